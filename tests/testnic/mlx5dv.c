/* libmlx5 of the software NIC: the direct-verbs view of the objects libibverbs.so.1 made
 * (mlx5dv_init_obj hands out the real buffers, doorbell records and doorbell registers the NIC
 * watches), the device query, and the devx entry points (devx.c).
 */
#include "prov.h"

#include <errno.h>
#include <string.h>

TN_API bool mlx5dv_is_supported(struct ibv_device *device)
{
	return device && !strncmp(ibv_get_device_name(device), "mlx5_", 5);
}

TN_API struct ibv_context *mlx5dv_open_device(struct ibv_device *device, struct mlx5dv_context_attr *attr)
{
	if (attr && (attr->comp_mask || (attr->flags & ~(uint32_t)MLX5DV_CONTEXT_FLAGS_DEVX))) {
		tn_refuse("mlx5dv_open_device with flags other than MLX5DV_CONTEXT_FLAGS_DEVX");
		return NULL;
	}
	return ibv_open_device(device);
}

/* mlx5dv_create_qp: a plain QP, or a DC target (what NVSHMEM's IBGDA creates); DCIs, DCI streams
 * and mlx5 create flags are refused (devx DCIs are supported: devx.c). */
TN_API struct ibv_qp *mlx5dv_create_qp(struct ibv_context *c, struct ibv_qp_init_attr_ex *attr,
				       struct mlx5dv_qp_init_attr *dv)
{
	if (!dv || !dv->comp_mask)
		return tn_create_qp_ex(c, attr);
	if (dv->comp_mask == MLX5DV_QP_INIT_ATTR_MASK_DC && dv->dc_init_attr.dc_type == MLX5DV_DCTYPE_DCT)
		return tn_create_dct(c, attr, dv->dc_init_attr.dct_access_key);
	tn_refuse("mlx5dv_create_qp with attributes other than a DC target (DCI, DCI streams, create flags)");
	return NULL;
}

TN_API int mlx5dv_query_device(struct ibv_context *c, struct mlx5dv_context *attrs)
{
	(void)c;
	uint64_t asked = attrs->comp_mask;
	memset(attrs, 0, sizeof *attrs);
	attrs->version = 1;
	attrs->flags = MLX5DV_CONTEXT_FLAGS_CQE_V1 | MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED;
	/* Answered optional parts: none (striding RQ, tunnel offloads, DC, crypto...: not modelled). */
	(void)asked;
	attrs->comp_mask = 0;
	return 0;
}

TN_API int mlx5dv_set_context_attr(struct ibv_context *c, enum mlx5dv_set_ctx_attr_type type, void *attr)
{
	(void)c;
	(void)type;
	(void)attr;
	return tn_refuse("mlx5dv_set_context_attr");
}

static int init_qp(struct ibv_qp *in, struct mlx5dv_qp *out)
{
	struct tn_vqp *q = (struct tn_vqp *)in;
	uint64_t asked = out->comp_mask;
	out->dbrec = (__be32 *)q->dbrec;
	out->sq.buf = q->hw.sq;
	out->sq.wqe_cnt = q->sq.cnt;
	out->sq.stride = TN_WQEBB;
	out->rq.buf = q->hw.rq;
	out->rq.wqe_cnt = q->rq.cnt;
	out->rq.stride = q->rq.cnt ? 1u << q->hw.rq_log_stride : 0;
	out->bf.reg = q->uar + TN_BF_OFFSET;
	out->bf.size = TN_BF_HALF;
	out->comp_mask = 0;
	if (asked & MLX5DV_QP_MASK_UAR_MMAP_OFFSET) {
		out->uar_mmap_offset = 0;
		out->comp_mask |= MLX5DV_QP_MASK_UAR_MMAP_OFFSET;
	}
	if (asked & (MLX5DV_QP_MASK_RAW_QP_HANDLES | MLX5DV_QP_MASK_RAW_QP_TIR_ADDR))
		return tn_refuse("mlx5dv_init_obj(QP) for raw packet QP handles");
	return 0;
}

static int init_cq(struct ibv_cq *in, struct mlx5dv_cq *out)
{
	struct tn_vcq *v = (struct tn_vcq *)in;
	out->buf = v->hw.buf;
	out->dbrec = (__be32 *)v->hw.dbrec;
	out->cqe_cnt = 1u << v->hw.log_cnt;
	out->cqe_size = 64;
	out->cq_uar = v->uar;
	out->cqn = v->hw.cqn;
	out->comp_mask = 0;
	return 0;
}

static int init_srq(struct ibv_srq *in, struct mlx5dv_srq *out)
{
	struct tn_vsrq *s = (struct tn_vsrq *)in;
	uint64_t asked = out->comp_mask;
	out->buf = s->hw.buf;
	out->dbrec = (__be32 *)s->hw.dbrec;
	out->stride = 1u << s->hw.log_stride;
	out->head = s->head;
	out->tail = s->tail;
	out->comp_mask = 0;
	if (asked & MLX5DV_SRQ_MASK_SRQN) {
		out->srqn = s->hw.srqn;
		out->comp_mask |= MLX5DV_SRQ_MASK_SRQN;
	}
	return 0;
}

static int init_obj(struct mlx5dv_obj *obj, uint64_t types)
{
	int err = 0;
	if (types & ~(uint64_t)(MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ | MLX5DV_OBJ_SRQ | MLX5DV_OBJ_PD | MLX5DV_OBJ_AH))
		return tn_refuse("mlx5dv_init_obj for RWQ or DM objects");
	if (!err && (types & MLX5DV_OBJ_QP))
		err = init_qp(obj->qp.in, obj->qp.out);
	if (!err && (types & MLX5DV_OBJ_CQ))
		err = init_cq(obj->cq.in, obj->cq.out);
	if (!err && (types & MLX5DV_OBJ_SRQ))
		err = init_srq(obj->srq.in, obj->srq.out);
	if (!err && (types & MLX5DV_OBJ_PD)) {
		obj->pd.out->pdn = tn_pdn(obj->pd.in);
		obj->pd.out->comp_mask = 0;
	}
	if (!err && (types & MLX5DV_OBJ_AH)) {
		obj->ah.out->av = &((struct tn_vah *)obj->ah.in)->av;
		obj->ah.out->comp_mask = 0;
	}
	return err;
}

/* Two versions, as in rdma-core: MLX5_1.0 and the default MLX5_1.2. */
int tn_init_obj_1_2(struct mlx5dv_obj *obj, uint64_t types);
int tn_init_obj_1_0(struct mlx5dv_obj *obj, uint64_t types);
__asm__(".symver tn_init_obj_1_2, mlx5dv_init_obj@@MLX5_1.2");
__asm__(".symver tn_init_obj_1_0, mlx5dv_init_obj@MLX5_1.0");
TN_API int tn_init_obj_1_2(struct mlx5dv_obj *obj, uint64_t types)
{
	return init_obj(obj, types);
}
TN_API int tn_init_obj_1_0(struct mlx5dv_obj *obj, uint64_t types)
{
	return init_obj(obj, types);
}
