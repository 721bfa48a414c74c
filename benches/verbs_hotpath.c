// ibverbs hot-path microbenchmark: the cost sigmatop's patched ctx->ops.post_send / poll_cq add per
// call, measured natively through the real shared library with a fake provider (a struct
// ibv_context whose ops are stub functions), per mode.
// In the same bursts it times the clock the preload stamps events with (see benches/hotpath.c).
// Build: gcc -O2 -o verbs_hotpath benches/verbs_hotpath.c -ldl
// Usage: SIGMATOP_MODE=simple [SIGMATOP_RECORD=dir] LD_PRELOAD=target/release/libsigmatop_preload.so ./verbs_hotpath
// (the preload built with `--features bench`, which exports the sigmatop_bench_* entry points).
// VERBS_REPS (default 6000) sets the number of 4,096-call bursts.
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <x86intrin.h>
#if __has_include(<infiniband/verbs.h>)
#include <infiniband/verbs.h>
#else
// No rdma-core headers on this machine (the H200 host has none): the few parts of the verbs ABI
// this bench touches, as sigmatop reads them (preload/src/ibverbs/abi.rs, whose offsets a test
// checks against rdma-core's header). ibv_post_send / ibv_poll_cq are verbs.h's inline calls
// through the context's ops table, written out here.
struct ibv_context;
struct ibv_sge { uint64_t addr; uint32_t length; uint32_t lkey; };
struct ibv_send_wr {
    uint64_t wr_id; struct ibv_send_wr *next; struct ibv_sge *sg_list; int num_sge;
    unsigned opcode; unsigned send_flags; uint32_t imm_data;
    union { struct { uint64_t remote_addr; uint32_t rkey; } rdma; uint64_t atomic[4]; } wr;
    uint64_t tail[7];
};
struct ibv_wc {
    uint64_t wr_id; unsigned status; unsigned opcode; uint32_t vendor_err; uint32_t byte_len;
    uint32_t imm_data; uint32_t qp_num; uint32_t src_qp; unsigned wc_flags; uint16_t pkey_index;
    uint16_t slid; uint8_t sl; uint8_t dlid_path_bits;
};
struct ibv_qp {
    struct ibv_context *context; void *qp_context, *pd, *send_cq, *recv_cq, *srq;
    uint32_t handle, qp_num; unsigned state, qp_type; uint64_t rest[16];
};
struct ibv_cq { struct ibv_context *context; uint64_t rest[16]; };
struct ibv_context_ops {
    void *slots0_10[11];
    int (*poll_cq)(struct ibv_cq *, int, struct ibv_wc *);            // slot 11
    void *slots12_24[13];
    int (*post_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **);  // slot 25
    void *slots26_31[6];
};
struct ibv_context {
    void *device; struct ibv_context_ops ops; int cmd_fd, async_fd, num_comp_vectors;
    uint64_t mutex[5]; void *abi_compat;
};
enum { IBV_WC_SUCCESS = 0, IBV_WC_RDMA_WRITE = 1, IBV_WR_RDMA_WRITE = 0, IBV_SEND_SIGNALED = 2,
       IBV_QPT_RC = 2 };
static inline int ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
    return qp->context->ops.post_send(qp, wr, bad);
}
static inline int ibv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
    return cq->context->ops.poll_cq(cq, n, wc);
}
#endif

static long sink;
__attribute__((noinline)) static int stub_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
    sink += wr->num_sge; return 0;
}
__attribute__((noinline)) static int stub_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
    // The completion of QP 1's signaled write (sigmatop retires it from that QP's send queue).
    wc[0].status = IBV_WC_SUCCESS; wc[0].opcode = IBV_WC_RDMA_WRITE; wc[0].byte_len = 64;
    wc[0].qp_num = 1; return 1;
}

static volatile uint64_t tsink;

static uint64_t mono(void) {
    struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec;
}

static double now_ns(void) {
    struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(void) {
    void (*setup)(void *, void *, void *) = (void (*)(void *, void *, void *))dlsym(RTLD_DEFAULT, "sigmatop_bench_verbs_setup");
    uint64_t (*pending)(void) = (uint64_t (*)(void))dlsym(RTLD_DEFAULT, "sigmatop_bench_pending");
    uint32_t (*is_tsc)(void) = (uint32_t (*)(void))dlsym(RTLD_DEFAULT, "sigmatop_bench_clock_is_tsc");
    if (!setup || !pending || !is_tsc) { fprintf(stderr, "%s\n", "needs LD_PRELOAD=libsigmatop_preload.so built with its bench entry points: cargo build --release -p sigmatop-preload --features bench"); return 2; }
    static struct ibv_context ctx;
    static struct ibv_qp qp;
    static struct ibv_cq cq;
    ctx.ops.post_send = stub_post_send;
    ctx.ops.poll_cq = stub_poll_cq;
    qp.context = &ctx; qp.qp_num = 1; qp.qp_type = IBV_QPT_RC;
    cq.context = &ctx;
    setup(&ctx, &qp, &cq);
    int (*volatile plain_send)(struct ibv_qp *, struct ibv_send_wr *, struct ibv_send_wr **) = stub_post_send;
    int (*volatile plain_poll)(struct ibv_cq *, int, struct ibv_wc *) = stub_poll_cq;
    int poll_wrapped = ctx.ops.poll_cq != stub_poll_cq;
    char buf[64];
    struct ibv_sge sge = {(uintptr_t)buf, 64, 1};
    // VERBS_CHAIN (default 1, at most 16): work requests linked in each post_send.
    int chain = getenv("VERBS_CHAIN") ? atoi(getenv("VERBS_CHAIN")) : 1;
    if (chain < 1) chain = 1;
    if (chain > 16) chain = 16;
    struct ibv_send_wr wrs[16];
    memset(wrs, 0, sizeof(wrs));
    for (int i = 0; i < chain; i++) {
        wrs[i].opcode = IBV_WR_RDMA_WRITE; wrs[i].sg_list = &sge; wrs[i].num_sge = 1;
        wrs[i].send_flags = IBV_SEND_SIGNALED;
        wrs[i].wr.rdma.remote_addr = 0x1000; wrs[i].wr.rdma.rkey = 7;
        wrs[i].next = i + 1 < chain ? &wrs[i + 1] : NULL;
    }
    struct ibv_send_wr wr = wrs[0];
    struct ibv_send_wr *bad;
    struct ibv_wc wc[4];
    int tsc = is_tsc();
    const int burst = 4096;
    int reps = getenv("VERBS_REPS") ? atoi(getenv("VERBS_REPS")) : 6000;
    if (reps < 1) reps = 1;
    double b_send = 0, t_send = 0, b_poll = 0, t_poll = 0, stamp = 0;
    // The fastest burst of each loop (see benches/hotpath.c).
    double best[5] = {1e30, 1e30, 1e30, 1e30, 1e30};
    for (int r = 0; r < reps; r++) {
        double t0 = now_ns();
        for (int i = 0; i < burst; i++) plain_send(&qp, &wr, &bad);
        double t1 = now_ns();
        for (int i = 0; i < burst; i++) ibv_post_send(&qp, &wr, &bad);
        double t2 = now_ns();
        for (int i = 0; i < burst; i++) plain_poll(&cq, 4, wc);
        double t3 = now_ns();
        for (int i = 0; i < burst; i++) ibv_poll_cq(&cq, 4, wc);
        double t4 = now_ns();
        uint64_t acc = 0;
        if (tsc) for (int i = 0; i < burst; i++) acc += __rdtsc();
        else for (int i = 0; i < burst; i++) acc += mono();
        double t5 = now_ns();
        tsink = acc;
        b_send += t1 - t0; t_send += t2 - t1; b_poll += t3 - t2; t_poll += t4 - t3; stamp += t5 - t4;
        double d[5] = {t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4};
        for (int k = 0; k < 5; k++) if (d[k] < best[k]) best[k] = d[k];
        // The collector drains the ring while the bench runs (as in a traced program); wait
        // between bursts only when the ring (65,536 events) is half full, so nothing is lost.
        while (pending() > 32768) { struct timespec s = {0, 200000}; nanosleep(&s, 0); }
    }
    double n = (double)burst * reps;
    const char *mode = getenv("SIGMATOP_MODE");
    const char *rec = getenv("SIGMATOP_RECORD");
    printf("mode=%s record=%s chain=%d calls=%.0f post_send plain=%.2f wrapped=%.2f added=%.2f ns/call; "
           "poll_cq(1 completion) plain=%.2f wrapped=%.2f added=%.2f ns/call%s; timestamp(%s)=%.2f ns; "
           "best burst: post_send added=%.2f poll_cq added=%.2f timestamp=%.2f\n",
           mode ? mode : "simple", rec && *rec ? "yes" : "no", chain, n, b_send / n, t_send / n, (t_send - b_send) / n,
           b_poll / n, t_poll / n, (t_poll - b_poll) / n, poll_wrapped ? "" : " (not wrapped in this mode)",
           tsc ? "rdtsc" : "clock_gettime", stamp / n, (best[1] - best[0]) / burst,
           (best[3] - best[2]) / burst, best[4] / burst);
    return 0;
}
