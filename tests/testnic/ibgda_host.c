/* The host sequence of NVSHMEM 3.4.5's IBGDA transport (src/modules/transport/ibgda/ibgda.cpp),
 * run on the CPU by two processes against whatever libibverbs/libmlx5 the loader finds (the
 * software NIC under scripts/with-testnic.sh), then NVSHMEM's device-side WQEs posted from the CPU.
 *
 * Each process: device list, open, query device/port/GID, PD (mlx5dv pdn), QUERY_HCA_CAP general
 * (cqe_version 1, log_bf_reg_size) and atomic (CAS/FA/masked, 4 and 8 bytes, endianness), an SRQ and
 * a receive CQ (mlx5dv srqn/cqn), umems for the WQ, CQ and doorbell records, query_eqn, an NC UAR for
 * the CQ, CREATE_CQ (collapsed, overrun ignore, buffer 0xff), an NC_DEDICATED UAR for the QP,
 * CREATE_QP (RC, SRQ), RST2INIT, INIT2RTR (remote QPN, GID from an AH's mlx5 address vector,
 * the grh bit 0 as NVSHMEM leaves it on RoCE; IBGDA_GRH=1 sets it), RTR2RTS. IBGDA_HOSTS=A,B puts
 * the two processes on simulated hosts A and B (TESTNIC_HOST): QPNs then repeat across them. Then, against the other process's memory, the WQE shapes ibgda_device.cuh writes:
 *   idx 0 RDMA write 64 B (ctrl, raddr, data)            idx 1 inline write 8 B (ctrl, raddr, inl)
 *   idx 2 RDMA read 128 B                                 idx 3 fetch-add 8 B (ctrl, raddr, atomic, data)
 *   idx 4 masked FA 4 B (opmod 0x08)                      idx 5 masked CS 8 B (opmod 0x09, 2 WQEBBs)
 *   idx 7 masked CS 4 B (opmod 0x08)                      idx 8 NOP with CQ_UPDATE
 * one DBR update (next free WQEBB, BE) and one 8-byte doorbell {pi << 8, qpn << 8} (BE) to the UAR,
 * as ibgda_post_send does; then it polls the collapsed CQ for wqe_counter 8 and checks every byte
 * that moved. Last, process 0's idx 9: a write with a wrong rkey must complete with REQ_ERR,
 * syndrome 0x13 (remote access error).
 * Then NVSHMEM's DC objects: a DC target (parent domain, mlx5dv_create_qp) per process and a devx
 * DCI that writes 32 bytes and fetch-adds through the peer's target with a full address vector.
 * Prints one "ibgda_host ..." summary line per process; exits non-zero on any mismatch.
 * `ibgda_host N` also times N single signaled writes, doorbell to CQE, on process 0.
 */
#include "ifc.h"

#include <dlfcn.h>
#include <endian.h>
#include <errno.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SQ_LOG 7
#define SQ_WQEBB (1u << SQ_LOG)
#define CQ_LOG 7

static int role, sock, lat_iters, grh_bit;

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "ibgda_host[%d]: ", role);
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

static void xchg(const void *mine, void *theirs, size_t n)
{
	CHECK(write(sock, mine, n) == (ssize_t)n, "socket write");
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(sock, (char *)theirs + got, n - got);
		CHECK(r > 0, "socket read (peer gone?)");
		got += (size_t)r;
	}
}

static void barrier(void)
{
	char a = 'b', b;
	xchg(&a, &b, 1);
}

static void *zalloc(size_t n)
{
	void *p = NULL;
	CHECK(posix_memalign(&p, 4096, n) == 0, "posix_memalign");
	memset(p, 0, n);
	return p;
}

static void cmd_ok(int r, const void *out, const char *what)
{
	CHECK(r == 0 && GET(out, 0, OUT_STATUS) == 0, "%s failed: ret %d status 0x%x syndrome 0x%x", what, r,
	      GET(out, 0, OUT_STATUS), GET(out, 0, OUT_SYNDROME));
}

static uint32_t query_cap(struct ibv_context *c, int type, uint8_t *out)
{
	uint8_t in[QUERY_CAP_IN_BYTES] = {0};
	SET(in, 0, IN_OPCODE, IFC_QUERY_HCA_CAP);
	SET(in, 0, IN_OP_MOD, (uint32_t)(type << 1) | 1);
	memset(out, 0, QUERY_CAP_OUT_BYTES);
	cmd_ok(mlx5dv_devx_general_cmd(c, in, sizeof in, out, QUERY_CAP_OUT_BYTES), out, "QUERY_HCA_CAP");
	return 0;
}

struct side {
	uint32_t qpn;
	uint16_t lid;
	uint8_t gid[16];
	uint64_t addr;
	uint32_t rkey;
	uint32_t dct;
};

#define DC_KEY 0x5623CEAFull /* NVSHMEM's IBGDA_DC_ACCESS_KEY */

/* ---- WQE writers: the layouts of ibgda_device.cuh ---- */

static uint8_t *sq;
static uint32_t qpn;

static uint8_t *wqe_at(uint32_t idx)
{
	return sq + (size_t)(idx & (SQ_WQEBB - 1)) * 64;
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

static uint8_t *seg_at(uint32_t idx, uint32_t n)
{
	return wqe_at(idx + n / 4) + (n % 4) * 16;
}

static void ctrl(uint32_t idx, uint32_t opmod, uint8_t opcode, uint32_t ds, uint8_t fm_ce_se)
{
	uint8_t *c = wqe_at(idx);
	memset(c, 0, 16);
	put32(c, opmod << 24 | (idx & 0xffff) << 8 | opcode);
	put32(c + 4, qpn << 8 | ds);
	c[11] = fm_ce_se;
}

static void raddr(uint8_t *s, uint64_t addr, uint32_t rkey)
{
	put64(s, addr);
	put32(s + 8, rkey);
	put32(s + 12, 0);
}

static void data(uint8_t *s, uint32_t len, uint32_t lkey, uint64_t addr)
{
	put32(s, len);
	put32(s + 4, lkey);
	put64(s + 8, addr);
}

static void ring(volatile uint32_t *dbrec, void *reg, uint32_t pi)
{
	/* ibgda_update_dbr, then ibgda_ring_db: {HTOBE32(pi << 8), HTOBE32(qpn << 8)} in one store. */
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__atomic_store_n(&dbrec[1], htobe32(pi & 0xffff), __ATOMIC_RELEASE);
	uint64_t db = (uint64_t)htobe32(qpn << 8) << 32 | htobe32((pi & 0xffff) << 8);
	__atomic_store_n((volatile uint64_t *)reg, db, __ATOMIC_RELEASE);
}

/* Polls the collapsed CQ (entry 0) for `idx`; returns its op_own. */
static uint8_t poll_cq(const uint8_t *cqe, uint16_t idx)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		/* wqe_counter and op_own in one load: on this collapsed CQ a new entry overwrites the
		 * last, and two loads could pair the old op_own with the new counter. */
		uint64_t tail = __atomic_load_n((const uint64_t *)(const void *)(cqe + 56), __ATOMIC_ACQUIRE);
		uint8_t b[8];
		memcpy(b, &tail, 8);
		uint8_t op_own = b[7];
		uint16_t wc = (uint16_t)(b[4] << 8 | b[5]);
		if ((op_own >> 4) != 0xf && wc == idx)
			return op_own;
		clock_gettime(CLOCK_MONOTONIC, &t);
		CHECK(t.tv_sec - t0.tv_sec < 20, "no CQE for WQE %u (op_own 0x%x wqe_counter %u)", idx, op_own, wc);
		sched_yield();
	}
}

/* NVSHMEM's DC target (ibgda_create_dct_shared_objects + ibgda_create_dct): a parent domain, an
 * SRQ and CQs on it, an AH to this port's GID, mlx5dv_create_qp(DCT), INIT, RTR. */
static struct ibv_qp *dct_create(struct ibv_context *c, struct ibv_pd *pd, union ibv_gid *gid)
{
	struct ibv_parent_domain_init_attr pda = {.pd = pd};
	struct ibv_pd *ppd = ibv_alloc_parent_domain(c, &pda);
	CHECK(ppd, "ibv_alloc_parent_domain");
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 64, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(ppd, &sa);
	struct ibv_cq *scq = ibv_create_cq(c, 64, NULL, NULL, 0), *rcq = ibv_create_cq(c, 64, NULL, NULL, 0);
	CHECK(srq && scq && rcq, "DCT SRQ/CQs");
	struct ibv_qp_init_attr_ex qa = {.pd = ppd, .comp_mask = IBV_QP_INIT_ATTR_PD, .qp_type = IBV_QPT_DRIVER,
					 .srq = srq, .send_cq = scq, .recv_cq = rcq,
					 .cap = {.max_send_wr = 64, .max_recv_wr = 64, .max_send_sge = 1,
						 .max_recv_sge = 1, .max_inline_data = 12}};
	struct mlx5dv_qp_init_attr dv = {.comp_mask = MLX5DV_QP_INIT_ATTR_MASK_DC};
	dv.dc_init_attr.dc_type = MLX5DV_DCTYPE_DCT;
	dv.dc_init_attr.dct_access_key = DC_KEY;
	struct ibv_qp *dct = mlx5dv_create_qp(c, &qa, &dv);
	CHECK(dct, "mlx5dv_create_qp(DCT)");
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1,
				.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
						   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC};
	CHECK(!ibv_modify_qp(dct, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
	      "DCT INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.hop_limit = 255;
	CHECK(!ibv_modify_qp(dct, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_MIN_RNR_TIMER),
	      "DCT RTR");
	return dct;
}

/* ---- loopback QPs (a QP connected to itself) ---- */

#define LOOP_WRITES 3
#define LOOP_READ 256

struct loopback {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_mr *mr;
	uint8_t *buf;
	uint32_t bytes; /* what the verbs QP moved: its writes and its read */
	struct mlx5dv_devx_obj *dx_qp, *dx_cq;
	struct mlx5dv_devx_umem *dx_wq, *dx_cqu;
	struct mlx5dv_devx_uar *dx_uar;
	uint32_t dx_qpn;
};

static void wait_wc(struct ibv_cq *cq, uint64_t wr_id)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0, "ibv_poll_cq");
		if (n == 1) {
			CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == wr_id, "loopback WR %llu: status %d (wr_id %llu)",
			      (unsigned long long)wr_id, wc.status, (unsigned long long)wc.wr_id);
			return;
		}
		clock_gettime(CLOCK_MONOTONIC, &t);
		CHECK(t.tv_sec - t0.tv_sec < 20, "no completion for loopback WR %llu", (unsigned long long)wr_id);
		sched_yield();
	}
}

static struct loopback loopback(struct ibv_context *c, struct ibv_pd *pd, union ibv_gid *gid,
				struct ibv_port_attr *pa, uint32_t pdn, struct mlx5dv_devx_umem *dbr_umem,
				uint8_t *dbr, struct mlx5dv_devx_uar *cq_uar, uint32_t eqn)
{
	struct loopback lo = {0};
	int ib = pa->link_layer == IBV_LINK_LAYER_INFINIBAND;
	lo.buf = zalloc(16384);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	lo.mr = ibv_reg_mr(pd, lo.buf, 16384, acc);
	lo.cq = ibv_create_cq(c, 16, NULL, NULL, 0);
	CHECK(lo.mr && lo.cq, "loopback MR/CQ");
	struct ibv_qp_init_attr qa = {.send_cq = lo.cq, .recv_cq = lo.cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 16, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
	lo.qp = ibv_create_qp(pd, &qa);
	CHECK(lo.qp, "loopback ibv_create_qp");
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = acc};
	CHECK(!ibv_modify_qp(lo.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
	      "loopback INIT");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = pa->active_mtu;
	a.dest_qp_num = lo.qp->qp_num; /* itself */
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.port_num = 1;
	a.ah_attr.dlid = pa->lid;
	/* Routed as the RC QPs above: by GID on RoCE (and on IB with IBGDA_GRH=1), by LID on IB. */
	a.ah_attr.is_global = !ib || grh_bit;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.hop_limit = 1;
	CHECK(!ibv_modify_qp(lo.qp, &a,
			     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
	      "loopback RTR");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	CHECK(!ibv_modify_qp(lo.qp, &a,
			     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				     IBV_QP_MAX_QP_RD_ATOMIC),
	      "loopback RTS");
	/* Writes of 1000, 1500 and 2000 + 8 * role bytes from [0, 4096) to [4096, 8192), then a read of
	 * LOOP_READ bytes from [4096, ...) to [8192, ...): all of it within this process. */
	for (int i = 0; i < 4096; i++)
		lo.buf[i] = (uint8_t)(i * 7 + role);
	uint32_t len[LOOP_WRITES] = {1000, 1500, 2000 + 8 * (uint32_t)role};
	for (int w = 0; w <= LOOP_WRITES; w++) {
		int rd = w == LOOP_WRITES;
		uint32_t n = rd ? LOOP_READ : len[w];
		struct ibv_sge sg = {.addr = (uintptr_t)lo.buf + (rd ? 8192 : 0), .length = n, .lkey = lo.mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 100 + (uint64_t)w, .sg_list = &sg, .num_sge = 1,
					 .opcode = rd ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE,
					 .send_flags = IBV_SEND_SIGNALED}, *badw;
		wr.wr.rdma.remote_addr = (uintptr_t)lo.buf + 4096;
		wr.wr.rdma.rkey = lo.mr->rkey;
		CHECK(!ibv_post_send(lo.qp, &wr, &badw), "loopback post %d", w);
		wait_wc(lo.cq, wr.wr_id);
		lo.bytes += n;
	}
	for (uint32_t i = 0; i < len[LOOP_WRITES - 1]; i++)
		CHECK(lo.buf[4096 + i] == (uint8_t)(i * 7 + role), "loopback write byte %u: 0x%x", i, lo.buf[4096 + i]);
	CHECK(!memcmp(lo.buf + 8192, lo.buf, LOOP_READ), "loopback read");

	/* The devx loopback QP: NVSHMEM's RC QP shape, its own SQ umem, collapsed CQ and UAR; the doorbell
	 * records at +256 (QP) and +320 (CQ) of the shared doorbell-record umem. */
	uint8_t *sqb = zalloc(SQ_WQEBB * 64), *cqb = zalloc(64u << CQ_LOG);
	memset(cqb, 0xff, 64u << CQ_LOG);
	lo.dx_wq = mlx5dv_devx_umem_reg(c, sqb, SQ_WQEBB * 64, IBV_ACCESS_LOCAL_WRITE);
	lo.dx_cqu = mlx5dv_devx_umem_reg(c, cqb, 64u << CQ_LOG, IBV_ACCESS_LOCAL_WRITE);
	lo.dx_uar = mlx5dv_devx_alloc_uar(c, 1u << 31);
	CHECK(lo.dx_wq && lo.dx_cqu && lo.dx_uar, "devx loopback umems/UAR");
	uint8_t in[CREATE_QP_IN_BYTES], out[CMD_OUT_BYTES];
	memset(in, 0, sizeof in);
	SET(in, 0, IN_OPCODE, IFC_CREATE_CQ);
	SET(in, 0, CQ_IN_UMEM_ID, lo.dx_cqu->umem_id);
	SET(in, 0, CQ_IN_UMEM_VALID, 1);
	SET(in, CQ_IN_CQC, CQC_DBR_UMEM_VALID, 1);
	SET(in, CQ_IN_CQC, CQC_CC, 1);
	SET(in, CQ_IN_CQC, CQC_OI, 1);
	SET(in, CQ_IN_CQC, CQC_DBR_UMEM_ID, dbr_umem->umem_id);
	SET(in, CQ_IN_CQC, CQC_LOG_CQ_SIZE, CQ_LOG);
	SET(in, CQ_IN_CQC, CQC_UAR_PAGE, cq_uar->page_id);
	SET(in, CQ_IN_CQC, CQC_C_EQN, eqn);
	put64(in + (CQ_IN_CQC + CQC_DBR_ADDR) / 8, 320);
	lo.dx_cq = mlx5dv_devx_obj_create(c, in, CREATE_CQ_IN_BYTES, out, sizeof out);
	CHECK(lo.dx_cq, "devx loopback CREATE_CQ");
	uint32_t dx_cqn = GET(out, 0, OUT_OBJ_NUM);
	memset(in, 0, sizeof in);
	SET(in, 0, IN_OPCODE, IFC_CREATE_QP);
	SET(in, 0, QP_IN_WQ_UMEM_ID, lo.dx_wq->umem_id);
	SET(in, 0, QP_IN_WQ_UMEM_VALID, 1);
	SET(in, QP_IN_QPC, QPC_ST, 0);
	SET(in, QP_IN_QPC, QPC_PM_STATE, 3);
	SET(in, QP_IN_QPC, QPC_PD, pdn);
	SET(in, QP_IN_QPC, QPC_UAR_PAGE, lo.dx_uar->page_id);
	SET(in, QP_IN_QPC, QPC_RQ_TYPE, RQ_TYPE_ZERO);
	SET(in, QP_IN_QPC, QPC_CQN_SND, dx_cqn);
	SET(in, QP_IN_QPC, QPC_CQN_RCV, dx_cqn);
	SET(in, QP_IN_QPC, QPC_LOG_SQ_SIZE, SQ_LOG);
	SET(in, QP_IN_QPC, QPC_DBR_UMEM_VALID, 1);
	SET(in, QP_IN_QPC, QPC_DBR_UMEM_ID, dbr_umem->umem_id);
	put64(in + (QP_IN_QPC + QPC_DBR_ADDR) / 8, 256);
	lo.dx_qp = mlx5dv_devx_obj_create(c, in, CREATE_QP_IN_BYTES, out, sizeof out);
	CHECK(lo.dx_qp, "devx loopback CREATE_QP");
	lo.dx_qpn = GET(out, 0, OUT_OBJ_NUM);
	memset(in, 0, sizeof in);
	SET(in, 0, IN_OPCODE, IFC_RST2INIT_QP);
	SET(in, 0, IN_QPN, lo.dx_qpn);
	SET(in, QP_IN_QPC, QPC_RWE, 1);
	SET(in, QP_IN_QPC, QPC_RRE, 1);
	SET(in, QP_IN_QPC + QPC_ADS, ADS_VHCA_PORT_NUM, 1);
	SET(in, QP_IN_QPC, QPC_PM_STATE, 3);
	cmd_ok(mlx5dv_devx_obj_modify(lo.dx_qp, in, MODIFY_QP_IN_BYTES, out, sizeof out), out, "loopback RST2INIT");
	memset(in, 0, sizeof in);
	SET(in, 0, IN_OPCODE, IFC_INIT2RTR_QP);
	SET(in, 0, IN_QPN, lo.dx_qpn);
	SET(in, QP_IN_QPC, QPC_MTU, pa->active_mtu);
	SET(in, QP_IN_QPC, QPC_LOG_MSG_MAX, 30);
	SET(in, QP_IN_QPC, QPC_REMOTE_QPN, lo.dx_qpn); /* itself */
	SET(in, QP_IN_QPC, QPC_MIN_RNR_NAK, 12);
	SET(in, QP_IN_QPC + QPC_ADS, ADS_GRH, grh_bit);
	if (ib && !grh_bit)
		SET(in, QP_IN_QPC + QPC_ADS, ADS_RLID, pa->lid);
	SET(in, QP_IN_QPC + QPC_ADS, ADS_HOP_LIMIT, 255);
	memcpy(in + (QP_IN_QPC + QPC_ADS + ADS_RGID) / 8, gid->raw, 16);
	cmd_ok(mlx5dv_devx_obj_modify(lo.dx_qp, in, MODIFY_QP_IN_BYTES, out, sizeof out), out, "loopback INIT2RTR");
	memset(in, 0, sizeof in);
	SET(in, 0, IN_OPCODE, IFC_RTR2RTS_QP);
	SET(in, 0, IN_QPN, lo.dx_qpn);
	SET(in, QP_IN_QPC, QPC_RETRY_COUNT, 7);
	SET(in, QP_IN_QPC, QPC_RNR_RETRY, 7);
	SET(in, QP_IN_QPC + QPC_ADS, ADS_ACK_TIMEOUT, 20);
	cmd_ok(mlx5dv_devx_obj_modify(lo.dx_qp, in, MODIFY_QP_IN_BYTES, out, sizeof out), out, "loopback RTR2RTS");
	uint8_t *save_sq = sq;
	uint32_t save_qpn = qpn;
	sq = sqb;
	qpn = lo.dx_qpn;
	ctrl(0, 0, MLX5_OPCODE_RDMA_WRITE, 3, MLX5_WQE_CTRL_CQ_UPDATE);
	raddr(seg_at(0, 1), (uintptr_t)lo.buf + 12288, lo.mr->rkey);
	data(seg_at(0, 2), 64, lo.mr->lkey, (uintptr_t)lo.buf + 64);
	ring((volatile uint32_t *)(dbr + 256), lo.dx_uar->reg_addr, 1);
	uint8_t op_own = poll_cq(cqb, 0);
	CHECK((op_own >> 4) == 0, "devx loopback write: CQE opcode %u syndrome 0x%x", op_own >> 4, cqb[55]);
	CHECK(!memcmp(lo.buf + 12288, lo.buf + 64, 64), "devx loopback write's bytes");
	sq = save_sq;
	qpn = save_qpn;
	return lo;
}

static void loopback_destroy(struct loopback *lo)
{
	CHECK(!mlx5dv_devx_obj_destroy(lo->dx_qp) && !mlx5dv_devx_obj_destroy(lo->dx_cq), "devx loopback destroy");
	CHECK(!mlx5dv_devx_umem_dereg(lo->dx_wq) && !mlx5dv_devx_umem_dereg(lo->dx_cqu), "devx loopback umems");
	mlx5dv_devx_free_uar(lo->dx_uar);
	CHECK(!ibv_destroy_qp(lo->qp) && !ibv_destroy_cq(lo->cq) && !ibv_dereg_mr(lo->mr), "loopback destroy");
}

static int run(void)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	CHECK(list && n > 0, "no RDMA device");
	CHECK(strstr(ibv_get_device_name(list[0]), "mlx5"), "device %s is no mlx5", ibv_get_device_name(list[0]));
	struct ibv_context *c = ibv_open_device(list[0]);
	CHECK(c, "ibv_open_device");
	struct ibv_device_attr da;
	CHECK(!ibv_query_device(c, &da), "ibv_query_device");
	struct ibv_port_attr pa;
	CHECK(!ibv_query_port(c, 1, &pa) && pa.state == IBV_PORT_ACTIVE, "port 1 not ACTIVE");
	union ibv_gid gid;
	CHECK(!ibv_query_gid(c, 1, 0, &gid), "ibv_query_gid");
	struct ibv_pd *pd = ibv_alloc_pd(c);
	CHECK(pd, "ibv_alloc_pd");
	struct mlx5dv_pd dvpd;
	struct mlx5dv_obj obj;
	memset(&obj, 0, sizeof obj);
	obj.pd.in = pd;
	obj.pd.out = &dvpd;
	CHECK(!mlx5dv_init_obj(&obj, MLX5DV_OBJ_PD), "mlx5dv_init_obj(PD)");

	/* Capabilities NVSHMEM checks. */
	static uint8_t cap[QUERY_CAP_OUT_BYTES];
	query_cap(c, CAP_GENERAL, cap);
	CHECK(GET(cap, CAP_BASE, HCA_CQE_VERSION) == 1, "cqe_version != 1");
	uint32_t log_bf = GET(cap, CAP_BASE, HCA_LOG_BF_REG_SIZE);
	query_cap(c, CAP_ATOMIC, cap);
	CHECK((GET(cap, CAP_BASE, ATOM_OPERATIONS) & 0xf) == 0xf, "atomic operations");
	CHECK((GET(cap, CAP_BASE, ATOM_SIZE_QP) & 0xc) == 0xc && (GET(cap, CAP_BASE, ATOM_SIZE_DC) & 0xc) == 0xc,
	      "4- and 8-byte atomics");
	CHECK(GET(cap, CAP_BASE, ATOM_SUPPORTED_8B_ENDIAN_MODE_1) && GET(cap, CAP_BASE, ATOM_REQ_8B_ENDIAN_MODE),
	      "8-byte atomics in host endianness");

	/* SRQ and receive CQ (verbs), as ibgda_create_qp_shared_objects makes them. */
	struct ibv_srq_init_attr sa = {.attr = {.max_wr = 64, .max_sge = 1}};
	struct ibv_srq *srq = ibv_create_srq(pd, &sa);
	CHECK(srq, "ibv_create_srq");
	struct mlx5dv_srq dvsrq = {.comp_mask = MLX5DV_SRQ_MASK_SRQN};
	memset(&obj, 0, sizeof obj);
	obj.srq.in = srq;
	obj.srq.out = &dvsrq;
	CHECK(!mlx5dv_init_obj(&obj, MLX5DV_OBJ_SRQ) && dvsrq.srqn, "mlx5dv_init_obj(SRQ)");
	struct ibv_cq *rcq = ibv_create_cq(c, 64, NULL, NULL, 0);
	CHECK(rcq, "ibv_create_cq");
	struct mlx5dv_cq dvcq;
	memset(&obj, 0, sizeof obj);
	obj.cq.in = rcq;
	obj.cq.out = &dvcq;
	CHECK(!mlx5dv_init_obj(&obj, MLX5DV_OBJ_CQ), "mlx5dv_init_obj(CQ)");

	/* NIC control buffers in host memory (NVSHMEM_IBGDA_FORCE_NIC_BUF_MEMTYPE=hostmem). */
	sq = zalloc(SQ_WQEBB * 64);
	uint8_t *cqbuf = zalloc(64u << CQ_LOG), *dbr = zalloc(4096);
	memset(cqbuf, 0xff, 64u << CQ_LOG);
	struct mlx5dv_devx_umem *wq_umem = mlx5dv_devx_umem_reg(c, sq, SQ_WQEBB * 64, IBV_ACCESS_LOCAL_WRITE);
	struct mlx5dv_devx_umem *cq_umem = mlx5dv_devx_umem_reg(c, cqbuf, 64u << CQ_LOG, IBV_ACCESS_LOCAL_WRITE);
	struct mlx5dv_devx_umem *dbr_umem = mlx5dv_devx_umem_reg(c, dbr, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(wq_umem && cq_umem && dbr_umem, "mlx5dv_devx_umem_reg");
	uint32_t eqn;
	CHECK(!mlx5dv_devx_query_eqn(c, 0, &eqn), "mlx5dv_devx_query_eqn");

	/* The collapsed send CQ (ibgda_create_cq). */
	struct mlx5dv_devx_uar *cq_uar = mlx5dv_devx_alloc_uar(c, MLX5DV_UAR_ALLOC_TYPE_NC);
	CHECK(cq_uar, "mlx5dv_devx_alloc_uar(NC)");
	uint8_t in[CREATE_QP_IN_BYTES], out[CMD_OUT_BYTES];
	memset(in, 0, sizeof in);
	SET(in, 0, IN_OPCODE, IFC_CREATE_CQ);
	SET(in, 0, CQ_IN_UMEM_ID, cq_umem->umem_id);
	SET(in, 0, CQ_IN_UMEM_VALID, 1);
	SET(in, CQ_IN_CQC, CQC_DBR_UMEM_VALID, 1);
	SET(in, CQ_IN_CQC, CQC_CQE_SZ, 0);
	SET(in, CQ_IN_CQC, CQC_CC, 1);
	SET(in, CQ_IN_CQC, CQC_OI, 1);
	SET(in, CQ_IN_CQC, CQC_DBR_UMEM_ID, dbr_umem->umem_id);
	SET(in, CQ_IN_CQC, CQC_LOG_CQ_SIZE, CQ_LOG);
	SET(in, CQ_IN_CQC, CQC_UAR_PAGE, cq_uar->page_id);
	SET(in, CQ_IN_CQC, CQC_C_EQN, eqn);
	put64(in + (CQ_IN_CQC + CQC_DBR_ADDR) / 8, 64); /* CQ doorbell record at +64 */
	struct mlx5dv_devx_obj *cq = mlx5dv_devx_obj_create(c, in, CREATE_CQ_IN_BYTES, out, sizeof out);
	CHECK(cq, "CREATE_CQ (errno %d, status 0x%x)", errno, GET(out, 0, OUT_STATUS));
	uint32_t cqn = GET(out, 0, OUT_OBJ_NUM);

	/* The QP's doorbell UAR (ibgda_alloc_and_map_qp_uar: NC_DEDICATED, else BF). */
	struct mlx5dv_devx_uar *uar = mlx5dv_devx_alloc_uar(c, 1u << 31);
	if (!uar)
		uar = mlx5dv_devx_alloc_uar(c, MLX5DV_UAR_ALLOC_TYPE_BF);
	CHECK(uar && log_bf, "mlx5dv_devx_alloc_uar");

	/* CREATE_QP (ibgda_create_qp, RC). */
	memset(in, 0, sizeof in);
	SET(in, 0, IN_OPCODE, IFC_CREATE_QP);
	SET(in, 0, QP_IN_WQ_UMEM_ID, wq_umem->umem_id);
	SET(in, 0, QP_IN_WQ_UMEM_VALID, 1);
	SET(in, QP_IN_QPC, QPC_ST, 0);
	SET(in, QP_IN_QPC, QPC_PM_STATE, 3);
	SET(in, QP_IN_QPC, QPC_PD, dvpd.pdn);
	SET(in, QP_IN_QPC, QPC_UAR_PAGE, uar->page_id);
	SET(in, QP_IN_QPC, QPC_RQ_TYPE, RQ_TYPE_SRQ);
	SET(in, QP_IN_QPC, QPC_SRQN, dvsrq.srqn);
	SET(in, QP_IN_QPC, QPC_CQN_SND, cqn);
	SET(in, QP_IN_QPC, QPC_CQN_RCV, dvcq.cqn);
	SET(in, QP_IN_QPC, QPC_LOG_SQ_SIZE, SQ_LOG);
	SET(in, QP_IN_QPC, QPC_DBR_UMEM_VALID, 1);
	SET(in, QP_IN_QPC, QPC_DBR_UMEM_ID, dbr_umem->umem_id);
	SET(in, QP_IN_QPC, QPC_USER_INDEX, (uint32_t)role);
	put64(in + (QP_IN_QPC + QPC_DBR_ADDR) / 8, 0); /* QP doorbell record at +0 */
	struct mlx5dv_devx_obj *qp = mlx5dv_devx_obj_create(c, in, CREATE_QP_IN_BYTES, out, sizeof out);
	CHECK(qp, "CREATE_QP (errno %d, status 0x%x)", errno, GET(out, 0, OUT_STATUS));
	qpn = GET(out, 0, OUT_OBJ_NUM);

	memset(in, 0, sizeof in);
	SET(in, 0, IN_OPCODE, IFC_RST2INIT_QP);
	SET(in, 0, IN_QPN, qpn);
	SET(in, QP_IN_QPC, QPC_RWE, 1);
	SET(in, QP_IN_QPC, QPC_RRE, 1);
	SET(in, QP_IN_QPC, QPC_RAE, 1);
	SET(in, QP_IN_QPC, QPC_ATOMIC_MODE, 3);
	SET(in, QP_IN_QPC + QPC_ADS, ADS_VHCA_PORT_NUM, 1);
	SET(in, QP_IN_QPC, QPC_PM_STATE, 3);
	cmd_ok(mlx5dv_devx_obj_modify(qp, in, MODIFY_QP_IN_BYTES, out, sizeof out), out, "RST2INIT");

	/* Memory: this side's buffer (the peer's target) and a local result buffer. */
	uint8_t *buf = zalloc(4096), *res = zalloc(4096);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	struct ibv_mr *mr = ibv_reg_mr(pd, buf, 4096, acc), *rmr = ibv_reg_mr(pd, res, 4096, IBV_ACCESS_LOCAL_WRITE);
	CHECK(mr && rmr, "ibv_reg_mr");
	for (int i = 0; i < 128; i++)
		buf[256 + i] = (uint8_t)(0x40 + role * 0x40 + i); /* what the peer reads */
	for (int i = 0; i < 64; i++)
		buf[1024 + i] = (uint8_t)(0x10 * (role + 1) + i); /* what this side writes */
	uint64_t fa8 = 1000 + role, cs8 = 0xaaaa0000 + role;
	uint32_t fa4 = 2000 + role, cs4 = 0xbbbb0000 + role;
	memcpy(buf + 512, &fa8, 8);
	memcpy(buf + 520, &fa4, 4);
	memcpy(buf + 528, &cs8, 8);
	memcpy(buf + 536, &cs4, 4);

	struct ibv_qp *dct = dct_create(c, pd, &gid);
	/* NVSHMEM on InfiniBand: RC paths by LID without a GRH, DC by the 16-byte address vector. */
	int ib = pa.link_layer == IBV_LINK_LAYER_INFINIBAND;
	struct side me = {.qpn = qpn, .lid = pa.lid, .addr = (uintptr_t)buf, .rkey = mr->rkey, .dct = dct->qp_num},
		    peer;
	memcpy(me.gid, gid.raw, 16);
	xchg(&me, &peer, sizeof me);

	/* INIT2RTR (ibgda_rc_init2rtr on RoCE: the remote GID through an AH's address vector). */
	struct ibv_ah_attr ah_attr = {.is_global = 1, .port_num = 1};
	memcpy(ah_attr.grh.dgid.raw, peer.gid, 16);
	struct ibv_ah *ah = ibv_create_ah(pd, &ah_attr);
	CHECK(ah, "ibv_create_ah");
	struct mlx5dv_ah dah;
	memset(&obj, 0, sizeof obj);
	obj.ah.in = ah;
	obj.ah.out = &dah;
	CHECK(!mlx5dv_init_obj(&obj, MLX5DV_OBJ_AH), "mlx5dv_init_obj(AH)");
	memset(in, 0, sizeof in);
	SET(in, 0, IN_OPCODE, IFC_INIT2RTR_QP);
	SET(in, 0, IN_QPN, qpn);
	SET(in, QP_IN_QPC, QPC_MTU, pa.active_mtu);
	SET(in, QP_IN_QPC, QPC_LOG_MSG_MAX, 30);
	SET(in, QP_IN_QPC, QPC_REMOTE_QPN, peer.qpn);
	SET(in, QP_IN_QPC, QPC_MIN_RNR_NAK, 12);
	/* NVSHMEM 3.4.5 leaves the grh bit 0 on RoCE (rgid_rip filled); IBGDA_GRH=1 sets it. */
	SET(in, QP_IN_QPC + QPC_ADS, ADS_GRH, grh_bit);
	if (ib && !grh_bit)
		SET(in, QP_IN_QPC + QPC_ADS, ADS_RLID, peer.lid);
	SET(in, QP_IN_QPC + QPC_ADS, ADS_HOP_LIMIT, 255);
	SET(in, QP_IN_QPC + QPC_ADS, ADS_SRC_ADDR_INDEX, 0);
	memcpy(in + (QP_IN_QPC + QPC_ADS + ADS_RGID) / 8, dah.av->rgid, 16);
	cmd_ok(mlx5dv_devx_obj_modify(qp, in, MODIFY_QP_IN_BYTES, out, sizeof out), out, "INIT2RTR");
	memset(in, 0, sizeof in);
	SET(in, 0, IN_OPCODE, IFC_RTR2RTS_QP);
	SET(in, 0, IN_QPN, qpn);
	SET(in, QP_IN_QPC, QPC_NEXT_SEND_PSN, 0);
	SET(in, QP_IN_QPC, QPC_RETRY_COUNT, 7);
	SET(in, QP_IN_QPC, QPC_RNR_RETRY, 7);
	SET(in, QP_IN_QPC + QPC_ADS, ADS_ACK_TIMEOUT, 20);
	cmd_ok(mlx5dv_devx_obj_modify(qp, in, MODIFY_QP_IN_BYTES, out, sizeof out), out, "RTR2RTS");
	barrier();

	/* The WQEs (ibgda_write_rdma_write_wqe, _inl_wqe, _rdma_read, ibgda_write_atomic_wqe, nop). */
	uint32_t lk = rmr->lkey, bk = mr->lkey;
	uint64_t r = peer.addr, l = (uintptr_t)res;
	ctrl(0, 0, MLX5_OPCODE_RDMA_WRITE, 3, 0);
	raddr(seg_at(0, 1), r + 0, peer.rkey);
	data(seg_at(0, 2), 64, bk, (uintptr_t)buf + 1024);
	ctrl(1, 0, MLX5_OPCODE_RDMA_WRITE, 3, 0);
	raddr(seg_at(1, 1), r + 64, peer.rkey);
	uint8_t *inl = seg_at(1, 2);
	put32(inl, 8 | MLX5_INLINE_SEG);
	memcpy(inl + 4, "INLINE!", 8);
	ctrl(2, 0, MLX5_OPCODE_RDMA_READ, 3, 0);
	raddr(seg_at(2, 1), r + 256, peer.rkey);
	data(seg_at(2, 2), 128, lk, l);
	ctrl(3, 0, MLX5_OPCODE_ATOMIC_FA, 4, 0);
	raddr(seg_at(3, 1), r + 512, peer.rkey);
	put64(seg_at(3, 2), 5);
	put64(seg_at(3, 2) + 8, 0);
	data(seg_at(3, 3), 8, lk, l + 128);
	ctrl(4, 0x08, MLX5_OPCODE_ATOMIC_MASKED_FA, 4, 0);
	raddr(seg_at(4, 1), r + 520, peer.rkey);
	memset(seg_at(4, 2), 0, 16);
	put32(seg_at(4, 2), 3);
	data(seg_at(4, 3), 4, lk, l + 136);
	ctrl(5, 0x09, MLX5_OPCODE_ATOMIC_MASKED_CS, 5, 0);
	raddr(seg_at(5, 1), r + 528, peer.rkey);
	put64(seg_at(5, 2), 0x1111); /* swap */
	put64(seg_at(5, 2) + 8, 0);   /* compare */
	put64(seg_at(5, 3), ~0ull);   /* swap mask */
	put64(seg_at(5, 3) + 8, 0);   /* compare mask: swap unconditionally */
	data(seg_at(5, 4), 8, lk, l + 144);
	ctrl(7, 0x08, MLX5_OPCODE_ATOMIC_MASKED_CS, 4, 0);
	raddr(seg_at(7, 1), r + 536, peer.rkey);
	put32(seg_at(7, 2), 0x2222);
	put32(seg_at(7, 2) + 4, 0);
	put32(seg_at(7, 2) + 8, ~0u);
	put32(seg_at(7, 2) + 12, 0);
	data(seg_at(7, 3), 4, lk, l + 152);
	ctrl(8, 0, MLX5_OPCODE_NOP, 2, MLX5_WQE_CTRL_CQ_UPDATE);
	volatile uint32_t *qp_dbr = (volatile uint32_t *)dbr;
	ring(qp_dbr, uar->reg_addr, 9);
	uint8_t op_own = poll_cq(cqbuf, 8);
	CHECK((op_own >> 4) == 0, "WQE 8 completed with CQE opcode %u, syndrome 0x%x", op_own >> 4, cqbuf[55]);

	/* What came back. */
	uint64_t got8;
	uint32_t got4;
	for (int i = 0; i < 128; i++)
		CHECK(res[i] == (uint8_t)(0x40 + (1 - role) * 0x40 + i), "RDMA read byte %d: 0x%x", i, res[i]);
	memcpy(&got8, res + 128, 8);
	CHECK(got8 == 1000u + (1 - role), "fetch-add returned %llu", (unsigned long long)got8);
	memcpy(&got4, res + 136, 4);
	CHECK(be32toh(got4) == 2000u + (1 - role), "masked FA 4B returned 0x%x (big-endian expected)", got4);
	memcpy(&got8, res + 144, 8);
	CHECK(got8 == 0xaaaa0000u + (1 - role), "masked CS 8B returned 0x%llx", (unsigned long long)got8);
	memcpy(&got4, res + 152, 4);
	CHECK(be32toh(got4) == 0xbbbb0000u + (1 - role), "masked CS 4B returned 0x%x", got4);
	barrier();

	/* What arrived here from the peer. */
	for (int i = 0; i < 64; i++)
		CHECK(buf[i] == (uint8_t)(0x10 * (2 - role) + i), "RDMA write byte %d: 0x%x", i, buf[i]);
	CHECK(!memcmp(buf + 64, "INLINE!", 8), "inline write");
	memcpy(&got8, buf + 512, 8);
	CHECK(got8 == 1005u + role, "fetch-add target holds %llu", (unsigned long long)got8);
	memcpy(&got4, buf + 520, 4);
	CHECK(got4 == 2003u + role, "masked FA 4B target holds %u", got4);
	memcpy(&got8, buf + 528, 8);
	CHECK(got8 == 0x1111, "masked CS 8B target holds 0x%llx", (unsigned long long)got8);
	memcpy(&got4, buf + 536, 4);
	CHECK(got4 == 0x2222, "masked CS 4B target holds 0x%x", got4);
	barrier();

	/* A DCI (ibgda_create_qp with st DCI) writing and adding to the peer through its DC target,
	 * with NVSHMEM's full 48-byte address vector (no compact AV on RoCE). */
	uint8_t *rc_sq = sq;
	uint32_t rc_qpn = qpn;
	sq = zalloc(SQ_WQEBB * 64);
	uint8_t *dcq = zalloc(64u << CQ_LOG);
	memset(dcq, 0xff, 64u << CQ_LOG);
	struct mlx5dv_devx_umem *dwq_umem = mlx5dv_devx_umem_reg(c, sq, SQ_WQEBB * 64, IBV_ACCESS_LOCAL_WRITE);
	struct mlx5dv_devx_umem *dcq_umem = mlx5dv_devx_umem_reg(c, dcq, 64u << CQ_LOG, IBV_ACCESS_LOCAL_WRITE);
	CHECK(dwq_umem && dcq_umem, "DCI umems");
	memset(in, 0, sizeof in);
	SET(in, 0, IN_OPCODE, IFC_CREATE_CQ);
	SET(in, 0, CQ_IN_UMEM_ID, dcq_umem->umem_id);
	SET(in, 0, CQ_IN_UMEM_VALID, 1);
	SET(in, CQ_IN_CQC, CQC_DBR_UMEM_VALID, 1);
	SET(in, CQ_IN_CQC, CQC_CC, 1);
	SET(in, CQ_IN_CQC, CQC_OI, 1);
	SET(in, CQ_IN_CQC, CQC_DBR_UMEM_ID, dbr_umem->umem_id);
	SET(in, CQ_IN_CQC, CQC_LOG_CQ_SIZE, CQ_LOG);
	SET(in, CQ_IN_CQC, CQC_UAR_PAGE, cq_uar->page_id);
	put64(in + (CQ_IN_CQC + CQC_DBR_ADDR) / 8, 192);
	struct mlx5dv_devx_obj *dci_cq = mlx5dv_devx_obj_create(c, in, CREATE_CQ_IN_BYTES, out, sizeof out);
	CHECK(dci_cq, "CREATE_CQ for the DCI");
	uint32_t dci_cqn = GET(out, 0, OUT_OBJ_NUM);
	struct mlx5dv_devx_uar *dci_uar = mlx5dv_devx_alloc_uar(c, 1u << 31);
	CHECK(dci_uar, "DCI UAR");
	memset(in, 0, sizeof in);
	SET(in, 0, IN_OPCODE, IFC_CREATE_QP);
	SET(in, 0, QP_IN_WQ_UMEM_ID, dwq_umem->umem_id);
	SET(in, 0, QP_IN_WQ_UMEM_VALID, 1);
	SET(in, QP_IN_QPC, QPC_ST, 5);
	SET(in, QP_IN_QPC, QPC_PM_STATE, 3);
	SET(in, QP_IN_QPC, QPC_PD, dvpd.pdn);
	SET(in, QP_IN_QPC, QPC_UAR_PAGE, dci_uar->page_id);
	SET(in, QP_IN_QPC, QPC_RQ_TYPE, RQ_TYPE_SRQ);
	SET(in, QP_IN_QPC, QPC_SRQN, dvsrq.srqn);
	SET(in, QP_IN_QPC, QPC_CQN_SND, dci_cqn);
	SET(in, QP_IN_QPC, QPC_CQN_RCV, dvcq.cqn);
	SET(in, QP_IN_QPC, QPC_LOG_SQ_SIZE, SQ_LOG);
	SET(in, QP_IN_QPC, QPC_DBR_UMEM_VALID, 1);
	SET(in, QP_IN_QPC, QPC_DBR_UMEM_ID, dbr_umem->umem_id);
	put64(in + (QP_IN_QPC + QPC_DBR_ADDR) / 8, 128);
	struct mlx5dv_devx_obj *dci = mlx5dv_devx_obj_create(c, in, CREATE_QP_IN_BYTES, out, sizeof out);
	CHECK(dci, "CREATE_QP (DCI)");
	qpn = GET(out, 0, OUT_OBJ_NUM);
	uint32_t dci_qpn = qpn;
	memset(in, 0, sizeof in);
	SET(in, 0, IN_OPCODE, IFC_RST2INIT_QP);
	SET(in, 0, IN_QPN, qpn);
	put64(in + (QP_IN_QPC + QPC_DC_ACCESS_KEY) / 8, DC_KEY);
	SET(in, QP_IN_QPC + QPC_ADS, ADS_VHCA_PORT_NUM, 1);
	cmd_ok(mlx5dv_devx_obj_modify(dci, in, MODIFY_QP_IN_BYTES, out, sizeof out), out, "DCI RST2INIT");
	memset(in, 0, sizeof in);
	SET(in, 0, IN_OPCODE, IFC_INIT2RTR_QP);
	SET(in, 0, IN_QPN, qpn);
	SET(in, QP_IN_QPC, QPC_MTU, pa.active_mtu);
	cmd_ok(mlx5dv_devx_obj_modify(dci, in, MODIFY_QP_IN_BYTES, out, sizeof out), out, "DCI INIT2RTR");
	memset(in, 0, sizeof in);
	SET(in, 0, IN_OPCODE, IFC_RTR2RTS_QP);
	SET(in, 0, IN_QPN, qpn);
	SET(in, QP_IN_QPC, QPC_RETRY_COUNT, 7);
	SET(in, QP_IN_QPC, QPC_RNR_RETRY, 7);
	SET(in, QP_IN_QPC + QPC_ADS, ADS_ACK_TIMEOUT, 20);
	cmd_ok(mlx5dv_devx_obj_modify(dci, in, MODIFY_QP_IN_BYTES, out, sizeof out), out, "DCI RTR2RTS");
	/* The AV NVSHMEM copies from its AH (ibgda_get_device_dct): key, DCT number | ext, GID. */
	struct mlx5_wqe_av av;
	memcpy(&av, dah.av, sizeof av);
	av.key.dc_key = htobe64(DC_KEY);
	av.dqp_dct = htobe32(0x80000000u | peer.dct);
	memcpy(av.rgid, peer.gid, 16);
	/* On InfiniBand the compact 16-byte AV (no ext bit, the peer's LID): one 16-byte segment
	 * instead of three, so the WQEs are shorter. */
	uint32_t av_ds = 3;
	if (ib) {
		av.dqp_dct = htobe32(peer.dct);
		av.rlid = htobe16(peer.lid);
		av_ds = 1;
	}
	for (int i = 0; i < 32; i++)
		buf[1100 + i] = (uint8_t)(0xd0 + role + i);
	uint32_t w_ds = 3 + av_ds, fa_ds = 4 + av_ds;
	uint32_t w_bb = (w_ds * 16 + 63) / 64, fa_bb = (fa_ds * 16 + 63) / 64;
	uint32_t d_w = 0, d_fa = w_bb;
	ctrl(d_w, 0, MLX5_OPCODE_RDMA_WRITE, w_ds, 0);
	memcpy(seg_at(d_w, 1), &av, av_ds * 16);
	raddr(seg_at(d_w, 1 + av_ds), r + 1536, peer.rkey);
	data(seg_at(d_w, 2 + av_ds), 32, bk, (uintptr_t)buf + 1100);
	ctrl(d_fa, 0, MLX5_OPCODE_ATOMIC_FA, fa_ds, MLX5_WQE_CTRL_CQ_UPDATE);
	memcpy(seg_at(d_fa, 1), &av, av_ds * 16);
	raddr(seg_at(d_fa, 1 + av_ds), r + 544, peer.rkey);
	put64(seg_at(d_fa, 2 + av_ds), 11);
	put64(seg_at(d_fa, 2 + av_ds) + 8, 0);
	data(seg_at(d_fa, 3 + av_ds), 8, lk, l + 160);
	ring((volatile uint32_t *)(dbr + 128), dci_uar->reg_addr, d_fa + fa_bb);
	op_own = poll_cq(dcq, (uint16_t)d_fa);
	CHECK((op_own >> 4) == 0, "DCI WQE %u: CQE opcode %u syndrome 0x%x", d_fa, op_own >> 4, dcq[55]);
	memcpy(&got8, res + 160, 8);
	CHECK(got8 == 0, "DCI fetch-add returned %llu", (unsigned long long)got8);
	barrier();
	for (int i = 0; i < 32; i++)
		CHECK(buf[1536 + i] == (uint8_t)(0xd0 + (1 - role) + i), "DCI write byte %d: 0x%x", i, buf[1536 + i]);
	memcpy(&got8, buf + 544, 8);
	CHECK(got8 == 11, "DC fetch-add target holds %llu", (unsigned long long)got8);
	barrier();

	/* A doorbell names its QP (docs/TESTNIC.md, strict doorbells). The RC QP gets a signaled
	 * NOP at idx 9 and its doorbell record moves to 10, but no doorbell of its own: the DCI's
	 * doorbell for its NOP at idx 4 goes to the RC QP's register instead (a QP not bound to that
	 * UAR: it rings nothing). Then the DCI rings its own register for idx 4..6 (the NOP and a
	 * signaled 32-byte write through the peer's DC target). When the write's CQE is there, the
	 * NIC has read the RC register after the stray doorbell at least once (the write needs the
	 * peer's ACK, a later NIC loop), so a NIC that ran the RC QP from its doorbell record would
	 * have completed the NOP by then: it must not have. Then the RC QP's own doorbell runs it. */
	uint8_t *dci_sq = sq;
	sq = rc_sq;
	qpn = rc_qpn;
	ctrl(9, 0, MLX5_OPCODE_NOP, 1, MLX5_WQE_CTRL_CQ_UPDATE);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__atomic_store_n(&qp_dbr[1], htobe32(10), __ATOMIC_RELEASE);
	sq = dci_sq;
	qpn = dci_qpn;
	uint32_t d_nop = d_fa + fa_bb, d_w2 = d_nop + 1;
	ctrl(d_nop, 0, MLX5_OPCODE_NOP, 1, 0);
	ring((volatile uint32_t *)(dbr + 128), uar->reg_addr, d_nop + 1);
	/* The NIC reads the RC register while it holds the stray doorbell: two loops of the software
	 * NIC's thread (its private call). Without it a fast peer's ACK could complete the DCI write
	 * in the NIC loop that read the RC register just before the stray store, and the RC QP's own
	 * doorbell below overwrite the stray one unseen (foreign=0; once under load). A ConnectX sees
	 * every doorbell: a write to the register is a posted write it receives. */
	void (*nic_quiesce)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "tn_nic_quiesce");
	CHECK(nic_quiesce, "tn_nic_quiesce not found: run under scripts/with-testnic.sh");
	nic_quiesce();
	for (int i = 0; i < 32; i++)
		buf[1200 + i] = (uint8_t)(0xe0 + role + i);
	ctrl(d_w2, 0, MLX5_OPCODE_RDMA_WRITE, w_ds, MLX5_WQE_CTRL_CQ_UPDATE);
	memcpy(seg_at(d_w2, 1), &av, av_ds * 16);
	raddr(seg_at(d_w2, 1 + av_ds), r + 1600, peer.rkey);
	data(seg_at(d_w2, 2 + av_ds), 32, bk, (uintptr_t)buf + 1200);
	ring((volatile uint32_t *)(dbr + 128), dci_uar->reg_addr, d_w2 + w_bb);
	op_own = poll_cq(dcq, (uint16_t)d_w2);
	CHECK((op_own >> 4) == 0, "DCI WQE %u: CQE opcode %u syndrome 0x%x", d_w2, op_own >> 4, dcq[55]);
	uint16_t last_rc = (uint16_t)(cqbuf[60] << 8 | cqbuf[61]);
	CHECK(last_rc == 8,
	      "the RC QP's NOP (idx 9) ran without a doorbell naming it (last RC CQE: wqe_counter %u; "
	      "a doorbell naming another QP must ring nothing)",
	      last_rc);
	sq = rc_sq;
	qpn = rc_qpn;
	ring(qp_dbr, uar->reg_addr, 10);
	op_own = poll_cq(cqbuf, 9);
	CHECK((op_own >> 4) == 0, "RC NOP 9: CQE opcode %u syndrome 0x%x", op_own >> 4, cqbuf[55]);
	barrier();
	for (int i = 0; i < 32; i++)
		CHECK(buf[1600 + i] == (uint8_t)(0xe0 + (1 - role) + i), "DCI write 2 byte %d: 0x%x", i, buf[1600 + i]);
	barrier();

	/* Latency (ibgda_host N): process 0 posts N signaled 8-byte inline writes one at a time and
	 * times doorbell -> CQE (the peer's NIC answers each with an ACK). */
	uint32_t pi = 10;
	if (role == 0 && lat_iters) {
		long *ns = calloc(lat_iters, sizeof *ns);
		CHECK(ns, "calloc");
		for (int i = 0; i < lat_iters; i++, pi++) {
			ctrl(pi, 0, MLX5_OPCODE_RDMA_WRITE, 3, MLX5_WQE_CTRL_CQ_UPDATE);
			raddr(seg_at(pi, 1), r + 128, peer.rkey);
			put32(seg_at(pi, 2), 8 | MLX5_INLINE_SEG);
			memcpy(seg_at(pi, 2) + 4, &i, sizeof i);
			struct timespec a, b;
			clock_gettime(CLOCK_MONOTONIC, &a);
			ring(qp_dbr, uar->reg_addr, pi + 1);
			op_own = poll_cq(cqbuf, (uint16_t)pi);
			clock_gettime(CLOCK_MONOTONIC, &b);
			CHECK((op_own >> 4) == 0, "latency write %d failed", i);
			ns[i] = (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec);
		}
		for (int i = 1; i < lat_iters; i++) /* insertion sort: a few thousand samples */
			for (int j = i; j > 0 && ns[j - 1] > ns[j]; j--) {
				long t = ns[j];
				ns[j] = ns[j - 1];
				ns[j - 1] = t;
			}
		printf("ibgda_host latency iters=%d min_ns=%ld median_ns=%ld p99_ns=%ld max_ns=%ld\n", lat_iters, ns[0],
		       ns[lat_iters / 2], ns[lat_iters * 99 / 100], ns[lat_iters - 1]);
		free(ns);
	}
	barrier();

	/* A wrong rkey (role 0 only: its QP ends in error, and a QP in error answers nobody, so the
	 * other side could not test after it): remote access error in the collapsed CQ. */
	if (role == 0) {
		ctrl(pi, 0, MLX5_OPCODE_RDMA_WRITE, 3, MLX5_WQE_CTRL_CQ_UPDATE);
		raddr(seg_at(pi, 1), r, peer.rkey ^ 0x5a5a00);
		data(seg_at(pi, 2), 8, bk, (uintptr_t)buf);
		ring(qp_dbr, uar->reg_addr, pi + 1);
		op_own = poll_cq(cqbuf, (uint16_t)pi);
		CHECK((op_own >> 4) == 13 && cqbuf[55] == 0x13,
		      "bad rkey: CQE opcode %u syndrome 0x%x (want 13, 0x13)", op_own >> 4, cqbuf[55]);
	}
	barrier();

	/* Loopback (issue 40 item 6): NVSHMEM connects every PE to itself too, a QP whose remote GID
	 * and QPN are its own. Each process makes two such QPs after every other QP, so under
	 * IBGDA_HOSTS=1,2 both processes number them alike (the QPNs collide across hosts, as do the
	 * mkeys and, after fork, the buffers' addresses): a verbs RC QP (its work requests are what
	 * sigmatop counts on the CPU) posting LOOP_WRITES writes and one read within its own buffer,
	 * and a devx RC QP (NVSHMEM's shape) writing 64 bytes to itself. */
	struct loopback lo = loopback(c, pd, &gid, &pa, dvpd.pdn, dbr_umem, dbr, cq_uar, eqn);
	barrier();

	printf("ibgda_host role=%d pid=%d qpn=0x%x peer_qpn=0x%x cqn=0x%x uar_page=0x%x rkey=0x%08x "
	       "peer_rkey=0x%08x peer_addr=0x%llx dci_qpn=0x%x peer_dct=0x%x dci_idx=%u,%u,%u,%u lid=%u wqes=%d "
	       "loop_qpn=0x%x loop_bytes=%u loop_addr=0x%llx loop_rkey=0x%08x dx_loop_qpn=0x%x ok\n",
	       role, (int)getpid(), rc_qpn, peer.qpn, cqn, uar->page_id, mr->rkey, peer.rkey,
	       (unsigned long long)peer.addr, dci_qpn, peer.dct, d_w, d_fa, d_nop, d_w2, (unsigned)pa.lid,
	       role == 0 ? 10 : 9, lo.qp->qp_num, lo.bytes, (unsigned long long)(uintptr_t)lo.buf, lo.mr->rkey,
	       lo.dx_qpn);
	fflush(stdout);
	barrier();

	loopback_destroy(&lo);
	CHECK(!mlx5dv_devx_obj_destroy(qp) && !mlx5dv_devx_obj_destroy(cq), "devx destroy");
	CHECK(!mlx5dv_devx_obj_destroy(dci) && !mlx5dv_devx_obj_destroy(dci_cq), "devx destroy (DCI)");
	CHECK(!mlx5dv_devx_umem_dereg(dwq_umem) && !mlx5dv_devx_umem_dereg(dcq_umem), "umem dereg (DCI)");
	mlx5dv_devx_free_uar(dci_uar);
	CHECK(!ibv_destroy_qp(dct), "destroy DCT");
	CHECK(!mlx5dv_devx_umem_dereg(wq_umem) && !mlx5dv_devx_umem_dereg(cq_umem) &&
		      !mlx5dv_devx_umem_dereg(dbr_umem),
	      "umem dereg");
	mlx5dv_devx_free_uar(uar);
	mlx5dv_devx_free_uar(cq_uar);
	ibv_destroy_ah(ah);
	ibv_dereg_mr(mr);
	ibv_dereg_mr(rmr);
	ibv_destroy_cq(rcq);
	ibv_destroy_srq(srq);
	ibv_dealloc_pd(pd);
	ibv_close_device(c);
	ibv_free_device_list(list);
	return 0;
}

int main(int argc, char **argv)
{
	lat_iters = argc > 1 ? atoi(argv[1]) : 0;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return 2;
	fflush(stdout);
	pid_t child = fork();
	if (child < 0)
		return 2;
	role = child == 0;
	/* IBGDA_HOSTS=A,B: role 0 on simulated host A, role 1 on host B (TESTNIC_HOST, read when
	 * the NIC first starts, after this), so their QPNs collide as on two machines. */
	const char *hs = getenv("IBGDA_HOSTS");
	unsigned ha, hb;
	if (hs && sscanf(hs, "%u,%u", &ha, &hb) == 2) {
		char v[16];
		snprintf(v, sizeof v, "%u", role ? hb : ha);
		setenv("TESTNIC_HOST", v, 1);
	}
	const char *g = getenv("IBGDA_GRH");
	grh_bit = g && *g == '1';
	sock = sv[role];
	close(sv[1 - role]);
	int rc = run();
	if (child > 0) {
		int st = 0;
		waitpid(child, &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			rc = 1;
	}
	return rc;
}
