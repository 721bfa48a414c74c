/* NCCL's side of the profiler interface v5, on the CPU: the descriptor and state-argument layouts
 * as NCCL 2.28.9's src/include/plugin/profiler/profiler_v5.h and net_ib_v1.h declare them
 * (retyped here, fields and order unchanged), laid out by the C compiler. It dlopens the plugin
 * (argv[1], NCCL_PROFILER_PLUGIN's value), looks up ncclProfiler_v5 as NCCL does and calls it the
 * way NCCL 2.28.9 does for one ncclAllReduce: init; on the host thread GroupApi (with its
 * GroupStartApiStop and GroupEndApiStart states), CollApi, then the Coll whose parent is the
 * CollApi; on the proxy thread a ProxyCtrl (Active, then Idle), the ProxyOp, a ProxyStep, an IB QP
 * net event, the step's states; stops; finalize. As NCCL does, an event is started only when its
 * type is in the activation mask init returned, and stopped or updated only through a non-null
 * handle. tests/nccl_plugin.rs checks what the plugin wrote (and, chained, what the plugin behind
 * it got). Prints "handles ok" when every handle NCCL would keep is non-null and distinct, and
 * "events N" with the number of events started. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

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
} state_args_t;
typedef struct {
	uint8_t type;
	union {
		struct {
			int device;
			uint64_t wr_id;
			int opcode;
			int qpNum;
			size_t length;
		} qp;
	};
} net_ib_t;
typedef struct {
	const char *name;
	ncclResult_t (*init)(void **context, uint64_t commId, int *eActivationMask, const char *commName,
			     int nNodes, int nranks, int rank, void *logfn);
	ncclResult_t (*startEvent)(void *context, void **eHandle, descr_t *eDescr);
	ncclResult_t (*stopEvent)(void *eHandle);
	ncclResult_t (*recordEventState)(void *eHandle, int eState, state_args_t *eStateArgs);
	ncclResult_t (*finalize)(void *context);
} profiler_v5_t;

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	profiler_v5_t *p = dlsym(lib, "ncclProfiler_v5");
	if (!p || strcmp(p->name, "sigmatop")) {
		fprintf(stderr, "no ncclProfiler_v5 named sigmatop\n");
		return 1;
	}
	void *ctx = NULL;
	int mask = 0;
	if (p->init(&ctx, 0x1234abcd5678ef00ull, &mask, "driver comm", 2, 2, 1, NULL))
		return 1;
	printf("mask=%d\n", mask);
	int events = 0;
	descr_t d;
	void *gapi = NULL, *capi = NULL, *ctrl = NULL;
	if (mask & (1 << 8)) { /* ncclProfileGroupApi */
		memset(&d, 0, sizeof d);
		d.type = 1 << 8;
		d.groupApi.groupDepth = 1;
		p->startEvent(ctx, &gapi, &d);
		events++;
		if (gapi)
			p->recordEventState(gapi, 23, NULL); /* GroupStartApiStop */
	}
	if (mask & (1 << 9)) { /* ncclProfileCollApi */
		memset(&d, 0, sizeof d);
		d.type = 1 << 9;
		d.parentObj = gapi;
		d.collApi.func = "AllReduce";
		d.collApi.count = 65536;
		d.collApi.datatype = "ncclFloat32";
		d.collApi.root = -1;
		p->startEvent(ctx, &capi, &d);
		events++;
		if (capi)
			p->stopEvent(capi);
	}
	if (gapi)
		p->recordEventState(gapi, 24, NULL); /* GroupEndApiStart */
	memset(&d, 0, sizeof d);
	d.type = 1 << 1; /* ncclProfileColl */
	d.parentObj = capi;
	d.rank = 1;
	d.coll.seqNumber = 41;
	d.coll.func = "AllReduce";
	d.coll.count = 65536;
	d.coll.root = -1;
	d.coll.datatype = "ncclFloat32";
	d.coll.nChannels = 8;
	d.coll.nWarps = 16;
	d.coll.algo = "RING";
	d.coll.proto = "SIMPLE";
	void *coll = NULL, *op = NULL, *step = NULL, *qp = NULL;
	p->startEvent(ctx, &coll, &d);
	events++;
	if (mask & (1 << 5)) { /* ncclProfileProxyCtrl: the proxy thread wakes up */
		memset(&d, 0, sizeof d);
		d.type = 1 << 5;
		p->startEvent(ctx, &ctrl, &d);
		events++;
		state_args_t c = {.proxyCtrl = {.appendedProxyOps = 1}};
		if (ctrl)
			p->recordEventState(ctrl, 14, &c); /* ProxyCtrlActive */
	}
	memset(&d, 0, sizeof d);
	d.type = 1 << 3; /* ncclProfileProxyOp */
	d.parentObj = coll;
	d.rank = 1;
	d.proxyOp.pid = 4242;
	d.proxyOp.channelId = 3;
	d.proxyOp.peer = 0;
	d.proxyOp.nSteps = 4;
	d.proxyOp.chunkSize = 131072;
	d.proxyOp.isSend = 1;
	p->startEvent(ctx, &op, &d);
	events++;
	memset(&d, 0, sizeof d);
	d.type = 1 << 4; /* ncclProfileProxyStep */
	d.parentObj = op;
	d.proxyStep.step = 2;
	p->startEvent(ctx, &step, &d);
	events++;
	net_ib_t ib;
	memset(&ib, 0, sizeof ib);
	ib.type = 1; /* ncclProfileQp */
	ib.qp.device = 0;
	ib.qp.wr_id = 0x7700000000000005ull;
	ib.qp.opcode = 3; /* IBV_WR_RDMA_WRITE_WITH_IMM */
	ib.qp.qpNum = 0x1c3;
	ib.qp.length = 32768;
	memset(&d, 0, sizeof d);
	d.type = 1 << 7; /* ncclProfileNetPlugin */
	d.parentObj = step;
	d.netPlugin.id = (1 << 16) | 1; /* NCCL_PROFILER_NET_TYPE_IB | version 1 */
	d.netPlugin.data = &ib;
	p->startEvent(ctx, &qp, &d);
	events++;
	state_args_t a = {.proxyStep = {.transSize = 32768}};
	/* SendPeerWait, on each of NCCL's polls of the peer's FIFO: the plugin keeps the first. */
	for (int i = 0; i < 3; i++)
		p->recordEventState(step, 20, &a);
	p->recordEventState(step, 9, &a); /* ncclProfilerProxyStepSendWait */
	p->stopEvent(qp);
	p->stopEvent(step);
	p->stopEvent(op);
	p->stopEvent(coll);
	if (ctrl) {
		state_args_t c = {.proxyCtrl = {.appendedProxyOps = 0}};
		p->recordEventState(ctrl, 13, &c); /* ProxyCtrlIdle */
		p->stopEvent(ctrl);
	}
	if (gapi)
		p->stopEvent(gapi);
	/* An event of a type profiler v5 does not have (ncclProfileCeColl, 1 << 12, profiler v6's):
	 * the plugin must count it, record nothing and give no handle. */
	memset(&d, 0, sizeof d);
	d.type = 1 << 12;
	d.rank = 1;
	void *ce = (void *)&d;
	p->startEvent(ctx, &ce, &d);
	if (ce)
		printf("an unknown type got a handle\n");
	p->finalize(ctx);
	printf("events %d\n", events);
	if (ctx && coll && op && step && qp && coll != op && op != step && step != qp &&
	    (!(mask & (1 << 8)) || (gapi && capi && gapi != capi && capi != coll)) &&
	    (!(mask & (1 << 5)) || ctrl))
		printf("handles ok\n");
	return 0;
}
