/* The NIC thread's inbound half: request packets from other QPs (this process is the responder)
 * and the responses to this process's own requests.
 *
 * Responder rules (RC): a packet must come from the connected QP with the expected PSN (one PSN
 * per message), otherwise it is dropped, as a NIC drops out-of-sequence packets; the requester
 * rewinds after a NAK, so what it sent after the NAKed message is dropped until the retransmission
 * arrives. Every memory access goes through the target's MR table: key, PD, bounds and the access
 * right of both the MR and the QP; a refusal is a NAK carrying the syndrome the requester's error
 * CQE will show (remote access, remote invalid request). A SEND with no receive WQE posted gets an
 * RNR NAK (the requester retries after a pause; rnr_retry 7 = forever, as on hardware).
 *
 * A request that needs a response is only started when a response slot could be reserved in the
 * requester's ring, so a full ring stalls the request (it stays at the head of this process's
 * request ring) without executing anything twice; a READ longer than one packet resumes where it
 * stopped.
 */
#include "nic.h"

#include <infiniband/mlx5dv.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------- */
/* Responses to this process's requests                                                      */
/* ---------------------------------------------------------------------------------------- */

static uint64_t rnr_delay_ns(uint8_t t)
{
	/* IB min_rnr_timer codes: 0 = 655 ms, 1..31 = 10 us .. 491 ms; keep it short here. */
	if (t == 0)
		return 1000000;
	uint64_t ns = 10000ull << (t / 4);
	return ns > 1000000 ? 1000000 : ns;
}

static void on_nak(struct tn_hqp *qp, const struct tn_pkt *p)
{
	tn_complete_upto(qp, p->wqe_idx, 0); /* everything before the NAKed message arrived */
	uint16_t s = p->syndrome;
	if (s == TN_NAK_RNR || s == TN_NAK_RETRY) {
		int rnr = s == TN_NAK_RNR;
		uint8_t lim = rnr ? qp->rnr_retry : qp->retry_cnt;
		uint8_t *cnt = rnr ? &qp->rnr_retries : &qp->retries;
		if (!(rnr && lim == 7) && ++*cnt > lim) {
			tn_qp_error(qp, rnr ? TN_SYN_RNR_RETRY_EXC : TN_SYN_RETRY_EXC);
			return;
		}
		/* Rewind: retransmit from the NAKed WQE after a pause. */
		qp->sent = qp->done;
		qp->tx_off = 0;
		qp->next_psn = qp->psn_at[qp->done & (qp->sq_cnt - 1)];
		qp->resume_ns = tn_now_ns() + (rnr ? rnr_delay_ns(qp->min_rnr_timer) : 1000000);
		qp->wait_since_ns = 0;
		return;
	}
	tn_qp_error(qp, (uint8_t)s);
}

/* The outstanding WQE a READ or atomic response answers; earlier WQEs complete first. */
static int answered_wqe(struct tn_hqp *qp, const struct tn_pkt *p, struct tn_wqe *w)
{
	tn_complete_upto(qp, p->wqe_idx, 0);
	if (qp->done == qp->sent)
		return 0;
	uint8_t s = tn_wqe_parse(qp, qp->done, w);
	if (w->idx != p->wqe_idx)
		return 0;
	if (s) {
		tn_qp_error(qp, s);
		return 0;
	}
	return 1;
}

static void on_read_resp(struct tn_hqp *qp, const struct tn_pkt *p)
{
	struct tn_wqe w;
	if (!answered_wqe(qp, p, &w) || w.opcode != MLX5_OPCODE_RDMA_READ)
		return;
	uint8_t s = tn_scatter(w.sge, w.nsge, p->offset, p->payload, p->len);
	if (s) {
		tn_qp_error(qp, s);
		return;
	}
	if (p->flags & TN_F_LAST) {
		tn_complete_upto(qp, p->wqe_idx, 1);
		tn_complete_local(qp);
	}
}

static void on_atomic_resp(struct tn_hqp *qp, const struct tn_pkt *p)
{
	struct tn_wqe w;
	if (!answered_wqe(qp, p, &w) || !w.asize)
		return;
	/* 8-byte results in host order (atomic endianness mode 1); 4-byte ones big-endian, which is
	 * what NVSHMEM byte-swaps back. */
	uint8_t res[8];
	if (w.asize == 4) {
		uint32_t v = htobe32((uint32_t)p->atomic[0]);
		memcpy(res, &v, 4);
	} else {
		memcpy(res, &p->atomic[0], 8);
	}
	uint8_t s = tn_scatter(w.sge, w.nsge, 0, res, w.asize);
	if (s) {
		tn_qp_error(qp, s);
		return;
	}
	tn_complete_upto(qp, p->wqe_idx, 1);
	tn_complete_local(qp);
}

int tn_rx_responses(int budget)
{
	int n = 0;
	struct tn_pkt *p;
	while (n < budget && (p = tn_ring_peek(TN_RING_RESP))) {
		struct tn_hqp *qp = tn_nic_find_qp(p->dst_qpn);
		/* From the connected peer: its QPN behind its GID (QPNs repeat across hosts). */
		if (qp && !qp->in_err && qp->rqpn == p->src_qpn && !memcmp(qp->rgid, p->src_gid, 16) &&
		    qp->state >= TN_RTS) {
			switch (p->type) {
			case TN_P_ACK:
				tn_complete_upto(qp, p->wqe_idx, 1);
				tn_complete_local(qp);
				break;
			case TN_P_NAK:
				on_nak(qp, p);
				break;
			case TN_P_READ_RESP:
				on_read_resp(qp, p);
				break;
			case TN_P_ATOMIC_RESP:
				on_atomic_resp(qp, p);
				break;
			default:
				break;
			}
		}
		tn_ring_pop(TN_RING_RESP);
		n++;
	}
	return n;
}

/* ---------------------------------------------------------------------------------------- */
/* Requests from other QPs                                                                   */
/* ---------------------------------------------------------------------------------------- */

struct resp {
	struct tn_pkt *p;
	uint64_t pos;
	struct tn_peer *peer; /* who gets the answer: the connected QP, or a DC target's requester */
};

static int reserve(struct tn_hqp *qp, struct resp *r)
{
	(void)qp;
	r->p = tn_ring_reserve(r->peer, TN_RING_RESP, &r->pos);
	return r->p != NULL;
}

/* Fills the reserved response slot's header; the caller may add payload, then commits. */
static struct tn_pkt *answer(struct tn_hqp *qp, struct resp *r, const struct tn_pkt *req, uint8_t type,
			     uint16_t synd)
{
	struct tn_pkt *p = r->p;
	p->type = type;
	p->flags = TN_F_FIRST | TN_F_LAST;
	p->opcode = req->opcode;
	p->opmod = req->opmod;
	p->wqe_idx = req->wqe_idx;
	p->syndrome = synd;
	p->dst_qpn = req->src_qpn;
	p->src_qpn = qp->qpn;
	memcpy(p->src_gid, tn_local_gid(), 16);
	p->psn = req->psn;
	p->len = p->offset = 0;
	p->total = req->total;
	return p;
}

static void commit(struct tn_hqp *qp, struct resp *r)
{
	(void)qp;
	tn_ring_commit(r->peer, TN_RING_RESP, r->p, r->pos);
	r->p = NULL;
}

static void respond(struct tn_hqp *qp, struct resp *r, const struct tn_pkt *req, uint8_t type, uint16_t synd)
{
	if (!r->p)
		return;
	answer(qp, r, req, type, synd);
	commit(qp, r);
}

/* Takes the next receive WQE (RQ or SRQ) for an incoming SEND or WRITE with immediate. */
static int take_recv(struct tn_hqp *qp)
{
	const uint8_t *wqe;
	uint32_t max;
	if (qp->srq) {
		struct tn_hsrq *s = qp->srq;
		uint32_t posted = tn_be32_load(&s->dbrec[0]) & 0xffff;
		if (((posted - s->taken) & 0xffff) == 0)
			return 0;
		wqe = s->buf + ((size_t)s->head << s->log_stride);
		uint16_t next;
		memcpy(&next, wqe + 2, 2);
		qp->rx_wqe_idx = s->head;
		s->head = be16toh(next) & (s->cnt - 1);
		s->taken++;
		wqe += 16;
		max = ((1u << s->log_stride) - 16) / 16;
	} else {
		if (!qp->rq_cnt || qp->dbrec_gpu)
			return 0;
		uint32_t head = tn_be32_load(&qp->dbrec[0]) & 0xffff;
		if (((head - qp->rq_ci) & 0xffff) == 0)
			return 0;
		uint32_t idx = qp->rq_ci & (qp->rq_cnt - 1);
		wqe = qp->rq + ((size_t)idx << qp->rq_log_stride);
		qp->rx_wqe_idx = idx;
		qp->rq_ci++;
		max = (1u << qp->rq_log_stride) / 16;
	}
	qp->rx_nsge = 0;
	qp->rx_synd = 0;
	for (uint32_t i = 0; i < max && i < TN_MAX_SGE; i++, wqe += 16) {
		uint32_t bc, lkey;
		uint64_t addr;
		memcpy(&bc, wqe, 4);
		memcpy(&lkey, wqe + 4, 4);
		memcpy(&addr, wqe + 8, 8);
		bc = be32toh(bc);
		lkey = be32toh(lkey);
		addr = be64toh(addr);
		if (lkey == TN_INVALID_LKEY)
			break;
		if (!bc)
			continue;
		struct tn_mr *mr = tn_mr_find(lkey);
		uint8_t s = tn_mr_check(mr, qp->pdn, addr, bc, TN_ACC_LOCAL_WRITE, TN_SYN_LOCAL_PROT);
		if (s) {
			qp->rx_synd = s;
			break;
		}
		struct tn_sge *g = &qp->rx_sge[qp->rx_nsge++];
		g->ptr = (uint64_t)(uintptr_t)tn_mr_ptr(mr, addr);
		g->len = bc;
		g->lkey = lkey;
		g->gpu = mr->gpu;
	}
	qp->rx_has_wqe = 1;
	qp->rx_bytes = 0;
	return 1;
}

/* The receive completion of a SEND or WRITE with immediate (or its error). */
static void recv_done(struct tn_hqp *qp, const struct tn_pkt *p, uint8_t opcode)
{
	uint32_t srqn_uidx = qp->srq ? qp->srq->srqn : qp->user_index;
	if (qp->rx_synd)
		tn_cqe_write(qp->rcq, TN_CQE_RESP_ERR, (uint8_t)qp->rx_synd, qp->qpn, (uint16_t)qp->rx_wqe_idx,
			     0, 0, 0, srqn_uidx, 0, 0);
	else
		tn_cqe_write(qp->rcq, opcode, 0, qp->qpn, (uint16_t)qp->rx_wqe_idx, p->total, p->imm, 0,
			     srqn_uidx, p->src_qpn, (p->flags & TN_F_SE) != 0);
	qp->rx_has_wqe = 0;
}

static int rx_send(struct tn_hqp *qp, const struct tn_pkt *p, struct resp *r)
{
	if (p->flags & TN_F_FIRST) {
		if (!take_recv(qp)) {
			respond(qp, r, p, TN_P_NAK, TN_NAK_RNR);
			return 1;
		}
		qp->rx_in_msg = 1;
	} else if (!qp->rx_in_msg) {
		return 1;
	}
	if (!qp->rx_synd && tn_scatter(qp->rx_sge, qp->rx_nsge, p->offset, p->payload, p->len))
		qp->rx_synd = TN_SYN_LOCAL_LENGTH;
	if (!(p->flags & TN_F_LAST))
		return 1;
	qp->rx_in_msg = 0;
	qp->exp_psn++;
	uint8_t synd = (uint8_t)qp->rx_synd;
	recv_done(qp, p, (p->flags & TN_F_IMM) ? TN_CQE_RESP_SEND_IMM : TN_CQE_RESP_SEND);
	if (synd) {
		/* A message longer than the receive buffer: both sides end in error, as on hardware. */
		respond(qp, r, p, TN_P_NAK, synd == TN_SYN_LOCAL_LENGTH ? TN_SYN_REMOTE_INVAL_REQ : TN_SYN_REMOTE_OP);
		tn_qp_flush(qp);
	} else if (p->flags & TN_F_ACKREQ) {
		respond(qp, r, p, TN_P_ACK, 0);
	}
	return 1;
}

static uint8_t check_remote(struct tn_hqp *qp, struct tn_mr **mr, uint32_t rkey, uint64_t addr, uint64_t len,
			    uint32_t right)
{
	*mr = tn_mr_find(rkey);
	if (!(qp->qp_access & right))
		return TN_SYN_REMOTE_ACCESS;
	return tn_mr_check(*mr, qp->pdn, addr, len, right, TN_SYN_REMOTE_ACCESS);
}

static int rx_write(struct tn_hqp *qp, const struct tn_pkt *p, struct resp *r)
{
	struct tn_mr *mr;
	if (p->flags & TN_F_FIRST) {
		uint8_t s = check_remote(qp, &mr, p->rkey, p->raddr, p->total, TN_ACC_REMOTE_WRITE);
		if (s) {
			qp->exp_psn++;
			respond(qp, r, p, TN_P_NAK, s);
			return 1;
		}
		qp->rx_in_msg = 1;
	} else if (!qp->rx_in_msg) {
		return 1;
	} else {
		mr = tn_mr_find(p->rkey);
	}
	if (p->len && (!mr || tn_copy(tn_mr_ptr(mr, p->raddr + p->offset), mr->gpu, p->payload, 0, p->len))) {
		qp->rx_in_msg = 0;
		qp->exp_psn++;
		respond(qp, r, p, TN_P_NAK, TN_SYN_REMOTE_ACCESS);
		return 1;
	}
	if (!(p->flags & TN_F_LAST))
		return 1;
	if (p->flags & TN_F_IMM) {
		if (!take_recv(qp)) {
			qp->rx_in_msg = 0;
			respond(qp, r, p, TN_P_NAK, TN_NAK_RNR);
			return 1;
		}
		recv_done(qp, p, TN_CQE_RESP_WR_IMM);
	}
	qp->rx_in_msg = 0;
	qp->exp_psn++;
	if (p->flags & TN_F_ACKREQ)
		respond(qp, r, p, TN_P_ACK, 0);
	return 1;
}

/* A READ in progress: the request stays at the head of the ring until every chunk went out. */
static struct {
	const struct tn_pkt *req;
	uint32_t off;
} rd;

static int rx_read(struct tn_hqp *qp, const struct tn_pkt *p, struct resp *r)
{
	struct tn_mr *mr;
	if (!r->p && !reserve(qp, r))
		return 0;
	uint8_t s = check_remote(qp, &mr, p->rkey, p->raddr, p->total, TN_ACC_REMOTE_READ);
	if (s) {
		qp->exp_psn++;
		respond(qp, r, p, TN_P_NAK, s);
		return 1;
	}
	if (rd.req != p) {
		rd.req = p;
		rd.off = 0;
	}
	do {
		if (!r->p && !reserve(qp, r))
			return 0; /* stalled: resume at rd.off */
		uint32_t n = p->total - rd.off;
		if (n > TN_PAYLOAD)
			n = TN_PAYLOAD;
		struct tn_pkt *o = answer(qp, r, p, TN_P_READ_RESP, 0);
		if (tn_copy(o->payload, 0, tn_mr_ptr(mr, p->raddr + rd.off), mr->gpu, n)) {
			respond(qp, r, p, TN_P_NAK, TN_SYN_REMOTE_ACCESS);
			break;
		}
		o->len = n;
		o->offset = rd.off;
		o->flags = (rd.off == 0 ? TN_F_FIRST : 0) | (rd.off + n == p->total ? TN_F_LAST : 0);
		commit(qp, r);
		rd.off += n;
	} while (rd.off < p->total);
	rd.req = NULL;
	qp->exp_psn++;
	return 1;
}

static uint64_t masked_add(uint64_t a, uint64_t b, uint64_t boundary, int bits)
{
	if (!boundary)
		return a + b;
	uint64_t r = 0, carry = 0;
	for (int i = 0; i < bits; i++) {
		uint64_t x = (a >> i) & 1, y = (b >> i) & 1;
		r |= (x ^ y ^ carry) << i;
		carry = (x & y) | (x & carry) | (y & carry);
		if ((boundary >> i) & 1)
			carry = 0; /* a field ends here: its carry does not spill into the next */
	}
	return r;
}

static uint64_t atomic_new(const struct tn_pkt *p, uint64_t old)
{
	uint64_t m = p->asize == 4 ? 0xffffffffull : ~0ull;
	switch (p->opcode) {
	case MLX5_OPCODE_ATOMIC_CS:
		return old == p->atomic[1] ? p->atomic[0] : old;
	case MLX5_OPCODE_ATOMIC_FA:
		return old + p->atomic[0];
	case MLX5_OPCODE_ATOMIC_MASKED_CS:
		if (((old ^ p->atomic[1]) & p->atomic[3] & m) == 0)
			return ((old & ~p->atomic[2]) | (p->atomic[0] & p->atomic[2])) & m;
		return old;
	default: /* masked fetch-add */
		return masked_add(old, p->atomic[0], p->atomic[2], p->asize * 8) & m;
	}
}

static int rx_atomic(struct tn_hqp *qp, const struct tn_pkt *p, struct resp *r)
{
	struct tn_mr *mr;
	qp->exp_psn++;
	uint8_t s = check_remote(qp, &mr, p->rkey, p->raddr, p->asize, TN_ACC_REMOTE_ATOMIC);
	if (!s && (p->raddr & (p->asize - 1)))
		s = TN_SYN_REMOTE_INVAL_REQ;
	if (s) {
		respond(qp, r, p, TN_P_NAK, s);
		return 1;
	}
	void *t = tn_mr_ptr(mr, p->raddr);
	uint64_t old = 0;
	if (mr->gpu) {
		/* Device memory: read, modify, write (not atomic against the GPU; documented). */
		tn_copy(&old, 0, t, 1, p->asize);
		uint64_t nv = atomic_new(p, old);
		tn_copy(t, 1, &nv, 0, p->asize);
	} else if (p->asize == 4) {
		uint32_t o = __atomic_load_n((uint32_t *)t, __ATOMIC_RELAXED), nv;
		do {
			nv = (uint32_t)atomic_new(p, o);
		} while (!__atomic_compare_exchange_n((uint32_t *)t, &o, nv, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
		old = o;
	} else {
		uint64_t o = __atomic_load_n((uint64_t *)t, __ATOMIC_RELAXED), nv;
		do {
			nv = atomic_new(p, o);
		} while (!__atomic_compare_exchange_n((uint64_t *)t, &o, nv, 0, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
		old = o;
	}
	struct tn_pkt *o = answer(qp, r, p, TN_P_ATOMIC_RESP, 0);
	o->atomic[0] = old;
	o->asize = p->asize;
	commit(qp, r);
	return 1;
}

/* 1 when the packet was consumed, 0 when it must stay (no response slot yet). */
static int on_request(const struct tn_pkt *p)
{
	if (!p->type)
		return 1; /* a slot the requester voided */
	struct tn_hqp *qp = tn_nic_find_qp(p->dst_qpn);
	struct resp r = {0};
	if (!qp || qp->state < TN_RTR || qp->state == TN_ERR)
		return 1; /* no such QP here, or not ready: dropped, as a NIC does */
	if (qp->st == TN_ST_DCT) {
		/* A DC target answers whichever DCI asked, if it knows the access key. */
		r.peer = tn_peer_resolve(p->src_gid, p->src_qpn);
		if (!r.peer)
			return 1;
		if (p->dc_key != qp->dc_key) {
			if (!reserve(qp, &r))
				return 0;
			respond(qp, &r, p, TN_P_NAK, TN_SYN_REMOTE_ACCESS);
			return 1;
		}
	} else {
		if (qp->rqpn != p->src_qpn || memcmp(qp->rgid, p->src_gid, 16) || !qp->peer)
			return 1; /* not connected to that requester: dropped */
		if (p->psn != (qp->exp_psn & 0xffffff))
			return 1; /* out of sequence (after a NAK): dropped until the retransmission */
		r.peer = qp->peer;
	}
	/* Anything that may answer gets its response slot first. */
	int may_answer = p->type == TN_P_READ_REQ || p->type == TN_P_ATOMIC_REQ ||
			 (p->flags & (TN_F_FIRST | TN_F_LAST));
	if (may_answer && !reserve(qp, &r))
		return 0;
	int done;
	switch (p->type) {
	case TN_P_SEND:
		done = rx_send(qp, p, &r);
		break;
	case TN_P_WRITE:
		done = rx_write(qp, p, &r);
		break;
	case TN_P_READ_REQ:
		done = rx_read(qp, p, &r);
		break;
	case TN_P_ATOMIC_REQ:
		done = rx_atomic(qp, p, &r);
		break;
	default:
		done = 1;
		break;
	}
	if (r.p) {
		/* A reserved slot nothing needed: voided so the ring moves on. */
		r.p->type = 0;
		tn_ring_commit(r.peer, TN_RING_RESP, r.p, r.pos);
	}
	return done;
}

int tn_rx_requests(int budget)
{
	int n = 0;
	struct tn_pkt *p;
	while (n < budget && (p = tn_ring_peek(TN_RING_REQ))) {
		if (!on_request(p))
			break;
		tn_ring_pop(TN_RING_REQ);
		n++;
	}
	return n;
}
