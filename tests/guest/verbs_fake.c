// A fake verbs provider on the host (no RDMA device needed): a context whose ops and
// verbs_context::create_qp_ex point at stub functions that behave like a provider (walk the WR
// chain, refuse an unknown opcode with *bad_wr, return completions). The program posts through the
// inline verbs.h calls exactly as a real program would, so under LD_PRELOAD the patched ops run.
// It prints one line per call with what the stub saw; tests/verbs_host.rs checks the record.
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <infiniband/verbs.h>

struct fake_vqp { // rdma-core libibverbs/driver.h struct verbs_qp
    union { struct ibv_qp qp; struct ibv_qp_ex qp_ex; };
    uint32_t comp_mask;
    void *xrcd;
};

static int fail_complete;
static unsigned long stub_wrs, stub_recvs;

static int stub_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
    for (; wr; wr = wr->next) {
        if (wr->opcode > IBV_WR_ATOMIC_FETCH_AND_ADD) { *bad = wr; return EINVAL; }
        stub_wrs++;
    }
    return 0;
}
static int stub_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
    for (; wr; wr = wr->next) stub_recvs++;
    return 0;
}
static int polls;
static int stub_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
    if (polls++ > 0 || n < 2) return 0;
    memset(wc, 0, 2 * sizeof(*wc));
    wc[0].opcode = IBV_WC_SEND; wc[0].byte_len = 64; wc[0].status = IBV_WC_SUCCESS;
    wc[1].opcode = IBV_WC_RECV; wc[1].byte_len = 4096; wc[1].status = IBV_WC_LOC_LEN_ERR;
    return 2;
}
static int stub_notify(struct ibv_cq *cq, int solicited) { return 0; }

static unsigned long x_start, x_ops, x_bytes;
static void s_start(struct ibv_qp_ex *q) { x_start++; }
static int s_complete(struct ibv_qp_ex *q) { return fail_complete ? EINVAL : 0; }
static void s_abort(struct ibv_qp_ex *q) {}
static void s_send(struct ibv_qp_ex *q) { x_ops++; }
static void s_write(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr) { x_ops++; }
static void s_read(struct ibv_qp_ex *q, uint32_t rkey, uint64_t raddr) { x_ops++; }
static void s_sge(struct ibv_qp_ex *q, uint32_t lkey, uint64_t addr, uint32_t len) { x_bytes += len; }
static void s_inl(struct ibv_qp_ex *q, void *addr, size_t len) { x_bytes += len; }

static struct fake_vqp vqp;
static struct ibv_qp *stub_create_qp_ex(struct ibv_context *ctx, struct ibv_qp_init_attr_ex *a) {
    memset(&vqp, 0, sizeof(vqp));
    vqp.qp.context = ctx; vqp.qp.qp_num = 0x42; vqp.qp.qp_type = IBV_QPT_RC;
    vqp.comp_mask = 1 << 1; // VERBS_QP_EX
    struct ibv_qp_ex *x = &vqp.qp_ex;
    x->wr_start = s_start; x->wr_complete = s_complete; x->wr_abort = s_abort;
    x->wr_send = s_send; x->wr_rdma_write = s_write; x->wr_rdma_read = s_read;
    x->wr_set_sge = s_sge; x->wr_set_inline_data = s_inl;
    return &vqp.qp;
}

int main(void) {
    static struct verbs_context vctx;
    struct ibv_context *ctx = &vctx.context;
    vctx.sz = sizeof(vctx);
    vctx.create_qp_ex = stub_create_qp_ex;
    ctx->abi_compat = (void *)(uintptr_t)-1; // __VERBS_ABI_IS_EXTENDED
    ctx->ops.post_send = stub_post_send;
    ctx->ops.post_recv = stub_post_recv;
    ctx->ops.poll_cq = stub_poll_cq;
    ctx->ops.req_notify_cq = stub_notify;
    static struct ibv_qp qp;
    static struct ibv_cq cq;
    qp.context = ctx; qp.qp_num = 0x41; qp.qp_type = IBV_QPT_RC;
    cq.context = ctx;
    void (*setup)(void *, void *, void *) = (void (*)(void *, void *, void *))dlsym(RTLD_DEFAULT, "sigmatop_bench_verbs_setup");
    if (setup) setup(ctx, &qp, &cq);
    else if (getenv("LD_PRELOAD"))
        fprintf(stderr, "%s\n", "needs LD_PRELOAD=libsigmatop_preload.so built with its bench entry points: cargo build -p sigmatop-preload --features bench");

    char buf[8192];
    struct ibv_sge s[4] = {{(uintptr_t)buf, 100, 1}, {(uintptr_t)buf, 28, 1}, {(uintptr_t)buf, 64, 1}, {(uintptr_t)buf, 4096, 1}};
    struct ibv_send_wr w[3];
    memset(w, 0, sizeof(w));
    w[0].opcode = IBV_WR_RDMA_WRITE; w[0].sg_list = &s[0]; w[0].num_sge = 2; w[0].send_flags = IBV_SEND_SIGNALED;
    w[0].wr.rdma.remote_addr = 0x1000; w[0].wr.rdma.rkey = 0x77; w[0].next = &w[1];
    w[1].opcode = IBV_WR_SEND; w[1].sg_list = &s[2]; w[1].num_sge = 1; w[1].send_flags = IBV_SEND_INLINE; w[1].next = &w[2];
    w[2].opcode = IBV_WR_RDMA_READ; w[2].sg_list = &s[3]; w[2].num_sge = 1; w[2].wr.rdma.remote_addr = 0x2000; w[2].wr.rdma.rkey = 0x78;
    struct ibv_send_wr *bad = NULL;
    int r = ibv_post_send(&qp, w, &bad);
    printf("post_send chain of 3: rc %d, provider took %lu\n", r, stub_wrs);

    // A chain whose second WR the provider refuses; the third is garbage the provider never reads.
    struct ibv_sge s5 = {(uintptr_t)buf, 512, 1};
    struct ibv_send_wr g[3];
    memset(g, 0, sizeof(g));
    g[0].opcode = IBV_WR_RDMA_WRITE; g[0].sg_list = &s5; g[0].num_sge = 1; g[0].wr.rdma.remote_addr = 0x3000; g[0].next = &g[1];
    g[1].opcode = 99; g[1].sg_list = (struct ibv_sge *)0x8; g[1].num_sge = 1000000; g[1].next = &g[2];
    g[2].opcode = IBV_WR_SEND; g[2].sg_list = (struct ibv_sge *)0x10; g[2].num_sge = 7; g[2].next = (struct ibv_send_wr *)0x18;
    r = ibv_post_send(&qp, g, &bad);
    printf("post_send refused at WR %d: rc %d, provider took %lu\n", (int)(bad - g), r, stub_wrs);

    r = ibv_post_send(&qp, NULL, &bad);
    printf("post_send NULL list: rc %d\n", r);

    struct ibv_sge rs[2] = {{(uintptr_t)buf, 4096, 1}, {(uintptr_t)buf + 4096, 4096, 1}};
    struct ibv_recv_wr rw[2];
    memset(rw, 0, sizeof(rw));
    rw[0].sg_list = &rs[0]; rw[0].num_sge = 1; rw[0].next = &rw[1];
    rw[1].sg_list = &rs[1]; rw[1].num_sge = 1;
    struct ibv_recv_wr *rbad = NULL;
    r = ibv_post_recv(&qp, rw, &rbad);
    printf("post_recv chain of 2: rc %d, provider took %lu\n", r, stub_recvs);

    struct ibv_wc wc[4];
    int n1 = ibv_poll_cq(&cq, 4, wc);
    int n2 = ibv_poll_cq(&cq, 4, wc);
    printf("poll_cq: %d then %d completions\n", n1, n2);
    printf("req_notify_cq: rc %d\n", ibv_req_notify_cq(&cq, 0));

    struct ibv_qp_init_attr_ex xa;
    memset(&xa, 0, sizeof(xa));
    xa.qp_type = IBV_QPT_RC;
    xa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    xa.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_READ;
    struct ibv_qp *xqp = ibv_create_qp_ex(ctx, &xa);
    struct ibv_qp_ex *qx = xqp ? ibv_qp_to_qp_ex(xqp) : NULL;
    if (!qx) { printf("create_qp_ex failed\n"); return 1; }
    ibv_wr_start(qx);
    qx->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(qx, 5, 0x5000);
    ibv_wr_set_sge(qx, 1, (uintptr_t)buf, 256);
    qx->wr_flags = 0;
    ibv_wr_send(qx);
    ibv_wr_set_inline_data(qx, buf, 32);
    r = ibv_wr_complete(qx);
    printf("wr batch of 2: rc %d\n", r);
    ibv_wr_start(qx);
    ibv_wr_send(qx);
    ibv_wr_set_sge(qx, 1, (uintptr_t)buf, 10);
    ibv_wr_abort(qx);
    printf("wr batch aborted\n");
    fail_complete = 1;
    ibv_wr_start(qx);
    ibv_wr_rdma_read(qx, 6, 0x6000);
    ibv_wr_set_sge(qx, 1, (uintptr_t)buf, 8);
    r = ibv_wr_complete(qx);
    printf("wr batch refused: rc %d; provider saw %lu starts, %lu WRs, %lu bytes\n", r, x_start, x_ops, x_bytes);
    // Live a little, like any real program: a collector that has not begun when the process
    // exits records nothing (collector.rs cancels a start that STOP overtakes).
    usleep(100000);
    return 0;
}
