/* An NCCL-shaped ring all-reduce on the CPU (issue 36, item 4 and item 5's last test; for
 * tests/nccl_ring.rs): R processes, one rank each, every one on its own simulated host of the
 * software NIC (TESTNIC_HOST=rank+1), moving their data with real verbs the way NCCL 2.28's IB
 * transport does, and driving NCCL's profiler plugin (`ncclProfiler_v5`, dlopened by path) with
 * the calls NCCL's host path and proxy thread make, in their order. No NCCL code is here: the
 * shapes were read in NVIDIA/nccl v2.28.9 (src/enqueue.cc, src/plugin/profiler.cc, src/proxy.cc,
 * src/transport/net.cc, src/transport/net_ib.cc) and written anew.
 *
 * Connections. Per channel c (C of them) rank r has one RC QP "send c" connected to rank r+1's
 * "recv c" QP (mod R). Data for channel c from r to r+1 travels on r's send-c QP; the receiver's
 * credits (64-byte FIFO entries, NCCL's ncclIbSendFifo: where to write, rkey, size, index) travel
 * back on the same QP pair, posted by r+1 on its recv-c QP:
 *   receiver (irecv): ibv_post_recv (no scatter list: the data arrives by RDMA write), then an
 *     RDMA_WRITE of its 64-byte FIFO entry into the sender's FIFO slot (fifoTail % 256), signaled
 *     only for slot 0 as NCCL does (so the queue drains);
 *   sender (isend): when its FIFO slot holds index fifoHead+1 (the credit), one signaled
 *     RDMA_WRITE_WITH_IMM of the step's data into the receiver's buffer, the size as immediate;
 *   test: ibv_poll_cq of the connection's CQ; a receive is done when its RECV completion (and, for
 *     a signaled FIFO write, that write's completion) came, a send when its write completed.
 *
 * Algorithm. SIZE bytes of float32 per iteration; channel c owns SIZE/C bytes, cut in R chunks
 * of SIZE/(C*R) bytes. Per channel 2(R-1) steps each way (NCCL's ring: reduce-scatter, then
 * all-gather): send step j carries chunk (r-j) mod R, receive step j chunk (r-j-1) mod R; the
 * "GPU" (on the proxy thread, here) reduces receive j with its own chunk into send j+1 for
 * j < R-1, keeps the final chunk (r+1) after receive R-2, and forwards and keeps the rest. The
 * host checks every element after each call (integers in float32: exact) and prints
 * "check ok" at the end; a wrong byte prints its place and exits 1.
 *
 * Profiler calls (NCCL 2.28.9 order). Host thread, per ncclAllReduce: startEvent GroupApi,
 * recordEventState(GroupStartApiStop), startEvent CollApi, stopEvent(CollApi), then at group
 * end recordEventState(GroupEndApiStart), startEvent Group, startEvent Coll (parent = the
 * CollApi handle, seqNumber, "AllReduce", count, "ncclFloat32", nChannels, "RING", "SIMPLE"),
 * the proxy operations handed to the proxy thread (ncclProxyStart), stopEvent(Coll),
 * stopEvent(Group), stopEvent(GroupApi); the host call returns and the host waits for the
 * "kernel" (cudaStreamSynchronize). Each stop/state is only called on a non-null handle, as NCCL
 * does. Proxy thread (its events only when the mask init gave asks for them, as NCCL checks:
 * ProxyOp for ProxyOp, ProxyStep or NetPlugin; ProxyStep for ProxyStep or NetPlugin), per
 * channel and side, when it takes the operation (ProxyAppend, maybe
 * after the Coll stop, as in NCCL): startEvent ProxyOp (parent = the Coll handle, pid, channelId,
 * peer, nSteps = 2(R-1), chunkSize, isSend); recordEventState(ProxyOpInProgress) when it starts
 * progressing (here: once the connection's previous operation ended); per step, send side: startEvent ProxyStep + SendGPUWait
 * when the buffer goes to the "GPU"; SendPeerWait on every poll for the receiver's credit once the
 * data is there; SendWait right after ibv_post_send of the data; stopEvent when its completion is
 * polled. Receive side: startEvent ProxyStep, irecv (post_recv + FIFO write), RecvWait;
 * RecvFlushWait when the receive completed (NCCL records it always; no flush is posted: host
 * memory, no GPU Direct); RecvGPUWait when the data is handed to the "GPU"; stopEvent once the
 * "GPU" consumed it. stopEvent(ProxyOp) when all its steps stopped. finalize at the end.
 *
 * Usage: nccl_ring -n RANKS -r RANK -d RENDEZVOUS_DIR [-c CHANNELS] [-b SIZE] [-i ITERS]
 *                  [-s SLEEP_MS] [-p PLUGIN] [-t TIMEOUT_S]
 *   -p: the profiler plugin's path (default: $NCCL_PROFILER_PLUGIN; none: no profiler).
 *   -s: the host sleeps this long after each call (keeps the program running for a test).
 *   -t: how long to wait for the peers' files in the rendezvous directory (default 60 s).
 *   -e: after the last call, N polls of a CQ no QP uses (idle_polls: prices an empty poll).
 * Prints per channel "rank R ch C send qp 0xQ -> rank N qp 0xQ recv qp 0xQ <- rank P qp 0xQ",
 * "profiler NAME mask M" when a plugin is loaded, "iter I ok" after each call, "proxy polls P
 * completed Q steps S" (the proxy thread's ibv_poll_cq calls, those that returned completions,
 * its proxy steps) once the proxy thread ended, and at the end "check ok: rank R of N, C channels, I iterations of SIZE bytes". Ranks meet through files in
 * RENDEZVOUS_DIR (rank-R: GID and per channel QPNs, FIFO and buffer addresses and rkeys; ready-R
 * once its QPs are connected; done-R before it tears them down), each written then renamed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* ---- NCCL's profiler interface v5, retyped from src/include/plugin/profiler/profiler_v5.h and
 * nccl_profiler.h (fields and order unchanged). ---- */
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
			void *stream;
		} kernelLaunch;
		struct {
			uint64_t seqNumber;
			const char *func;
			void const *sendBuff;
			void *recvBuff;
			size_t count;
			int root;
			const char *datatype;
			uint8_t nChannels;
			uint8_t nWarps;
			const char *algo;
			const char *proto;
			void *parentGroup;
		} coll;
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
		struct {
			uint8_t channelId;
			uint64_t pTimer;
		} kernelCh;
		struct {
			int64_t id;
			void *data;
		} netPlugin;
	};
} descr_t;
typedef union {
	struct {
		size_t transSize;
	} proxyStep;
	struct {
		int appendedProxyOps;
	} proxyCtrl;
	struct {
		void *data;
	} netPlugin;
	struct {
		uint64_t pTimer;
	} kernelCh;
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
	ProfileGroup = 1 << 0,
	ProfileColl = 1 << 1,
	ProfileProxyOp = 1 << 3,
	ProfileProxyStep = 1 << 4,
	ProfileNetPlugin = 1 << 7,
	ProfileGroupApi = 1 << 8,
	ProfileCollApi = 1 << 9,
};
enum {
	StepSendGPUWait = 8,
	StepSendWait = 9,
	StepRecvWait = 10,
	StepRecvFlushWait = 11,
	StepRecvGPUWait = 12,
	OpInProgress = 19,
	StepSendPeerWait = 20,
	GroupStartApiStop = 23,
	GroupEndApiStart = 24,
};

/* ---- Sizes as NCCL's (device.h NCCL_STEPS, net_ib.cc MAX_REQUESTS and its FIFO entry). ---- */
#define NSTEPS 8
#define FIFO_SLOTS 256
struct fifo_elem { /* ncclIbSendFifo: 64 bytes */
	uint64_t addr;
	uint64_t size;
	uint32_t rkeys[4];
	uint32_t nreqs;
	uint32_t tag;
	uint64_t idx;
	char padding[16];
};
_Static_assert(sizeof(struct fifo_elem) == 64, "FIFO entry is 64 bytes");

static int R, RANK, C = 2, ITERS = 10, SLEEP_MS, TIMEOUT_S = 60, IDLE_POLLS;
static size_t SIZE = 1 << 16;
static const char *DIR_, *PLUGIN;
static size_t CHUNK; /* bytes per step */
static int NST;      /* steps per operation: 2(R-1) */

static profiler_v5_t *prof;
static void *pctx;
static int pmask; /* the activation mask the plugin's init gave */

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "nccl_ring: rank %d: ", RANK);
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

/* Profiler calls, each only when there is a plugin (and, for stops and states, a handle). */
static void *p_start(descr_t *d)
{
	void *h = NULL;
	if (prof)
		prof->startEvent(pctx, &h, d);
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

/* ---- Verbs objects ---- */
struct req {
	int used, events, size;
};

struct send_conn {
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	struct fifo_elem *fifo; /* written by the receiver */
	struct ibv_mr *fifo_mr;
	char *buf; /* NSTEPS staging slots the "GPU" fills */
	struct ibv_mr *buf_mr;
	uint64_t fifo_head, step;
	struct req reqs[FIFO_SLOTS];
};

struct recv_conn {
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	char *buf; /* NSTEPS receive slots the sender writes */
	struct ibv_mr *buf_mr;
	struct fifo_elem *elems; /* local copies of the FIFO entries we write */
	struct ibv_mr *elems_mr;
	uint64_t rem_fifo;
	uint32_t rem_fifo_rkey;
	uint64_t fifo_tail, step;
	struct req reqs[FIFO_SLOTS];
};

/* One proxy operation (one "sub" of NCCL's ncclProxyArgs): appended (its ProxyOp event
 * started) when the proxy thread takes the call, active once it is its connection's oldest. */
struct op {
	int active, seq, is_send, nsteps;
	uint64_t base;
	int posted, transmitted, received, done;
	int produced; /* send: steps the "GPU" wrote */
	int consumed; /* receive: steps the "GPU" read */
	int req[NSTEPS]; /* request index per step slot */
	void *handle, *coll, *steps[NSTEPS];
	size_t trans_size;
};

struct channel {
	struct send_conn s;
	struct recv_conn r;
	/* Operations appended per side, in call order: [cur, taken) of a ring of PENDING. */
	struct op sops[4], rops[4]; /* PENDING */
	int s_cur, s_taken, r_cur, r_taken;
	/* "GPU" state of this channel: the call it works on, the steps it produced and consumed */
	int g_seq, g_prod, g_cons;
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;
static struct channel *ch;
static float *sendbuf, *recvbuf;

/* Host → proxy: calls posted (the Coll handle of each) and how far the "kernel" got. */
#define PENDING 4 /* calls between the host and the proxy: at most 2 per side at a time */
static void *pending_coll[PENDING];
static int posted_calls;   /* written by the host (release) */
static int *kernel_done;   /* per channel: calls whose GPU work finished (proxy writes) */
static int quit;           /* the host made its last call and saw it finish */

static void post_recv_wr(struct recv_conn *rc, uint64_t wr_id)
{
	struct ibv_recv_wr w, *bad;
	memset(&w, 0, sizeof w);
	w.wr_id = wr_id;
	w.sg_list = NULL;
	w.num_sge = 0;
	if (ibv_post_recv(rc->qp, &w, &bad))
		die("ibv_post_recv failed");
}

/* ncclIbIrecv: a receive for step slot `slot`, then the FIFO entry telling the sender where. */
static int irecv(struct recv_conn *rc, int slot, size_t size)
{
	uint64_t tail = rc->fifo_tail;
	int fslot = (int)(tail % FIFO_SLOTS);
	struct req *q = &rc->reqs[fslot];
	if (q->used)
		die("receive request %d still in use", fslot);
	q->used = 1;
	q->events = 1;
	q->size = 0;
	post_recv_wr(rc, (uint64_t)fslot);
	struct fifo_elem *e = &rc->elems[fslot];
	memset(e, 0, sizeof *e);
	e->addr = (uint64_t)(uintptr_t)(rc->buf + (size_t)slot * CHUNK);
	e->size = size;
	e->rkeys[0] = rc->buf_mr->rkey;
	e->nreqs = 1;
	e->tag = (uint32_t)((RANK + R - 1) % R);
	e->idx = tail + 1;
	struct ibv_sge sge = {(uintptr_t)e, sizeof *e, rc->elems_mr->lkey};
	struct ibv_send_wr w, *bad;
	memset(&w, 0, sizeof w);
	w.sg_list = &sge;
	w.num_sge = 1;
	w.opcode = IBV_WR_RDMA_WRITE;
	w.wr.rdma.remote_addr = rc->rem_fifo + (uint64_t)fslot * sizeof *e;
	w.wr.rdma.rkey = rc->rem_fifo_rkey;
	if (fslot == 0) { /* NCCL: slot == devIndex is signaled, so the send queue drains */
		w.send_flags = IBV_SEND_SIGNALED;
		w.wr_id = (uint64_t)fslot;
		q->events++;
	}
	if (ibv_post_send(rc->qp, &w, &bad))
		die("ibv_post_send (FIFO) failed");
	rc->fifo_tail++;
	return fslot;
}

/* ncclIbIsend: -1 while the receiver's credit for the next FIFO slot is not there. */
static int isend(struct send_conn *sc, int slot, size_t size)
{
	int fslot = (int)(sc->fifo_head % FIFO_SLOTS);
	volatile struct fifo_elem *e = &sc->fifo[fslot];
	if (e->idx != sc->fifo_head + 1)
		return -1;
	__sync_synchronize();
	if (e->size < size)
		size = e->size;
	if (e->addr == 0 || e->rkeys[0] == 0)
		die("FIFO slot %d: bad receive info", fslot);
	struct req *q = &sc->reqs[fslot];
	if (q->used)
		die("send request %d still in use", fslot);
	q->used = 1;
	q->events = 1;
	q->size = (int)size;
	struct ibv_sge sge = {(uintptr_t)(sc->buf + (size_t)slot * CHUNK), (uint32_t)size, sc->buf_mr->lkey};
	struct ibv_send_wr w, *bad;
	memset(&w, 0, sizeof w);
	w.wr_id = (uint64_t)fslot;
	w.sg_list = &sge;
	w.num_sge = 1;
	w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
	w.imm_data = htonl((uint32_t)size);
	w.send_flags = IBV_SEND_SIGNALED;
	w.wr.rdma.remote_addr = e->addr;
	w.wr.rdma.rkey = e->rkeys[0];
	if (ibv_post_send(sc->qp, &w, &bad))
		die("ibv_post_send (data) failed");
	memset((void *)e, 0, sizeof *e);
	sc->fifo_head++;
	return fslot;
}

/* The proxy thread's polls, and those that returned completions (printed at the end). */
static long polls, polls_done;

/* ncclIbTest: polls the connection's CQ; 1 when request `q` is done. */
static int test(struct ibv_cq *cq, struct req *reqs, int qi, int *size)
{
	struct req *q = &reqs[qi];
	if (q->events > 0) {
		struct ibv_wc wc[16];
		int n = ibv_poll_cq(cq, 16, wc);
		if (n < 0)
			die("ibv_poll_cq failed");
		polls++;
		polls_done += n > 0;
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				die("completion of wr_id %llu on QP 0x%x: %s (%d), vendor error 0x%x",
				    (unsigned long long)wc[i].wr_id, wc[i].qp_num, ibv_wc_status_str(wc[i].status),
				    wc[i].status, wc[i].vendor_err);
			struct req *d = &reqs[wc[i].wr_id % FIFO_SLOTS];
			if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM)
				d->size = (int)ntohl(wc[i].imm_data);
			d->events--;
		}
	}
	if (q->events > 0)
		return 0;
	if (size)
		*size = q->size;
	q->used = 0;
	return 1;
}

/* ---- The proxy thread: NCCL's sendProxyProgress / recvProxyProgress for one sub each. ---- */
/* ProxyAppend (ncclProxyOpToArgs): the operation's event starts when the proxy takes it. */
static void op_append(struct op *o, int is_send, int seq, void *coll, int c)
{
	memset(o, 0, sizeof *o);
	o->is_send = is_send;
	o->seq = seq;
	o->coll = coll;
	o->nsteps = NST;
	descr_t d;
	memset(&d, 0, sizeof d);
	d.type = ProfileProxyOp;
	d.parentObj = coll;
	d.rank = RANK;
	d.proxyOp.pid = getpid();
	d.proxyOp.channelId = (uint8_t)c;
	d.proxyOp.peer = is_send ? (RANK + 1) % R : (RANK + R - 1) % R;
	d.proxyOp.nSteps = o->nsteps;
	d.proxyOp.chunkSize = (int)CHUNK;
	d.proxyOp.isSend = is_send;
	/* NCCL (profiler.cc ncclProfilerStartProxyOpEvent): only when the mask asks for proxy
	 * operations, steps or network plugin events; a null handle otherwise. */
	o->handle = pmask & (ProfileProxyOp | ProfileProxyStep | ProfileNetPlugin) ? p_start(&d) : NULL;
}

/* The first progress call (ncclProxyOpReady → Progress): its steps follow the connection's. */
static void op_activate(struct op *o, uint64_t *conn_step)
{
	o->active = 1;
	o->base = *conn_step; /* sliceSteps 1 here: no rounding */
	*conn_step = o->base + (uint64_t)o->nsteps;
	p_state(o->handle, OpInProgress, 0);
}

/* The oldest operation of a side, or NULL. */
static struct op *current(struct op *ring, int cur, int taken)
{
	return cur < taken ? &ring[cur % PENDING] : NULL;
}

static void *step_start(struct op *o, int step)
{
	descr_t d;
	memset(&d, 0, sizeof d);
	d.type = ProfileProxyStep;
	d.parentObj = o->handle;
	d.rank = RANK;
	d.proxyStep.step = step;
	/* NCCL: only when the mask asks for steps or network plugin events. */
	void *h = pmask & (ProfileProxyStep | ProfileNetPlugin) ? p_start(&d) : NULL;
	o->steps[step % NSTEPS] = h;
	return h;
}

static void step_state(struct op *o, int step, int state)
{
	if (o->handle)
		p_state(o->steps[step % NSTEPS], state, o->trans_size);
}

static void step_stop(struct op *o, int step)
{
	p_stop(o->steps[step % NSTEPS]);
	o->steps[step % NSTEPS] = NULL;
}

static void op_end(struct op *o, int *cur)
{
	p_stop(o->handle);
	o->handle = NULL;
	o->active = 0;
	(*cur)++;
}

/* One pass over a send operation; 1 when it did something. */
static int send_progress(struct channel *k)
{
	struct op *o = current(k->sops, k->s_cur, k->s_taken);
	struct send_conn *sc = &k->s;
	if (!o)
		return 0;
	if (!o->active)
		op_activate(o, &sc->step);
	if (o->posted < o->nsteps && o->posted < o->done + NSTEPS) {
		int s = o->posted;
		step_start(o, s);
		o->posted++; /* the buffer goes to the "GPU" */
		step_state(o, s, StepSendGPUWait);
		return 1;
	}
	int slot_of = (int)((o->base + (uint64_t)o->transmitted) % NSTEPS);
	if (o->transmitted < o->posted && o->transmitted < o->done + NSTEPS && o->produced > o->transmitted) {
		int s = o->transmitted;
		step_state(o, s, StepSendPeerWait); /* on every poll, as NCCL */
		int q = isend(sc, slot_of, CHUNK);
		if (q >= 0) {
			o->req[s % NSTEPS] = q;
			o->trans_size = CHUNK;
			o->transmitted++;
			step_state(o, s, StepSendWait);
			return 1;
		}
	}
	if (o->done < o->transmitted) {
		int s = o->done;
		if (test(sc->cq, sc->reqs, o->req[s % NSTEPS], NULL)) {
			o->done++;
			step_stop(o, s);
			if (o->done == o->nsteps)
				op_end(o, &k->s_cur);
			return 1;
		}
	}
	return 0;
}

static int recv_progress(struct channel *k, int c)
{
	struct op *o = current(k->rops, k->r_cur, k->r_taken);
	struct recv_conn *rc = &k->r;
	if (!o)
		return 0;
	if (!o->active)
		op_activate(o, &rc->step);
	if (o->posted < o->nsteps && o->posted < o->done + NSTEPS) {
		int s = o->posted;
		step_start(o, s);
		int slot = (int)((o->base + (uint64_t)s) % NSTEPS);
		o->req[s % NSTEPS] = irecv(rc, slot, CHUNK);
		o->posted++;
		step_state(o, s, StepRecvWait);
		return 1;
	}
	if (o->posted > o->received) {
		int s = o->received, size = 0;
		if (test(rc->cq, rc->reqs, o->req[s % NSTEPS], &size)) {
			if ((size_t)size != CHUNK)
				die("ch %d step %d: received %d bytes, expected %zu", c, s, size, CHUNK);
			o->trans_size = (size_t)size;
			o->received++;
			step_state(o, s, StepRecvFlushWait); /* host memory: no flush follows */
			return 1;
		}
	}
	if (o->received > o->transmitted) {
		int s = o->transmitted;
		o->transmitted++; /* the data goes to the "GPU" (NCCL: recvTail) */
		step_state(o, s, StepRecvGPUWait);
		return 1;
	}
	int did = 0;
	while (o->transmitted > o->done && o->consumed > o->done) {
		int s = o->done;
		o->done++;
		step_stop(o, s);
		did = 1;
	}
	if (o->done == o->nsteps) {
		op_end(o, &k->r_cur);
		did = 1;
	}
	return did;
}

static float value(int rank, int iter, size_t e)
{
	return (float)((rank * 131 + iter * 17 + (int)(e % 1000)) % 1000);
}

/* Element range of chunk `idx` of channel c. */
static size_t chunk_first(int c, int idx)
{
	size_t per = CHUNK / sizeof(float);
	return ((size_t)c * R + (size_t)idx) * per;
}

/* The "GPU" of channel c: produces the send steps and consumes the receive steps of call g_seq
 * (NCCL's kernel: a send buffer is written once the proxy posted it, a received step is read
 * once the proxy handed it over and, but for the last, the send buffer it reduces into is
 * posted). */
static int gpu_progress(struct channel *k, int c, int calls)
{
	size_t per = CHUNK / sizeof(float);
	int did = 0;
	if (k->g_seq >= calls)
		return 0;
	struct op *so = current(k->sops, k->s_cur, k->s_taken);
	struct op *ro = current(k->rops, k->r_cur, k->r_taken);
	if (so && (!so->active || so->seq != k->g_seq))
		so = NULL;
	if (ro && (!ro->active || ro->seq != k->g_seq))
		ro = NULL;
	if (k->g_prod == 0) {
		if (!so || so->posted == 0)
			return 0;
		memcpy(k->s.buf + (size_t)(so->base % NSTEPS) * CHUNK, sendbuf + chunk_first(c, RANK), CHUNK);
		k->g_prod = so->produced = 1;
		did = 1;
	}
	while (ro && k->g_cons < NST && ro->transmitted > k->g_cons) {
		int i = k->g_cons;
		int last = i + 1 == NST;
		if (!last && !(so && so->posted > i + 1))
			break;
		const float *in = (const float *)(k->r.buf + (size_t)((ro->base + (uint64_t)i) % NSTEPS) * CHUNK);
		float *out = last ? NULL : (float *)(k->s.buf + (size_t)((so->base + (uint64_t)i + 1) % NSTEPS) * CHUNK);
		int idx = ((RANK - i - 1) % R + R) % R;
		if (i < R - 2) { /* reduce-scatter: add our chunk, pass it on */
			const float *own = sendbuf + chunk_first(c, idx);
			for (size_t e = 0; e < per; e++)
				out[e] = in[e] + own[e];
		} else if (i == R - 2) { /* the last addition: chunk idx is final */
			const float *own = sendbuf + chunk_first(c, idx);
			float *res = recvbuf + chunk_first(c, idx);
			for (size_t e = 0; e < per; e++)
				res[e] = out[e] = in[e] + own[e];
		} else { /* all-gather: keep it, pass it on */
			memcpy(recvbuf + chunk_first(c, idx), in, CHUNK);
			if (out)
				memcpy(out, in, CHUNK);
		}
		k->g_cons = ro->consumed = i + 1;
		if (!last)
			k->g_prod = so->produced = i + 2;
		did = 1;
	}
	if (k->g_cons == NST) {
		k->g_seq++;
		k->g_prod = k->g_cons = 0;
		__atomic_store_n(&kernel_done[c], k->g_seq, __ATOMIC_RELEASE);
		did = 1;
	}
	return did;
}

static void *proxy_thread(void *arg)
{
	(void)arg;
	long idle = 0;
	for (;;) {
		int calls = __atomic_load_n(&posted_calls, __ATOMIC_ACQUIRE);
		int busy = 0, all_idle = 1;
		for (int c = 0; c < C; c++) {
			struct channel *k = &ch[c];
			/* ProxyAppend: the calls posted since, send then receive operation. */
			while (k->s_taken < calls) {
				void *coll = pending_coll[k->s_taken % PENDING];
				op_append(&k->sops[k->s_taken % PENDING], 1, k->s_taken, coll, c);
				k->s_taken++;
				busy = 1;
			}
			while (k->r_taken < calls) {
				void *coll = pending_coll[k->r_taken % PENDING];
				op_append(&k->rops[k->r_taken % PENDING], 0, k->r_taken, coll, c);
				k->r_taken++;
				busy = 1;
			}
			busy |= send_progress(k);
			busy |= recv_progress(k, c);
			busy |= gpu_progress(k, c, calls);
			if (k->s_cur < k->s_taken || k->r_cur < k->r_taken)
				all_idle = 0;
		}
		if (all_idle && __atomic_load_n(&quit, __ATOMIC_ACQUIRE))
			return NULL;
		if (busy) {
			idle = 0;
		} else if (++idle > 2000) {
			struct timespec ts = {0, 200000}; /* nap while nothing moves */
			nanosleep(&ts, NULL);
		} else {
			sched_yield();
		}
	}
}

/* ---- Setup: device, connections, rendezvous ---- */
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

static struct ibv_qp *make_qp(struct ibv_cq *cq, int send_wr, int recv_wr)
{
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = cq;
	a.recv_cq = cq;
	a.qp_type = IBV_QPT_RC;
	a.cap.max_send_wr = (uint32_t)send_wr;
	a.cap.max_recv_wr = (uint32_t)recv_wr;
	a.cap.max_send_sge = 1;
	a.cap.max_recv_sge = 1;
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	if (!qp)
		die("ibv_create_qp failed");
	struct ibv_qp_attr m;
	memset(&m, 0, sizeof m);
	m.qp_state = IBV_QPS_INIT;
	m.port_num = 1;
	m.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	if (ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		die("modify to INIT failed");
	return qp;
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest, const union ibv_gid *dgid)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_4096;
	a.dest_qp_num = dest;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *dgid;
	a.ah_attr.grh.sgid_index = 0;
	a.ah_attr.grh.hop_limit = 255;
	a.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		die("modify to RTR failed");
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 20; /* NCCL's defaults: NCCL_IB_TIMEOUT 20, NCCL_IB_RETRY_CNT 7 */
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				       IBV_QP_MAX_QP_RD_ATOMIC))
		die("modify to RTS failed");
}

struct peer_info {
	union ibv_gid gid;
	uint32_t sqpn[64], rqpn[64];
	uint64_t fifo[64], rbuf[64];
	uint32_t fifo_rkey[64], rbuf_rkey[64];
};

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

/* Waits (polling, with the -t deadline) for DIR/name and returns its text (malloc'd). */
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

static void read_info(int peer, struct peer_info *pi)
{
	char name[64];
	snprintf(name, sizeof name, "rank-%d", peer);
	char *text = wait_file(name, "rendezvous file of that rank");
	memset(pi, 0, sizeof *pi);
	char *save = NULL;
	int nch = 0, got_gid = 0;
	for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		char hex[64];
		int c;
		unsigned sq, rq, fk, rk;
		unsigned long long fa, ra;
		if (sscanf(l, "gid %32s", hex) == 1 && strlen(hex) == 32) {
			for (int i = 0; i < 16; i++) {
				unsigned b;
				sscanf(hex + 2 * i, "%2x", &b);
				pi->gid.raw[i] = (uint8_t)b;
			}
			got_gid = 1;
		} else if (sscanf(l, "ch %d sendqp %x fifo %llx %x recvqp %x buf %llx %x", &c, &sq, &fa, &fk, &rq, &ra,
				  &rk) == 7 &&
			   c >= 0 && c < C) {
			pi->sqpn[c] = sq;
			pi->rqpn[c] = rq;
			pi->fifo[c] = fa;
			pi->fifo_rkey[c] = fk;
			pi->rbuf[c] = ra;
			pi->rbuf_rkey[c] = rk;
			nch++;
		}
	}
	free(text);
	if (!got_gid || nch != C)
		die("%s/rank-%d has %d channels (want %d) or no gid: every rank needs the same -c", DIR_, peer, nch, C);
}

static uint64_t fnv(const char *s)
{
	uint64_t h = 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ull;
	return h;
}

/* -e N: N polls of a CQ no QP uses (always empty), for benches/nccl_step_callgrind.sh to
 * price an empty poll (this function's instructions, traced minus untraced, over N). */
__attribute__((noinline)) static void idle_polls(int n)
{
	struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
	if (!cq)
		die("ibv_create_cq (idle polls) failed");
	struct ibv_wc wc[16];
	for (int i = 0; i < n; i++)
		if (ibv_poll_cq(cq, 16, wc) != 0)
			die("a CQ no QP uses returned a completion");
	ibv_destroy_cq(cq);
}

static void usage(void)
{
	fprintf(stderr, "usage: nccl_ring -n RANKS -r RANK -d RENDEZVOUS_DIR [-c CHANNELS] [-b SIZE] [-i ITERS] "
			"[-s SLEEP_MS] [-p PLUGIN] [-t TIMEOUT_S] [-e IDLE_POLLS]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	int opt;
	RANK = -1;
	while ((opt = getopt(argc, argv, "n:r:d:c:b:i:s:p:t:e:")) != -1) {
		switch (opt) {
		case 'n': R = atoi(optarg); break;
		case 'r': RANK = atoi(optarg); break;
		case 'd': DIR_ = optarg; break;
		case 'c': C = atoi(optarg); break;
		case 'b': SIZE = strtoull(optarg, NULL, 0); break;
		case 'i': ITERS = atoi(optarg); break;
		case 's': SLEEP_MS = atoi(optarg); break;
		case 'p': PLUGIN = optarg; break;
		case 't': TIMEOUT_S = atoi(optarg); break;
		case 'e': IDLE_POLLS = atoi(optarg); break;
		default: usage();
		}
	}
	if (R < 2 || RANK < 0 || RANK >= R || !DIR_ || C < 1 || C > 64 || ITERS < 1 || SLEEP_MS < 0 || TIMEOUT_S < 1)
		usage();
	if (SIZE == 0 || SIZE % (sizeof(float) * (size_t)C * (size_t)R))
		die("-b %zu is not a positive multiple of 4 x channels x ranks = %zu", SIZE,
		    sizeof(float) * (size_t)C * (size_t)R);
	CHUNK = SIZE / ((size_t)C * (size_t)R);
	NST = 2 * (R - 1);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!PLUGIN)
		PLUGIN = getenv("NCCL_PROFILER_PLUGIN");

	/* The profiler, as NCCL loads it: dlopen, ncclProfiler_v5, init per communicator. */
	if (PLUGIN && *PLUGIN && strcmp(PLUGIN, "none")) {
		void *lib = dlopen(PLUGIN, RTLD_NOW | RTLD_LOCAL);
		if (!lib)
			die("dlopen %s: %s", PLUGIN, dlerror());
		prof = dlsym(lib, "ncclProfiler_v5");
		if (!prof)
			die("%s has no ncclProfiler_v5", PLUGIN);
	}

	struct ibv_device **devs = ibv_get_device_list(NULL);
	if (!devs || !devs[0])
		die("no RDMA device (run through scripts/with-testnic.sh)");
	ctx = ibv_open_device(devs[0]);
	if (!ctx)
		die("ibv_open_device failed");
	if (ibv_query_gid(ctx, 1, 0, &gid))
		die("ibv_query_gid failed");
	pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("ibv_alloc_pd failed");
	ch = calloc((size_t)C, sizeof *ch);
	kernel_done = calloc((size_t)C, sizeof(int));
	if (posix_memalign((void **)&sendbuf, 4096, SIZE) || posix_memalign((void **)&recvbuf, 4096, SIZE) || !ch ||
	    !kernel_done)
		die("out of memory");

	char info[16384];
	int off = 0;
	off += snprintf(info + off, sizeof info - (size_t)off, "rank %d\ngid ", RANK);
	for (int i = 0; i < 16; i++)
		off += snprintf(info + off, sizeof info - (size_t)off, "%02x", gid.raw[i]);
	off += snprintf(info + off, sizeof info - (size_t)off, "\n");
	int ra = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	for (int c = 0; c < C; c++) {
		struct channel *k = &ch[c];
		k->s.cq = ibv_create_cq(ctx, 2 * FIFO_SLOTS, NULL, NULL, 0);
		k->r.cq = ibv_create_cq(ctx, 4 * FIFO_SLOTS, NULL, NULL, 0);
		if (!k->s.cq || !k->r.cq)
			die("ibv_create_cq failed");
		/* NCCL: max_send_wr 2*MAX_REQUESTS, max_recv_wr MAX_REQUESTS */
		k->s.qp = make_qp(k->s.cq, 2 * FIFO_SLOTS, FIFO_SLOTS);
		k->r.qp = make_qp(k->r.cq, 2 * FIFO_SLOTS, FIFO_SLOTS);
		k->s.fifo = alloc_reg(FIFO_SLOTS * sizeof(struct fifo_elem), ra, &k->s.fifo_mr);
		k->s.buf = alloc_reg(NSTEPS * CHUNK, IBV_ACCESS_LOCAL_WRITE, &k->s.buf_mr);
		k->r.buf = alloc_reg(NSTEPS * CHUNK, ra, &k->r.buf_mr);
		k->r.elems = alloc_reg(FIFO_SLOTS * sizeof(struct fifo_elem), IBV_ACCESS_LOCAL_WRITE, &k->r.elems_mr);
		off += snprintf(info + off, sizeof info - (size_t)off,
				"ch %d sendqp %x fifo %llx %x recvqp %x buf %llx %x\n", c, k->s.qp->qp_num,
				(unsigned long long)(uintptr_t)k->s.fifo, k->s.fifo_mr->rkey, k->r.qp->qp_num,
				(unsigned long long)(uintptr_t)k->r.buf, k->r.buf_mr->rkey);
	}
	char name[64];
	snprintf(name, sizeof name, "rank-%d", RANK);
	write_file(name, info);
	int right = (RANK + 1) % R, left = (RANK + R - 1) % R;
	static struct peer_info pr, pl;
	read_info(right, &pr);
	read_info(left, &pl);
	for (int c = 0; c < C; c++) {
		struct channel *k = &ch[c];
		connect_qp(k->s.qp, pr.rqpn[c], &pr.gid);
		connect_qp(k->r.qp, pl.sqpn[c], &pl.gid);
		k->r.rem_fifo = pl.fifo[c];
		k->r.rem_fifo_rkey = pl.fifo_rkey[c];
		printf("rank %d ch %d send qp 0x%x -> rank %d qp 0x%x recv qp 0x%x <- rank %d qp 0x%x\n", RANK, c,
		       k->s.qp->qp_num, right, pr.rqpn[c], k->r.qp->qp_num, left, pl.sqpn[c]);
	}
	/* Every QP of the ring is at RTR before anyone sends. */
	snprintf(name, sizeof name, "ready-%d", RANK);
	write_file(name, "ready\n");
	for (int q = 0; q < R; q++) {
		snprintf(name, sizeof name, "ready-%d", q);
		free(wait_file(name, "ready file of a rank"));
	}

	if (prof && prof->init(&pctx, fnv(DIR_), &pmask, "nccl_ring", R, R, RANK, NULL))
		die("the profiler's init failed");
	if (prof)
		printf("profiler %s mask %d\n", prof->name, pmask);

	pthread_t th;
	if (pthread_create(&th, NULL, proxy_thread, NULL))
		die("pthread_create failed");

	size_t count = SIZE / sizeof(float);
	long wrong = 0;
	for (int it = 0; it < ITERS; it++) {
		for (size_t e = 0; e < count; e++) {
			sendbuf[e] = value(RANK, it, e);
			recvbuf[e] = -1.0f;
		}
		/* ncclAllReduce(sendbuf, recvbuf, count, ncclFloat32, ncclSum, comm, stream) */
		descr_t d;
		memset(&d, 0, sizeof d);
		d.type = ProfileGroupApi;
		d.groupApi.groupDepth = 1;
		void *gapi = p_start(&d);
		p_state(gapi, GroupStartApiStop, 0);
		memset(&d, 0, sizeof d);
		d.type = ProfileCollApi;
		d.parentObj = gapi;
		d.collApi.func = "AllReduce";
		d.collApi.count = count;
		d.collApi.datatype = "ncclFloat32";
		d.collApi.root = 0;
		void *capi = p_start(&d);
		p_stop(capi);
		/* ncclGroupEnd: launch; the host task starts the Group and Coll events, posts the
		 * proxy operations, stops both. */
		p_state(gapi, GroupEndApiStart, 0);
		memset(&d, 0, sizeof d);
		d.type = ProfileGroup;
		void *group = p_start(&d);
		memset(&d, 0, sizeof d);
		d.type = ProfileColl;
		d.parentObj = capi;
		d.rank = RANK;
		d.coll.seqNumber = (uint64_t)it;
		d.coll.func = "AllReduce";
		d.coll.sendBuff = sendbuf;
		d.coll.recvBuff = recvbuf;
		d.coll.count = count;
		d.coll.root = 0;
		d.coll.datatype = "ncclFloat32";
		d.coll.nChannels = (uint8_t)C;
		d.coll.nWarps = 16;
		d.coll.algo = "RING";
		d.coll.proto = "SIMPLE";
		d.coll.parentGroup = group;
		void *coll = p_start(&d);
		pending_coll[it % PENDING] = coll;
		__atomic_store_n(&posted_calls, it + 1, __ATOMIC_RELEASE); /* ncclProxyStart */
		p_stop(coll);
		p_stop(group);
		p_stop(gapi);
		/* cudaStreamSynchronize: the "kernel" of every channel finished this call. */
		for (int c = 0; c < C; c++) {
			long spins = 0;
			while (__atomic_load_n(&kernel_done[c], __ATOMIC_ACQUIRE) < it + 1) {
				if (++spins > 1000)
					usleep(100);
				else
					sched_yield();
			}
		}
		for (size_t e = 0; e < count && !wrong; e++) {
			float want = 0;
			for (int q = 0; q < R; q++)
				want += value(q, it, e);
			if (memcmp(&recvbuf[e], &want, sizeof want)) {
				const uint8_t *g = (const uint8_t *)&recvbuf[e], *w = (const uint8_t *)&want;
				int b = 0;
				while (g[b] == w[b])
					b++;
				fprintf(stderr,
					"nccl_ring: rank %d iteration %d: wrong byte at offset %zu (element %zu): 0x%02x, "
					"expected 0x%02x (%g instead of %g)\n",
					RANK, it, e * sizeof(float) + (size_t)b, e, g[b], w[b], recvbuf[e], want);
				wrong++;
			}
		}
		if (wrong)
			return 1;
		printf("iter %d ok\n", it);
		if (SLEEP_MS)
			usleep((useconds_t)SLEEP_MS * 1000);
	}
	/* The proxy operations end after the kernel (the last sends' completions): wait for them. */
	__atomic_store_n(&quit, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	printf("proxy polls %ld completed %ld steps %d\n", polls, polls_done, ITERS * C * 2 * NST);
	if (IDLE_POLLS)
		idle_polls(IDLE_POLLS);
	if (prof)
		prof->finalize(pctx);
	/* No QP goes away while a neighbour may still wait for its acknowledgements. */
	snprintf(name, sizeof name, "done-%d", RANK);
	write_file(name, "done\n");
	for (int q = 0; q < R; q++) {
		snprintf(name, sizeof name, "done-%d", q);
		free(wait_file(name, "done file of a rank"));
	}
	for (int c = 0; c < C; c++) {
		ibv_destroy_qp(ch[c].s.qp);
		ibv_destroy_qp(ch[c].r.qp);
		ibv_destroy_cq(ch[c].s.cq);
		ibv_destroy_cq(ch[c].r.cq);
		ibv_dereg_mr(ch[c].s.fifo_mr);
		ibv_dereg_mr(ch[c].s.buf_mr);
		ibv_dereg_mr(ch[c].r.buf_mr);
		ibv_dereg_mr(ch[c].r.elems_mr);
	}
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	ibv_free_device_list(devs);
	printf("check ok: rank %d of %d, %d channels, %d iterations of %zu bytes\n", RANK, R, C, ITERS, SIZE);
	return 0;
}
