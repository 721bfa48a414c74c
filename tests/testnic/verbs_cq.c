/* libibverbs: completion queues and shared receive queues, as libmlx5 drives them.
 *
 * A CQ is a ring of 64-byte mlx5 CQEs initialised to "invalid" (op_own 0xf0). The NIC writes an
 * entry with the owner bit of its pass; ibv_poll_cq takes entries whose owner bit matches the
 * consumer's pass, decodes them (qpn, wqe_counter, byte_cnt, opcode, syndrome) and writes the
 * consumer index to the doorbell record. ibv_req_notify_cq arms the CQ as libmlx5 does (arm
 * doorbell record, then the 8-byte arm doorbell at UAR+0x20); the NIC answers an armed CQ that
 * has a new entry by writing the CQ into the completion channel's pipe. A solicited-only arm is
 * treated as a plain one (an event may come early, never late).
 *
 * An SRQ is libmlx5's linked list of receive WQEs (a next-segment, then data segments); its
 * doorbell record counts posted WQEs; a completion gives the WQE back at the list's tail.
 */
#include "prov.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static void *zalloc_pages(size_t n)
{
	size_t sz = (n + TN_PAGE - 1) & ~(size_t)(TN_PAGE - 1);
	void *p = mmap(NULL, sz ? sz : TN_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	return p == MAP_FAILED ? NULL : p;
}

static void free_pages(void *p, size_t n)
{
	if (p)
		munmap(p, (n + TN_PAGE - 1) & ~(size_t)(TN_PAGE - 1));
}

/* ---- CQ ---- */

TN_API struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *cq_context,
				    struct ibv_comp_channel *channel, int comp_vector)
{
	(void)comp_vector;
	if (cqe < 1 || (uint32_t)cqe >= TN_MAX_CQE) {
		errno = EINVAL;
		return NULL;
	}
	struct tn_vcq *v = calloc(1, sizeof *v);
	uint32_t log = tn_ilog2_up((uint32_t)cqe + 1);
	if (!v) {
		errno = ENOMEM;
		return NULL;
	}
	v->hw.buf = zalloc_pages((size_t)64 << log);
	v->uar = tn_page_alloc();
	v->hw.dbrec = calloc(16, sizeof(uint32_t));
	if (!v->hw.buf || !v->uar || !v->hw.dbrec) {
		free_pages(v->hw.buf, (size_t)64 << log);
		free_pages(v->uar, TN_PAGE);
		free((void *)v->hw.dbrec);
		free(v);
		errno = ENOMEM;
		return NULL;
	}
	for (uint32_t i = 0; i < (1u << log); i++)
		v->hw.buf[i * 64 + 63] = TN_CQE_INVALID << 4;
	v->hw.cqn = tn_id_alloc(TN_ID_CQN);
	v->hw.log_cnt = log;
	v->hw.ev_fd = channel ? ((struct tn_vchan *)channel)->wfd : -1;
	v->hw.ev_cq = v;
	v->hw.arm_done = ~0u;
	pthread_spin_init(&v->lock, PTHREAD_PROCESS_PRIVATE);
	struct ibv_cq *cq = (struct ibv_cq *)&v->cq;
	cq->context = c;
	cq->channel = channel;
	cq->cq_context = cq_context;
	cq->handle = v->hw.cqn;
	cq->cqe = (int)(1u << log) - 1;
	pthread_mutex_init(&cq->mutex, NULL);
	pthread_cond_init(&cq->cond, NULL);
	tn_obj_put(TN_OBJ_CQ, v->hw.cqn, &v->hw);
	if (channel) {
		pthread_mutex_lock(&tn_nic.lock);
		int err = tn_nic_add_evcq(&v->hw);
		if (!err)
			channel->refcnt++;
		pthread_mutex_unlock(&tn_nic.lock);
		if (err) {
			tn_obj_del(TN_OBJ_CQ, v->hw.cqn);
			free_pages(v->hw.buf, (size_t)64 << log);
			free_pages(v->uar, TN_PAGE);
			free((void *)v->hw.dbrec);
			free(v);
			errno = err;
			return NULL;
		}
	}
	return cq;
}

TN_API int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct tn_vcq *v = (struct tn_vcq *)cq;
	/* Like libibverbs: wait until every delivered completion event was acknowledged. */
	pthread_mutex_lock(&cq->mutex);
	while (cq->comp_events_completed != __atomic_load_n(&v->events, __ATOMIC_ACQUIRE))
		pthread_cond_wait(&cq->cond, &cq->mutex);
	pthread_mutex_unlock(&cq->mutex);
	if (cq->channel) {
		pthread_mutex_lock(&tn_nic.lock);
		tn_nic_del_evcq(&v->hw);
		cq->channel->refcnt--;
		pthread_mutex_unlock(&tn_nic.lock);
	}
	tn_obj_del(TN_OBJ_CQ, v->hw.cqn);
	tn_nic_quiesce();
	free_pages(v->hw.buf, (size_t)64 << v->hw.log_cnt);
	free_pages(v->uar, TN_PAGE);
	free((void *)v->hw.dbrec);
	free(v);
	return 0;
}

TN_API int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	(void)cq;
	(void)cqe;
	return tn_refuse("ibv_resize_cq");
}

static enum ibv_wc_status status_of(uint8_t synd)
{
	switch (synd) {
	case TN_SYN_LOCAL_LENGTH: return IBV_WC_LOC_LEN_ERR;
	case TN_SYN_LOCAL_QP_OP: return IBV_WC_LOC_QP_OP_ERR;
	case TN_SYN_LOCAL_PROT: return IBV_WC_LOC_PROT_ERR;
	case TN_SYN_WR_FLUSH: return IBV_WC_WR_FLUSH_ERR;
	case 0x06: return IBV_WC_MW_BIND_ERR;
	case 0x10: return IBV_WC_BAD_RESP_ERR;
	case 0x11: return IBV_WC_LOC_ACCESS_ERR;
	case TN_SYN_REMOTE_INVAL_REQ: return IBV_WC_REM_INV_REQ_ERR;
	case TN_SYN_REMOTE_ACCESS: return IBV_WC_REM_ACCESS_ERR;
	case TN_SYN_REMOTE_OP: return IBV_WC_REM_OP_ERR;
	case TN_SYN_RETRY_EXC: return IBV_WC_RETRY_EXC_ERR;
	case TN_SYN_RNR_RETRY_EXC: return IBV_WC_RNR_RETRY_EXC_ERR;
	case 0x22: return IBV_WC_REM_ABORT_ERR;
	default: return IBV_WC_GENERAL_ERR;
	}
}

static enum ibv_wc_opcode req_opcode(uint8_t op)
{
	switch (op) {
	case MLX5_OPCODE_RDMA_WRITE:
	case MLX5_OPCODE_RDMA_WRITE_IMM: return IBV_WC_RDMA_WRITE;
	case MLX5_OPCODE_RDMA_READ: return IBV_WC_RDMA_READ;
	case MLX5_OPCODE_ATOMIC_CS: return IBV_WC_COMP_SWAP;
	case MLX5_OPCODE_ATOMIC_FA: return IBV_WC_FETCH_ADD;
	case MLX5_OPCODE_ATOMIC_MASKED_CS: return IBV_WC_COMP_SWAP;
	case MLX5_OPCODE_ATOMIC_MASKED_FA: return IBV_WC_FETCH_ADD;
	default: return IBV_WC_SEND;
	}
}

static uint32_t ld32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return be32toh(v);
}

/* The receive WQE a responder CQE consumed: its wr_id (and an SRQ WQE goes back to the list). */
static uint64_t recv_wrid(struct tn_vqp *q, uint16_t wqe_counter)
{
	if (q->hw.srq) {
		struct tn_vsrq *s = (struct tn_vsrq *)q->qpx.qp_base.srq;
		uint32_t idx = wqe_counter & (s->hw.cnt - 1);
		uint64_t id = s->wrid[idx];
		pthread_spin_lock(&s->lock);
		struct mlx5_wqe_srq_next_seg *tail =
			(struct mlx5_wqe_srq_next_seg *)(s->hw.buf + ((size_t)s->tail << s->hw.log_stride));
		tail->next_wqe_index = htobe16((uint16_t)idx);
		s->tail = idx;
		pthread_spin_unlock(&s->lock);
		return id;
	}
	uint64_t id = q->rq.wrid[q->rq.tail & (q->rq.cnt - 1)];
	q->rq.tail++;
	return id;
}

int tn_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct tn_vcq *v = (struct tn_vcq *)cq;
	struct tn_ctx *ctx = to_ctx(cq->context);
	uint32_t mask = (1u << v->hw.log_cnt) - 1;
	int got = 0;
	pthread_spin_lock(&v->lock);
	while (got < n) {
		uint8_t *e = v->hw.buf + (size_t)(v->ci & mask) * 64;
		uint8_t op_own = __atomic_load_n(e + 63, __ATOMIC_ACQUIRE);
		uint8_t opcode = op_own >> 4;
		if (opcode == TN_CQE_INVALID || (op_own & 1) != ((v->ci >> v->hw.log_cnt) & 1))
			break;
		v->ci++;
		uint32_t sop = ld32(e + 56);
		uint16_t wqe_counter = (uint16_t)(e[60] << 8 | e[61]);
		struct tn_vqp *q = tn_ctx_find_qp(ctx, sop & 0xffffff);
		if (!q)
			continue; /* a QP destroyed with completions still queued */
		struct ibv_wc *w = &wc[got++];
		memset(w, 0, sizeof *w);
		w->qp_num = sop & 0xffffff;
		w->byte_len = ld32(e + 44);
		if (opcode == TN_CQE_REQ || opcode == TN_CQE_REQ_ERR) {
			uint32_t idx = wqe_counter & (q->sq.cnt - 1);
			w->wr_id = q->sq.wrid[idx];
			q->sq.tail = q->sq.wqe_head[idx] + 1;
			w->opcode = req_opcode(sop >> 24);
			if (opcode == TN_CQE_REQ_ERR) {
				w->status = status_of(e[55]);
				w->vendor_err = e[54];
				w->byte_len = 0;
			} else if (w->opcode == IBV_WC_COMP_SWAP || w->opcode == IBV_WC_FETCH_ADD) {
				w->byte_len = 8;
			}
			continue;
		}
		w->wr_id = recv_wrid(q, wqe_counter);
		if (opcode == TN_CQE_RESP_ERR) {
			w->status = status_of(e[55]);
			w->vendor_err = e[54];
			w->opcode = IBV_WC_RECV;
			w->byte_len = 0;
			continue;
		}
		w->opcode = opcode == TN_CQE_RESP_WR_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
		if (opcode == TN_CQE_RESP_WR_IMM || opcode == TN_CQE_RESP_SEND_IMM) {
			memcpy(&w->imm_data, e + 36, 4);
			w->wc_flags |= IBV_WC_WITH_IMM;
		}
		w->src_qp = ld32(e + 24) & 0xffffff;
		w->wc_flags |= IBV_WC_GRH;
	}
	if (got || v->ci != (tn_be32_load(&v->hw.dbrec[0]) & 0xffffff))
		__atomic_store_n(&v->hw.dbrec[0], htobe32(v->ci & 0xffffff), __ATOMIC_RELEASE);
	pthread_spin_unlock(&v->lock);
	return got;
}

int tn_req_notify_cq(struct ibv_cq *cq, int solicited)
{
	struct tn_vcq *v = (struct tn_vcq *)cq;
	uint32_t sn = __atomic_load_n(&v->arm_sn, __ATOMIC_RELAXED) & 3;
	uint32_t word = sn << 28 | (solicited ? MLX5_CQ_DB_REQ_NOT_SOL : MLX5_CQ_DB_REQ_NOT) | (v->ci & 0xffffff);
	__atomic_store_n(&v->hw.dbrec[1], htobe32(word), __ATOMIC_RELEASE);
	uint64_t db = (uint64_t)htobe32(v->hw.cqn) << 32 | htobe32(word);
	__atomic_store_n((uint64_t *)(v->uar + TN_CQ_DOORBELL), db, __ATOMIC_RELEASE);
	return 0;
}

/* ---- SRQ ---- */

TN_API struct ibv_srq *ibv_create_srq(struct ibv_pd *pd, struct ibv_srq_init_attr *attr)
{
	uint32_t wr = attr->attr.max_wr, sge = attr->attr.max_sge ? attr->attr.max_sge : 1;
	if (wr == 0 || wr >= TN_MAX_QP_WR || sge > TN_MAX_SGE) {
		errno = EINVAL;
		return NULL;
	}
	struct tn_vsrq *s = calloc(1, sizeof *s);
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	uint32_t log_cnt = tn_ilog2_up(wr + 1), log_stride = tn_ilog2_up(16 + 16 * sge);
	s->hw.cnt = 1u << log_cnt;
	s->hw.log_stride = log_stride;
	s->hw.buf = zalloc_pages((size_t)s->hw.cnt << log_stride);
	s->hw.dbrec = calloc(16, sizeof(uint32_t));
	s->wrid = calloc(s->hw.cnt, sizeof *s->wrid);
	if (!s->hw.buf || !s->hw.dbrec || !s->wrid) {
		free_pages(s->hw.buf, (size_t)s->hw.cnt << log_stride);
		free((void *)s->hw.dbrec);
		free(s->wrid);
		free(s);
		errno = ENOMEM;
		return NULL;
	}
	for (uint32_t i = 0; i < s->hw.cnt; i++) {
		struct mlx5_wqe_srq_next_seg *nx = (void *)(s->hw.buf + ((size_t)i << log_stride));
		nx->next_wqe_index = htobe16((uint16_t)((i + 1) & (s->hw.cnt - 1)));
	}
	s->head = 0;
	s->tail = s->hw.cnt - 1;
	s->max_gs = sge;
	s->hw.srqn = tn_id_alloc(TN_ID_SRQN);
	s->hw.pdn = tn_pdn(pd);
	pthread_spin_init(&s->lock, PTHREAD_PROCESS_PRIVATE);
	s->srq.context = pd->context;
	s->srq.srq_context = attr->srq_context;
	s->srq.pd = pd;
	s->srq.handle = s->hw.srqn;
	pthread_mutex_init(&s->srq.mutex, NULL);
	pthread_cond_init(&s->srq.cond, NULL);
	attr->attr.max_wr = s->hw.cnt - 1;
	attr->attr.max_sge = sge;
	tn_obj_put(TN_OBJ_SRQ, s->hw.srqn, &s->hw);
	return &s->srq;
}

TN_API int ibv_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr, int mask)
{
	(void)srq;
	(void)attr;
	(void)mask;
	return tn_refuse("ibv_modify_srq");
}

TN_API int ibv_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	struct tn_vsrq *s = (struct tn_vsrq *)srq;
	attr->max_wr = s->hw.cnt - 1;
	attr->max_sge = s->max_gs;
	attr->srq_limit = 0;
	return 0;
}

TN_API int ibv_destroy_srq(struct ibv_srq *srq)
{
	struct tn_vsrq *s = (struct tn_vsrq *)srq;
	tn_obj_del(TN_OBJ_SRQ, s->hw.srqn);
	tn_nic_quiesce();
	free_pages(s->hw.buf, (size_t)s->hw.cnt << s->hw.log_stride);
	free((void *)s->hw.dbrec);
	free(s->wrid);
	free(s);
	return 0;
}

int tn_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct tn_vsrq *s = (struct tn_vsrq *)srq;
	int err = 0;
	pthread_spin_lock(&s->lock);
	for (; wr; wr = wr->next) {
		if ((uint32_t)wr->num_sge > s->max_gs) {
			err = EINVAL;
			*bad = wr;
			break;
		}
		if (s->head == s->tail) {
			err = ENOMEM; /* full */
			*bad = wr;
			break;
		}
		uint32_t idx = s->head;
		uint8_t *wqe = s->hw.buf + ((size_t)idx << s->hw.log_stride);
		struct mlx5_wqe_srq_next_seg *nx = (void *)wqe;
		struct mlx5_wqe_data_seg *d = (void *)(wqe + 16);
		int j = 0;
		for (int i = 0; i < wr->num_sge; i++) {
			if (!wr->sg_list[i].length)
				continue;
			mlx5dv_set_data_seg(&d[j++], wr->sg_list[i].length, wr->sg_list[i].lkey, wr->sg_list[i].addr);
		}
		if ((uint32_t)j < s->max_gs) {
			d[j].byte_count = 0;
			d[j].lkey = htobe32(TN_INVALID_LKEY);
			d[j].addr = 0;
		}
		s->wrid[idx] = wr->wr_id;
		s->head = be16toh(nx->next_wqe_index);
		s->counter++;
	}
	__atomic_store_n(&s->hw.dbrec[0], htobe32(s->counter), __ATOMIC_RELEASE);
	pthread_spin_unlock(&s->lock);
	return err;
}
