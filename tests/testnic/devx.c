/* libmlx5 devx of the software NIC: what NVSHMEM's IBGDA transport (and DOCA GPUNetIO) use to
 * build GPU-driven queues without libmlx5's help.
 *
 * - umems (mlx5dv_devx_umem_reg / _reg_ex): a registered buffer the NIC may read or write (host
 *   or CUDA device memory; a dma-buf umem only where the fd can be mapped: a CUDA dma-buf cannot,
 *   and NVSHMEM then falls back to the plain umem_reg of the same device address).
 * - UARs (mlx5dv_devx_alloc_uar: BF, NC, NC_DEDICATED): a 4 KiB page; reg_addr = page + 0x800 is
 *   the doorbell register the NIC thread watches for every QP created on that page.
 * - QUERY_HCA_CAP (general, atomic and RoCE capabilities) and QUERY_ROCE_ADDRESS (the one GID,
 *   RoCE v2) through mlx5dv_devx_general_cmd: NVSHMEM reads the first two, DOCA GPUNetIO (NCCL's
 *   GDAKI) the general port type, RC, queue and WQE sizes, the RoCE caps and the RoCE address.
 * - CREATE_CQ (64-byte CQEs in a umem, doorbell record in a umem, collapsed, overrun-ignore),
 *   CREATE_QP (RC or DCI, send queue and doorbell record in umems, SRQ or regular RQ), the QP
 *   transitions RST2INIT, INIT2RTR, RTR2RTS, RTS2RTS, 2ERR, 2RST, and destroy, with mailboxes
 *   parsed in the PRM layout (ifc.h). Output mailboxes carry status and syndrome as firmware's
 *   do; anything else is refused with a stderr line and status BAD_OP.
 * - QUERY_QP (mlx5dv_devx_obj_query of a devx QP): the QP context as CREATE_QP and the
 *   transitions set it, with the live state (ERR once the NIC put the QP in error, as a ConnectX
 *   moves an RC QP to error on a completion with error) and PSNs: what DOCA GPUNetIO's
 *   doca_gpu_verbs_query_last_error (NCCL's GIN error query) reads.
 */
#include "ifc.h"
#include "prov.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct tn_umem {
	struct mlx5dv_devx_umem pub;
	uint8_t *addr;
	size_t size;
	int gpu;
	void *map;            /* a dma-buf mapped here */
	size_t map_len;
};

struct tn_uar {
	struct mlx5dv_devx_uar pub;
	uint8_t *page;
	uint32_t type;
};

enum { OBJ_CQ = 1, OBJ_QP };
struct tn_dobj {
	int type;
	struct tn_hcq cq;
	struct tn_hqp qp;
	int in_nic;
	/* The QP context as CREATE_QP and the transitions left it (PRM layout, QPC_BYTES), what
	 * QUERY_QP answers with the live state and PSNs on top. */
	uint8_t qpc[QPC_BYTES];
};

/* ---- command plumbing ---- */

static void status_out(void *out, size_t outlen, uint8_t status, uint32_t syndrome)
{
	if (outlen >= 8) {
		SET(out, 0, OUT_STATUS, status);
		SET(out, 0, OUT_SYNDROME, syndrome);
	}
}

/* Refuses a command: stderr line, status BAD_OP in the out box, errno EOPNOTSUPP. */
static int refuse_cmd(const char *call, uint16_t op, void *out, size_t outlen)
{
	char what[128];
	snprintf(what, sizeof what, "%s(opcode 0x%x)", call, op);
	status_out(out, outlen, IFC_STATUS_BAD_OP, 0x7e57);
	return tn_refuse(what);
}

static int bad(void *out, size_t outlen, uint8_t status, const char *why)
{
	tn_warn("devx command refused: %s", why);
	status_out(out, outlen, status, 0xbad);
	errno = EINVAL;
	return EINVAL;
}

/* ---- QUERY_HCA_CAP ---- */

TN_API int mlx5dv_devx_general_cmd(struct ibv_context *c, const void *in, size_t inlen, void *out, size_t outlen)
{
	(void)c;
	if (inlen < 16 || outlen < 16)
		return EINVAL;
	uint16_t op = (uint16_t)GET(in, 0, IN_OPCODE);
	if (op == IFC_QUERY_ROCE_ADDRESS) {
		memset(out, 0, outlen);
		if (outlen < ROCE_ADDR_OUT_BYTES)
			return bad(out, outlen, IFC_STATUS_BAD_PARAM, "QUERY_ROCE_ADDRESS output mailbox too small");
		if (GET(in, 0, ROCE_ADDR_IN_INDEX) != 0)
			return bad(out, outlen, IFC_STATUS_BAD_PARAM, "QUERY_ROCE_ADDRESS of a GID index other than 0");
		memcpy((uint8_t *)out + (ROCE_ADDR_BASE + ROCE_ADDR_L3) / 8, tn_local_gid(), 16);
		SET(out, ROCE_ADDR_BASE, ROCE_ADDR_L3_TYPE, 0); /* IPv4 (an IPv4-mapped GID) */
		SET(out, ROCE_ADDR_BASE, ROCE_ADDR_VERSION, 2); /* RoCE v2 */
		return 0;
	}
	if (op != IFC_QUERY_HCA_CAP)
		return refuse_cmd("mlx5dv_devx_general_cmd", op, out, outlen);
	uint32_t cap = (GET(in, 0, IN_OP_MOD) >> 1) & 0x7fff;
	memset(out, 0, outlen);
	if (outlen < 16 + 0x100)
		return bad(out, outlen, IFC_STATUS_BAD_PARAM, "QUERY_HCA_CAP output mailbox too small");
	switch (cap) {
	case CAP_GENERAL:
		SET(out, CAP_BASE, HCA_CQE_VERSION, 1);
		SET(out, CAP_BASE, HCA_COMPACT_AV, 1);
		SET(out, CAP_BASE, HCA_LOG_BF_REG_SIZE, TN_LOG_BF_REG);
		SET(out, CAP_BASE, HCA_PORT_TYPE, 1); /* Ethernet (RoCE) */
		SET(out, CAP_BASE, HCA_RC, 1);
		SET(out, CAP_BASE, HCA_LOG_MAX_QP_SZ, 15); /* as query_device's max_qp_wr */
		SET(out, CAP_BASE, HCA_MAX_WQE_SZ_SQ, 1024); /* the NIC's WQE limit (1 KiB) */
		SET(out, CAP_BASE, HCA_MAX_WQE_SZ_RQ, 512);
		break;
	case CAP_ROCE:
		SET(out, CAP_BASE, ROCE_VERSION, 2);
		SET(out, CAP_BASE, ROCE_MAX_SRC_UDP_PORT, 0xffff);
		SET(out, CAP_BASE, ROCE_MIN_SRC_UDP_PORT, 0xc000);
		SET(out, CAP_BASE, ROCE_ADDRESS_TABLE_SIZE, 1); /* one GID */
		break;
	case CAP_ATOMIC:
		SET(out, CAP_BASE, ATOM_OPERATIONS, 0xf); /* CAS, FA, masked CAS, masked FA */
		SET(out, CAP_BASE, ATOM_SIZE_QP, 0x4 | 0x8); /* 4- and 8-byte operands */
		SET(out, CAP_BASE, ATOM_SIZE_DC, 0x4 | 0x8);
		SET(out, CAP_BASE, ATOM_SUPPORTED_8B_ENDIAN_MODE_1, 1);
		SET(out, CAP_BASE, ATOM_REQ_8B_ENDIAN_MODE, 1); /* 8-byte atomics in host order */
		break;
	default:
		return refuse_cmd("QUERY_HCA_CAP of capability type", (uint16_t)cap, out, outlen);
	}
	return 0;
}

TN_API int mlx5dv_devx_query_eqn(struct ibv_context *c, uint32_t vector, uint32_t *eqn)
{
	(void)c;
	*eqn = vector; /* one completion EQ per vector; the NIC raises no interrupts */
	return 0;
}

/* ---- UARs ---- */

TN_API struct mlx5dv_devx_uar *mlx5dv_devx_alloc_uar(struct ibv_context *c, uint32_t flags)
{
	(void)c;
	if (flags != MLX5DV_UAR_ALLOC_TYPE_BF && flags != MLX5DV_UAR_ALLOC_TYPE_NC && flags != (1u << 31)) {
		tn_refuse("mlx5dv_devx_alloc_uar with an unknown type");
		return NULL;
	}
	struct tn_uar *u = calloc(1, sizeof *u);
	void *page = mmap(NULL, TN_PAGE, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (!u || page == MAP_FAILED) {
		free(u);
		if (page != MAP_FAILED)
			munmap(page, TN_PAGE);
		errno = ENOMEM;
		return NULL;
	}
	u->page = page;
	u->type = flags;
	u->pub.base_addr = page;
	u->pub.reg_addr = u->page + TN_BF_OFFSET;
	u->pub.page_id = tn_id_alloc(TN_ID_UAR);
	u->pub.mmap_off = 0;
	u->pub.comp_mask = 0;
	tn_obj_put(TN_OBJ_UAR, u->pub.page_id, u);
	return &u->pub;
}

TN_API void mlx5dv_devx_free_uar(struct mlx5dv_devx_uar *uar)
{
	if (!uar)
		return;
	struct tn_uar *u = (struct tn_uar *)uar;
	tn_obj_del(TN_OBJ_UAR, u->pub.page_id);
	tn_nic_quiesce();
	munmap(u->page, TN_PAGE);
	free(u);
}

struct tn_range {
	uintptr_t p;
	size_t len;
};

static int uar_holds(const void *obj, const void *arg)
{
	const struct tn_uar *u = obj;
	const struct tn_range *r = arg;
	uintptr_t page = (uintptr_t)u->page;
	return r->p >= page && r->len <= TN_PAGE && r->p - page <= TN_PAGE - r->len;
}

/* For test harnesses, never called by programs (version TESTNIC_PRIVATE): whether [p, p+len) lies
 * in one devx UAR page of this NIC. A real UAR is MMIO and CUDA registers it with IoMemory; this
 * one is RAM, which CUDA refuses with that flag, so the GPU test harness (tests/gpu/
 * nvshmem_harness.c) drops the flag for exactly these ranges in untraced runs. */
TN_API int testnic_uar_contains(const void *p, size_t len)
{
	struct tn_range r = { (uintptr_t)p, len ? len : 1 };
	return tn_obj_any(TN_OBJ_UAR, uar_holds, &r);
}

/* ---- umems ---- */

static struct mlx5dv_devx_umem *umem_new(uint8_t *addr, size_t size, int gpu, void *map, size_t map_len)
{
	struct tn_umem *m = calloc(1, sizeof *m);
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	m->addr = addr;
	m->size = size;
	m->gpu = gpu;
	m->map = map;
	m->map_len = map_len;
	m->pub.umem_id = tn_id_alloc(TN_ID_UMEM);
	tn_obj_put(TN_OBJ_UMEM, m->pub.umem_id, m);
	return &m->pub;
}

TN_API struct mlx5dv_devx_umem *mlx5dv_devx_umem_reg(struct ibv_context *c, void *addr, size_t size,
						     uint32_t access)
{
	(void)c;
	(void)access;
	if (!addr || !size) {
		errno = EINVAL;
		return NULL;
	}
	return umem_new(addr, size, tn_mem_is_gpu(addr), NULL, 0);
}

TN_API struct mlx5dv_devx_umem *mlx5dv_devx_umem_reg_ex(struct ibv_context *c, struct mlx5dv_devx_umem_in *in)
{
	if (!(in->comp_mask & MLX5DV_UMEM_MASK_DMABUF))
		return mlx5dv_devx_umem_reg(c, in->addr, in->size, in->access);
	/* addr is the offset into the dma-buf. */
	size_t off = (size_t)(uintptr_t)in->addr, len = off + in->size;
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, in->dmabuf_fd, 0);
	if (p == MAP_FAILED) {
		tn_warn("mlx5dv_devx_umem_reg_ex: dma-buf fd %d cannot be mapped (%m): the software NIC cannot "
			"reach its memory; register the buffer's address with mlx5dv_devx_umem_reg instead",
			in->dmabuf_fd);
		errno = EOPNOTSUPP;
		return NULL;
	}
	return umem_new((uint8_t *)p + off, in->size, 0, p, len);
}

TN_API int mlx5dv_devx_umem_dereg(struct mlx5dv_devx_umem *umem)
{
	struct tn_umem *m = (struct tn_umem *)umem;
	tn_obj_del(TN_OBJ_UMEM, m->pub.umem_id);
	tn_nic_quiesce();
	if (m->map)
		munmap(m->map, m->map_len);
	free(m);
	return 0;
}

/* A range [off, off + len) of umem `id`, or NULL. */
static struct tn_umem *umem_range(uint32_t id, uint64_t off, uint64_t len)
{
	struct tn_umem *m = tn_obj_get(TN_OBJ_UMEM, id);
	if (!m || off > m->size || len > m->size - off)
		return NULL;
	return m;
}

/* ---- CREATE_CQ ---- */

static int create_cq(struct tn_dobj *o, const void *in, void *out, size_t outlen)
{
	const uint32_t q = CQ_IN_CQC;
	if (!GET(in, 0, CQ_IN_UMEM_VALID) || !GET(in, q, CQC_DBR_UMEM_VALID))
		return refuse_cmd("CREATE_CQ with kernel-allocated buffers (no umem)", IFC_CREATE_CQ, out, outlen);
	if (GET(in, q, CQC_CQE_SZ) != 0)
		return refuse_cmd("CREATE_CQ with 128-byte CQEs", IFC_CREATE_CQ, out, outlen);
	uint32_t log = GET(in, q, CQC_LOG_CQ_SIZE);
	uint64_t off = ifc_get64(in, CQ_IN_UMEM_OFFSET), dbr_off = ifc_get64(in, q + CQC_DBR_ADDR);
	struct tn_umem *buf = umem_range(GET(in, 0, CQ_IN_UMEM_ID), off, (uint64_t)64 << log);
	struct tn_umem *dbr = umem_range(GET(in, q, CQC_DBR_UMEM_ID), dbr_off, 8);
	if (!buf || !dbr)
		return bad(out, outlen, IFC_STATUS_BAD_PARAM, "CREATE_CQ: umem id unknown or range outside it");
	struct tn_hcq *cq = &o->cq;
	cq->buf = buf->addr + off;
	cq->gpu = buf->gpu;
	cq->log_cnt = log;
	cq->dbrec = (volatile uint32_t *)(dbr->addr + dbr_off);
	cq->collapsed = GET(in, q, CQC_CC);
	cq->ignore_overrun = GET(in, q, CQC_OI) || dbr->gpu;
	cq->ev_fd = -1;
	cq->arm_done = ~0u;
	cq->cqn = tn_id_alloc(TN_ID_CQN);
	tn_obj_put(TN_OBJ_CQ, cq->cqn, cq);
	SET(out, 0, OUT_OBJ_NUM, cq->cqn);
	return 0;
}

/* ---- CREATE_QP ---- */

static int create_qp(struct tn_dobj *o, const void *in, void *out, size_t outlen)
{
	const uint32_t q = QP_IN_QPC;
	uint32_t st = GET(in, q, QPC_ST);
	if (st != TN_ST_RC && st != TN_ST_DCI)
		return refuse_cmd("CREATE_QP of a service type other than RC or DCI", IFC_CREATE_QP, out, outlen);
	if (!GET(in, 0, QP_IN_WQ_UMEM_VALID) || !GET(in, q, QPC_DBR_UMEM_VALID))
		return refuse_cmd("CREATE_QP with kernel-allocated buffers (no umem)", IFC_CREATE_QP, out, outlen);
	uint32_t rq_type = GET(in, q, QPC_RQ_TYPE);
	uint64_t rq_cnt = rq_type == RQ_TYPE_REGULAR ? 1u << GET(in, q, QPC_LOG_RQ_SIZE) : 0;
	uint32_t rq_log_stride = GET(in, q, QPC_LOG_RQ_STRIDE) + 4;
	uint64_t sq_cnt = GET(in, q, QPC_NO_SQ) ? 0 : 1u << GET(in, q, QPC_LOG_SQ_SIZE);
	uint64_t rq_bytes = rq_cnt << rq_log_stride, wq_off = ifc_get64(in, QP_IN_WQ_UMEM_OFFSET);
	uint64_t dbr_off = ifc_get64(in, q + QPC_DBR_ADDR);
	struct tn_umem *wq = umem_range(GET(in, 0, QP_IN_WQ_UMEM_ID), wq_off, rq_bytes + sq_cnt * TN_WQEBB);
	struct tn_umem *dbr = umem_range(GET(in, q, QPC_DBR_UMEM_ID), dbr_off, 8);
	struct tn_uar *uar = tn_obj_get(TN_OBJ_UAR, GET(in, q, QPC_UAR_PAGE));
	struct tn_hcq *scq = tn_obj_get(TN_OBJ_CQ, GET(in, q, QPC_CQN_SND));
	struct tn_hcq *rcq = tn_obj_get(TN_OBJ_CQ, GET(in, q, QPC_CQN_RCV));
	struct tn_hsrq *srq = rq_type == RQ_TYPE_SRQ ? tn_obj_get(TN_OBJ_SRQ, GET(in, q, QPC_SRQN)) : NULL;
	if (!wq || !dbr)
		return bad(out, outlen, IFC_STATUS_BAD_PARAM, "CREATE_QP: umem id unknown or range outside it");
	if (!uar || (sq_cnt && !scq) || (rq_type == RQ_TYPE_SRQ && !srq))
		return bad(out, outlen, IFC_STATUS_BAD_RESOURCE, "CREATE_QP: unknown UAR page, CQ or SRQ");
	if (rq_cnt && (wq->gpu || dbr->gpu))
		return refuse_cmd("CREATE_QP with a regular receive queue in GPU memory", IFC_CREATE_QP, out, outlen);
	struct tn_hqp *h = &o->qp;
	h->st = st;
	h->pdn = GET(in, q, QPC_PD);
	h->user_index = GET(in, q, QPC_USER_INDEX);
	h->rq = wq->addr + wq_off;
	h->rq_cnt = (uint32_t)rq_cnt;
	h->rq_log_stride = rq_log_stride;
	h->sq = wq->addr + wq_off + rq_bytes;
	h->sq_cnt = (uint32_t)sq_cnt;
	h->sq_gpu = wq->gpu;
	h->dbrec = (volatile uint32_t *)(dbr->addr + dbr_off);
	h->dbrec_gpu = dbr->gpu;
	h->db[0] = (volatile uint64_t *)uar->pub.reg_addr;
	h->db[1] = uar->type == MLX5DV_UAR_ALLOC_TYPE_BF ? (volatile uint64_t *)(uar->page + TN_BF_OFFSET + TN_BF_HALF)
							 : NULL;
	h->scq = scq;
	h->rcq = rcq;
	h->srq = srq;
	h->state = TN_RESET;
	if (tn_hqp_alloc_nic_state(h)) {
		status_out(out, outlen, IFC_STATUS_BAD_RESOURCE, 0);
		errno = ENOMEM;
		return ENOMEM;
	}
	for (int tries = 0;; tries++) {
		h->qpn = tn_id_alloc(TN_ID_QPN);
		if (h->qpn && tn_qpn_publish(h->qpn) == 0)
			break;
		if (tries > 64) {
			tn_hqp_free_nic_state(h);
			return bad(out, outlen, IFC_STATUS_BAD_RESOURCE, "CREATE_QP: no QPN");
		}
	}
	SET(out, 0, OUT_OBJ_NUM, h->qpn);
	memcpy(o->qpc, (const uint8_t *)in + q / 8, QPC_BYTES);
	SET(o->qpc, 0, QPC_STATE, PRM_QP_RST);
	return 0;
}

TN_API struct mlx5dv_devx_obj *mlx5dv_devx_obj_create(struct ibv_context *c, const void *in, size_t inlen,
						      void *out, size_t outlen)
{
	(void)c;
	if (inlen < 16 || outlen < 16) {
		errno = EINVAL;
		return NULL;
	}
	uint16_t op = (uint16_t)GET(in, 0, IN_OPCODE);
	struct tn_dobj *o = calloc(1, sizeof *o);
	if (!o) {
		errno = ENOMEM;
		return NULL;
	}
	memset(out, 0, outlen);
	int err;
	if (op == IFC_CREATE_CQ && inlen >= 0x300 / 8) {
		o->type = OBJ_CQ;
		err = create_cq(o, in, out, outlen);
	} else if (op == IFC_CREATE_QP && inlen >= 0x880 / 8) {
		o->type = OBJ_QP;
		err = create_qp(o, in, out, outlen);
	} else {
		err = refuse_cmd("mlx5dv_devx_obj_create", op, out, outlen);
	}
	if (err) {
		free(o);
		errno = err;
		return NULL;
	}
	return (struct mlx5dv_devx_obj *)o;
}

/* ---- QP transitions ---- */

static int to_nic(struct tn_dobj *o)
{
	int err = 0;
	if (!o->in_nic) {
		pthread_mutex_lock(&tn_nic.lock);
		err = tn_nic_add_qp(&o->qp);
		pthread_mutex_unlock(&tn_nic.lock);
		o->in_nic = !err;
	}
	return err ? err : tn_nic_start();
}

static void out_of_nic(struct tn_dobj *o)
{
	pthread_mutex_lock(&tn_nic.lock);
	tn_nic_del_qp(&o->qp);
	pthread_mutex_unlock(&tn_nic.lock);
	tn_nic_quiesce();
	o->in_nic = 0;
}

/* Copies field (bit, width) of the QPC in mailbox `in` into the kept QPC. */
static void keep(struct tn_dobj *o, const void *in, uint32_t bit, uint32_t width)
{
	ifc_set(o->qpc, bit, width, ifc_get(in, QP_IN_QPC + bit, width));
}
#define KEEP(o, in, F) keep((o), (in), IFC_BIT(F), IFC_WIDTH(F))
#define KEEP_ADS(o, in, F) keep((o), (in), QPC_ADS + IFC_BIT(F), IFC_WIDTH(F))

/* What each transition writes into the QP context (the fields the NIC and QUERY_QP's readers
 * use), after it succeeded. */
static void keep_qpc(struct tn_dobj *o, uint16_t op, const void *in)
{
	switch (op) {
	case IFC_RST2INIT_QP:
		KEEP(o, in, QPC_RWE);
		KEEP(o, in, QPC_RRE);
		KEEP(o, in, QPC_RAE);
		KEEP(o, in, QPC_ATOMIC_MODE);
		KEEP(o, in, QPC_PM_STATE);
		KEEP_ADS(o, in, ADS_PKEY_INDEX);
		KEEP_ADS(o, in, ADS_VHCA_PORT_NUM);
		break;
	case IFC_INIT2RTR_QP:
		KEEP(o, in, QPC_MTU);
		KEEP(o, in, QPC_LOG_MSG_MAX);
		KEEP(o, in, QPC_REMOTE_QPN);
		KEEP(o, in, QPC_MIN_RNR_NAK);
		KEEP(o, in, QPC_NEXT_RCV_PSN);
		KEEP(o, in, QPC_LOG_RRA_MAX);
		KEEP_ADS(o, in, ADS_GRH);
		KEEP_ADS(o, in, ADS_RLID);
		KEEP_ADS(o, in, ADS_SRC_ADDR_INDEX);
		KEEP_ADS(o, in, ADS_STAT_RATE);
		KEEP_ADS(o, in, ADS_HOP_LIMIT);
		KEEP_ADS(o, in, ADS_TCLASS);
		KEEP_ADS(o, in, ADS_FLOW_LABEL);
		KEEP_ADS(o, in, ADS_DSCP);
		KEEP_ADS(o, in, ADS_UDP_SPORT);
		KEEP_ADS(o, in, ADS_SL);
		KEEP_ADS(o, in, ADS_PKEY_INDEX);
		if (GET(in, QP_IN_QPC + QPC_ADS, ADS_VHCA_PORT_NUM))
			KEEP_ADS(o, in, ADS_VHCA_PORT_NUM);
		memcpy(o->qpc + (QPC_ADS + ADS_RGID) / 8, (const uint8_t *)in + (QP_IN_QPC + QPC_ADS + ADS_RGID) / 8, 16);
		break;
	case IFC_RTR2RTS_QP:
		KEEP(o, in, QPC_NEXT_SEND_PSN);
		KEEP(o, in, QPC_RETRY_COUNT);
		KEEP(o, in, QPC_RNR_RETRY);
		KEEP(o, in, QPC_LOG_SRA_MAX);
		KEEP(o, in, QPC_LOG_ACK_REQ_FREQ);
		KEEP_ADS(o, in, ADS_ACK_TIMEOUT);
		break;
	default:
		break;
	}
}

static int modify_qp(struct tn_dobj *o, uint16_t op, const void *in, void *out, size_t outlen)
{
	struct tn_hqp *h = &o->qp;
	const uint32_t q = QP_IN_QPC, a = QP_IN_QPC + QPC_ADS;
	int cur = h->state;
	switch (op) {
	case IFC_RST2INIT_QP:
		if (cur != TN_RESET)
			break;
		h->qp_access = (GET(in, q, QPC_RWE) ? TN_ACC_REMOTE_WRITE : 0) |
			       (GET(in, q, QPC_RRE) ? TN_ACC_REMOTE_READ : 0) |
			       (GET(in, q, QPC_RAE) ? TN_ACC_REMOTE_ATOMIC : 0);
		__atomic_store_n(&h->state, TN_INIT, __ATOMIC_RELEASE);
		return 0;
	case IFC_INIT2RTR_QP:
		if (cur != TN_INIT)
			break;
		if (h->st == TN_ST_RC) {
			h->rqpn = GET(in, q, QPC_REMOTE_QPN);
			/* On RoCE the GRH is implied and the port routes by rgid_rip whatever the grh bit
			 * says (it matters on IB): NVSHMEM 3.4.5's INIT2RTR for an Ethernet link layer
			 * fills rgid_rip and leaves grh 0, and a ConnectX accepts that. */
			memcpy(h->rgid, (const uint8_t *)in + (a + ADS_RGID) / 8, 16);
			/* On InfiniBand without a GRH the port routes by the remote LID. */
			if (tn_port_ib() && !GET(in, a, ADS_GRH) &&
			    tn_gid_of_lid((uint16_t)GET(in, a, ADS_RLID), h->rgid))
				tn_warn("QP 0x%x: INIT2RTR without a GRH names LID %u, which no port has", h->qpn,
					(unsigned)GET(in, a, ADS_RLID));
			h->exp_psn = GET(in, q, QPC_NEXT_RCV_PSN);
			h->min_rnr_timer = (uint8_t)GET(in, q, QPC_MIN_RNR_NAK);
			h->peer = tn_peer_resolve(h->rgid, h->rqpn);
			if (!h->peer)
				tn_warn("QP 0x%x: no QP 0x%x behind its remote GID: its requests will fail", h->qpn,
					h->rqpn);
		}
		__atomic_store_n(&h->state, TN_RTR, __ATOMIC_RELEASE);
		return to_nic(o);
	case IFC_RTR2RTS_QP:
		if (cur != TN_RTR)
			break;
		h->next_psn = GET(in, q, QPC_NEXT_SEND_PSN);
		h->retry_cnt = (uint8_t)GET(in, q, QPC_RETRY_COUNT);
		h->rnr_retry = (uint8_t)GET(in, q, QPC_RNR_RETRY);
		h->timeout = (uint8_t)GET(in, a, ADS_ACK_TIMEOUT);
		__atomic_store_n(&h->state, TN_RTS, __ATOMIC_RELEASE);
		return 0;
	case IFC_RTS2RTS_QP:
		if (cur != TN_RTS)
			break;
		return 0;
	case IFC_2ERR_QP:
		h->flush_req = 1;
		__atomic_store_n(&h->state, TN_ERR, __ATOMIC_RELEASE);
		return to_nic(o);
	case IFC_2RST_QP:
		out_of_nic(o);
		h->pi = h->sent = h->done = h->fetched = h->logged = h->tx_off = 0;
		h->err_pending = h->in_err = h->rx_in_msg = h->rx_has_wqe = 0;
		h->rq_ci = 0;
		h->db_seen[0] = h->db_seen[1] = 0;
		h->resume_ns = h->wait_since_ns = 0;
		h->state = TN_RESET;
		return 0;
	default:
		return refuse_cmd("mlx5dv_devx_obj_modify", op, out, outlen);
	}
	return bad(out, outlen, IFC_STATUS_BAD_QP_STATE, "QP transition from a wrong state");
}

TN_API int mlx5dv_devx_obj_modify(struct mlx5dv_devx_obj *obj, const void *in, size_t inlen, void *out,
				  size_t outlen)
{
	struct tn_dobj *o = (struct tn_dobj *)obj;
	if (inlen < 16 || outlen < 16)
		return EINVAL;
	uint16_t op = (uint16_t)GET(in, 0, IN_OPCODE);
	memset(out, 0, outlen);
	if (o->type != OBJ_QP)
		return refuse_cmd("mlx5dv_devx_obj_modify of a CQ", op, out, outlen);
	if (op != IFC_2RST_QP && op != IFC_2ERR_QP && inlen < 0x880 / 8)
		return bad(out, outlen, IFC_STATUS_BAD_PARAM, "QP transition mailbox too short");
	if (GET(in, 0, IN_QPN) != o->qp.qpn)
		return bad(out, outlen, IFC_STATUS_BAD_PARAM, "QP transition names another QPN");
	int err = modify_qp(o, op, in, out, outlen);
	if (!err)
		keep_qpc(o, op, in);
	return err;
}

/* The PRM state of a QP (qpc.state). The NIC thread moves a QP to TN_ERR itself when a work
 * request completes in error (wqe.c), as a ConnectX does with an RC QP. */
static uint32_t prm_state(int s)
{
	switch (s) {
	case TN_RESET: return PRM_QP_RST;
	case TN_INIT: return PRM_QP_INIT;
	case TN_RTR: return PRM_QP_RTR;
	case TN_RTS: return PRM_QP_RTS;
	case TN_SQE: return PRM_QP_SQER;
	case TN_SQD: return PRM_QP_SQD;
	default: return PRM_QP_ERR;
	}
}

/* QUERY_QP (0x50b): status, then the QP context at bit 0xc0 of the out box, as a ConnectX
 * answers it: the fields CREATE_QP and the transitions set, the current state, the next send
 * PSN (RTS and later) and the next expected receive PSN (RTR and later) as the NIC has them now. */
static unsigned long queries_answered, queries_in_err;

/* At exit, when any QUERY_QP was answered: how many, and how many said ERR (the evidence that a
 * program's error query, NCCL's GIN one, ran and what it heard). */
__attribute__((destructor)) static void devx_fini(void)
{
	unsigned long n = __atomic_load_n(&queries_answered, __ATOMIC_RELAXED);
	if (n)
		tn_warn("pid %d QUERY_QP answered %lu times, %lu in ERR", (int)getpid(), n,
			__atomic_load_n(&queries_in_err, __ATOMIC_RELAXED));
}

static int query_qp(struct tn_dobj *o, const void *in, void *out, size_t outlen)
{
	if (GET(in, 0, IN_QPN) != o->qp.qpn)
		return bad(out, outlen, IFC_STATUS_BAD_PARAM, "QUERY_QP names another QPN than the object's");
	if (outlen < QUERY_QP_OUT_QPC / 8 + QPC_BYTES)
		return bad(out, outlen, IFC_STATUS_BAD_PARAM, "QUERY_QP output mailbox shorter than the QP context");
	struct tn_hqp *h = &o->qp;
	uint8_t *qpc = (uint8_t *)out + QUERY_QP_OUT_QPC / 8;
	memcpy(qpc, o->qpc, QPC_BYTES);
	int st = __atomic_load_n(&h->state, __ATOMIC_ACQUIRE);
	SET(qpc, 0, QPC_STATE, prm_state(st));
	if (h->st == TN_ST_RC && st >= TN_RTS && st != TN_ERR)
		SET(qpc, 0, QPC_NEXT_SEND_PSN, __atomic_load_n(&h->next_psn, __ATOMIC_RELAXED) & 0xffffff);
	if (h->st == TN_ST_RC && st >= TN_RTR && st != TN_ERR)
		SET(qpc, 0, QPC_NEXT_RCV_PSN, __atomic_load_n(&h->exp_psn, __ATOMIC_RELAXED) & 0xffffff);
	__atomic_fetch_add(&queries_answered, 1, __ATOMIC_RELAXED);
	if (st == TN_ERR)
		__atomic_fetch_add(&queries_in_err, 1, __ATOMIC_RELAXED);
	return 0;
}

TN_API int mlx5dv_devx_obj_query(struct mlx5dv_devx_obj *obj, const void *in, size_t inlen, void *out,
				 size_t outlen)
{
	struct tn_dobj *o = (struct tn_dobj *)obj;
	if (!o || !in || !out || inlen < QUERY_QP_IN_BYTES || outlen < CMD_OUT_BYTES)
		return EINVAL;
	uint16_t op = (uint16_t)GET(in, 0, IN_OPCODE);
	memset(out, 0, outlen);
	if (o->type == OBJ_QP && op == IFC_QUERY_QP)
		return query_qp(o, in, out, outlen);
	return refuse_cmd(o->type == OBJ_QP ? "mlx5dv_devx_obj_query of a QP" : "mlx5dv_devx_obj_query of a CQ", op,
			  out, outlen);
}

TN_API int mlx5dv_devx_obj_destroy(struct mlx5dv_devx_obj *obj)
{
	struct tn_dobj *o = (struct tn_dobj *)obj;
	if (o->type == OBJ_QP) {
		out_of_nic(o);
		tn_qpn_retire(o->qp.qpn);
		tn_hqp_free_nic_state(&o->qp);
	} else {
		tn_obj_del(TN_OBJ_CQ, o->cq.cqn);
		tn_nic_quiesce();
	}
	free(o);
	return 0;
}
