/* Receive buffers larger than the messages that fill them, over verbs (issue 16, for
 * tests/testnic_verbs.rs on the software mlx5 NIC): one process, two RC connections over the
 * NIC's loopback (GID index 0 of port 1):
 *   QP a -> QP b, b posting its receive WRs on its own receive queue;
 *   QP c -> QP d, d taking its receive WRs from an SRQ.
 * b and the SRQ each get N receive WRs of RECV_BYTES (13,312); a and c each send N signaled
 * SENDs of msg_bytes(i) = 100 + 37 * i bytes (i = 0..N-1, all smaller), and every completion is
 * polled. The program prints the QPNs, then what its own work completions said arrived:
 *   "qpn a=0x.. b=0x.. c=0x.. d=0x.. srq"
 *   "recv b: N completions, X bytes" / "recv srq: N completions, X bytes"
 * Usage: verbs_larger_recv N
 */
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RECV_BYTES 13312

static int msg_bytes(int i) { return 100 + 37 * i; }

static void die(const char *what) { fprintf(stderr, "verbs_larger_recv: %s failed\n", what); exit(1); }

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_srq *srq, int n)
{
    struct ibv_qp_init_attr a;
    memset(&a, 0, sizeof a);
    a.send_cq = cq;
    a.recv_cq = cq;
    a.srq = srq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = n;
    a.cap.max_recv_wr = srq ? 0 : n;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    struct ibv_qp *qp = ibv_create_qp(pd, &a);
    if (!qp)
        die("ibv_create_qp");
    return qp;
}

static void connect_qp(struct ibv_qp *qp, uint32_t dest, union ibv_gid *gid)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        die("modify INIT");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = dest;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = *gid;
    a.ah_attr.grh.sgid_index = 0;
    a.ah_attr.grh.hop_limit = 1;
    a.ah_attr.port_num = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        die("modify RTR");
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = 0;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
        die("modify RTS");
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 100, i;
    if (n < 1 || n > 200)
        die("N in 1..200");
    struct ibv_device **devs = ibv_get_device_list(NULL);
    if (!devs || !devs[0])
        die("ibv_get_device_list");
    struct ibv_context *ctx = ibv_open_device(devs[0]);
    if (!ctx)
        die("ibv_open_device");
    union ibv_gid gid;
    if (ibv_query_gid(ctx, 1, 0, &gid))
        die("ibv_query_gid");
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    size_t len = (size_t)4 * n * RECV_BYTES;
    char *buf = calloc(1, len);
    struct ibv_mr *mr = pd && buf ? ibv_reg_mr(pd, buf, len, IBV_ACCESS_LOCAL_WRITE) : NULL;
    struct ibv_cq *cq = mr ? ibv_create_cq(ctx, 8 * n, NULL, NULL, 0) : NULL;
    if (!cq)
        die("pd, mr or cq");
    struct ibv_srq_init_attr sa;
    memset(&sa, 0, sizeof sa);
    sa.attr.max_wr = n;
    sa.attr.max_sge = 1;
    struct ibv_srq *srq = ibv_create_srq(pd, &sa);
    if (!srq)
        die("ibv_create_srq");
    struct ibv_qp *a = make_qp(pd, cq, NULL, n), *b = make_qp(pd, cq, NULL, n);
    struct ibv_qp *c = make_qp(pd, cq, NULL, n), *d = make_qp(pd, cq, srq, n);
    connect_qp(a, b->qp_num, &gid);
    connect_qp(b, a->qp_num, &gid);
    connect_qp(c, d->qp_num, &gid);
    connect_qp(d, c->qp_num, &gid);
    printf("qpn a=0x%x b=0x%x c=0x%x d=0x%x srq\n", a->qp_num, b->qp_num, c->qp_num, d->qp_num);
    /* Receive buffers: b's in the first quarter, the SRQ's in the second; sends from the rest. */
    for (i = 0; i < n; i++) {
        struct ibv_sge s = {(uintptr_t)(buf + (size_t)i * RECV_BYTES), RECV_BYTES, mr->lkey};
        struct ibv_recv_wr w = {.wr_id = 1000 + i, .sg_list = &s, .num_sge = 1}, *bad;
        if (ibv_post_recv(b, &w, &bad))
            die("ibv_post_recv");
        s.addr = (uintptr_t)(buf + (size_t)(n + i) * RECV_BYTES);
        w.wr_id = 2000 + i;
        if (ibv_post_srq_recv(srq, &w, &bad))
            die("ibv_post_srq_recv");
    }
    for (i = 0; i < n; i++) {
        char *src = buf + (size_t)(2 * n + i) * RECV_BYTES;
        memset(src, 'a' + i % 26, msg_bytes(i));
        struct ibv_sge s = {(uintptr_t)src, (uint32_t)msg_bytes(i), mr->lkey};
        struct ibv_send_wr w = {.wr_id = i, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND,
                                .send_flags = IBV_SEND_SIGNALED},
                           *bad;
        if (ibv_post_send(a, &w, &bad))
            die("ibv_post_send a");
        if (ibv_post_send(c, &w, &bad))
            die("ibv_post_send c");
    }
    long got_b = 0, got_srq = 0, nb = 0, nsrq = 0, sends = 0;
    while (sends < 2 * n || nb < n || nsrq < n) {
        struct ibv_wc wc[16];
        int k = ibv_poll_cq(cq, 16, wc);
        if (k < 0)
            die("ibv_poll_cq");
        for (i = 0; i < k; i++) {
            if (wc[i].status != IBV_WC_SUCCESS) {
                fprintf(stderr, "completion %d: status %d\n", (int)wc[i].wr_id, wc[i].status);
                return 1;
            }
            if (wc[i].opcode == IBV_WC_SEND)
                sends++;
            else if (wc[i].qp_num == b->qp_num)
                got_b += wc[i].byte_len, nb++;
            else if (wc[i].qp_num == d->qp_num)
                got_srq += wc[i].byte_len, nsrq++;
        }
    }
    printf("recv b: %ld completions, %ld bytes\n", nb, got_b);
    printf("recv srq: %ld completions, %ld bytes\n", nsrq, got_srq);
    ibv_destroy_qp(a);
    ibv_destroy_qp(b);
    ibv_destroy_qp(c);
    ibv_destroy_qp(d);
    ibv_destroy_srq(srq);
    ibv_destroy_cq(cq);
    ibv_dereg_mr(mr);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(devs);
    return 0;
}
