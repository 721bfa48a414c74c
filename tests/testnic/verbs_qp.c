/* libibverbs: RC queue pairs (create, modify through the IB state machine, query, destroy).
 *
 * Layout as libmlx5 makes it: one buffer with the receive queue first and the send queue after
 * it (64-byte WQEBBs), a doorbell record ([0] receive, [1] send counter) and a UAR page of the
 * QP's own whose register at +0x800 (two 0x100 halves, used alternately) takes the doorbells.
 * mlx5dv_init_obj hands out exactly these. QPNs are device-wide (fabric.c) and published in the
 * QP directory so a peer addresses this QP by GID + QPN.
 *
 * RTR resolves the peer (its GID must be the GID of a node, i.e. ah_attr.is_global = 1 on RoCE,
 * as on real RoCE hardware) and starts the NIC thread.
 */
#include "prov.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static size_t page_round(size_t n)
{
	return (n + TN_PAGE - 1) & ~(size_t)(TN_PAGE - 1);
}

/* ---- the context's QPN table (poll_cq: CQE qpn -> QP) ---- */

struct tn_vqp *tn_ctx_find_qp(struct tn_ctx *ctx, uint32_t qpn)
{
	uint32_t s = (qpn * 2654435761u) & (QP_TABLE - 1);
	for (uint32_t i = 0; i < QP_TABLE; i++, s = (s + 1) & (QP_TABLE - 1)) {
		struct tn_vqp *q = __atomic_load_n(&ctx->qps[s], __ATOMIC_ACQUIRE);
		if (!q)
			return NULL;
		if (q != (struct tn_vqp *)1 && q->hw.qpn == qpn)
			return q;
	}
	return NULL;
}

#define TOMB ((struct tn_vqp *)1)

static int table_insert(struct tn_ctx *ctx, struct tn_vqp *q)
{
	uint32_t s = (q->hw.qpn * 2654435761u) & (QP_TABLE - 1);
	for (uint32_t i = 0; i < QP_TABLE; i++, s = (s + 1) & (QP_TABLE - 1)) {
		struct tn_vqp *cur = ctx->qps[s];
		if (!cur || cur == TOMB) {
			__atomic_store_n(&ctx->qps[s], q, __ATOMIC_RELEASE);
			return 0;
		}
	}
	return ENOMEM;
}

static void table_remove(struct tn_ctx *ctx, struct tn_vqp *q)
{
	uint32_t s = (q->hw.qpn * 2654435761u) & (QP_TABLE - 1);
	for (uint32_t i = 0; i < QP_TABLE && ctx->qps[s]; i++, s = (s + 1) & (QP_TABLE - 1)) {
		if (ctx->qps[s] == q) {
			__atomic_store_n(&ctx->qps[s], TOMB, __ATOMIC_RELEASE);
			return;
		}
	}
}

/* ---- create ---- */

static void free_qp(struct tn_vqp *q)
{
	if (q->buf)
		munmap(q->buf, page_round(q->buf_size));
	if (q->uar)
		munmap(q->uar, TN_PAGE);
	free(q->sq.wrid);
	free(q->sq.wqe_head);
	free(q->rq.wrid);
	tn_hqp_free_nic_state(&q->hw);
	free(q);
}

static int size_queues(struct tn_vqp *q, struct ibv_qp_cap *cap, int has_srq)
{
	if (cap->max_send_wr > TN_MAX_QP_WR || cap->max_recv_wr > TN_MAX_QP_WR || cap->max_send_sge > TN_MAX_SGE ||
	    cap->max_recv_sge > TN_MAX_SGE || cap->max_inline_data > TN_MAX_INLINE)
		return EINVAL;
	uint32_t data = cap->max_send_sge * 16;
	uint32_t inl = (4 + cap->max_inline_data + 15) & ~15u;
	if (inl > data)
		data = inl;
	if (data < 16)
		data = 16;
	uint32_t wqe = 16 + 16 + data;
	if (wqe < 80)
		wqe = 80; /* room for every atomic form: ctrl, raddr, 32-byte operands, result */
	wqe = (wqe + TN_WQEBB - 1) & ~(TN_WQEBB - 1);
	q->wqe_bb = wqe / TN_WQEBB;
	q->max_inline = wqe - 16 - 16 - 4;
	uint32_t wr = cap->max_send_wr ? cap->max_send_wr : 1;
	q->sq.cnt = 1u << tn_ilog2_up(wr * q->wqe_bb);
	q->sq.max_post = q->sq.cnt / q->wqe_bb;
	q->sq.max_gs = cap->max_send_sge;
	if (!has_srq && cap->max_recv_wr) {
		uint32_t gs = cap->max_recv_sge ? cap->max_recv_sge : 1;
		q->hw.rq_log_stride = tn_ilog2_up(gs * 16);
		q->rq.cnt = 1u << tn_ilog2_up(cap->max_recv_wr);
		q->rq.max_post = q->rq.cnt;
		q->rq.max_gs = (1u << q->hw.rq_log_stride) / 16;
	}
	cap->max_send_wr = q->sq.max_post;
	cap->max_inline_data = q->max_inline;
	if (!has_srq) {
		cap->max_recv_wr = q->rq.max_post;
		cap->max_recv_sge = q->rq.max_gs;
	}
	return 0;
}

struct ibv_qp *tn_create_qp_ex(struct ibv_context *c, struct ibv_qp_init_attr_ex *a)
{
	struct tn_ctx *ctx = to_ctx(c);
	uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
	if (a->comp_mask & ~known) {
		tn_refuse("ibv_create_qp_ex with XRC, RSS, TSO or source-QPN attributes");
		return NULL;
	}
	if (a->qp_type != IBV_QPT_RC) {
		tn_warn("ibv_create_qp: only RC queue pairs are implemented (asked for type %d)", a->qp_type);
		errno = EOPNOTSUPP;
		return NULL;
	}
	if ((a->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && a->create_flags) {
		tn_refuse("ibv_create_qp_ex with create_flags");
		return NULL;
	}
	if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd || !a->send_cq || (!a->recv_cq && !a->srq)) {
		errno = EINVAL;
		return NULL;
	}
	struct tn_vqp *q = calloc(1, sizeof *q);
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	q->ctx = ctx;
	int err = size_queues(q, &a->cap, a->srq != NULL);
	if (err) {
		free(q);
		errno = err;
		return NULL;
	}
	size_t rq_bytes = (size_t)q->rq.cnt << q->hw.rq_log_stride;
	q->buf_size = rq_bytes + (size_t)q->sq.cnt * TN_WQEBB;
	void *buf = mmap(NULL, page_round(q->buf_size), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	q->buf = buf == MAP_FAILED ? NULL : buf;
	q->uar = tn_page_alloc();
	q->sq.wrid = calloc(q->sq.cnt, sizeof(uint64_t));
	q->sq.wqe_head = calloc(q->sq.cnt, sizeof(uint32_t));
	q->rq.wrid = calloc(q->rq.cnt ? q->rq.cnt : 1, sizeof(uint64_t));
	struct tn_hqp *h = &q->hw;
	h->sq = q->buf + rq_bytes;
	h->sq_cnt = q->sq.cnt;
	h->rq = q->buf;
	h->rq_cnt = q->rq.cnt;
	if (!q->buf || !q->uar || !q->sq.wrid || !q->sq.wqe_head || !q->rq.wrid || tn_hqp_alloc_nic_state(h)) {
		free_qp(q);
		errno = ENOMEM;
		return NULL;
	}
	pthread_spin_init(&q->sq.lock, PTHREAD_PROCESS_PRIVATE);
	pthread_spin_init(&q->rq.lock, PTHREAD_PROCESS_PRIVATE);
	h->st = TN_ST_RC;
	h->pdn = tn_pdn(a->pd);
	h->dbrec = q->dbrec;
	h->db[0] = (volatile uint64_t *)(q->uar + TN_BF_OFFSET);
	h->db[1] = (volatile uint64_t *)(q->uar + TN_BF_OFFSET + TN_BF_HALF);
	h->scq = &((struct tn_vcq *)a->send_cq)->hw;
	h->rcq = a->recv_cq ? &((struct tn_vcq *)a->recv_cq)->hw : NULL;
	h->srq = a->srq ? &((struct tn_vsrq *)a->srq)->hw : NULL;
	q->sig_all = a->sq_sig_all;
	for (int tries = 0;; tries++) {
		h->qpn = tn_id_alloc(TN_ID_QPN);
		if (h->qpn && tn_qpn_publish(h->qpn) == 0)
			break;
		if (tries > 64) {
			free_qp(q);
			errno = ENOMEM;
			return NULL;
		}
	}
	h->user_index = h->qpn;
	pthread_mutex_lock(&ctx->lock);
	err = table_insert(ctx, q);
	pthread_mutex_unlock(&ctx->lock);
	if (err) {
		tn_qpn_retire(h->qpn);
		free_qp(q);
		errno = err;
		return NULL;
	}
	struct ibv_qp *qp = &q->qpx.qp_base;
	qp->context = c;
	qp->qp_context = a->qp_context;
	qp->pd = a->pd;
	qp->send_cq = a->send_cq;
	qp->recv_cq = a->recv_cq;
	qp->srq = a->srq;
	qp->handle = h->qpn;
	qp->qp_num = h->qpn;
	qp->state = IBV_QPS_RESET;
	qp->qp_type = a->qp_type;
	pthread_mutex_init(&qp->mutex, NULL);
	pthread_cond_init(&qp->cond, NULL);
	q->cap = a->cap;
	if (a->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		q->ex_ops = 1;
		tn_qpx_init(q);
	}
	return qp;
}

TN_API struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ibv_qp_init_attr_ex a;
	memset(&a, 0, sizeof a);
	memcpy(&a, attr, sizeof *attr);
	a.comp_mask = IBV_QP_INIT_ATTR_PD;
	a.pd = pd;
	struct ibv_qp *qp = tn_create_qp_ex(pd->context, &a);
	if (qp)
		attr->cap = a.cap;
	return qp;
}

/* A DC target (mlx5dv_create_qp with MLX5DV_DCTYPE_DCT): no send queue, receives through its SRQ,
 * answers any DCI that presents its access key. */
struct ibv_qp *tn_create_dct(struct ibv_context *c, struct ibv_qp_init_attr_ex *a, uint64_t key)
{
	struct tn_ctx *ctx = to_ctx(c);
	if (!(a->comp_mask & IBV_QP_INIT_ATTR_PD) || !a->pd || !a->srq || !a->recv_cq) {
		errno = EINVAL;
		return NULL;
	}
	struct tn_vqp *q = calloc(1, sizeof *q);
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	q->ctx = ctx;
	struct tn_hqp *h = &q->hw;
	h->st = TN_ST_DCT;
	h->dc_key = key;
	h->pdn = tn_pdn(a->pd);
	h->srq = &((struct tn_vsrq *)a->srq)->hw;
	h->rcq = &((struct tn_vcq *)a->recv_cq)->hw;
	h->scq = a->send_cq ? &((struct tn_vcq *)a->send_cq)->hw : NULL;
	for (int tries = 0;; tries++) {
		h->qpn = tn_id_alloc(TN_ID_QPN);
		if (h->qpn && tn_qpn_publish(h->qpn) == 0)
			break;
		if (tries > 64) {
			free(q);
			errno = ENOMEM;
			return NULL;
		}
	}
	h->user_index = h->qpn;
	pthread_mutex_lock(&ctx->lock);
	int err = table_insert(ctx, q);
	pthread_mutex_unlock(&ctx->lock);
	if (err) {
		tn_qpn_retire(h->qpn);
		free(q);
		errno = err;
		return NULL;
	}
	struct ibv_qp *qp = &q->qpx.qp_base;
	qp->context = c;
	qp->qp_context = a->qp_context;
	qp->pd = a->pd;
	qp->send_cq = a->send_cq;
	qp->recv_cq = a->recv_cq;
	qp->srq = a->srq;
	qp->handle = qp->qp_num = h->qpn;
	qp->state = IBV_QPS_RESET;
	qp->qp_type = IBV_QPT_DRIVER;
	pthread_mutex_init(&qp->mutex, NULL);
	pthread_cond_init(&qp->cond, NULL);
	return qp;
}

TN_API struct ibv_qp_ex *ibv_qp_to_qp_ex(struct ibv_qp *qp)
{
	struct tn_vqp *q = (struct tn_vqp *)qp;
	if (!q->ex_ops) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	return &q->qpx;
}

/* ---- modify ---- */

/* Back to RESET: the NIC forgets the QP and every cursor starts again from zero. */
static void reset_qp(struct tn_vqp *q)
{
	pthread_mutex_lock(&tn_nic.lock);
	tn_nic_del_qp(&q->hw);
	pthread_mutex_unlock(&tn_nic.lock);
	tn_nic_quiesce();
	q->in_nic = 0;
	struct tn_hqp *h = &q->hw;
	h->state = TN_RESET;
	h->pi = h->sent = h->done = h->fetched = h->logged = h->tx_off = 0;
	h->rq_ci = 0;
	h->err_pending = h->in_err = h->rx_in_msg = h->rx_has_wqe = 0;
	h->db_seen[0] = h->db_seen[1] = 0;
	h->resume_ns = h->wait_since_ns = 0;
	q->dbrec[0] = q->dbrec[1] = 0;
	memset(q->uar + TN_BF_OFFSET, 0, 2 * TN_BF_HALF);
	q->sq.head = q->sq.tail = q->rq.head = q->rq.tail = 0;
	q->bf_off = 0;
	q->sq_pi = 0;
}

static int to_nic(struct tn_vqp *q)
{
	int err = 0;
	if (!q->in_nic) {
		pthread_mutex_lock(&tn_nic.lock);
		err = tn_nic_add_qp(&q->hw);
		pthread_mutex_unlock(&tn_nic.lock);
		q->in_nic = !err;
	}
	return err ? err : tn_nic_start();
}

static uint32_t rights(unsigned f)
{
	return (f & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC));
}

TN_API int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	struct tn_vqp *q = (struct tn_vqp *)qp;
	struct tn_hqp *h = &q->hw;
	int cur = h->state;
	int next = (mask & IBV_QP_STATE) ? (int)attr->qp_state : cur;
	if ((mask & IBV_QP_CUR_STATE) && (int)attr->cur_qp_state != cur)
		return EINVAL;
	int ok = next == TN_RESET || next == TN_ERR || (cur == TN_RESET && next == TN_INIT) ||
		 (cur == TN_INIT && (next == TN_INIT || next == TN_RTR)) || (cur == TN_RTR && next == TN_RTS) ||
		 (cur == TN_RTS && next == TN_RTS) || (cur == TN_SQE && next == TN_RTS);
	if (!ok)
		return EINVAL;
	if (h->st == TN_ST_DCT && next != TN_INIT && next != TN_RTR && next != TN_RESET && next != TN_ERR)
		return EINVAL; /* a DC target only receives */
	if (next == TN_RTR && cur == TN_INIT && h->st == TN_ST_DCT) {
		h->min_rnr_timer = (mask & IBV_QP_MIN_RNR_TIMER) ? attr->min_rnr_timer : 0;
	} else if (next == TN_RTR && cur == TN_INIT) {
		int need = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
		if ((mask & need) != need)
			return EINVAL;
		if (attr->ah_attr.is_global) {
			memcpy(h->rgid, attr->ah_attr.grh.dgid.raw, 16);
		} else if (tn_gid_of_lid(attr->ah_attr.dlid, h->rgid)) {
			tn_warn("ibv_modify_qp(RTR) of QP 0x%x: %s", h->qpn,
				tn_port_ib() ? "no port has that destination LID"
					     : "RoCE needs a GRH (ah_attr.is_global = 1 and a GID; e.g. ibv_rc_pingpong "
					       "-g 0)");
			return EINVAL;
		}
		h->rqpn = attr->dest_qp_num & 0xffffff;
		h->exp_psn = attr->rq_psn & 0xffffff;
		h->min_rnr_timer = (mask & IBV_QP_MIN_RNR_TIMER) ? attr->min_rnr_timer : 0;
		h->peer = tn_peer_resolve(h->rgid, h->rqpn);
		if (!h->peer) {
			char g[64];
			inet_ntop(AF_INET6, h->rgid, g, sizeof g);
			tn_warn("QP 0x%x: no QP 0x%x behind GID %s: its requests will fail (retry exceeded)", h->qpn,
				h->rqpn, g);
		}
	}
	if (next == TN_RTS && cur == TN_RTR) {
		if (!(mask & IBV_QP_SQ_PSN))
			return EINVAL;
		h->next_psn = attr->sq_psn & 0xffffff;
		h->timeout = (mask & IBV_QP_TIMEOUT) ? attr->timeout : 14;
		h->retry_cnt = (mask & IBV_QP_RETRY_CNT) ? attr->retry_cnt : 7;
		h->rnr_retry = (mask & IBV_QP_RNR_RETRY) ? attr->rnr_retry : 7;
	}
	if (mask & IBV_QP_ACCESS_FLAGS)
		h->qp_access = rights(attr->qp_access_flags);
	/* Remember what query_qp reports. */
	struct ibv_qp_attr *s = &q->attr;
	if (mask & IBV_QP_ACCESS_FLAGS)
		s->qp_access_flags = attr->qp_access_flags;
	if (mask & IBV_QP_PKEY_INDEX)
		s->pkey_index = attr->pkey_index;
	if (mask & IBV_QP_PORT)
		s->port_num = attr->port_num;
	if (mask & IBV_QP_AV)
		s->ah_attr = attr->ah_attr;
	if (mask & IBV_QP_PATH_MTU)
		s->path_mtu = attr->path_mtu;
	if (mask & IBV_QP_DEST_QPN)
		s->dest_qp_num = attr->dest_qp_num;
	if (mask & IBV_QP_RQ_PSN)
		s->rq_psn = attr->rq_psn;
	if (mask & IBV_QP_SQ_PSN)
		s->sq_psn = attr->sq_psn;
	if (mask & IBV_QP_TIMEOUT)
		s->timeout = attr->timeout;
	if (mask & IBV_QP_RETRY_CNT)
		s->retry_cnt = attr->retry_cnt;
	if (mask & IBV_QP_RNR_RETRY)
		s->rnr_retry = attr->rnr_retry;
	if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
		s->max_rd_atomic = attr->max_rd_atomic;
	if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
		s->max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (mask & IBV_QP_MIN_RNR_TIMER)
		s->min_rnr_timer = attr->min_rnr_timer;
	int err = 0;
	if (next == TN_RESET && cur != TN_RESET) {
		reset_qp(q);
	} else if (next == TN_ERR) {
		h->flush_req = 1;
		err = to_nic(q);
		__atomic_store_n(&h->state, TN_ERR, __ATOMIC_RELEASE);
	} else if (next != cur) {
		__atomic_store_n(&h->state, next, __ATOMIC_RELEASE);
		if (next == TN_RTR)
			err = to_nic(q);
	}
	if (!err)
		qp->state = (enum ibv_qp_state)next;
	return err;
}

TN_API int ibv_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask, struct ibv_qp_init_attr *init)
{
	(void)mask;
	struct tn_vqp *q = (struct tn_vqp *)qp;
	*attr = q->attr;
	attr->qp_state = attr->cur_qp_state = (enum ibv_qp_state)q->hw.state;
	attr->cap = q->cap;
	attr->cap.max_inline_data = q->max_inline;
	if (init) {
		memset(init, 0, sizeof *init);
		init->qp_context = qp->qp_context;
		init->send_cq = qp->send_cq;
		init->recv_cq = qp->recv_cq;
		init->srq = qp->srq;
		init->cap = attr->cap;
		init->qp_type = qp->qp_type;
		init->sq_sig_all = q->sig_all;
	}
	return 0;
}

TN_API int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct tn_vqp *q = (struct tn_vqp *)qp;
	pthread_mutex_lock(&tn_nic.lock);
	tn_nic_del_qp(&q->hw);
	pthread_mutex_unlock(&tn_nic.lock);
	tn_nic_quiesce();
	tn_qpn_retire(q->hw.qpn);
	pthread_mutex_lock(&q->ctx->lock);
	table_remove(q->ctx, q);
	pthread_mutex_unlock(&q->ctx->lock);
	free_qp(q);
	return 0;
}
