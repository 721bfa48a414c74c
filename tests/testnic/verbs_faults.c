/* Faults through plain verbs, two processes (A = the parent acts, B = the child serves): each case
 * gets a fresh RC QP pair and checks the completion status (and mlx5 syndrome, in vendor_err) a
 * real mlx5 NIC gives, within a bound:
 *   bad_rkey       write with a wrong rkey             -> REM_ACCESS_ERR (0x13), then a later WR flushes
 *   bounds         read past the end of the MR         -> REM_ACCESS_ERR
 *   no_right       write to a QP without remote write  -> REM_ACCESS_ERR
 *   atomics        fetch-add and compare-swap          -> the old values, and B's memory updated
 *   write_imm_and_short_send  receive completions: RECV_RDMA_WITH_IMM (length, imm) and a short
 *                  send's byte_len = what arrived
 *   too_long       128-byte send into a 64-byte recv   -> A: REM_INV_REQ_ERR, B: LOC_LEN_ERR
 *   rnr            send with no receive, rnr_retry 1   -> RNR_RETRY_EXC_ERR
 *   bad_lkey       write from an unregistered lkey     -> LOC_PROT_ERR (0x04)
 *   dmabuf         ibv_reg_dmabuf_mr: fd -1 and a closed fd -> EBADF (NCCL's probe); a memfd at an
 *                  iova of its own, written by B through iova + rkey -> the bytes land at the offset
 *   malformed      a WQE with opcode 0x3f written and rung through mlx5dv -> LOC_QP_OP_ERR (0x02)
 *   flush_on_modify_err  3 receives posted, QP moved to ERR by B -> 3 WR_FLUSH_ERR in order
 *   chain_full     a chain of max_send_wr + 3 writes (A) and one of max_recv_wr + 2 receives (B)
 *                  into empty queues -> ENOMEM, bad_wr = the first WR past the queue's room; the
 *                  WRs before it run (A: max_send_wr successful completions)
 *   peer_death     B exits without cleanup; A writes   -> RETRY_EXC_ERR within 5 s
 * Vendor syndromes as a ConnectX gives them: 0x81 for retry exceeded, 0xf9 for a flush; the
 * other errors carry their syndrome.
 *
 * `verbs_faults fail`, run with TESTNIC_FAIL=3 (B posts no send), instead checks the injected
 * failure: A posts 2 receives (wr_id 101, 102), then one chain of 5 RDMA writes of 8 bytes to B's
 * buffer + 64 * wr_id, signaled 1 0 1 0 1 (wr_id 1..5):
 *   fail_first_runs      wr 1 succeeds; unsignaled wr 2 gives no completion
 *   fail_retry_exceeded  wr 3: RETRY_EXC_ERR, vendor 0x81
 *   fail_flush_unsignaled wr 4 (unsignaled): WR_FLUSH_ERR, vendor 0xf9; wr 5 the same
 *   fail_flush_receives  receives 101, 102: WR_FLUSH_ERR
 *   fail_flush_later     wr 6 posted after the error: WR_FLUSH_ERR
 *   fail_qp_state        ibv_query_qp: IBV_QPS_ERR
 *   fail_not_sent        B's buffer holds what wr 1 and 2 wrote and nothing of wr 3..6
 * Prints "verbs_faults CASE status=S vendor_err=0xV ms=T ok" per case; exits non-zero on any miss.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int role, sock; /* role 0 = A (acts), 1 = B (serves) */
static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;
static uint8_t *buf;
static struct ibv_mr *mr;

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "verbs_faults[%c]: ", role ? 'B' : 'A');
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

#define CHECK(c, ...)                                                                                      \
	do {                                                                                               \
		if (!(c))                                                                                  \
			die(__VA_ARGS__);                                                                  \
	} while (0)

static void xchg(const void *mine, void *theirs, size_t n)
{
	CHECK(write(sock, mine, n) == (ssize_t)n, "socket write");
	for (size_t got = 0; got < n;) {
		ssize_t r = read(sock, (char *)theirs + got, n - got);
		CHECK(r > 0, "socket read");
		got += (size_t)r;
	}
}

static void barrier(void)
{
	char a = 0, b;
	xchg(&a, &b, 1);
}

static long now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

struct conn {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	uint64_t addr;  /* the peer's buffer */
	uint32_t rkey;
};

struct info {
	uint32_t qpn;
	uint64_t addr;
	uint32_t rkey;
};

static struct conn connect_pair(int access, int rnr_retry)
{
	struct conn c;
	c.cq = ibv_create_cq(ctx, 32, NULL, NULL, 0);
	struct ibv_qp_init_attr ia = {.send_cq = c.cq, .recv_cq = c.cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 1,
					      .max_recv_sge = 1, .max_inline_data = 64}};
	c.qp = c.cq ? ibv_create_qp(pd, &ia) : NULL;
	CHECK(c.qp, "create CQ/QP");
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = access};
	CHECK(!ibv_modify_qp(c.qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), "INIT");
	struct info me = {c.qp->qp_num, (uintptr_t)buf, mr->rkey}, peer;
	xchg(&me, &peer, sizeof me);
	c.addr = peer.addr;
	c.rkey = peer.rkey;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer.qpn;
	a.max_dest_rd_atomic = 4;
	a.min_rnr_timer = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.hop_limit = 1;
	CHECK(!ibv_modify_qp(c.qp, &a,
			     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
	      "RTR");
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = (uint8_t)rnr_retry;
	a.max_rd_atomic = 4;
	CHECK(!ibv_modify_qp(c.qp, &a,
			     IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				     IBV_QP_MAX_QP_RD_ATOMIC),
	      "RTS");
	barrier();
	return c;
}

static void close_pair(struct conn *c)
{
	barrier();
	CHECK(!ibv_destroy_qp(c->qp) && !ibv_destroy_cq(c->cq), "destroy");
}

static struct ibv_wc wait_wc(struct ibv_cq *cq, long limit_ms)
{
	struct ibv_wc wc;
	long t0 = now_ms();
	for (;;) {
		int n = ibv_poll_cq(cq, 1, &wc);
		CHECK(n >= 0, "ibv_poll_cq");
		if (n)
			return wc;
		CHECK(now_ms() - t0 < limit_ms, "no completion within %ld ms", limit_ms);
		usleep(100);
	}
}

static void post(struct conn *c, enum ibv_wr_opcode op, uint64_t laddr, uint32_t len, uint32_t lkey,
		 uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = {.addr = laddr, .length = len, .lkey = lkey};
	struct ibv_send_wr wr = {.wr_id = 7, .sg_list = &sge, .num_sge = 1, .opcode = op,
				 .send_flags = IBV_SEND_SIGNALED}, *bad;
	if (op == IBV_WR_ATOMIC_FETCH_AND_ADD || op == IBV_WR_ATOMIC_CMP_AND_SWP) {
		wr.wr.atomic.remote_addr = raddr;
		wr.wr.atomic.rkey = rkey;
	} else {
		wr.wr.rdma.remote_addr = raddr;
		wr.wr.rdma.rkey = rkey;
	}
	CHECK(!ibv_post_send(c->qp, &wr, &bad), "ibv_post_send");
}

static void expect(const char *name, struct ibv_wc wc, enum ibv_wc_status st, int vendor, long t0)
{
	CHECK(wc.status == st, "%s: status %d (%s), want %d (%s)", name, wc.status, ibv_wc_status_str(wc.status),
	      st, ibv_wc_status_str(st));
	CHECK(vendor < 0 || (int)wc.vendor_err == vendor, "%s: vendor_err 0x%x, want 0x%x", name, wc.vendor_err,
	      vendor);
	printf("verbs_faults %s status=%d vendor_err=0x%x ms=%ld ok\n", name, wc.status, wc.vendor_err,
	       now_ms() - t0);
	fflush(stdout);
}

static const int ALL = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
		       IBV_ACCESS_REMOTE_ATOMIC;

static void cases(void)
{
	struct conn c;
	long t0;
	uint64_t mine = (uintptr_t)buf + 2048;

	c = connect_pair(ALL, 7);
	if (!role) {
		t0 = now_ms();
		post(&c, IBV_WR_RDMA_WRITE, mine, 64, mr->lkey, c.addr, c.rkey ^ 0xff00);
		expect("bad_rkey", wait_wc(c.cq, 5000), IBV_WC_REM_ACCESS_ERR, 0x13, t0);
		t0 = now_ms();
		post(&c, IBV_WR_RDMA_WRITE, mine, 64, mr->lkey, c.addr, c.rkey);
		expect("flush_after_error", wait_wc(c.cq, 5000), IBV_WC_WR_FLUSH_ERR, 0xf9, t0);
	}
	close_pair(&c);

	c = connect_pair(ALL, 7);
	if (!role) {
		t0 = now_ms();
		post(&c, IBV_WR_RDMA_READ, mine, 64, mr->lkey, c.addr + 4096 - 32, c.rkey);
		expect("bounds", wait_wc(c.cq, 5000), IBV_WC_REM_ACCESS_ERR, 0x13, t0);
	}
	close_pair(&c);

	c = connect_pair(role ? IBV_ACCESS_REMOTE_READ : ALL, 7);
	if (!role) {
		t0 = now_ms();
		post(&c, IBV_WR_RDMA_WRITE, mine, 8, mr->lkey, c.addr, c.rkey);
		expect("no_right", wait_wc(c.cq, 5000), IBV_WC_REM_ACCESS_ERR, 0x13, t0);
	}
	close_pair(&c);

	c = connect_pair(ALL, 7);
	uint64_t init = 40, *ctr = (uint64_t *)(buf + 512);
	if (role)
		*ctr = init;
	barrier();
	if (!role) {
		t0 = now_ms();
		struct ibv_sge sge = {.addr = mine, .length = 8, .lkey = mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD, .send_flags = IBV_SEND_SIGNALED},
				   *bad;
		wr.wr.atomic.remote_addr = c.addr + 512;
		wr.wr.atomic.rkey = c.rkey;
		wr.wr.atomic.compare_add = 2;
		CHECK(!ibv_post_send(c.qp, &wr, &bad), "post FA");
		struct ibv_wc wc = wait_wc(c.cq, 5000);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_FETCH_ADD, "FA: status %d", wc.status);
		CHECK(*(uint64_t *)(uintptr_t)mine == init, "FA returned %llu", *(unsigned long long *)(uintptr_t)mine);
		wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
		wr.wr.atomic.compare_add = init + 2;
		wr.wr.atomic.swap = 99;
		CHECK(!ibv_post_send(c.qp, &wr, &bad), "post CS");
		wc = wait_wc(c.cq, 5000);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_COMP_SWAP, "CS: status %d", wc.status);
		CHECK(*(uint64_t *)(uintptr_t)mine == init + 2, "CS returned %llu", *(unsigned long long *)(uintptr_t)mine);
		expect("atomics", wc, IBV_WC_SUCCESS, 0, t0);
	}
	barrier();
	if (role)
		CHECK(*ctr == 99, "B's counter holds %llu after FA 2 and CS -> 99", (unsigned long long)*ctr);
	close_pair(&c);

	c = connect_pair(ALL, 7);
	if (role) {
		struct ibv_sge sge = {.addr = (uintptr_t)buf + 1024, .length = 64, .lkey = mr->lkey};
		struct ibv_recv_wr rw = {.wr_id = 9, .sg_list = &sge, .num_sge = 1}, *bad;
		CHECK(!ibv_post_recv(c.qp, &rw, &bad), "post recv");
	}
	barrier();
	t0 = now_ms();
	if (!role) {
		post(&c, IBV_WR_SEND, mine, 128, mr->lkey, 0, 0);
		expect("too_long", wait_wc(c.cq, 5000), IBV_WC_REM_INV_REQ_ERR, 0x12, t0);
	} else {
		expect("too_long_receiver", wait_wc(c.cq, 5000), IBV_WC_LOC_LEN_ERR, 0x01, t0);
	}
	close_pair(&c);

	/* Successes with receive completions: a write with immediate (byte_len = the write's length,
	 * imm_data as sent) and a 40-byte send into a 64-byte receive (byte_len = what arrived). */
	c = connect_pair(ALL, 7);
	if (role) {
		struct ibv_sge sge = {.addr = (uintptr_t)buf + 1024, .length = 64, .lkey = mr->lkey};
		struct ibv_recv_wr rw = {.wr_id = 21, .sg_list = &sge, .num_sge = 1}, *bad;
		CHECK(!ibv_post_recv(c.qp, &rw, &bad), "post recv");
		rw.wr_id = 22;
		CHECK(!ibv_post_recv(c.qp, &rw, &bad), "post recv");
	}
	barrier();
	t0 = now_ms();
	if (!role) {
		memset(buf + 2048, 0x77, 100);
		struct ibv_sge sge = {.addr = mine, .length = 100, .lkey = mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1,
					 .opcode = IBV_WR_RDMA_WRITE_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
					 .imm_data = htobe32(0x12345678)},
				   *bad;
		wr.wr.rdma.remote_addr = c.addr + 3000;
		wr.wr.rdma.rkey = c.rkey;
		CHECK(!ibv_post_send(c.qp, &wr, &bad), "post write-imm");
		struct ibv_wc wc = wait_wc(c.cq, 5000);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE, "write-imm: %d", wc.status);
		post(&c, IBV_WR_SEND, mine, 40, mr->lkey, 0, 0);
		wc = wait_wc(c.cq, 5000);
		expect("write_imm_and_short_send", wc, IBV_WC_SUCCESS, 0, t0);
	} else {
		struct ibv_wc wc = wait_wc(c.cq, 5000);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && wc.wr_id == 21 &&
			      wc.byte_len == 100 && (wc.wc_flags & IBV_WC_WITH_IMM) &&
			      wc.imm_data == htobe32(0x12345678),
		      "write-imm receive: status %d opcode %d wr_id %llu byte_len %u imm 0x%x", wc.status, wc.opcode,
		      (unsigned long long)wc.wr_id, wc.byte_len, be32toh(wc.imm_data));
		for (int i = 0; i < 100; i++)
			CHECK(buf[3000 + i] == 0x77, "write-imm byte %d", i);
		wc = wait_wc(c.cq, 5000);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.wr_id == 22 && wc.byte_len == 40,
		      "short send: status %d wr_id %llu byte_len %u", wc.status, (unsigned long long)wc.wr_id,
		      wc.byte_len);
		expect("write_imm_and_short_send_receiver", wc, IBV_WC_SUCCESS, 0, t0);
	}
	close_pair(&c);

	c = connect_pair(ALL, 1);
	if (!role) {
		t0 = now_ms();
		post(&c, IBV_WR_SEND, mine, 16, mr->lkey, 0, 0);
		expect("rnr", wait_wc(c.cq, 5000), IBV_WC_RNR_RETRY_EXC_ERR, 0x16, t0);
	}
	close_pair(&c);

	c = connect_pair(ALL, 7);
	if (!role) {
		t0 = now_ms();
		post(&c, IBV_WR_RDMA_WRITE, mine, 8, mr->lkey ^ 0x3300, c.addr, c.rkey);
		expect("bad_lkey", wait_wc(c.cq, 5000), IBV_WC_LOC_PROT_ERR, 0x04, t0);
	}
	close_pair(&c);

	/* dma-buf registration: NCCL's probe (fd -1) gets EBADF, the kernel's "supported" answer, and a
	 * closed fd too; a dma-buf (a memfd stands in for one: any mappable fd) registered at an iova of
	 * its own is written by the peer through that iova and the MR's rkey. */
	c = connect_pair(ALL, 7);
	{
		errno = 0;
		CHECK(!ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0) && errno == EBADF, "dma-buf probe: errno %d, want EBADF",
		      errno);
		int fd = memfd_create("verbs_faults-dmabuf", MFD_CLOEXEC);
		CHECK(fd >= 0 && ftruncate(fd, 8192) == 0, "memfd");
		const uint64_t iova = 0x7e0000000000ull;
		struct ibv_mr *dm = ibv_reg_dmabuf_mr(pd, 4096, 4096, iova, fd, ALL);
		CHECK(dm && dm->rkey && (uint64_t)(uintptr_t)dm->addr == iova, "ibv_reg_dmabuf_mr of a memfd: errno %d",
		      errno);
		int closed = dup(fd);
		CHECK(closed >= 0 && close(closed) == 0, "dup");
		errno = 0;
		CHECK(!ibv_reg_dmabuf_mr(pd, 0, 4096, iova, closed, ALL) && errno == EBADF,
		      "dma-buf of a closed fd: errno %d, want EBADF", errno);
		struct info me = {0, iova, dm->rkey}, peer;
		xchg(&me, &peer, sizeof me);
		t0 = now_ms();
		if (role) {
			memset(buf + 2048, 0x5a, 256);
			post(&c, IBV_WR_RDMA_WRITE, mine, 256, mr->lkey, peer.addr + 100, peer.rkey);
			struct ibv_wc wc = wait_wc(c.cq, 5000);
			CHECK(wc.status == IBV_WC_SUCCESS, "write into the dma-buf: status %d", wc.status);
		}
		barrier();
		if (!role) {
			uint8_t *m = mmap(NULL, 8192, PROT_READ, MAP_SHARED, fd, 0);
			CHECK(m != MAP_FAILED, "mmap memfd");
			for (int i = 0; i < 356; i++)
				CHECK(m[4096 + i] == (i < 100 ? 0 : 0x5a), "dma-buf byte %d = 0x%x", i, m[4096 + i]);
			munmap(m, 8192);
			struct ibv_wc ok = {.status = IBV_WC_SUCCESS};
			expect("dmabuf", ok, IBV_WC_SUCCESS, 0, t0);
		}
		CHECK(!ibv_dereg_mr(dm), "dereg dma-buf MR");
		close(fd);
	}
	close_pair(&c);

	c = connect_pair(ALL, 7);
	if (!role) {
		/* A WQE no NIC knows, written and rung the way libmlx5 would. */
		struct mlx5dv_qp dq;
		memset(&dq, 0, sizeof dq); /* comp_mask: nothing optional asked */
		struct mlx5dv_obj o = {.qp = {.in = c.qp, .out = &dq}};
		CHECK(!mlx5dv_init_obj(&o, MLX5DV_OBJ_QP), "mlx5dv_init_obj(QP)");
		struct mlx5_wqe_ctrl_seg *ctrl = dq.sq.buf;
		mlx5dv_set_ctrl_seg(ctrl, 0, 0x3f, 0, c.qp->qp_num, MLX5_WQE_CTRL_CQ_UPDATE, 1, 0, 0);
		t0 = now_ms();
		__atomic_thread_fence(__ATOMIC_RELEASE);
		dq.dbrec[MLX5_SND_DBR] = htobe32(1);
		uint64_t db;
		memcpy(&db, ctrl, 8);
		__atomic_store_n((uint64_t *)dq.bf.reg, db, __ATOMIC_RELEASE);
		expect("malformed", wait_wc(c.cq, 5000), IBV_WC_LOC_QP_OP_ERR, 0x02, t0);
	}
	close_pair(&c);

	c = connect_pair(ALL, 7);
	if (role) {
		/* Receives posted, then the QP moved to error by the program: each flushes, in order. */
		struct ibv_sge sge = {.addr = (uintptr_t)buf + 1024, .length = 64, .lkey = mr->lkey};
		struct ibv_recv_wr rw = {.sg_list = &sge, .num_sge = 1}, *bad;
		for (uint64_t i = 0; i < 3; i++) {
			rw.wr_id = 100 + i;
			CHECK(!ibv_post_recv(c.qp, &rw, &bad), "post recv");
		}
		struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
		t0 = now_ms();
		CHECK(!ibv_modify_qp(c.qp, &a, IBV_QP_STATE), "modify to ERR");
		struct ibv_wc wc;
		for (uint64_t i = 0; i < 3; i++) {
			wc = wait_wc(c.cq, 5000);
			CHECK(wc.wr_id == 100 + i, "flushed receive %llu has wr_id %llu", (unsigned long long)i,
			      (unsigned long long)wc.wr_id);
			CHECK(wc.status == IBV_WC_WR_FLUSH_ERR, "flushed receive status %d", wc.status);
		}
		expect("flush_on_modify_err", wc, IBV_WC_WR_FLUSH_ERR, 0xf9, t0);
	}
	close_pair(&c);

	c = connect_pair(ALL, 7);
	{
		/* A chain longer than the queue's room: as libmlx5, ENOMEM at the first WR that does not
		 * fit, bad_wr pointing at it; those before it are posted and run. */
		struct ibv_qp_attr qa;
		struct ibv_qp_init_attr qi;
		CHECK(!ibv_query_qp(c.qp, &qa, IBV_QP_CAP, &qi), "ibv_query_qp");
		uint32_t room = role ? qa.cap.max_recv_wr : qa.cap.max_send_wr, n = room + (role ? 2 : 3);
		struct ibv_sge sge = {.addr = (uintptr_t)buf + 512, .length = 8, .lkey = mr->lkey};
		t0 = now_ms();
		int r;
		uint32_t at;
		if (!role) {
			struct ibv_send_wr w[64], *bad = NULL;
			CHECK(n <= 64, "max_send_wr %u", room);
			for (uint32_t i = 0; i < n; i++)
				w[i] = (struct ibv_send_wr){.wr_id = 200 + i, .next = i + 1 < n ? &w[i + 1] : NULL,
							    .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_WRITE,
							    .send_flags = IBV_SEND_SIGNALED,
							    .wr.rdma = {.remote_addr = c.addr + 512, .rkey = c.rkey}};
			r = ibv_post_send(c.qp, w, &bad);
			at = bad ? (uint32_t)(bad - w) : n;
			CHECK(r == ENOMEM && at == room, "post_send of %u into %u: %d, bad_wr at %u", n, room, r, at);
			struct ibv_wc wc = {0};
			for (uint32_t i = 0; i < room; i++) {
				wc = wait_wc(c.cq, 5000);
				CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == 200 + i, "chain write %u: %d", i, wc.status);
			}
			printf("verbs_faults chain posted=%u accepted=%u\n", n, room);
			expect("chain_full", wc, IBV_WC_SUCCESS, 0, t0);
		} else {
			struct ibv_recv_wr w[64], *bad = NULL;
			CHECK(n <= 64, "max_recv_wr %u", room);
			for (uint32_t i = 0; i < n; i++)
				w[i] = (struct ibv_recv_wr){.wr_id = 300 + i, .next = i + 1 < n ? &w[i + 1] : NULL,
							    .sg_list = &sge, .num_sge = 1};
			r = ibv_post_recv(c.qp, w, &bad);
			at = bad ? (uint32_t)(bad - w) : n;
			CHECK(r == ENOMEM && at == room, "post_recv of %u into %u: %d, bad_wr at %u", n, room, r, at);
			printf("verbs_faults chain_receiver posted=%u accepted=%u\n", n, room);
			struct ibv_wc ok = {.status = IBV_WC_SUCCESS};
			expect("chain_full_receiver", ok, IBV_WC_SUCCESS, 0, t0);
		}
	}
	close_pair(&c);

	c = connect_pair(ALL, 7);
	if (role) {
		fflush(stdout);
		_exit(0); /* no cleanup: its NIC stops answering */
	}
	sleep(1);
	t0 = now_ms();
	post(&c, IBV_WR_RDMA_WRITE, mine, 8, mr->lkey, c.addr, c.rkey);
	struct ibv_wc wc = wait_wc(c.cq, 5000);
	expect("peer_death", wc, IBV_WC_RETRY_EXC_ERR, 0x81, t0);
}

/* TESTNIC_FAIL=3: the third send WQE of A fails with retry exceeded; the QP goes to error. */
static void fail_case(void)
{
	struct conn c = connect_pair(ALL, 7);
	if (role) /* B: wr i writes 8 bytes at 64 * i */
		memset(buf, 0, 1024);
	barrier();
	if (!role) {
		long t0 = now_ms();
		struct ibv_sge rs = {.addr = (uintptr_t)buf + 3072, .length = 64, .lkey = mr->lkey};
		struct ibv_recv_wr rw = {.sg_list = &rs, .num_sge = 1}, *rbad;
		for (uint64_t i = 101; i <= 102; i++) {
			rw.wr_id = i;
			CHECK(!ibv_post_recv(c.qp, &rw, &rbad), "post recv");
		}
		struct ibv_sge sge[7];
		struct ibv_send_wr w[7], *bad;
		for (uint64_t i = 1; i <= 6; i++) {
			*(uint64_t *)(buf + 2048 + 8 * i) = 0x1000 + i;
			sge[i] = (struct ibv_sge){.addr = (uintptr_t)buf + 2048 + 8 * i, .length = 8, .lkey = mr->lkey};
			w[i] = (struct ibv_send_wr){.wr_id = i, .sg_list = &sge[i], .num_sge = 1,
						    .opcode = IBV_WR_RDMA_WRITE,
						    .send_flags = (i & 1) ? IBV_SEND_SIGNALED : 0,
						    .next = i < 5 ? &w[i + 1] : NULL,
						    .wr.rdma = {.remote_addr = c.addr + 64 * i, .rkey = c.rkey}};
		}
		CHECK(!ibv_post_send(c.qp, &w[1], &bad), "post the chain of 5 writes");
		/* In send-queue order: 1 (success), 3 (retry exceeded), 4 and 5 (flushed); the two
		 * receives flush too. Nothing of wr 2 (unsignaled, successful). */
		struct ibv_wc got[6];
		for (int i = 0; i < 6; i++)
			got[i] = wait_wc(c.cq, 5000);
		uint64_t sq_order[4], nsq = 0, recvs = 0;
		for (int i = 0; i < 6; i++) {
			struct ibv_wc *x = &got[i];
			if (x->wr_id >= 101) {
				CHECK(x->status == IBV_WC_WR_FLUSH_ERR && x->vendor_err == 0xf9 && x->qp_num == c.qp->qp_num,
				      "receive %llu: status %d vendor_err 0x%x", (unsigned long long)x->wr_id, x->status,
				      x->vendor_err);
				recvs |= 1u << (x->wr_id - 101);
				continue;
			}
			CHECK(nsq < 4, "more than 4 send completions (wr_id %llu)", (unsigned long long)x->wr_id);
			sq_order[nsq++] = x->wr_id;
		}
		CHECK(recvs == 3 && nsq == 4 && sq_order[0] == 1 && sq_order[1] == 3 && sq_order[2] == 4 &&
			      sq_order[3] == 5,
		      "send completions %llu %llu %llu %llu (want 1 3 4 5), receives flushed 0x%llx",
		      (unsigned long long)sq_order[0], (unsigned long long)sq_order[1],
		      (unsigned long long)sq_order[2], (unsigned long long)sq_order[3], (unsigned long long)recvs);
		struct ibv_wc by[6];
		for (int i = 0; i < 6; i++)
			if (got[i].wr_id <= 5)
				by[got[i].wr_id] = got[i];
		expect("fail_first_runs", by[1], IBV_WC_SUCCESS, 0, t0);
		expect("fail_retry_exceeded", by[3], IBV_WC_RETRY_EXC_ERR, 0x81, t0);
		expect("fail_flush_unsignaled", by[4], IBV_WC_WR_FLUSH_ERR, 0xf9, t0);
		expect("fail_flush_signaled", by[5], IBV_WC_WR_FLUSH_ERR, 0xf9, t0);
		for (int i = 0; i < 6; i++)
			if (got[i].wr_id == 102)
				expect("fail_flush_receives", got[i], IBV_WC_WR_FLUSH_ERR, 0xf9, t0);
		/* Posted after the error (the program never moved the QP): flushed as well. */
		w[6].next = NULL;
		CHECK(!ibv_post_send(c.qp, &w[6], &bad), "post wr 6 after the error");
		struct ibv_wc x = wait_wc(c.cq, 5000);
		CHECK(x.wr_id == 6, "after the error: wr_id %llu", (unsigned long long)x.wr_id);
		expect("fail_flush_later", x, IBV_WC_WR_FLUSH_ERR, 0xf9, t0);
		struct ibv_qp_attr qa;
		struct ibv_qp_init_attr qi;
		CHECK(!ibv_query_qp(c.qp, &qa, IBV_QP_STATE, &qi), "ibv_query_qp");
		CHECK(qa.qp_state == IBV_QPS_ERR, "query_qp: state %d, want IBV_QPS_ERR (%d)", qa.qp_state,
		      IBV_QPS_ERR);
		struct ibv_wc ok = {.status = IBV_WC_SUCCESS};
		expect("fail_qp_state", ok, IBV_WC_SUCCESS, 0, t0);
	}
	barrier();
	if (role) {
		for (uint64_t i = 1; i <= 6; i++) {
			uint64_t want = i <= 2 ? 0x1000 + i : 0;
			CHECK(*(uint64_t *)(buf + 64 * i) == want,
			      "B's slot %llu holds 0x%llx, want 0x%llx", (unsigned long long)i,
			      (unsigned long long)*(uint64_t *)(buf + 64 * i), (unsigned long long)want);
		}
		struct ibv_wc ok = {.status = IBV_WC_SUCCESS};
		expect("fail_not_sent", ok, IBV_WC_SUCCESS, 0, now_ms());
	}
	close_pair(&c);
}

int main(int argc, char **argv)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return 2;
	fflush(stdout);
	pid_t child = fork();
	if (child < 0)
		return 2;
	role = child == 0;
	sock = sv[role];
	close(sv[1 - role]);
	struct ibv_device **l = ibv_get_device_list(NULL);
	CHECK(l && l[0], "no device");
	ctx = ibv_open_device(l[0]);
	pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	CHECK(pd && !ibv_query_gid(ctx, 1, 0, &gid), "open/PD/GID");
	CHECK(!posix_memalign((void **)&buf, 4096, 4096), "alloc");
	memset(buf, 0x5c, 4096);
	mr = ibv_reg_mr(pd, buf, 4096, ALL);
	CHECK(mr, "ibv_reg_mr");
	if (argc > 1 && !strcmp(argv[1], "fail"))
		fail_case();
	else
		cases();
	int st = 0;
	waitpid(child, &st, 0); /* B exited in peer_death */
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}
