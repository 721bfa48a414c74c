/* The devx commands DOCA GPUNetIO's host library (NCCL 2.28's GDAKI transport, src/transport/gdaki/
 * doca-gpunetio) issues for a GIN QP, in its order, from the CPU against whatever libibverbs/libmlx5
 * the loader finds (the software NIC under scripts/with-testnic.sh); then the periodic error query
 * NCCL's GIN progress makes (ncclGinGdakiQueryLastError -> doca_gpu_verbs_query_last_error ->
 * doca_verbs_qp::query_qp: one QUERY_QP through mlx5dv_devx_obj_query per QP, has_error = state is
 * ERR), on a healthy QP and on a QP the NIC put in error.
 *
 * One process, two RC QPs A and B connected to each other (GIN's QP and its peer's, both here).
 * Each QP, as doca_verbs_cq / doca_verbs_qp / create_gpu_umem do it (queues in host memory here:
 * the umems are registered as DOCA's legacy "nvidia-peermem" fallback does, mlx5dv_devx_umem_reg_ex
 * with comp_mask 0 and the buffer's address, the call it makes with the GPU address when the
 * dma-buf umem is refused):
 *   ibv_query_device, QUERY_HCA_CAP general and RoCE (doca_verbs_query_device);
 *   umem_reg_ex CQ ring, umem_reg_ex CQ doorbell record, alloc_uar BF, query_eqn(0), CREATE_CQ
 *   (64-byte CQEs, not collapsed, overrun ignore);
 *   umem_reg_ex WQ, umem_reg_ex QP doorbell record, alloc_uar BF, CREATE_QP (RC, zero-size RQ);
 *   RST2INIT (port, pm_state migrated, rwe/rre/rae, atomic mode), QUERY_ROCE_ADDRESS (RoCE version
 *   of the source GID), INIT2RTR (grh 1, rgid, mtu 4K, remote QPN, rq PSN, udp_sport, dscp), RTR2RTS
 *   (sq PSN, ack timeout, retry counts).
 * Then:
 *   1. QUERY_QP of A and B: RTS, and every field DOCA reads equals what was set.
 *   2. A writes 64 bytes to B's buffer (signaled): CQE OK, the bytes there; QUERY_QP: A's next send
 *      PSN and B's next receive PSN one further (one packet).
 *   3. A writes with a wrong rkey: CQE with syndrome 0x13 (remote access error); QUERY_QP: A is in
 *      ERR (the NIC put it there: has_error for NCCL).
 *   4. B moved to ERR by 2ERR: QUERY_QP says ERR; by 2RST: RST.
 *   5. What the kernel and firmware refuse: a QUERY_QP naming another QPN (EINVAL, BAD_PARAM), an
 *      output mailbox shorter than the QP context (EINVAL), QUERY_CQ of a CQ (not supported here).
 * Prints one "gdaki_host ..." line per step; exits non-zero on any mismatch.
 */
#include "ifc.h"

#include <endian.h>
#include <errno.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SQ_LOG 6
#define CQ_LOG 6
#define PSN_A 0x1234
#define PSN_B 0x5678

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "gdaki_host: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

#define CHECK(cond, ...)                                                                                   \
	do {                                                                                               \
		if (!(cond))                                                                               \
			die(__VA_ARGS__);                                                                  \
	} while (0)

static void *zalloc(size_t n)
{
	void *p = NULL;
	CHECK(posix_memalign(&p, 4096, n) == 0, "posix_memalign");
	memset(p, 0, n);
	return p;
}

static void put32(uint8_t *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, 4);
}

static void put64(uint8_t *p, uint64_t v)
{
	v = htobe64(v);
	memcpy(p, &v, 8);
}

static void cmd_ok(int r, const void *out, const char *what)
{
	CHECK(r == 0 && GET(out, 0, OUT_STATUS) == 0, "%s failed: ret %d status 0x%x syndrome 0x%x", what, r,
	      GET(out, 0, OUT_STATUS), GET(out, 0, OUT_SYNDROME));
}

/* doca_verbs_umem::create with DOCA_VERBS_DMABUF_INVALID_FD: comp_mask 0, the page size bitmap. */
static struct mlx5dv_devx_umem *umem(struct ibv_context *c, void *p, size_t n)
{
	struct mlx5dv_devx_umem_in in = {.addr = p, .size = n, .access = IBV_ACCESS_LOCAL_WRITE,
					 .pgsz_bitmap = (uint64_t)sysconf(_SC_PAGESIZE), .comp_mask = 0};
	struct mlx5dv_devx_umem *u = mlx5dv_devx_umem_reg_ex(c, &in);
	CHECK(u, "mlx5dv_devx_umem_reg_ex (errno %d)", errno);
	return u;
}

/* doca_verbs_uar_create: BlueFlame, else NC. */
static struct mlx5dv_devx_uar *uar(struct ibv_context *c)
{
	struct mlx5dv_devx_uar *u = mlx5dv_devx_alloc_uar(c, MLX5DV_UAR_ALLOC_TYPE_BF);
	if (!u)
		u = mlx5dv_devx_alloc_uar(c, MLX5DV_UAR_ALLOC_TYPE_NC);
	CHECK(u, "mlx5dv_devx_alloc_uar");
	return u;
}

struct qp {
	const char *name;
	uint8_t *cqbuf, *cqdbr, *wq, *qpdbr;
	struct mlx5dv_devx_umem *cq_u, *cqdbr_u, *wq_u, *qpdbr_u;
	struct mlx5dv_devx_uar *cq_uar, *qp_uar;
	struct mlx5dv_devx_obj *cq, *obj;
	uint32_t cqn, qpn, psn, ci;
	uint16_t pi;
};

static void create(struct ibv_context *c, uint32_t pdn, struct qp *q, uint32_t user_index)
{
	/* doca_verbs_cq::create */
	q->cqbuf = zalloc(64u << CQ_LOG);
	for (unsigned i = 0; i < 1u << CQ_LOG; i++)
		q->cqbuf[i * 64 + 63] = 0xf1; /* MLX5_CQE_INVALID << 4 | owner (mlx5_init_cqes) */
	q->cqdbr = zalloc(4096);
	q->cq_u = umem(c, q->cqbuf, 64u << CQ_LOG);
	q->cqdbr_u = umem(c, q->cqdbr, 4096);
	q->cq_uar = uar(c);
	uint32_t eqn;
	CHECK(!mlx5dv_devx_query_eqn(c, 0, &eqn), "mlx5dv_devx_query_eqn");
	uint8_t in[CREATE_QP_IN_BYTES], out[CMD_OUT_BYTES];
	memset(in, 0, sizeof in);
	SET(in, 0, IN_OPCODE, IFC_CREATE_CQ);
	SET(in, CQ_IN_CQC, CQC_CQE_SZ, 0);
	SET(in, CQ_IN_CQC, CQC_CC, 0);
	SET(in, CQ_IN_CQC, CQC_OI, 1);
	SET(in, CQ_IN_CQC, CQC_LOG_CQ_SIZE, CQ_LOG);
	SET(in, CQ_IN_CQC, CQC_UAR_PAGE, q->cq_uar->page_id);
	SET(in, 0, CQ_IN_UMEM_ID, q->cq_u->umem_id);
	SET(in, 0, CQ_IN_UMEM_VALID, 1);
	SET(in, CQ_IN_CQC, CQC_DBR_UMEM_ID, q->cqdbr_u->umem_id);
	SET(in, CQ_IN_CQC, CQC_DBR_UMEM_VALID, 1);
	SET(in, CQ_IN_CQC, CQC_C_EQN, eqn);
	q->cq = mlx5dv_devx_obj_create(c, in, CREATE_CQ_IN_BYTES, out, sizeof out);
	CHECK(q->cq, "CREATE_CQ (errno %d status 0x%x)", errno, GET(out, 0, OUT_STATUS));
	q->cqn = GET(out, 0, OUT_OBJ_NUM);

	/* doca_verbs_qp::create (external umems, as create_qp in doca_gpunetio_high_level.cpp) */
	q->wq = zalloc(64u << SQ_LOG);
	q->qpdbr = zalloc(4096);
	q->wq_u = umem(c, q->wq, 64u << SQ_LOG);
	q->qpdbr_u = umem(c, q->qpdbr, 4096);
	q->qp_uar = uar(c);
	memset(in, 0, sizeof in);
	SET(in, 0, IN_OPCODE, IFC_CREATE_QP);
	SET(in, QP_IN_QPC, QPC_ST, 0); /* RC */
	SET(in, QP_IN_QPC, QPC_PM_STATE, 3);
	SET(in, QP_IN_QPC, QPC_PD, pdn);
	SET(in, QP_IN_QPC, QPC_USER_INDEX, user_index);
	SET(in, QP_IN_QPC, QPC_UAR_PAGE, q->qp_uar->page_id);
	SET(in, QP_IN_QPC, QPC_CQN_SND, q->cqn);
	SET(in, QP_IN_QPC, QPC_LOG_SQ_SIZE, SQ_LOG);
	SET(in, QP_IN_QPC, QPC_CQN_RCV, q->cqn);
	SET(in, QP_IN_QPC, QPC_RQ_TYPE, RQ_TYPE_ZERO);
	SET(in, QP_IN_QPC, QPC_DBR_UMEM_VALID, 1);
	SET(in, QP_IN_QPC, QPC_DBR_UMEM_ID, q->qpdbr_u->umem_id);
	SET(in, 0, QP_IN_WQ_UMEM_ID, q->wq_u->umem_id);
	SET(in, 0, QP_IN_WQ_UMEM_VALID, 1);
	q->obj = mlx5dv_devx_obj_create(c, in, CREATE_QP_IN_BYTES, out, sizeof out);
	CHECK(q->obj, "CREATE_QP (errno %d status 0x%x)", errno, GET(out, 0, OUT_STATUS));
	q->qpn = GET(out, 0, OUT_OBJ_NUM);
}

static void connect_qp(struct ibv_context *c, struct qp *q, uint32_t rqpn, uint32_t rq_psn, const uint8_t *gid,
		       uint32_t mtu)
{
	uint8_t in[MODIFY_QP_IN_BYTES], out[CMD_OUT_BYTES];
	/* doca_verbs_qp::rst2init */
	memset(in, 0, sizeof in);
	SET(in, 0, IN_OPCODE, IFC_RST2INIT_QP);
	SET(in, 0, IN_QPN, q->qpn);
	SET(in, QP_IN_QPC + QPC_ADS, ADS_VHCA_PORT_NUM, 1);
	SET(in, QP_IN_QPC, QPC_PM_STATE, 3);
	SET(in, QP_IN_QPC + QPC_ADS, ADS_PKEY_INDEX, 0);
	SET(in, QP_IN_QPC, QPC_RWE, 1);
	SET(in, QP_IN_QPC, QPC_RRE, 1);
	SET(in, QP_IN_QPC, QPC_RAE, 1);
	SET(in, QP_IN_QPC, QPC_ATOMIC_MODE, 3);
	cmd_ok(mlx5dv_devx_obj_modify(q->obj, in, sizeof in, out, sizeof out), out, "RST2INIT");
	/* query_roce_version (QUERY_ROCE_ADDRESS of the source GID index) */
	uint8_t rin[16] = {0}, rout[ROCE_ADDR_OUT_BYTES];
	SET(rin, 0, IN_OPCODE, IFC_QUERY_ROCE_ADDRESS);
	SET(rin, 0, ROCE_ADDR_IN_INDEX, 0);
	cmd_ok(mlx5dv_devx_general_cmd(c, rin, sizeof rin, rout, sizeof rout), rout, "QUERY_ROCE_ADDRESS");
	CHECK(GET(rout, ROCE_ADDR_BASE, ROCE_ADDR_VERSION) == 2, "RoCE version %u",
	      GET(rout, ROCE_ADDR_BASE, ROCE_ADDR_VERSION));
	/* doca_verbs_qp::init2rtr */
	memset(in, 0, sizeof in);
	SET(in, 0, IN_OPCODE, IFC_INIT2RTR_QP);
	SET(in, 0, IN_QPN, q->qpn);
	SET(in, QP_IN_QPC, QPC_NEXT_RCV_PSN, rq_psn);
	SET(in, QP_IN_QPC, QPC_REMOTE_QPN, rqpn);
	SET(in, QP_IN_QPC, QPC_LOG_MSG_MAX, 30);
	SET(in, QP_IN_QPC, QPC_MTU, mtu);
	SET(in, QP_IN_QPC, QPC_MIN_RNR_NAK, 12);
	SET(in, QP_IN_QPC + QPC_ADS, ADS_TCLASS, 0);
	SET(in, QP_IN_QPC + QPC_ADS, ADS_HOP_LIMIT, 255);
	SET(in, QP_IN_QPC + QPC_ADS, ADS_SRC_ADDR_INDEX, 0);
	SET(in, QP_IN_QPC + QPC_ADS, ADS_GRH, 1);
	memcpy(in + (QP_IN_QPC + QPC_ADS + ADS_RGID) / 8, gid, 16);
	SET(in, QP_IN_QPC + QPC_ADS, ADS_UDP_SPORT, 0xc000 + (q->qpn & 0x3fff));
	SET(in, QP_IN_QPC + QPC_ADS, ADS_DSCP, 0);
	cmd_ok(mlx5dv_devx_obj_modify(q->obj, in, sizeof in, out, sizeof out), out, "INIT2RTR");
	/* doca_verbs_qp::rtr2rts */
	memset(in, 0, sizeof in);
	SET(in, 0, IN_OPCODE, IFC_RTR2RTS_QP);
	SET(in, 0, IN_QPN, q->qpn);
	SET(in, QP_IN_QPC, QPC_NEXT_SEND_PSN, q->psn);
	SET(in, QP_IN_QPC + QPC_ADS, ADS_ACK_TIMEOUT, 20);
	SET(in, QP_IN_QPC, QPC_RETRY_COUNT, 7);
	SET(in, QP_IN_QPC, QPC_RNR_RETRY, 7);
	SET(in, QP_IN_QPC, QPC_LOG_ACK_REQ_FREQ, 0);
	cmd_ok(mlx5dv_devx_obj_modify(q->obj, in, sizeof in, out, sizeof out), out, "RTR2RTS");
}

/* doca_verbs_qp::query_qp: its exact mailboxes (query_qp_in, query_qp_out) and the fields it reads. */
struct qattr {
	uint32_t state, mtu, rq_psn, sq_psn, dest_qp_num, pkey_index, port_num, ack_timeout, retry_cnt, rnr_retry,
		min_rnr_timer, rwe, rre, dlid, sl, sgid_index, static_rate, hop_limit, traffic_class, user_index;
	uint8_t gid[16];
};

static int query(struct qp *q, uint32_t qpn, size_t outlen, struct qattr *a, uint8_t *status)
{
	uint8_t in[QUERY_QP_IN_BYTES] = {0}, out[QUERY_QP_OUT_BYTES];
	memset(out, 0, sizeof out);
	SET(in, 0, IN_OPCODE, IFC_QUERY_QP);
	SET(in, 0, IN_QPN, qpn);
	int r = mlx5dv_devx_obj_query(q->obj, in, sizeof in, out, outlen);
	*status = (uint8_t)GET(out, 0, OUT_STATUS);
	if (r)
		return r;
	const uint8_t *c = out + QUERY_QP_OUT_QPC / 8;
	const uint32_t p = QPC_ADS;
	a->state = GET(c, 0, QPC_STATE);
	a->mtu = GET(c, 0, QPC_MTU);
	a->rq_psn = GET(c, 0, QPC_NEXT_RCV_PSN);
	a->sq_psn = GET(c, 0, QPC_NEXT_SEND_PSN);
	a->dest_qp_num = GET(c, 0, QPC_REMOTE_QPN);
	a->pkey_index = GET(c, p, ADS_PKEY_INDEX);
	a->port_num = GET(c, p, ADS_VHCA_PORT_NUM);
	a->ack_timeout = GET(c, p, ADS_ACK_TIMEOUT);
	a->retry_cnt = GET(c, 0, QPC_RETRY_COUNT);
	a->rnr_retry = GET(c, 0, QPC_RNR_RETRY);
	a->min_rnr_timer = GET(c, 0, QPC_MIN_RNR_NAK);
	a->rwe = GET(c, 0, QPC_RWE);
	a->rre = GET(c, 0, QPC_RRE);
	a->dlid = GET(c, p, ADS_RLID);
	a->sl = GET(c, p, ADS_SL);
	a->sgid_index = GET(c, p, ADS_SRC_ADDR_INDEX);
	a->static_rate = GET(c, p, ADS_STAT_RATE);
	a->hop_limit = GET(c, p, ADS_HOP_LIMIT);
	a->traffic_class = GET(c, p, ADS_TCLASS);
	memcpy(a->gid, c + (p + ADS_RGID) / 8, 16);
	a->user_index = GET(c, 0, QPC_USER_INDEX);
	return 0;
}

static const char *state_name(uint32_t s)
{
	static const char *n[] = {"RST", "INIT", "RTR", "RTS", "SQER", "SQD", "ERR"};
	return s < 7 ? n[s] : "?";
}

/* One QUERY_QP as NCCL's error query makes it; checks what DOCA converts (a state and an MTU it
 * knows, or DOCA fails the query) and every field against what the commands set. */
static struct qattr check_query(const char *step, struct qp *q, uint32_t want_state, uint32_t rqpn,
				uint32_t sq_psn, uint32_t rq_psn, const uint8_t *gid, uint32_t mtu, uint32_t user_index)
{
	struct qattr a;
	uint8_t st;
	int r = query(q, q->qpn, QUERY_QP_OUT_BYTES, &a, &st);
	CHECK(r == 0 && st == 0, "%s: QUERY_QP of %s failed: ret %d status 0x%x", step, q->name, r, st);
	CHECK(a.state == want_state, "%s: QP %s state %u (%s), want %u (%s)", step, q->name, a.state,
	      state_name(a.state), want_state, state_name(want_state));
	CHECK(a.mtu == mtu, "%s: %s mtu %u, want %u", step, q->name, a.mtu, mtu);
	CHECK(a.dest_qp_num == rqpn, "%s: %s remote_qpn 0x%x, want 0x%x", step, q->name, a.dest_qp_num, rqpn);
	CHECK(a.sq_psn == sq_psn && a.rq_psn == rq_psn, "%s: %s next_send_psn 0x%x next_rcv_psn 0x%x, want 0x%x 0x%x",
	      step, q->name, a.sq_psn, a.rq_psn, sq_psn, rq_psn);
	CHECK(a.port_num == 1 && a.pkey_index == 0 && a.ack_timeout == 20 && a.retry_cnt == 7 && a.rnr_retry == 7 &&
		      a.min_rnr_timer == 12 && a.rwe == 1 && a.rre == 1,
	      "%s: %s port %u pkey %u ack_timeout %u retry %u rnr_retry %u min_rnr %u rwe %u rre %u", step, q->name,
	      a.port_num, a.pkey_index, a.ack_timeout, a.retry_cnt, a.rnr_retry, a.min_rnr_timer, a.rwe, a.rre);
	CHECK(a.dlid == 0 && a.sl == 0 && a.sgid_index == 0 && a.static_rate == 0 && a.hop_limit == 255 &&
		      a.traffic_class == 0 && !memcmp(a.gid, gid, 16) && a.user_index == user_index,
	      "%s: %s dlid %u sl %u sgid_index %u rate %u hop_limit %u tclass %u user_index %u (or the GID)", step,
	      q->name, a.dlid, a.sl, a.sgid_index, a.static_rate, a.hop_limit, a.traffic_class, a.user_index);
	printf("gdaki_host %s qp=%s qpn=0x%x state=%s has_error=%d sq_psn=0x%x rq_psn=0x%x remote_qpn=0x%x ok\n", step,
	       q->name, q->qpn, state_name(a.state), a.state == PRM_QP_ERR, a.sq_psn, a.rq_psn, a.dest_qp_num);
	fflush(stdout);
	return a;
}

/* An RDMA write from A (doca_gpu_dev_verbs_put's shape: ctrl, raddr, data), signaled, then its
 * doorbell (record, then the 8-byte UAR store); returns the CQE's opcode and syndrome. */
static uint8_t post_write(struct qp *q, uint64_t raddr, uint32_t rkey, uint32_t lkey, uint64_t laddr, uint32_t len,
			  uint8_t *synd)
{
	uint8_t *w = q->wq + (size_t)(q->pi & ((1u << SQ_LOG) - 1)) * 64;
	memset(w, 0, 64);
	put32(w, (uint32_t)q->pi << 8 | 0x08);
	put32(w + 4, q->qpn << 8 | 3);
	w[11] = 0x08; /* CQ_UPDATE */
	put64(w + 16, raddr);
	put32(w + 24, rkey);
	put32(w + 32, len);
	put32(w + 36, lkey);
	put64(w + 40, laddr);
	q->pi++;
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__atomic_store_n((volatile uint32_t *)q->qpdbr + 1, htobe32(q->pi), __ATOMIC_RELEASE);
	uint64_t db = (uint64_t)htobe32(q->qpn << 8) << 32 | htobe32((uint32_t)q->pi << 8);
	__atomic_store_n((volatile uint64_t *)q->qp_uar->reg_addr, db, __ATOMIC_RELEASE);
	/* The next CQE of the (not collapsed) CQ: owner bit of this pass. */
	uint8_t *cqe = q->cqbuf + (size_t)(q->ci & ((1u << CQ_LOG) - 1)) * 64;
	uint8_t owner = (q->ci >> CQ_LOG) & 1;
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		uint8_t op_own = __atomic_load_n(cqe + 63, __ATOMIC_ACQUIRE);
		if ((op_own >> 4) != 0xf && (op_own & 1) == owner) {
			q->ci++;
			__atomic_store_n((volatile uint32_t *)q->cqdbr, htobe32(q->ci & 0xffffff), __ATOMIC_RELEASE);
			*synd = cqe[55];
			return op_own >> 4;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		CHECK(t.tv_sec - t0.tv_sec < 20, "no CQE for %s's write at %u", q->name, q->pi - 1);
		sched_yield();
	}
}

int main(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n > 0, "no RDMA device");
	struct ibv_context *c = ibv_open_device(list[0]);
	CHECK(c, "ibv_open_device");
	/* doca_verbs_query_device */
	struct ibv_device_attr da;
	CHECK(!ibv_query_device(c, &da), "ibv_query_device");
	static uint8_t cap[QUERY_CAP_OUT_BYTES];
	uint8_t cin[QUERY_CAP_IN_BYTES] = {0};
	SET(cin, 0, IN_OPCODE, IFC_QUERY_HCA_CAP);
	SET(cin, 0, IN_OP_MOD, CAP_GENERAL << 1 | 1);
	cmd_ok(mlx5dv_devx_general_cmd(c, cin, sizeof cin, cap, sizeof cap), cap, "QUERY_HCA_CAP general");
	CHECK(GET(cap, CAP_BASE, HCA_RC) == 1 && GET(cap, CAP_BASE, HCA_PORT_TYPE) == 1, "general caps");
	SET(cin, 0, IN_OP_MOD, CAP_ROCE << 1 | 1);
	cmd_ok(mlx5dv_devx_general_cmd(c, cin, sizeof cin, cap, sizeof cap), cap, "QUERY_HCA_CAP RoCE");
	struct ibv_port_attr pa;
	CHECK(!ibv_query_port(c, 1, &pa), "ibv_query_port");
	union ibv_gid gid;
	CHECK(!ibv_query_gid(c, 1, 0, &gid), "ibv_query_gid");
	struct ibv_pd *pd = ibv_alloc_pd(c);
	CHECK(pd, "ibv_alloc_pd");
	struct mlx5dv_pd dvpd;
	struct mlx5dv_obj obj = {.pd = {.in = pd, .out = &dvpd}};
	CHECK(!mlx5dv_init_obj(&obj, MLX5DV_OBJ_PD), "mlx5dv_init_obj(PD)");

	struct qp a = {.name = "A", .psn = PSN_A}, b = {.name = "B", .psn = PSN_B};
	create(c, dvpd.pdn, &a, 7);
	create(c, dvpd.pdn, &b, 8);
	uint32_t mtu = 5; /* MLX5_QPC_MTU_4K_BYTES (the port's active MTU) */
	connect_qp(c, &a, b.qpn, PSN_B, gid.raw, mtu);
	connect_qp(c, &b, a.qpn, PSN_A, gid.raw, mtu);
	printf("gdaki_host created pid=%d qpn_a=0x%x qpn_b=0x%x\n", (int)getpid(), a.qpn, b.qpn);

	/* 1. Both healthy. */
	check_query("healthy", &a, PRM_QP_RTS, b.qpn, PSN_A, PSN_B, gid.raw, mtu, 7);
	check_query("healthy", &b, PRM_QP_RTS, a.qpn, PSN_B, PSN_A, gid.raw, mtu, 8);

	/* 2. One write A -> B: one packet, one PSN further on both sides. */
	uint8_t *buf = zalloc(8192);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192, acc);
	CHECK(mr, "ibv_reg_mr");
	for (int i = 0; i < 64; i++)
		buf[i] = (uint8_t)(0x30 + i);
	uint8_t synd = 0;
	uint8_t op = post_write(&a, (uintptr_t)buf + 4096, mr->rkey, mr->lkey, (uintptr_t)buf, 64, &synd);
	CHECK(op == 0, "write: CQE opcode %u syndrome 0x%x", op, synd);
	CHECK(!memcmp(buf + 4096, buf, 64), "the write's bytes");
	check_query("after_write", &a, PRM_QP_RTS, b.qpn, PSN_A + 1, PSN_B, gid.raw, mtu, 7);
	check_query("after_write", &b, PRM_QP_RTS, a.qpn, PSN_B, PSN_A + 1, gid.raw, mtu, 8);

	/* 3. A wrong rkey: the NIC completes it in error and puts A in error. */
	op = post_write(&a, (uintptr_t)buf + 4096, mr->rkey ^ 0x5a5a00, mr->lkey, (uintptr_t)buf, 8, &synd);
	CHECK(op == 13 && synd == 0x13, "bad rkey: CQE opcode %u syndrome 0x%x (want 13, 0x13)", op, synd);
	struct qattr qa;
	uint8_t st;
	CHECK(!query(&a, a.qpn, QUERY_QP_OUT_BYTES, &qa, &st) && qa.state == PRM_QP_ERR,
	      "errored: QP A state %u (%s), want ERR", qa.state, state_name(qa.state));
	printf("gdaki_host errored qp=A qpn=0x%x state=%s has_error=1 ok\n", a.qpn, state_name(qa.state));

	/* 4. The program's own transitions. */
	uint8_t in[MODIFY_QP_IN_BYTES] = {0}, out[CMD_OUT_BYTES];
	SET(in, 0, IN_OPCODE, IFC_2ERR_QP);
	SET(in, 0, IN_QPN, b.qpn);
	cmd_ok(mlx5dv_devx_obj_modify(b.obj, in, sizeof in, out, sizeof out), out, "2ERR");
	CHECK(!query(&b, b.qpn, QUERY_QP_OUT_BYTES, &qa, &st) && qa.state == PRM_QP_ERR, "2ERR: B state %u",
	      qa.state);
	SET(in, 0, IN_OPCODE, IFC_2RST_QP);
	cmd_ok(mlx5dv_devx_obj_modify(b.obj, in, sizeof in, out, sizeof out), out, "2RST");
	CHECK(!query(&b, b.qpn, QUERY_QP_OUT_BYTES, &qa, &st) && qa.state == PRM_QP_RST, "2RST: B state %u",
	      qa.state);
	printf("gdaki_host transitions qp=B 2ERR=ERR 2RST=RST ok\n");

	/* 5. Refused. */
	int r = query(&a, b.qpn, QUERY_QP_OUT_BYTES, &qa, &st);
	CHECK(r == EINVAL && st == IFC_STATUS_BAD_PARAM, "QUERY_QP of another QPN: ret %d status 0x%x", r, st);
	r = query(&a, a.qpn, 64, &qa, &st);
	CHECK(r == EINVAL, "QUERY_QP into 64 bytes: ret %d", r);
	uint8_t cq_in[16] = {0}, cq_out[64];
	SET(cq_in, 0, IN_OPCODE, IFC_QUERY_CQ);
	SET(cq_in, 0, IN_CQN, a.cqn);
	r = mlx5dv_devx_obj_query(a.cq, cq_in, sizeof cq_in, cq_out, sizeof cq_out);
	CHECK(r != 0 && GET(cq_out, 0, OUT_STATUS) != 0, "QUERY_CQ: ret %d status 0x%x", r, GET(cq_out, 0, OUT_STATUS));
	printf("gdaki_host refused other_qpn=%d short_out=%d query_cq=%d ok\n", EINVAL, EINVAL, r);

	struct qp *qs[2] = {&a, &b};
	for (int i = 0; i < 2; i++) {
		struct qp *q = qs[i];
		CHECK(!mlx5dv_devx_obj_destroy(q->obj) && !mlx5dv_devx_obj_destroy(q->cq), "destroy %s", q->name);
		CHECK(!mlx5dv_devx_umem_dereg(q->wq_u) && !mlx5dv_devx_umem_dereg(q->qpdbr_u) &&
			      !mlx5dv_devx_umem_dereg(q->cq_u) && !mlx5dv_devx_umem_dereg(q->cqdbr_u),
		      "umem dereg %s", q->name);
		mlx5dv_devx_free_uar(q->qp_uar);
		mlx5dv_devx_free_uar(q->cq_uar);
	}
	ibv_dereg_mr(mr);
	ibv_dealloc_pd(pd);
	ibv_close_device(c);
	ibv_free_device_list(list);
	printf("gdaki_host pid=%d ok\n", (int)getpid());
	return 0;
}
