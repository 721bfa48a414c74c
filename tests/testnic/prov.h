/* The driver half of the software NIC's libibverbs: the objects handed to programs, each a public
 * rdma-core struct (first member, as programs cast them) followed by what libmlx5 would keep
 * beside it, and the hardware context (nic.h) the NIC thread works on.
 */
#ifndef TESTNIC_PROV_H
#define TESTNIC_PROV_H

#include "nic.h"

#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>

#define TN_VENDOR_ID 0x02c9      /* Mellanox */
#define TN_VENDOR_PART 4129      /* ConnectX-7 */
#define TN_FW_VER "28.39.1002"

struct tn_ctx {
	struct verbs_context vctx;   /* programs get &vctx.context */
	pthread_mutex_t lock;
	struct tn_vqp **qps;         /* QPN -> QP for poll_cq: open addressing, QP_TABLE slots */
};
#define QP_TABLE 4096u

struct tn_vpd {
	struct ibv_pd pd;
	uint32_t pdn;
};

struct tn_vmr {
	struct ibv_mr mr;
	struct tn_mr hw;
};

struct tn_vah {
	struct ibv_ah ah;
	struct ibv_ah_attr attr;
	struct mlx5_wqe_av av;
};

struct tn_vchan {
	struct ibv_comp_channel ch;
	int wfd;                     /* the NIC writes the ibv_cq pointer here */
};

struct tn_vcq {
	struct ibv_cq_ex cq;         /* ibv_cq is its prefix */
	struct tn_hcq hw;
	uint32_t ci;                 /* consumer index */
	uint32_t arm_sn;
	uint32_t events;             /* completion events delivered through the channel */
	uint8_t *uar;                /* page whose +0x20 word takes the arm doorbell */
	pthread_spinlock_t lock;
};

struct tn_vsrq {
	struct ibv_srq srq;
	struct tn_hsrq hw;
	uint64_t *wrid;
	uint32_t head, tail, counter, max_gs;
	pthread_spinlock_t lock;
};

struct tn_wq {
	uint64_t *wrid;
	uint32_t *wqe_head;          /* SQ: head value when the WQE was posted (poll moves tail past it) */
	uint32_t cnt, max_post, head, tail, max_gs;
	pthread_spinlock_t lock;
};

struct tn_vqp {
	struct ibv_qp_ex qpx;        /* ibv_qp is its prefix */
	struct tn_hqp hw;
	struct tn_ctx *ctx;
	uint8_t *buf;                /* RQ then SQ, as libmlx5 lays them out */
	size_t buf_size;
	uint32_t dbrec[2] __attribute__((aligned(64)));
	uint8_t *uar;                /* this QP's own UAR page: its doorbell register is +0x800 */
	uint32_t bf_off;             /* which half of the register the next doorbell uses */
	struct tn_wq sq, rq;
	uint32_t wqe_bb;             /* WQEBBs per WQE (sizing) */
	uint32_t max_inline;
	int ex_ops;                  /* created with send ops: ibv_qp_to_qp_ex works */
	int sig_all;
	struct ibv_qp_attr attr;     /* what modify_qp set, for query_qp */
	struct ibv_qp_cap cap;
	int in_nic;                  /* on the NIC thread's list */
	uint32_t sq_pi;              /* WQEBBs posted (libmlx5's cur_post) */
	/* ibv_wr_* state between wr_start and wr_complete */
	uint32_t wr_save_pi, wr_save_head;
	int wr_err;
	uint32_t wr_nreq;
	uint8_t *wr_ctrl;            /* ctrl segment of the WQE being built */
	uint32_t wr_ds;              /* its size so far, 16-byte units */
	uint8_t *wr_data;            /* where its data segment goes */
	uint8_t *wr_last_ctrl;
};

static inline struct tn_ctx *to_ctx(struct ibv_context *c)
{
	return (struct tn_ctx *)((uint8_t *)c - offsetof(struct tn_ctx, vctx.context));
}

/* verbs_cq.c / verbs_qp.c / verbs_post.c */
int tn_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int tn_req_notify_cq(struct ibv_cq *cq, int solicited);
int tn_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int tn_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int tn_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
struct ibv_qp *tn_create_qp_ex(struct ibv_context *c, struct ibv_qp_init_attr_ex *attr);
struct ibv_qp *tn_create_dct(struct ibv_context *c, struct ibv_qp_init_attr_ex *attr, uint64_t key);
void tn_qpx_init(struct tn_vqp *q);
struct tn_vqp *tn_ctx_find_qp(struct tn_ctx *ctx, uint32_t qpn);
uint8_t *tn_page_alloc(void);
void tn_ctx_ops(struct tn_ctx *ctx);
uint32_t tn_pdn(struct ibv_pd *pd);

#endif
