/* What the NIC does with one send queue entry and one completion: fetching WQEs into the QP's
 * shadow copy, parsing them as mlx5 hardware would (ctrl, raddr, data, inline, atomic and
 * masked-atomic segments; docs/TESTNIC.md lists the checks and the syndrome each failure gets),
 * gathering and scattering payload through checked memory keys, writing 64-byte CQEs, and the
 * in-order completion walk, error completion and flush.
 */
#include "nic.h"

#include <infiniband/mlx5dv.h>
#include <string.h>
#include <unistd.h>

static inline uint32_t rd32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return be32toh(v);
}

static inline uint64_t rd64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return be64toh(v);
}

const char *tn_opcode_name(uint8_t op)
{
	switch (op) {
	case MLX5_OPCODE_NOP: return "NOP";
	case MLX5_OPCODE_RDMA_WRITE: return "RDMA_WRITE";
	case MLX5_OPCODE_RDMA_WRITE_IMM: return "RDMA_WRITE_IMM";
	case MLX5_OPCODE_SEND: return "SEND";
	case MLX5_OPCODE_SEND_IMM: return "SEND_IMM";
	case MLX5_OPCODE_SEND_INVAL: return "SEND_INVAL";
	case MLX5_OPCODE_RDMA_READ: return "RDMA_READ";
	case MLX5_OPCODE_ATOMIC_CS: return "ATOMIC_CS";
	case MLX5_OPCODE_ATOMIC_FA: return "ATOMIC_FA";
	case MLX5_OPCODE_ATOMIC_MASKED_CS: return "ATOMIC_MASKED_CS";
	case MLX5_OPCODE_ATOMIC_MASKED_FA: return "ATOMIC_MASKED_FA";
	case 0x23: return "DUMP";
	default: return "UNKNOWN";
	}
}

/* ---- the shadow copy of the send queue ---- */

int tn_sq_fetch(struct tn_hqp *qp, uint32_t upto)
{
	uint32_t mask = qp->sq_cnt - 1;
	while (qp->fetched != upto) {
		uint32_t n = upto - qp->fetched;
		if (n > qp->sq_cnt)
			n = qp->sq_cnt;
		uint32_t at = qp->fetched & mask;
		if (at + n > qp->sq_cnt)
			n = qp->sq_cnt - at; /* up to the end of the ring, then wrap */
		size_t off = (size_t)at * TN_WQEBB, bytes = (size_t)n * TN_WQEBB;
		if (qp->sq_gpu) {
			if (tn_copy(qp->shadow + off, 0, qp->sq + off, 1, bytes))
				return -1;
		} else {
			memcpy(qp->shadow + off, qp->sq + off, bytes);
		}
		qp->fetched += n;
	}
	return 0;
}

void tn_wqe_ctrl(const struct tn_hqp *qp, uint32_t pos, uint8_t *opcode, uint16_t *idx, uint32_t *nbb,
		 int *signaled)
{
	const uint8_t *c = qp->shadow + (size_t)(pos & (qp->sq_cnt - 1)) * TN_WQEBB;
	uint32_t w0 = rd32(c), ds = rd32(c + 4) & 0x3f;
	*opcode = w0 & 0xff;
	*idx = (w0 >> 8) & 0xffff;
	*nbb = ds ? (ds * 16 + TN_WQEBB - 1) / TN_WQEBB : 1;
	if (*nbb > TN_MAX_WQEBB)
		*nbb = 1;
	*signaled = (c[11] & MLX5_WQE_CTRL_CQ_UPDATE) != 0;
}

/* ---- parsing ---- */

static uint8_t add_sge(const struct tn_hqp *qp, struct tn_wqe *w, const uint8_t *seg, uint32_t need)
{
	uint32_t bc = rd32(seg), lkey = rd32(seg + 4);
	uint64_t addr = rd64(seg + 8);
	if (bc == 0)
		return 0; /* an empty entry moves nothing */
	if (w->nsge == TN_MAX_SGE)
		return TN_SYN_LOCAL_QP_OP;
	struct tn_mr *mr = tn_mr_find(lkey);
	uint8_t s = tn_mr_check(mr, qp->pdn, addr, bc, need, TN_SYN_LOCAL_PROT);
	if (s)
		return s;
	struct tn_sge *g = &w->sge[w->nsge++];
	g->ptr = (uint64_t)(uintptr_t)tn_mr_ptr(mr, addr);
	g->len = bc;
	g->lkey = lkey;
	g->gpu = mr->gpu;
	w->len += bc;
	return 0;
}

/* Data and inline segments from `seg` to `end`. */
static uint8_t data_segs(const struct tn_hqp *qp, struct tn_wqe *w, const uint8_t *seg, const uint8_t *end,
			 uint32_t need)
{
	while (seg < end) {
		uint32_t bc = rd32(seg);
		if (bc & MLX5_INLINE_SEG) {
			uint32_t n = bc & ~MLX5_INLINE_SEG;
			if (w->inl || w->nsge || seg + 4 + n > end)
				return TN_SYN_LOCAL_QP_OP;
			w->inl = seg + 4;
			w->len = n;
			seg += (4 + n + 15) & ~15u;
			continue;
		}
		if (w->inl)
			return TN_SYN_LOCAL_QP_OP;
		uint8_t s = add_sge(qp, w, seg, need);
		if (s)
			return s;
		seg += 16;
	}
	return 0;
}

static uint8_t atomic_segs(const struct tn_hqp *qp, struct tn_wqe *w, const uint8_t *seg, const uint8_t *end)
{
	int ext = w->opcode == MLX5_OPCODE_ATOMIC_MASKED_CS || w->opcode == MLX5_OPCODE_ATOMIC_MASKED_FA;
	w->asize = (ext && w->opmod == 0x08) ? 4 : 8;
	if (ext && w->opmod != 0x08 && w->opmod != 0x09 && w->opmod != 0)
		return TN_SYN_LOCAL_QP_OP;
	uint32_t opbytes = 16;
	if (w->opcode == MLX5_OPCODE_ATOMIC_MASKED_CS && w->asize == 8)
		opbytes = 32; /* swap, compare, then swap mask, compare mask */
	if (seg + opbytes + 16 > end)
		return TN_SYN_LOCAL_QP_OP;
	if (w->asize == 4) {
		for (int i = 0; i < 4; i++)
			w->atomic[i] = rd32(seg + 4 * i);
	} else {
		for (uint32_t i = 0; i < opbytes / 8; i++)
			w->atomic[i] = rd64(seg + 8 * i);
	}
	if (w->opcode == MLX5_OPCODE_ATOMIC_MASKED_FA) {
		/* add, field boundary: keep them in [0] and [2] like the masked compare's masks */
		w->atomic[2] = w->atomic[1];
		w->atomic[1] = 0;
	}
	uint8_t s = data_segs(qp, w, seg + opbytes, end, TN_ACC_LOCAL_WRITE);
	if (s)
		return s;
	if (w->len < w->asize)
		return TN_SYN_LOCAL_LENGTH;
	w->len = w->asize;
	return 0;
}

uint8_t tn_wqe_parse(const struct tn_hqp *qp, uint32_t pos, struct tn_wqe *w)
{
	memset(w, 0, offsetof(struct tn_wqe, buf));
	uint32_t mask = qp->sq_cnt - 1;
	const uint8_t *c = qp->shadow + (size_t)(pos & mask) * TN_WQEBB;
	uint32_t w0 = rd32(c), w1 = rd32(c + 4);
	w->opcode = w0 & 0xff;
	w->opmod = w0 >> 24;
	w->idx = (w0 >> 8) & 0xffff;
	w->ds = w1 & 0x3f;
	w->nbb = w->ds ? (w->ds * 16 + TN_WQEBB - 1) / TN_WQEBB : 1;
	w->signaled = (c[11] & MLX5_WQE_CTRL_CQ_UPDATE) != 0;
	if (!w->ds || w->nbb > TN_MAX_WQEBB || w->nbb > qp->sq_cnt) {
		w->nbb = 1;
		return TN_SYN_LOCAL_QP_OP;
	}
	for (uint32_t i = 0; i < w->nbb; i++)
		memcpy(w->buf + i * TN_WQEBB, qp->shadow + (size_t)((pos + i) & mask) * TN_WQEBB, TN_WQEBB);
	if (w->idx != (pos & 0xffff) || (w1 >> 8) != qp->qpn)
		return TN_SYN_LOCAL_QP_OP;
	w->se = (w->buf[11] & MLX5_WQE_CTRL_SOLICITED) != 0;
	memcpy(&w->imm, w->buf + 12, 4);
	const uint8_t *seg = w->buf + 16, *end = w->buf + w->ds * 16;
	switch (w->opcode) {
	case MLX5_OPCODE_NOP:
		return 0;
	case 0x23: /* DUMP: the NIC reads local memory (NVSHMEM's consistency op) */
		return data_segs(qp, w, seg, end, 0);
	default:
		break;
	}
	if (qp->st == TN_ST_DCI) {
		/* The address vector comes first: DC key, DCT number (bit 31: a 48-byte AV with the
		 * GID), ... A 16-byte AV routes by LID, which a RoCE port has not. */
		if (seg + 16 > end)
			return TN_SYN_LOCAL_QP_OP;
		w->dc_key = rd64(seg);
		uint32_t dqp = rd32(seg + 8);
		w->dqpn = dqp & 0xffffff;
		if (!(dqp & 0x80000000u)) {
			/* The 16-byte (compact) AV: rlid at +14. An InfiniBand port routes it by LID. */
			if (tn_gid_of_lid((uint16_t)(seg[14] << 8 | seg[15]), w->dgid))
				return TN_SYN_LOCAL_QP_OP;
			seg += 16;
		} else {
			if (seg + 48 > end)
				return TN_SYN_LOCAL_QP_OP;
			memcpy(w->dgid, seg + 32, 16);
			seg += 48;
		}
	}
	switch (w->opcode) {
	case MLX5_OPCODE_SEND:
	case MLX5_OPCODE_SEND_IMM:
		w->remote = 1;
		return data_segs(qp, w, seg, end, 0);
	case MLX5_OPCODE_RDMA_WRITE:
	case MLX5_OPCODE_RDMA_WRITE_IMM:
	case MLX5_OPCODE_RDMA_READ:
	case MLX5_OPCODE_ATOMIC_CS:
	case MLX5_OPCODE_ATOMIC_FA:
	case MLX5_OPCODE_ATOMIC_MASKED_CS:
	case MLX5_OPCODE_ATOMIC_MASKED_FA:
		break;
	default:
		return TN_SYN_LOCAL_QP_OP;
	}
	if (seg + 16 > end)
		return TN_SYN_LOCAL_QP_OP;
	w->remote = 1;
	w->raddr = rd64(seg);
	w->rkey = rd32(seg + 8);
	seg += 16;
	if (w->opcode == MLX5_OPCODE_RDMA_READ) {
		uint8_t s = data_segs(qp, w, seg, end, TN_ACC_LOCAL_WRITE);
		return s ? s : (w->inl ? TN_SYN_LOCAL_QP_OP : 0);
	}
	if (w->opcode == MLX5_OPCODE_RDMA_WRITE || w->opcode == MLX5_OPCODE_RDMA_WRITE_IMM)
		return data_segs(qp, w, seg, end, 0);
	return atomic_segs(qp, w, seg, end);
}

/* ---- payload movement ---- */

uint8_t tn_gather(const struct tn_wqe *w, uint32_t off, uint8_t *dst, uint32_t n)
{
	if (w->inl) {
		memcpy(dst, w->inl + off, n);
		return 0;
	}
	for (uint32_t i = 0; i < w->nsge && n; i++) {
		const struct tn_sge *g = &w->sge[i];
		if (off >= g->len) {
			off -= g->len;
			continue;
		}
		uint32_t c = g->len - off < n ? g->len - off : n;
		if (tn_copy(dst, 0, (const void *)(uintptr_t)(g->ptr + off), g->gpu, c))
			return TN_SYN_LOCAL_PROT;
		dst += c;
		n -= c;
		off = 0;
	}
	return n ? TN_SYN_LOCAL_LENGTH : 0;
}

uint8_t tn_scatter(const struct tn_sge *sge, uint32_t nsge, uint32_t off, const uint8_t *src, uint32_t n)
{
	for (uint32_t i = 0; i < nsge && n; i++) {
		const struct tn_sge *g = &sge[i];
		if (off >= g->len) {
			off -= g->len;
			continue;
		}
		uint32_t c = g->len - off < n ? g->len - off : n;
		if (tn_copy((void *)(uintptr_t)(g->ptr + off), g->gpu, src, 0, c))
			return TN_SYN_LOCAL_PROT;
		src += c;
		n -= c;
		off = 0;
	}
	return n ? TN_SYN_LOCAL_LENGTH : 0;
}

/* ---- completions ---- */

void tn_cqe_write(struct tn_hcq *cq, uint8_t opcode, uint8_t synd, uint32_t qpn, uint16_t wqe_counter,
		  uint32_t byte_cnt, uint32_t imm, uint8_t wqe_opcode, uint32_t srqn_uidx, uint32_t rqpn, int se)
{
	if (!cq)
		return;
	uint32_t cnt = 1u << cq->log_cnt;
	if (!cq->collapsed && !cq->ignore_overrun && !cq->gpu) {
		uint32_t ci = tn_be32_load(&cq->dbrec[0]) & 0xffffff;
		if (((cq->pi - ci) & 0xffffff) >= cnt) {
			if (!cq->overruns++)
				tn_warn("CQ 0x%x overrun: %u entries, none free; completion dropped", cq->cqn, cnt);
			return;
		}
	}
	uint8_t e[64];
	memset(e, 0, sizeof e);
	uint32_t v;
	v = htobe32(srqn_uidx & 0xffffff);
	memcpy(e + 32, &v, 4);
	if (opcode == TN_CQE_REQ_ERR || opcode == TN_CQE_RESP_ERR) {
		e[54] = tn_vendor_syndrome(synd);
		e[55] = synd;
	} else {
		v = htobe32(rqpn & 0xffffff);
		memcpy(e + 24, &v, 4);
		memcpy(e + 36, &imm, 4);
		v = htobe32(byte_cnt);
		memcpy(e + 44, &v, 4);
		uint64_t ts = htobe64(tn_now_ns());
		memcpy(e + 48, &ts, 8);
	}
	v = htobe32((uint32_t)wqe_opcode << 24 | (qpn & 0xffffff));
	memcpy(e + 56, &v, 4);
	uint16_t wc = htobe16(wqe_counter);
	memcpy(e + 60, &wc, 2);
	uint32_t slot = cq->collapsed ? 0 : (cq->pi & (cnt - 1));
	uint8_t owner = cq->collapsed ? 0 : ((cq->pi >> cq->log_cnt) & 1);
	uint8_t op_own = (uint8_t)(opcode << 4 | (se ? 2 : 0) | owner);
	uint8_t *dst = cq->buf + (size_t)slot * 64;
	/* The entry's last 8 bytes (opcode and QPN, wqe_counter, signature, op_own) go last and in
	 * one aligned store, as a NIC's one 64-byte write lands: a poller never sees a half-written
	 * entry, and on a collapsed CQ (one entry, no owner bit) never an old op_own beside a new
	 * wqe_counter. */
	e[63] = op_own;
	uint64_t tail;
	memcpy(&tail, e + 56, 8);
	if (cq->gpu) {
		tn_copy(dst, 1, e, 0, 56);
		tn_copy(dst + 56, 1, &tail, 0, 8);
	} else if (((uintptr_t)dst & 7) == 0) {
		memcpy(dst, e, 56);
		__atomic_store_n((uint64_t *)(void *)(dst + 56), tail, __ATOMIC_RELEASE);
	} else { /* a misaligned CQ buffer (no NIC takes one): owner byte last */
		memcpy(dst, e, 63);
		__atomic_store_n(dst + 63, op_own, __ATOMIC_RELEASE);
	}
	cq->pi++;
}

uint8_t tn_vendor_syndrome(uint8_t synd)
{
	/* The vendor syndromes a ConnectX reports for these (UCX prints "synd 0x15 vend 0x81"; a
	 * flushed WQE has vendor_err 0xf9); for the others this NIC repeats the syndrome. */
	switch (synd) {
	case TN_SYN_RETRY_EXC: return 0x81;
	case TN_SYN_WR_FLUSH: return 0xf9;
	default: return synd;
	}
}

static void req_cqe(struct tn_hqp *qp, uint32_t pos, uint8_t op, uint16_t idx, uint8_t synd)
{
	if (synd)
		tn_cqe_write(qp->scq, TN_CQE_REQ_ERR, synd, qp->qpn, idx, 0, 0, op, qp->user_index, 0, 0);
	else
		tn_cqe_write(qp->scq, TN_CQE_REQ, 0, qp->qpn, idx, qp->len_at[pos & (qp->sq_cnt - 1)], 0, op,
			     qp->user_index, 0, 0);
}

void tn_complete_upto(struct tn_hqp *qp, uint16_t idx, int inclusive)
{
	uint32_t before = qp->done;
	while (qp->done != qp->sent) {
		uint8_t op;
		uint16_t widx;
		uint32_t nbb;
		int sig;
		tn_wqe_ctrl(qp, qp->done, &op, &widx, &nbb, &sig);
		int match = widx == idx;
		if (match && !inclusive)
			break;
		if (sig)
			req_cqe(qp, qp->done, op, widx, 0);
		qp->done += nbb;
		if (match)
			break;
	}
	if (qp->done == before)
		return;
	/* Progress: the silence timer restarts for whatever is still outstanding. */
	qp->wait_since_ns = qp->done != qp->sent ? tn_now_ns() : 0;
	qp->retries = qp->rnr_retries = 0;
}

static int local_only(uint8_t op)
{
	return op == MLX5_OPCODE_NOP || op == 0x23;
}

void tn_complete_local(struct tn_hqp *qp)
{
	while (qp->done != qp->sent) {
		uint8_t op;
		uint16_t widx;
		uint32_t nbb;
		int sig;
		tn_wqe_ctrl(qp, qp->done, &op, &widx, &nbb, &sig);
		if (!local_only(op))
			break;
		if (sig)
			req_cqe(qp, qp->done, op, widx, 0);
		qp->done += nbb;
	}
	if (qp->done == qp->sent && qp->err_pending)
		tn_qp_error(qp, qp->err_synd);
}

void tn_qp_error(struct tn_hqp *qp, uint8_t synd)
{
	if (qp->in_err)
		return;
	/* In error before its error CQE is visible, as on a ConnectX: a program (DOCA's QUERY_QP
	 * after an error completion, ibv_query_qp) that polled the CQE finds the QP in ERR. */
	__atomic_store_n(&qp->state, TN_ERR, __ATOMIC_RELEASE);
	if (qp->done != qp->pi && tn_sq_fetch(qp, qp->pi) == 0) {
		uint8_t op;
		uint16_t widx;
		uint32_t nbb;
		int sig;
		tn_wqe_ctrl(qp, qp->done, &op, &widx, &nbb, &sig);
		req_cqe(qp, qp->done, op, widx, synd);
		qp->done += nbb;
		if ((int32_t)(qp->sent - qp->done) < 0)
			qp->sent = qp->done;
	}
	tn_qp_flush(qp);
}

/* Every posted WQE the NIC has not completed completes with a flush error, receive WQEs too. */
void tn_qp_flush(struct tn_hqp *qp)
{
	qp->in_err = 1;
	qp->err_pending = 0;
	__atomic_store_n(&qp->state, TN_ERR, __ATOMIC_RELEASE);
	if (qp->sq_cnt && qp->done != qp->pi && tn_sq_fetch(qp, qp->pi) == 0) {
		while (qp->done != qp->pi) {
			uint8_t op;
			uint16_t widx;
			uint32_t nbb;
			int sig;
			tn_wqe_ctrl(qp, qp->done, &op, &widx, &nbb, &sig);
			if ((int32_t)(qp->pi - qp->done) < (int32_t)nbb)
				nbb = qp->pi - qp->done;
			req_cqe(qp, qp->done, op, widx, TN_SYN_WR_FLUSH);
			qp->done += nbb;
		}
	}
	qp->sent = qp->done;
	qp->tx_off = 0;
	if (qp->rx_has_wqe && !qp->srq) {
		/* The receive WQE held for a message still in flight. */
		tn_cqe_write(qp->rcq, TN_CQE_RESP_ERR, TN_SYN_WR_FLUSH, qp->qpn, (uint16_t)qp->rx_wqe_idx, 0, 0,
			     0, qp->user_index, 0, 0);
	}
	qp->rx_has_wqe = qp->rx_in_msg = 0;
	if (qp->rq_cnt && !qp->srq && qp->dbrec && !qp->dbrec_gpu) {
		uint32_t head = tn_be32_load(&qp->dbrec[0]) & 0xffff;
		while ((qp->rq_ci & 0xffff) != head) {
			tn_cqe_write(qp->rcq, TN_CQE_RESP_ERR, TN_SYN_WR_FLUSH, qp->qpn,
				     (uint16_t)(qp->rq_ci & (qp->rq_cnt - 1)), 0, 0, 0, qp->user_index, 0, 0);
			qp->rq_ci++;
		}
	}
}
