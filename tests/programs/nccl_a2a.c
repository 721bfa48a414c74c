/* An NCCL-shaped expert-parallel MoE exchange on the CPU (issue 38, the demo's Collectives): R
 * processes, one rank each, each on its own simulated host of the software NIC
 * (TESTNIC_HOST=rank+1), moving their data with real verbs and driving NCCL's profiler plugin
 * (`ncclProfiler_v5`, dlopened by path) with the calls NCCL 2.28.9's host path and proxy make for
 * the two calls of an MoE layer's step, as torch makes them:
 *   1. ncclAlltoAll of COUNT floats per rank (the token counts each rank routes to each other);
 *   2. the dispatch, a user's ncclGroupStart, one ncclSend to and one ncclRecv from every other
 *      rank, ncclGroupEnd, of TOKENS floats per pair, three times as many to the HOT rank.
 * No NCCL code is here: the shapes were read in NVIDIA/nccl v2.28.9 (src/enqueue.cc taskAppend and
 * p2pTaskAppend, src/group.cc, src/plugin/profiler.cc) and written anew.
 *
 * Connections. One RC QP per pair of ranks; a message from r to p is one signaled
 * RDMA_WRITE_WITH_IMM into p's receive slot for r (slot = the call's number mod 4: a rank cannot be
 * 4 calls ahead of another, each call needing every other rank's message), consuming the receive
 * p's receive step of that call posted (a writer ahead of its reader is told "receiver not ready"
 * by the NIC and tries again, rnr_retry 7: NCCL's credits do that job with its FIFO).
 *
 * Profiler calls, per call, each only when its type is in the activation mask init returned and
 * stops and states only on a non-null handle, as NCCL does. Host: startEvent GroupApi (depth 1 for
 * ncclAlltoAll, NCCL's own group; 2 for the user's group), recordEventState GroupStartApiStop,
 * per part a P2pApi ("Send"/"Recv", count) started and stopped (AlltoAll: a Send and a Recv to
 * every rank, itself included), GroupEndApiStart; at launch per part with another rank a P2p
 * task event (parent: its P2pApi), stopped after launch; stopEvent GroupApi. The rank's own part
 * of the AlltoAll is copied locally with no task event (NCCL gives none for it at times). Then,
 * as NCCL's proxy, per task a ProxyOp (channel 0, peer, 1 step, isSend) and its ProxyStep:
 * receive steps post one receive and record RecvWait, send steps post the write and record
 * SendWait; each step stops when its completion is polled, its ProxyOp after it. The host checks
 * every element of every message and prints "check ok: rank R of N, S steps" at the end.
 *
 * Usage: nccl_a2a -n RANKS -r RANK -d RENDEZVOUS_DIR [-i STEPS] [-c COUNT] [-k TOKENS] [-H HOT]
 *                 [-s SLEEP_MS] [-l LATE_RANK] [-L LATE_MS] [-p PLUGIN] [-t TIMEOUT_S]
 *   -s: every rank sleeps this long before each step (the layer's compute); -l/-L: that rank
 *       sleeps LATE_MS more (a straggler); -H: the hot rank (default 2 when there are 3 ranks or
 *       more, else none); -p: the plugin's path (default $NCCL_PROFILER_PLUGIN; none: no profiler).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* ---- NCCL's profiler interface v5 (profiler_v5.h, nccl_profiler.h; fields and order unchanged) ---- */
typedef int ncclResult_t;
typedef struct {
	uint64_t type;
	void *parentObj;
	int rank;
	union {
		struct {
			bool graphCaptured;
			int groupDepth;
		} groupApi;
		struct {
			const char *func;
			size_t count;
			const char *datatype;
			int root;
			void *stream;
			bool graphCaptured;
		} collApi;
		struct {
			const char *func;
			size_t count;
			const char *datatype;
			void *stream;
			bool graphCaptured;
		} p2pApi;
		struct {
			const char *func;
			void *buff;
			const char *datatype;
			size_t count;
			int peer;
			uint8_t nChannels;
			void *parentGroup;
		} p2p;
		struct {
			pid_t pid;
			uint8_t channelId;
			int peer;
			int nSteps;
			int chunkSize;
			int isSend;
		} proxyOp;
		struct {
			int step;
		} proxyStep;
		uint64_t pad[12];
	};
} descr_t;
typedef union {
	struct {
		size_t transSize;
	} proxyStep;
	uint64_t pad;
} state_args_t;
typedef struct {
	const char *name;
	ncclResult_t (*init)(void **context, uint64_t commId, int *eActivationMask, const char *commName,
			     int nNodes, int nranks, int rank, void *logfn);
	ncclResult_t (*startEvent)(void *context, void **eHandle, descr_t *eDescr);
	ncclResult_t (*stopEvent)(void *eHandle);
	ncclResult_t (*recordEventState)(void *eHandle, int eState, state_args_t *eStateArgs);
	ncclResult_t (*finalize)(void *context);
} profiler_v5_t;

enum {
	ProfileP2p = 1 << 2,
	ProfileProxyOp = 1 << 3,
	ProfileProxyStep = 1 << 4,
	ProfileGroupApi = 1 << 8,
	ProfileP2pApi = 1 << 10,
};
enum { StepSendWait = 9, StepRecvWait = 10, GroupStartApiStop = 23, GroupEndApiStart = 24 };

#define SLOTS 4
#define MAXR 16

static int R, RANK, STEPS = 10, HOT = -1, SLEEP_MS, LATE = -1, LATE_MS, TIMEOUT_S = 60;
static size_t COUNT = 256, TOKENS = 1024;
static const char *DIR_, *PLUGIN;
static profiler_v5_t *prof;
static void *pctx;
static int mask;

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static union ibv_gid gid;
static struct ibv_qp *qp[MAXR];
static float *sbuf, *rbuf;
static struct ibv_mr *smr, *rmr;
static size_t MSG; /* largest message, bytes */
static uint64_t rem_addr[MAXR];
static uint32_t rem_rkey[MAXR];
static long recvd[MAXR]; /* messages from each peer so far */
static long sends_done;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "nccl_a2a: rank %d: ", RANK);
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *p_start(int type, descr_t *d)
{
	void *h = NULL;
	if (prof && (mask & type)) {
		d->type = (uint64_t)type;
		d->rank = RANK;
		prof->startEvent(pctx, &h, d);
	}
	return h;
}
static void p_stop(void *h)
{
	if (prof && h)
		prof->stopEvent(h);
}
static void p_state(void *h, int state, size_t trans)
{
	if (prof && h) {
		state_args_t a;
		memset(&a, 0, sizeof a);
		a.proxyStep.transSize = trans;
		prof->recordEventState(h, state, &a);
	}
}

/* Floats of the message from src to dst in call c (0: the AlltoAll, 1: the dispatch). */
static size_t msg_count(int src, int dst, int c)
{
	(void)src;
	if (c == 0)
		return COUNT;
	return dst == HOT ? 3 * TOKENS : TOKENS;
}
static float value(int src, int dst, long call, size_t e)
{
	return (float)(((uint64_t)src * 7919u + (uint64_t)dst * 104729u + (uint64_t)call * 31u + e) % 1000003u);
}
static size_t slot_off(int peer, long call)
{
	return ((size_t)peer * SLOTS + (size_t)(call % SLOTS)) * MSG;
}

static void post_recv(int p)
{
	struct ibv_recv_wr wr, *bad;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = (uint64_t)p << 1;
	if (ibv_post_recv(qp[p], &wr, &bad))
		die("ibv_post_recv to rank %d failed", p);
}

static void post_write(int p, long call, size_t bytes)
{
	struct ibv_sge sge = {.addr = (uintptr_t)sbuf + slot_off(p, call), .length = (uint32_t)bytes, .lkey = smr->lkey};
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = ((uint64_t)p << 1) | 1;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = htonl((uint32_t)call);
	wr.wr.rdma.remote_addr = rem_addr[p] + slot_off(RANK, call);
	wr.wr.rdma.rkey = rem_rkey[p];
	if (ibv_post_send(qp[p], &wr, &bad))
		die("ibv_post_send to rank %d failed", p);
}

/* Polls until every other rank's message of `call` arrived and `sends` sends completed. */
static void progress(long call, long sends)
{
	double until = now_s() + TIMEOUT_S;
	for (;;) {
		bool all = sends_done >= sends;
		for (int p = 0; p < R; p++)
			if (p != RANK && recvd[p] <= call)
				all = false;
		if (all)
			return;
		struct ibv_wc wc[16];
		int n = ibv_poll_cq(cq, 16, wc);
		if (n < 0)
			die("ibv_poll_cq failed");
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				die("completion error %d (%s) on wr %llx", wc[i].status, ibv_wc_status_str(wc[i].status),
				    (unsigned long long)wc[i].wr_id);
			if (wc[i].wr_id & 1)
				sends_done++;
			else
				recvd[wc[i].wr_id >> 1]++;
		}
		if (n == 0 && now_s() > until)
			die("call %ld: no message from every rank after %d s", call, TIMEOUT_S);
	}
}

/* One call: c 0 the AlltoAll (NCCL's own group, depth 1), 1 the dispatch (the user's, depth 2). */
static void call_once(long call, int c)
{
	descr_t d;
	void *api[MAXR][2], *task[MAXR][2];
	memset(api, 0, sizeof api);
	memset(task, 0, sizeof task);
	memset(&d, 0, sizeof d);
	d.groupApi.groupDepth = c == 0 ? 1 : 2;
	void *gapi = p_start(ProfileGroupApi, &d);
	p_state(gapi, GroupStartApiStop, 0);
	for (int p = 0; p < R; p++) {
		if (c == 1 && p == RANK)
			continue;
		for (int s = 0; s < 2; s++) {
			memset(&d, 0, sizeof d);
			d.parentObj = gapi;
			d.p2pApi.func = s == 0 ? "Send" : "Recv";
			d.p2pApi.count = s == 0 ? msg_count(RANK, p, c) : msg_count(p, RANK, c);
			d.p2pApi.datatype = "ncclFloat32";
			api[p][s] = p_start(ProfileP2pApi, &d);
			p_stop(api[p][s]);
		}
	}
	p_state(gapi, GroupEndApiStart, 0);
	/* Launch: the task events of the parts with other ranks, stopped after the launch. */
	for (int p = 0; p < R; p++) {
		if (p == RANK)
			continue;
		for (int s = 0; s < 2; s++) {
			memset(&d, 0, sizeof d);
			d.parentObj = api[p][s];
			d.p2p.func = s == 0 ? "Send" : "Recv";
			d.p2p.count = s == 0 ? msg_count(RANK, p, c) : msg_count(p, RANK, c);
			d.p2p.datatype = "ncclFloat32";
			d.p2p.peer = p;
			d.p2p.nChannels = 1;
			task[p][s] = p_start(ProfileP2p, &d);
		}
	}
	for (int p = 0; p < R; p++)
		for (int s = 0; s < 2; s++)
			p_stop(task[p][s]);
	p_stop(gapi);
	/* The rank's own part of the AlltoAll: a local copy. */
	if (c == 0) {
		float *src = sbuf + slot_off(RANK, call) / sizeof(float);
		float *dst = rbuf + slot_off(RANK, call) / sizeof(float);
		for (size_t e = 0; e < COUNT; e++)
			src[e] = value(RANK, RANK, call, e);
		memcpy(dst, src, COUNT * sizeof(float));
	}
	/* The proxy: receive steps, then send steps, one each per other rank. */
	void *op[MAXR][2], *step[MAXR][2];
	memset(op, 0, sizeof op);
	memset(step, 0, sizeof step);
	for (int s = 1; s >= 0; s--) {
		for (int p = 0; p < R; p++) {
			if (p == RANK)
				continue;
			size_t bytes = (s == 0 ? msg_count(RANK, p, c) : msg_count(p, RANK, c)) * sizeof(float);
			memset(&d, 0, sizeof d);
			d.parentObj = task[p][s];
			d.proxyOp.pid = getpid();
			d.proxyOp.peer = p;
			d.proxyOp.nSteps = 1;
			d.proxyOp.chunkSize = (int)bytes;
			d.proxyOp.isSend = s == 0;
			op[p][s] = task[p][s] ? p_start(ProfileProxyOp, &d) : NULL;
			memset(&d, 0, sizeof d);
			d.parentObj = op[p][s];
			step[p][s] = op[p][s] ? p_start(ProfileProxyStep, &d) : NULL;
			if (s == 1) {
				post_recv(p);
				p_state(step[p][s], StepRecvWait, bytes);
			} else {
				float *b = sbuf + slot_off(p, call) / sizeof(float);
				for (size_t e = 0; e < bytes / sizeof(float); e++)
					b[e] = value(RANK, p, call, e);
				post_write(p, call, bytes);
				p_state(step[p][s], StepSendWait, bytes);
			}
		}
	}
	static long sends;
	sends += R - 1;
	progress(call, sends);
	for (int p = 0; p < R; p++) {
		for (int s = 1; s >= 0; s--) {
			p_stop(step[p][s]);
			p_stop(op[p][s]);
		}
	}
	for (int p = 0; p < R; p++) {
		size_t n = msg_count(p, RANK, c);
		if (c == 1 && p == RANK)
			continue;
		const float *b = rbuf + slot_off(p, call) / sizeof(float);
		for (size_t e = 0; e < n; e++)
			if (b[e] != value(p, RANK, call, e))
				die("call %ld from rank %d: element %zu is %g, want %g", call, p, e, (double)b[e],
				    (double)value(p, RANK, call, e));
	}
}

/* ---- Setup ---- */
static void *alloc_reg(size_t len, int access, struct ibv_mr **mr)
{
	void *p = NULL;
	if (posix_memalign(&p, 4096, len))
		die("out of memory");
	memset(p, 0, len);
	*mr = ibv_reg_mr(pd, p, len, access);
	if (!*mr)
		die("ibv_reg_mr of %zu bytes failed", len);
	return p;
}

static struct ibv_qp *make_qp(void)
{
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = cq;
	a.recv_cq = cq;
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = 64;
	a.cap.max_recv_wr = 64;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	struct ibv_qp *q = ibv_create_qp(pd, &a);
	if (!q)
		die("ibv_create_qp failed");
	struct ibv_qp_attr m;
	memset(&m, 0, sizeof m);
	m.qp_state = IBV_QPS_INIT;
	m.port_num = 1;
	m.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
	if (ibv_modify_qp(q, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify to INIT failed");
	return q;
}

static void connect_qp(struct ibv_qp *q, uint32_t dest, const union ibv_gid *dgid)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096;
	a.dest_qp_num = dest;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *dgid;
	a.ah_attr.grh.hop_limit = 255;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("modify to RTR failed");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 20;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				     IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify to RTS failed");
}

static void write_file(const char *name, const char *text)
{
	char tmp[4096], dst[4096];
	snprintf(tmp, sizeof tmp, "%s/.%s.%d.tmp", DIR_, name, getpid());
	snprintf(dst, sizeof dst, "%s/%s", DIR_, name);
	FILE *f = fopen(tmp, "w");
	if (!f)
		die("cannot write %s: %s (is -d a writable directory?)", tmp, strerror(errno));
	fputs(text, f);
	if (fclose(f) || rename(tmp, dst))
		die("cannot write %s: %s", dst, strerror(errno));
}

static char *wait_file(const char *name, const char *what)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/%s", DIR_, name);
	double until = now_s() + TIMEOUT_S;
	for (;;) {
		FILE *f = fopen(path, "r");
		if (f) {
			char *buf = calloc(1, 1 << 16);
			size_t n = buf ? fread(buf, 1, (1 << 16) - 1, f) : 0;
			fclose(f);
			if (!buf)
				die("out of memory");
			buf[n] = 0;
			return buf;
		}
		if (now_s() > until)
			die("no %s (%s) after %d s: is every rank started with the same -n and -d?", what, path,
			    TIMEOUT_S);
		usleep(10000);
	}
}

static uint64_t fnv(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

static void usage(void)
{
	fprintf(stderr, "usage: nccl_a2a -n RANKS -r RANK -d RENDEZVOUS_DIR [-i STEPS] [-c COUNT] [-k TOKENS] "
			"[-H HOT] [-s SLEEP_MS] [-l LATE_RANK] [-L LATE_MS] [-p PLUGIN] [-t TIMEOUT_S]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int opt;
	RANK = -1;
	while ((opt = getopt(argc, argv, "n:r:d:i:c:k:H:s:l:L:p:t:")) != -1) {
		switch (opt) {
		case 'n': R = atoi(optarg); break;
		case 'r': RANK = atoi(optarg); break;
		case 'd': DIR_ = optarg; break;
		case 'i': STEPS = atoi(optarg); break;
		case 'c': COUNT = strtoull(optarg, NULL, 0); break;
		case 'k': TOKENS = strtoull(optarg, NULL, 0); break;
		case 'H': HOT = atoi(optarg); break;
		case 's': SLEEP_MS = atoi(optarg); break;
		case 'l': LATE = atoi(optarg); break;
		case 'L': LATE_MS = atoi(optarg); break;
		case 'p': PLUGIN = optarg; break;
		case 't': TIMEOUT_S = atoi(optarg); break;
		default: usage();
		}
	}
	if (R < 2 || R > MAXR || RANK < 0 || RANK >= R || !DIR_ || STEPS < 1 || COUNT < 1 || TOKENS < 1 ||
	    SLEEP_MS < 0 || LATE_MS < 0 || TIMEOUT_S < 1)
		usage();
	if (HOT < 0 && R >= 3)
		HOT = 2;
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!PLUGIN)
		PLUGIN = getenv("NCCL_PROFILER_PLUGIN");
	if (PLUGIN && *PLUGIN && strcmp(PLUGIN, "none")) {
		void *lib = dlopen(PLUGIN, RTLD_NOW | RTLD_LOCAL);
		if (!lib)
			die("dlopen %s: %s", PLUGIN, dlerror());
		prof = dlsym(lib, "ncclProfiler_v5");
		if (!prof)
			die("%s has no ncclProfiler_v5", PLUGIN);
	}
	MSG = (COUNT > 3 * TOKENS ? COUNT : 3 * TOKENS) * sizeof(float);

	struct ibv_device **devs = ibv_get_device_list(NULL);
	if (!devs || !devs[0])
		die("no RDMA device (run through scripts/with-testnic.sh)");
	ctx = ibv_open_device(devs[0]);
	if (!ctx || ibv_query_gid(ctx, 1, 0, &gid))
		die("ibv_open_device / ibv_query_gid failed");
	pd = ibv_alloc_pd(ctx);
	cq = pd ? ibv_create_cq(ctx, 1024, NULL, NULL, 0) : NULL;
	if (!cq)
		die("ibv_alloc_pd / ibv_create_cq failed");
	size_t len = (size_t)R * SLOTS * MSG;
	sbuf = alloc_reg(len, IBV_ACCESS_LOCAL_WRITE, &smr);
	rbuf = alloc_reg(len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &rmr);

	char info[8192];
	int off = snprintf(info, sizeof info, "rank %d\nbuf %llx %x\ngid ", RANK,
			   (unsigned long long)(uintptr_t)rbuf, rmr->rkey);
	for (int i = 0; i < 16; i++)
		off += snprintf(info + off, sizeof info - (size_t)off, "%02x", gid.raw[i]);
	off += snprintf(info + off, sizeof info - (size_t)off, "\n");
	for (int p = 0; p < R; p++) {
		if (p == RANK)
			continue;
		qp[p] = make_qp();
		off += snprintf(info + off, sizeof info - (size_t)off, "qp %d %x\n", p, qp[p]->qp_num);
	}
	char name[64];
	snprintf(name, sizeof name, "rank-%d", RANK);
	write_file(name, info);
	for (int p = 0; p < R; p++) {
		if (p == RANK)
			continue;
		snprintf(name, sizeof name, "rank-%d", p);
		char *text = wait_file(name, "rendezvous file of that rank");
		unsigned long long addr = 0;
		unsigned rkey = 0, qpn = 0;
		union ibv_gid g;
		int have = 0;
		char *save = NULL;
		for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
			char hex[64];
			int to;
			unsigned q;
			if (sscanf(l, "buf %llx %x", &addr, &rkey) == 2)
				have |= 1;
			else if (sscanf(l, "gid %32s", hex) == 1 && strlen(hex) == 32) {
				for (int i = 0; i < 16; i++) {
					unsigned b;
					sscanf(hex + 2 * i, "%2x", &b);
					g.raw[i] = (uint8_t)b;
				}
				have |= 2;
			} else if (sscanf(l, "qp %d %x", &to, &q) == 2 && to == RANK) {
				qpn = q;
				have |= 4;
			}
		}
		free(text);
		if (have != 7)
			die("%s/rank-%d is incomplete: every rank needs the same -n", DIR_, p);
		rem_addr[p] = addr;
		rem_rkey[p] = rkey;
		connect_qp(qp[p], qpn, &g);
	}
	snprintf(name, sizeof name, "ready-%d", RANK);
	write_file(name, "ready\n");
	for (int q = 0; q < R; q++) {
		snprintf(name, sizeof name, "ready-%d", q);
		free(wait_file(name, "ready file of a rank"));
	}
	if (prof && prof->init(&pctx, fnv(DIR_), &mask, "moe", R, R, RANK, NULL))
		die("the profiler's init failed");
	if (prof)
		printf("profiler %s mask %d\n", prof->name, mask);

	for (int s = 0; s < STEPS; s++) {
		int ms = SLEEP_MS + (RANK == LATE ? LATE_MS : 0);
		if (ms) {
			struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
			nanosleep(&ts, NULL);
		}
		call_once(2L * s, 0);
		call_once(2L * s + 1, 1);
		printf("step %d ok\n", s);
	}
	/* Every rank is done before anyone tears its QPs down. */
	snprintf(name, sizeof name, "done-%d", RANK);
	write_file(name, "done\n");
	for (int q = 0; q < R; q++) {
		snprintf(name, sizeof name, "done-%d", q);
		free(wait_file(name, "done file of a rank"));
	}
	if (prof)
		prof->finalize(pctx);
	printf("check ok: rank %d of %d, %d steps\n", RANK, R, STEPS);
	return 0;
}
