/* What sigmatop adds to real UCX calls, not to the generic bench hook: one process, one worker, an
 * endpoint to itself (UCX_TLS=self: no peer, no network, the same calls every iteration), each
 * iteration posts an 8-byte tag receive, sends 8 bytes to it and progresses the worker until both
 * complete. The program's own callbacks are passed, as MPI and NCCL's UCX plugin do, so the
 * preload's receive-completion wrapper runs as it does for them.
 *
 * Run it untraced and under LD_PRELOAD in the same sitting and compare: `ns/iter` (fastest burst
 * of 4,096 iterations) or, deterministically, instructions under callgrind (`UCXHOT_REPS=20`):
 *
 *   gcc -O2 -o target/ucx_hotpath benches/ucx_hotpath.c -lucp -lucs
 *   UCX_TLS=self target/ucx_hotpath
 *   UCX_TLS=self SIGMATOP_MODE=aggregate LD_PRELOAD=$PWD/target/release/libsigmatop_preload.so target/ucx_hotpath
 *
 * Prints: iterations, progress calls per iteration, mean and fastest-burst ns per iteration.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucp/api/ucp.h>

#define BURST 4096

static int recv_done, send_done;

static void on_recv(void *req, ucs_status_t st, const ucp_tag_recv_info_t *info, void *user)
{
    (void)req; (void)st; (void)info; (void)user;
    recv_done = 1;
}

static void on_send(void *req, ucs_status_t st, void *user)
{
    (void)req; (void)st; (void)user;
    send_done = 1;
}

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

static void die(const char *what, ucs_status_t st)
{
    fprintf(stderr, "ucx_hotpath: %s: %s\n", what, ucs_status_string(st));
    exit(1);
}

int main(void)
{
    const char *r = getenv("UCXHOT_REPS");
    long reps = r ? atol(r) : 2000; /* bursts */
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES, .features = UCP_FEATURE_TAG};
    ucp_context_h ctx;
    ucs_status_t st = ucp_init(&p, NULL, &ctx);
    if (st != UCS_OK) die("ucp_init", st);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    ucp_worker_h w;
    if ((st = ucp_worker_create(ctx, &wp, &w)) != UCS_OK) die("ucp_worker_create", st);
    ucp_address_t *addr;
    size_t alen;
    if ((st = ucp_worker_get_address(w, &addr, &alen)) != UCS_OK) die("get_address", st);
    ucp_ep_params_t ep_p = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = addr};
    ucp_ep_h ep;
    if ((st = ucp_ep_create(w, &ep_p, &ep)) != UCS_OK) die("ucp_ep_create", st);

    char sbuf[8] = "sigmatop", rbuf[8];
    ucp_request_param_t rp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK,
                              .cb.recv = on_recv};
    ucp_request_param_t sp = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK,
                              .cb.send = on_send};
    long polls = 0;
    double best = 1e30, total = 0;
    for (long b = 0; b < reps + 10; b++) { /* 10 warm-up bursts */
        double t0 = now_ns();
        for (int i = 0; i < BURST; i++) {
            recv_done = send_done = 0;
            void *rr = ucp_tag_recv_nbx(w, rbuf, sizeof rbuf, 7, (ucp_tag_t)-1, &rp);
            if (UCS_PTR_IS_ERR(rr)) die("tag_recv", UCS_PTR_STATUS(rr));
            if (rr == NULL) recv_done = 1;
            void *sr = ucp_tag_send_nbx(ep, sbuf, sizeof sbuf, 7, &sp);
            if (UCS_PTR_IS_ERR(sr)) die("tag_send", UCS_PTR_STATUS(sr));
            if (sr == NULL) send_done = 1;
            while (!recv_done || !send_done) {
                ucp_worker_progress(w);
                if (b >= 10) polls++;
            }
            if (rr) ucp_request_free(rr);
            if (sr) ucp_request_free(sr);
        }
        double dt = (now_ns() - t0) / BURST;
        if (b >= 10) {
            total += dt;
            if (dt < best) best = dt;
        }
    }
    printf("iterations=%ld polls_per_iter=%.2f mean_ns=%.2f fastest_ns=%.2f\n", reps * BURST,
           (double)polls / (reps * BURST), total / reps, best);
    ucp_worker_release_address(w, addr);
    ucs_status_ptr_t cr = ucp_ep_close_nb(ep, UCP_EP_CLOSE_MODE_FORCE);
    while (cr && UCS_PTR_IS_PTR(cr) && ucp_request_check_status(cr) == UCS_INPROGRESS)
        ucp_worker_progress(w);
    if (cr && UCS_PTR_IS_PTR(cr)) ucp_request_free(cr);
    ucp_worker_destroy(w);
    ucp_cleanup(ctx);
    return 0;
}
