/* libibverbs data path: WQEs built exactly as libmlx5 builds them, then the doorbell record and
 * the UAR doorbell.
 *
 * A send WQE is a 16-byte ctrl segment (opmod | WQE index << 8 | opcode, qpn << 8 | ds,
 * signature, fm_ce_se, immediate), then a raddr segment for RDMA and atomics, an atomic segment
 * for atomics, then data segments (byte_count, lkey, addr) or one inline segment (byte_count |
 * 0x80000000, data padded to 16 bytes); it occupies (ds * 16 + 63) / 64 WQEBBs and may wrap at the
 * end of the ring. After the WQEs of one post: release barrier, dbrec[1] = next WQEBB (BE, 16
 * bits), then one 8-byte store of the last WQE's first 8 ctrl bytes into the QP's doorbell
 * register, alternating between its two halves (BlueFlame offset flip). Receive WQEs are data
 * segments ended by an MLX5_INVALID_LKEY entry; dbrec[0] = receives posted.
 *
 * ibv_qp_ex (ibv_wr_start ... ibv_wr_complete) builds the same WQEs and rings once at complete.
 */
#include "prov.h"

#include <errno.h>
#include <string.h>

/* ---- shared WQE building ---- */

static uint8_t *sq_at(struct tn_vqp *q, uint32_t pi)
{
	return q->hw.sq + (size_t)(pi & (q->sq.cnt - 1)) * TN_WQEBB;
}

/* The next 16-byte segment after `p`, wrapping at the end of the send queue. */
static uint8_t *next_seg(struct tn_vqp *q, uint8_t *p)
{
	p += 16;
	return p == q->hw.sq + (size_t)q->sq.cnt * TN_WQEBB ? q->hw.sq : p;
}

static void put_raddr(uint8_t *seg, uint64_t raddr, uint32_t rkey)
{
	struct mlx5_wqe_raddr_seg *r = (void *)seg;
	r->raddr = htobe64(raddr);
	r->rkey = htobe32(rkey);
	r->reserved = 0;
}

/* Inline data from `n` buffers into the inline segment at `seg`; returns 16-byte units used. */
static int put_inline(struct tn_vqp *q, uint8_t *seg, const struct ibv_sge *sg, const struct ibv_data_buf *db,
		      size_t n, uint32_t *units)
{
	size_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += sg ? sg[i].length : db[i].length;
	if (total > q->max_inline)
		return ENOMEM;
	uint8_t *end = q->hw.sq + (size_t)q->sq.cnt * TN_WQEBB, *p = seg + 4;
	for (size_t i = 0; i < n; i++) {
		const uint8_t *src = sg ? (const uint8_t *)(uintptr_t)sg[i].addr : db[i].addr;
		size_t len = sg ? sg[i].length : db[i].length;
		while (len) {
			if (p == end)
				p = q->hw.sq;
			size_t c = (size_t)(end - p) < len ? (size_t)(end - p) : len;
			memcpy(p, src, c);
			p += c;
			src += c;
			len -= c;
		}
	}
	uint32_t bc = htobe32((uint32_t)total | MLX5_INLINE_SEG);
	memcpy(seg, &bc, 4);
	*units = total ? (uint32_t)((4 + total + 15) / 16) : 0;
	return 0;
}

static uint8_t fm_ce_se(struct tn_vqp *q, unsigned flags)
{
	uint8_t f = 0;
	if ((flags & IBV_SEND_SIGNALED) || q->sig_all)
		f |= MLX5_WQE_CTRL_CQ_UPDATE;
	if (flags & IBV_SEND_SOLICITED)
		f |= MLX5_WQE_CTRL_SOLICITED;
	if (flags & IBV_SEND_FENCE)
		f |= MLX5_WQE_CTRL_FENCE;
	return f;
}

/* Dbrec, then the doorbell: what libmlx5's post_send_db does. */
static void ring(struct tn_vqp *q, const uint8_t *last_ctrl)
{
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__atomic_store_n(&q->dbrec[MLX5_SND_DBR], htobe32(q->sq_pi & 0xffff), __ATOMIC_RELEASE);
	uint64_t v;
	memcpy(&v, last_ctrl, 8);
	__atomic_store_n((uint64_t *)(q->uar + TN_BF_OFFSET + q->bf_off), v, __ATOMIC_RELEASE);
	q->bf_off ^= TN_BF_HALF;
}

static int opcode_of(enum ibv_wr_opcode op, uint8_t *mlx)
{
	switch (op) {
	case IBV_WR_RDMA_WRITE: *mlx = MLX5_OPCODE_RDMA_WRITE; return 0;
	case IBV_WR_RDMA_WRITE_WITH_IMM: *mlx = MLX5_OPCODE_RDMA_WRITE_IMM; return 0;
	case IBV_WR_SEND: *mlx = MLX5_OPCODE_SEND; return 0;
	case IBV_WR_SEND_WITH_IMM: *mlx = MLX5_OPCODE_SEND_IMM; return 0;
	case IBV_WR_RDMA_READ: *mlx = MLX5_OPCODE_RDMA_READ; return 0;
	case IBV_WR_ATOMIC_CMP_AND_SWP: *mlx = MLX5_OPCODE_ATOMIC_CS; return 0;
	case IBV_WR_ATOMIC_FETCH_AND_ADD: *mlx = MLX5_OPCODE_ATOMIC_FA; return 0;
	default:
		tn_warn("ibv_post_send: work request opcode %d is not supported", (int)op);
		return EINVAL;
	}
}

/* ---- ibv_post_send ---- */

static int build_one(struct tn_vqp *q, struct ibv_send_wr *wr, uint8_t **ctrl_out)
{
	uint8_t op;
	int err = opcode_of(wr->opcode, &op);
	if (err)
		return err;
	if ((uint32_t)wr->num_sge > q->sq.max_gs && !(wr->send_flags & IBV_SEND_INLINE))
		return EINVAL;
	uint8_t *ctrl = sq_at(q, q->sq_pi), *seg = next_seg(q, ctrl);
	uint32_t ds = 1;
	int atomic = op == MLX5_OPCODE_ATOMIC_CS || op == MLX5_OPCODE_ATOMIC_FA;
	if (atomic) {
		put_raddr(seg, wr->wr.atomic.remote_addr, wr->wr.atomic.rkey);
		seg = next_seg(q, seg);
		struct mlx5_wqe_atomic_seg *a = (void *)seg;
		if (op == MLX5_OPCODE_ATOMIC_CS) {
			a->swap_add = htobe64(wr->wr.atomic.swap);
			a->compare = htobe64(wr->wr.atomic.compare_add);
		} else {
			a->swap_add = htobe64(wr->wr.atomic.compare_add);
			a->compare = 0;
		}
		seg = next_seg(q, seg);
		ds += 2;
	} else if (op != MLX5_OPCODE_SEND && op != MLX5_OPCODE_SEND_IMM) {
		put_raddr(seg, wr->wr.rdma.remote_addr, wr->wr.rdma.rkey);
		seg = next_seg(q, seg);
		ds++;
	}
	if ((wr->send_flags & IBV_SEND_INLINE) && !atomic && op != MLX5_OPCODE_RDMA_READ) {
		uint32_t units;
		err = put_inline(q, seg, wr->sg_list, NULL, (size_t)wr->num_sge, &units);
		if (err)
			return err;
		ds += units;
	} else {
		for (int i = 0; i < wr->num_sge; i++) {
			if (!wr->sg_list[i].length)
				continue;
			mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)seg, wr->sg_list[i].length, wr->sg_list[i].lkey,
					    wr->sg_list[i].addr);
			seg = next_seg(q, seg);
			ds++;
		}
	}
	__be32 imm = (op == MLX5_OPCODE_SEND_IMM || op == MLX5_OPCODE_RDMA_WRITE_IMM) ? wr->imm_data : 0;
	mlx5dv_set_ctrl_seg((struct mlx5_wqe_ctrl_seg *)ctrl, (uint16_t)q->sq_pi, op, 0, q->hw.qpn,
			    fm_ce_se(q, wr->send_flags), (uint8_t)ds, 0, imm);
	*ctrl_out = ctrl;
	return 0;
}

int tn_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct tn_vqp *q = (struct tn_vqp *)qp;
	int err = 0;
	uint32_t nreq = 0;
	uint8_t *last = NULL;
	pthread_spin_lock(&q->sq.lock);
	/* As libmlx5: the state the program last set decides (after an error the NIC flushes). */
	if (qp->state < IBV_QPS_RTS) {
		*bad = wr;
		pthread_spin_unlock(&q->sq.lock);
		return EINVAL;
	}
	for (; wr; wr = wr->next, nreq++) {
		if (q->sq.head + nreq - q->sq.tail >= q->sq.max_post) {
			err = ENOMEM;
			*bad = wr;
			break;
		}
		uint8_t *ctrl;
		err = build_one(q, wr, &ctrl);
		if (err) {
			*bad = wr;
			break;
		}
		uint32_t idx = q->sq_pi & (q->sq.cnt - 1);
		q->sq.wrid[idx] = wr->wr_id;
		q->sq.wqe_head[idx] = q->sq.head + nreq;
		uint32_t ds = be32toh(((struct mlx5_wqe_ctrl_seg *)ctrl)->qpn_ds) & 0x3f;
		q->sq_pi += (ds * 16 + TN_WQEBB - 1) / TN_WQEBB;
		last = ctrl;
	}
	if (nreq && last) {
		q->sq.head += nreq;
		ring(q, last);
	}
	pthread_spin_unlock(&q->sq.lock);
	return err;
}

/* ---- ibv_post_recv ---- */

int tn_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct tn_vqp *q = (struct tn_vqp *)qp;
	int err = 0;
	uint32_t nreq = 0;
	if (!q->rq.cnt) {
		*bad = wr;
		return EINVAL; /* the QP receives through an SRQ */
	}
	pthread_spin_lock(&q->rq.lock);
	for (; wr; wr = wr->next, nreq++) {
		if (q->rq.head + nreq - q->rq.tail >= q->rq.max_post) {
			err = ENOMEM;
			*bad = wr;
			break;
		}
		if ((uint32_t)wr->num_sge > q->rq.max_gs) {
			err = EINVAL;
			*bad = wr;
			break;
		}
		uint32_t ind = (q->rq.head + nreq) & (q->rq.cnt - 1);
		struct mlx5_wqe_data_seg *d = (void *)(q->hw.rq + ((size_t)ind << q->hw.rq_log_stride));
		uint32_t j = 0;
		for (int i = 0; i < wr->num_sge; i++) {
			if (!wr->sg_list[i].length)
				continue;
			mlx5dv_set_data_seg(&d[j++], wr->sg_list[i].length, wr->sg_list[i].lkey, wr->sg_list[i].addr);
		}
		if (j < q->rq.max_gs) {
			d[j].byte_count = 0;
			d[j].lkey = htobe32(TN_INVALID_LKEY);
			d[j].addr = 0;
		}
		q->rq.wrid[ind] = wr->wr_id;
	}
	if (nreq) {
		q->rq.head += nreq;
		__atomic_thread_fence(__ATOMIC_RELEASE);
		__atomic_store_n(&q->dbrec[MLX5_RCV_DBR], htobe32(q->rq.head & 0xffff), __ATOMIC_RELEASE);
	}
	pthread_spin_unlock(&q->rq.lock);
	return err;
}

/* ---- ibv_qp_ex: ibv_wr_start, ibv_wr_<op>, ibv_wr_set_<data>, ibv_wr_complete ---- */

static struct tn_vqp *qx(struct ibv_qp_ex *x)
{
	return (struct tn_vqp *)x;
}

/* Closes the WQE being built: its size goes into the ctrl segment and the producer moves on. */
static void wr_close(struct tn_vqp *q)
{
	if (!q->wr_ctrl)
		return;
	struct mlx5_wqe_ctrl_seg *c = (void *)q->wr_ctrl;
	c->qpn_ds = htobe32(q->hw.qpn << 8 | (q->wr_ds & 0x3f));
	q->sq_pi += (q->wr_ds * 16 + TN_WQEBB - 1) / TN_WQEBB;
	q->wr_last_ctrl = q->wr_ctrl;
	q->wr_ctrl = NULL;
}

/* Starts a WQE: ctrl segment, and the raddr segment for RDMA/atomic opcodes. */
static uint8_t *wr_open(struct ibv_qp_ex *x, uint8_t op, int raddr, uint32_t rkey, uint64_t addr, __be32 imm)
{
	struct tn_vqp *q = qx(x);
	wr_close(q);
	if (q->wr_err)
		return NULL;
	if (q->sq.head + q->wr_nreq - q->sq.tail >= q->sq.max_post) {
		q->wr_err = ENOMEM;
		return NULL;
	}
	uint8_t *ctrl = sq_at(q, q->sq_pi);
	mlx5dv_set_ctrl_seg((struct mlx5_wqe_ctrl_seg *)ctrl, (uint16_t)q->sq_pi, op, 0, q->hw.qpn,
			    fm_ce_se(q, x->wr_flags), 1, 0, imm);
	uint32_t idx = q->sq_pi & (q->sq.cnt - 1);
	q->sq.wrid[idx] = x->wr_id;
	q->sq.wqe_head[idx] = q->sq.head + q->wr_nreq;
	q->wr_nreq++;
	q->wr_ctrl = ctrl;
	q->wr_ds = 1;
	uint8_t *seg = next_seg(q, ctrl);
	if (raddr) {
		put_raddr(seg, addr, rkey);
		seg = next_seg(q, seg);
		q->wr_ds++;
	}
	q->wr_data = seg;
	return seg;
}

static void wr_send(struct ibv_qp_ex *x)
{
	wr_open(x, MLX5_OPCODE_SEND, 0, 0, 0, 0);
}

static void wr_send_imm(struct ibv_qp_ex *x, __be32 imm)
{
	wr_open(x, MLX5_OPCODE_SEND_IMM, 0, 0, 0, imm);
}

static void wr_rdma_write(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr)
{
	wr_open(x, MLX5_OPCODE_RDMA_WRITE, 1, rkey, addr, 0);
}

static void wr_rdma_write_imm(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, __be32 imm)
{
	wr_open(x, MLX5_OPCODE_RDMA_WRITE_IMM, 1, rkey, addr, imm);
}

static void wr_rdma_read(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr)
{
	wr_open(x, MLX5_OPCODE_RDMA_READ, 1, rkey, addr, 0);
}

static void wr_atomic(struct ibv_qp_ex *x, uint8_t op, uint32_t rkey, uint64_t addr, uint64_t swap_add,
		      uint64_t compare)
{
	struct tn_vqp *q = qx(x);
	uint8_t *seg = wr_open(x, op, 1, rkey, addr, 0);
	if (!seg)
		return;
	struct mlx5_wqe_atomic_seg *a = (void *)seg;
	a->swap_add = htobe64(swap_add);
	a->compare = htobe64(compare);
	q->wr_data = next_seg(q, seg);
	q->wr_ds++;
}

static void wr_cas(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap)
{
	wr_atomic(x, MLX5_OPCODE_ATOMIC_CS, rkey, addr, swap, compare);
}

static void wr_fadd(struct ibv_qp_ex *x, uint32_t rkey, uint64_t addr, uint64_t add)
{
	wr_atomic(x, MLX5_OPCODE_ATOMIC_FA, rkey, addr, add, 0);
}

static void wr_set_sge(struct ibv_qp_ex *x, uint32_t lkey, uint64_t addr, uint32_t len)
{
	struct tn_vqp *q = qx(x);
	if (!q->wr_ctrl || !len)
		return;
	mlx5dv_set_data_seg((struct mlx5_wqe_data_seg *)q->wr_data, len, lkey, addr);
	q->wr_data = next_seg(q, q->wr_data);
	q->wr_ds++;
}

static void wr_set_sge_list(struct ibv_qp_ex *x, size_t n, const struct ibv_sge *sg)
{
	struct tn_vqp *q = qx(x);
	if (n > q->sq.max_gs) {
		q->wr_err = EINVAL;
		return;
	}
	for (size_t i = 0; i < n; i++)
		wr_set_sge(x, sg[i].lkey, sg[i].addr, sg[i].length);
}

static void wr_inline(struct ibv_qp_ex *x, const struct ibv_data_buf *db, size_t n)
{
	struct tn_vqp *q = qx(x);
	if (!q->wr_ctrl)
		return;
	uint32_t units;
	int err = put_inline(q, q->wr_data, NULL, db, n, &units);
	if (err) {
		q->wr_err = err;
		return;
	}
	q->wr_ds += units;
}

static void wr_set_inline_data(struct ibv_qp_ex *x, void *addr, size_t len)
{
	struct ibv_data_buf b = {.addr = addr, .length = len};
	wr_inline(x, &b, 1);
}

static void wr_set_inline_data_list(struct ibv_qp_ex *x, size_t n, const struct ibv_data_buf *l)
{
	wr_inline(x, l, n);
}

static void wr_start(struct ibv_qp_ex *x)
{
	struct tn_vqp *q = qx(x);
	pthread_spin_lock(&q->sq.lock);
	q->wr_err = q->qpx.qp_base.state < IBV_QPS_RTS ? EINVAL : 0;
	q->wr_nreq = 0;
	q->wr_ctrl = q->wr_last_ctrl = NULL;
	q->wr_save_pi = q->sq_pi;
	q->wr_save_head = q->sq.head;
}

static int wr_complete(struct ibv_qp_ex *x)
{
	struct tn_vqp *q = qx(x);
	wr_close(q);
	int err = q->wr_err;
	if (err) {
		q->sq_pi = q->wr_save_pi;
		q->sq.head = q->wr_save_head;
	} else if (q->wr_nreq) {
		q->sq.head += q->wr_nreq;
		ring(q, q->wr_last_ctrl);
	}
	pthread_spin_unlock(&q->sq.lock);
	return err;
}

static void wr_abort(struct ibv_qp_ex *x)
{
	struct tn_vqp *q = qx(x);
	q->wr_ctrl = NULL;
	q->sq_pi = q->wr_save_pi;
	q->sq.head = q->wr_save_head;
	pthread_spin_unlock(&q->sq.lock);
}

#define WR_REFUSE(name)                                                                                    \
	static void refuse_##name(struct ibv_qp_ex *x)                                                     \
	{                                                                                                  \
		qx(x)->wr_err = tn_refuse(#name);                                                          \
	}
WR_REFUSE(ibv_wr_bind_mw)
WR_REFUSE(ibv_wr_local_inv)
WR_REFUSE(ibv_wr_send_inv)
WR_REFUSE(ibv_wr_send_tso)
WR_REFUSE(ibv_wr_set_ud_addr)
WR_REFUSE(ibv_wr_set_xrc_srqn)
WR_REFUSE(ibv_wr_atomic_write)
#define FN(field, fn) (x->field = (__typeof__(x->field))(void (*)(void))(fn))

void tn_qpx_init(struct tn_vqp *q)
{
	struct ibv_qp_ex *x = &q->qpx;
	x->wr_send = wr_send;
	x->wr_send_imm = wr_send_imm;
	x->wr_rdma_write = wr_rdma_write;
	x->wr_rdma_write_imm = wr_rdma_write_imm;
	x->wr_rdma_read = wr_rdma_read;
	x->wr_atomic_cmp_swp = wr_cas;
	x->wr_atomic_fetch_add = wr_fadd;
	x->wr_set_sge = wr_set_sge;
	x->wr_set_sge_list = wr_set_sge_list;
	x->wr_set_inline_data = wr_set_inline_data;
	x->wr_set_inline_data_list = wr_set_inline_data_list;
	x->wr_start = wr_start;
	x->wr_complete = wr_complete;
	x->wr_abort = wr_abort;
	FN(wr_bind_mw, refuse_ibv_wr_bind_mw);
	FN(wr_local_inv, refuse_ibv_wr_local_inv);
	FN(wr_send_inv, refuse_ibv_wr_send_inv);
	FN(wr_send_tso, refuse_ibv_wr_send_tso);
	FN(wr_set_ud_addr, refuse_ibv_wr_set_ud_addr);
	FN(wr_set_xrc_srqn, refuse_ibv_wr_set_xrc_srqn);
	FN(wr_atomic_write, refuse_ibv_wr_atomic_write);
}
