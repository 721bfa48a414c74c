/* NCCL's IB proxy call pattern on the software NIC, for counting what sigmatop adds per verbs call
 * (callgrind instructions; issue 24). Two processes (fork, a socketpair for the QP exchange), one
 * RC QP each, connected to each other; per proxy step, as NCCL 2.28's net_ib.cc does it:
 *   receiver (ncclIbIrecv + ncclIbPostFifo): ibv_post_recv of one WR (for the write with
 *            immediate), then ibv_post_send of one inline 64-byte RDMA write of a FIFO entry into
 *            the sender's FIFO (signaled once every 32, as NCCL signals one FIFO slot in 32);
 *   sender   (ncclIbIsend + ncclIbMultiSend): waits for the FIFO entry (reads its memory, no
 *            verbs call), then ibv_post_send of one RDMA write with immediate of STEP bytes;
 *   both     (ncclIbTest): ibv_poll_cq(cq, 4, wc) until the step's completion arrives.
 * The verbs calls go through small functions of their own (call_post_send, call_post_recv,
 * call_poll), so that `valgrind --tool=callgrind --toggle-collect=call_*` counts them alone,
 * provider and sigmatop included; `empty_polls` polls N times with nothing outstanding through
 * call_poll_empty (every poll empty: NCCL's proxy spinning), so that a completed poll's cost can be
 * told from an empty one's. Prints per role: steps, posts, polls, empty polls. Exit 0 when every step completed.
 *   nccl_proxy_calls [STEPS] [STEP_BYTES] [EMPTY_POLLS]   (default 2000 524288 20000)
 * NCCL_PROXY_POLL_SLEEP_US=N sleeps N us after each empty poll of a wait (fewer empty polls under
 * callgrind, whose serialized threads make the NIC slow; the calls themselves are the same).
 * Run by benches/nccl_proxy_callgrind.sh (untraced, then under the preload in each mode).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define FIFO_SLOTS 32

struct fifo_entry {
	uint64_t addr;
	uint64_t size;
	uint32_t rkey;
	uint32_t nreqs;
	uint64_t idx; /* step + 1 once written */
	char pad[32]; /* 64 bytes, NCCL's struct ncclIbSendFifo */
};

struct info {
	uint32_t qpn;
	uint64_t data;
	uint32_t data_rkey;
	uint64_t fifo;
	uint32_t fifo_rkey;
};

static int sock;
static const char *who = "?";

static void die(const char *what)
{
	fprintf(stderr, "nccl_proxy_calls[%s]: %s\n", who, what);
	exit(1);
}

static void xchg(const void *mine, void *theirs, size_t n)
{
	if (write(sock, mine, n) != (ssize_t)n)
		die("socket write");
	for (size_t got = 0; got < n;) {
		ssize_t r = read(sock, (char *)theirs + got, n - got);
		if (r <= 0)
			die("socket read");
		got += (size_t)r;
	}
}

__attribute__((noinline)) int call_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr)
{
	struct ibv_send_wr *bad;
	return ibv_post_send(qp, wr, &bad);
}

__attribute__((noinline)) int call_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr)
{
	struct ibv_recv_wr *bad;
	return ibv_post_recv(qp, wr, &bad);
}

__attribute__((noinline)) int call_poll(struct ibv_cq *cq, struct ibv_wc *wc)
{
	return ibv_poll_cq(cq, 4, wc);
}

/* The same call, for the empty phase alone (callgrind tells the two functions apart). */
__attribute__((noinline)) int call_poll_empty(struct ibv_cq *cq, struct ibv_wc *wc)
{
	return ibv_poll_cq(cq, 4, wc);
}

static unsigned long polls, empty, posts;
static long poll_sleep_us; /* NCCL_PROXY_POLL_SLEEP_US: pause between empty polls (callgrind) */

/* Polls until `want` completions arrived (NCCL's ncclIbTest loop). */
static void wait_wc(struct ibv_cq *cq, int want)
{
	struct ibv_wc wc[4];
	while (want > 0) {
		int n = call_poll(cq, wc);
		polls++;
		if (n < 0)
			die("poll_cq");
		if (n == 0) {
			empty++;
			if (poll_sleep_us > 0)
				usleep((useconds_t)poll_sleep_us);
			continue;
		}
		for (int i = 0; i < n; i++)
			if (wc[i].status != IBV_WC_SUCCESS)
				die("completion with an error");
		want -= n;
	}
}

__attribute__((noinline)) void empty_polls(struct ibv_cq *cq, long n)
{
	struct ibv_wc wc[4];
	for (long i = 0; i < n; i++)
		if (call_poll_empty(cq, wc) != 0)
			die("a completion in the empty phase");
}

int main(int argc, char **argv)
{
	long steps = argc > 1 ? atol(argv[1]) : 2000;
	long step_bytes = argc > 2 ? atol(argv[2]) : 524288;
	long n_empty = argc > 3 ? atol(argv[3]) : 20000;
	const char *sl = getenv("NCCL_PROXY_POLL_SLEEP_US");
	poll_sleep_us = sl ? atol(sl) : 0;
	if (steps <= 0 || step_bytes <= 0 || n_empty < 0)
		die("usage: nccl_proxy_calls [STEPS>0] [STEP_BYTES>0] [EMPTY_POLLS>=0]");
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		die("socketpair");
	fflush(stdout);
	pid_t child = fork();
	if (child < 0)
		die("fork");
	int recv_role = child == 0; /* the child receives */
	who = recv_role ? "receiver" : "sender";
	sock = sv[recv_role];
	close(sv[1 - recv_role]);

	struct ibv_device **l = ibv_get_device_list(NULL);
	if (!l || !l[0])
		die("no RDMA device (run on the software NIC: scripts/with-testnic.sh)");
	struct ibv_context *ctx = ibv_open_device(l[0]);
	struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
	union ibv_gid gid;
	if (!pd || ibv_query_gid(ctx, 1, 0, &gid))
		die("open/PD/GID");
	char *data = aligned_alloc(4096, (size_t)step_bytes);
	struct fifo_entry *fifo = aligned_alloc(4096, sizeof(struct fifo_entry) * FIFO_SLOTS);
	if (!data || !fifo)
		die("alloc");
	memset(data, 0x5c, (size_t)step_bytes);
	memset(fifo, 0, sizeof(struct fifo_entry) * FIFO_SLOTS);
	int acc = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_mr *dmr = ibv_reg_mr(pd, data, (size_t)step_bytes, acc);
	struct ibv_mr *fmr = ibv_reg_mr(pd, fifo, sizeof(struct fifo_entry) * FIFO_SLOTS, acc);
	struct ibv_cq *cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
	if (!dmr || !fmr || !cq)
		die("MR/CQ");
	struct ibv_qp_init_attr ia = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 128, .max_recv_wr = 128, .max_send_sge = 1,
					      .max_recv_sge = 1, .max_inline_data = 64}};
	struct ibv_qp *qp = ibv_create_qp(pd, &ia);
	if (!qp)
		die("create QP");
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .port_num = 1, .qp_access_flags = acc};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("INIT");
	struct info me = {qp->qp_num, (uintptr_t)data, dmr->rkey, (uintptr_t)fifo, fmr->rkey}, peer;
	xchg(&me, &peer, sizeof me);
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096;
	a.dest_qp_num = peer.qpn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.port_num = 1;
	a.ah_attr.grh.dgid = gid;
	a.ah_attr.grh.hop_limit = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
					   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("RTR");
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
					   IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		die("RTS");
	char b = 0, c;
	xchg(&b, &c, 1);

	for (long s = 0; s < steps; s++) {
		if (recv_role) {
			struct ibv_sge rs = {(uintptr_t)data, (uint32_t)step_bytes, dmr->lkey};
			struct ibv_recv_wr rwr = {.wr_id = (uint64_t)s, .sg_list = &rs, .num_sge = 1};
			if (call_post_recv(qp, &rwr))
				die("post_recv");
			struct fifo_entry e = {(uintptr_t)data, (uint64_t)step_bytes, dmr->rkey, 1, (uint64_t)s + 1, {0}};
			struct ibv_sge fs = {(uintptr_t)&e, sizeof e, 0};
			struct ibv_send_wr fwr = {.wr_id = (uint64_t)s, .sg_list = &fs, .num_sge = 1,
						  .opcode = IBV_WR_RDMA_WRITE};
			fwr.send_flags = IBV_SEND_INLINE | (s % FIFO_SLOTS == 0 ? IBV_SEND_SIGNALED : 0);
			fwr.wr.rdma.remote_addr = peer.fifo + sizeof(struct fifo_entry) * (uint64_t)(s % FIFO_SLOTS);
			fwr.wr.rdma.rkey = peer.fifo_rkey;
			if (call_post_send(qp, &fwr))
				die("post_send (FIFO)");
			posts += 2;
			/* The receive's completion, and the signaled FIFO write's. */
			wait_wc(cq, 1 + (s % FIFO_SLOTS == 0));
		} else {
			volatile struct fifo_entry *e = &fifo[s % FIFO_SLOTS];
			while (e->idx != (uint64_t)s + 1)
				__atomic_thread_fence(__ATOMIC_ACQUIRE);
			struct ibv_sge ss = {(uintptr_t)data, (uint32_t)e->size, dmr->lkey};
			struct ibv_send_wr wr = {.wr_id = (uint64_t)s, .sg_list = &ss, .num_sge = 1,
						 .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
						 .send_flags = IBV_SEND_SIGNALED};
			wr.imm_data = htonl((uint32_t)e->size);
			wr.wr.rdma.remote_addr = e->addr;
			wr.wr.rdma.rkey = e->rkey;
			if (call_post_send(qp, &wr))
				die("post_send (data)");
			posts++;
			wait_wc(cq, 1);
		}
	}
	xchg(&b, &c, 1);
	empty_polls(cq, n_empty);
	printf("nccl_proxy_calls %s pid=%d steps=%ld step_bytes=%ld posts=%lu polls=%lu empty=%lu empty_phase=%ld\n",
	       who, (int)getpid(), steps, step_bytes, posts, polls, empty, n_empty);
	fflush(stdout);
	xchg(&b, &c, 1);
	if (!recv_role) {
		int st = 0;
		waitpid(child, &st, 0);
		return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
	}
	return 0;
}
