/* Test-only: what the "GPU" does, in NVSHMEM IBGDA's formats, shared by the CUDA kernels and the
 * CPU thread that plays the GPU in CI. Every WQE posted is logged (what sigmatop must recover);
 * `rings` counts doorbell stores with a new value (DOCA's second, identical store is not one). */
#ifndef SIGMATOP_TEST_SCENARIO_H
#define SIGMATOP_TEST_SCENARIO_H

#include "host.h"

#ifdef __CUDA_ARCH__
#define FENCE() __threadfence_system()
#define RELAX() __nanosleep(20)
#else
#define FENCE() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define RELAX() __builtin_ia32_pause()
#endif

#define MAX_LOG 8192
#define R_ATOMIC 300000u

struct oplog {
  uint32_t qpn;
  uint16_t idx;
  uint8_t opcode;
  uint32_t bytes;
  uint64_t raddr;
  uint32_t rkey;
};

struct wl {
  struct qpdev q[NQP];
  uint16_t pi[NQP];
  uint8_t *L, *R; /* local and "remote" buffers (device memory) */
  struct oplog log[MAX_LOG];
  uint32_t nlog;
  uint32_t rings;
  uint32_t bad;
  uint64_t results[64];
  uint32_t batch_prod;
  uint32_t batch_base;
};

HD uint16_t post_at(struct wl *w, int qi, uint16_t idx, const struct op_desc *o, uint32_t logi) {
  struct qpdev *q = &w->q[qi];
  write_wqe(q->sq + (uint32_t)(idx & (q->sq_cnt - 1)) * WQEBB, idx, q->qpn, o);
  if (logi < MAX_LOG) {
    struct oplog *l = &w->log[logi];
    l->qpn = q->qpn;
    l->idx = idx;
    l->opcode = o->opcode;
    l->bytes = o->bytes;
    l->raddr = o->raddr;
    l->rkey = o->rkey;
  }
  return idx;
}

HD uint16_t post(struct wl *w, int qi, const struct op_desc *o) {
  uint16_t idx = w->pi[qi]++;
  return post_at(w, qi, idx, o, w->nlog++);
}

/* ibgda_post_send: membar, DBR update, membar, doorbell store (the synthetic GPU word). */
HD void ring(struct wl *w, int qi) {
  struct qpdev *q = &w->q[qi];
  FENCE();
  q->dbr[1] = be32(w->pi[qi]);
  FENCE();
  *q->db = gpu_db_word(q->qpn, w->pi[qi]);
  w->rings++;
}

/* DOCA submit_db: DB, DBR, DB with the same value. */
HD void ring_doca(struct wl *w, int qi) {
  struct qpdev *q = &w->q[qi];
  uint64_t v = gpu_db_word(q->qpn, w->pi[qi]);
  FENCE();
  *q->db = v;
  FENCE();
  q->dbr[1] = be32(w->pi[qi]);
  FENCE();
  *q->db = v;
  w->rings++;
}

HD void wait_cqe(struct wl *w, int qi, uint16_t idx) {
  volatile uint8_t *c = w->q[qi].cqe + CQE_WQE_COUNTER_OFF;
  for (;;) {
    uint16_t v = (uint16_t)((c[0] << 8) | c[1]);
    if (v == idx)
      return;
    RELAX();
  }
}

/* In-flight WQEs per doorbell in the sweep: 1 to 1024 (the whole SQ). */
#define SWEEP_STEPS 10
HD int sweep_n(int s) {
  switch (s) {
  case 0: return 1;
  case 1: return 2;
  case 2: return 3;
  case 3: return 16;
  case 4: return 100;
  case 5: return 255;
  case 6: return 256;
  case 7: return 511;
  case 8: return 1000;
  default: return 1024;
  }
}

HD struct op_desc mk(uint8_t opcode, uint32_t bytes, uint64_t raddr, uint64_t laddr) {
  struct op_desc o;
  memset(&o, 0, sizeof o);
  o.opcode = opcode;
  o.bytes = bytes;
  o.raddr = raddr;
  o.rkey = RKEY;
  o.laddr = laddr;
  o.lkey = LKEY;
  return o;
}

/* The single-thread part: writes, reads, inline writes, fetch-add, compare-swap, DOCA's double
 * ring, on QP 0; then the in-flight sweep (1..1024 WQEs per doorbell) on QP 1. */
HD void scenario_single(struct wl *w) {
  uint64_t L = (uint64_t)w->L, R = (uint64_t)w->R;
  for (int i = 0; i < 8; i++) {
    struct op_desc o = mk(MLX5_OPCODE_RDMA_WRITE, 8 + i * 37, R + 4096 * i, L + 512 * i);
    uint16_t idx = post(w, 0, &o);
    ring(w, 0);
    wait_cqe(w, 0, idx);
  }
  for (int i = 0; i < 8; i++) {
    struct op_desc o = mk(MLX5_OPCODE_RDMA_READ, 16 + i * 29, R + 100000 + 4096 * i, L + 65536 + 4096 * i);
    uint16_t idx = post(w, 0, &o);
    ring(w, 0);
    wait_cqe(w, 0, idx);
  }
  for (int i = 0; i < 4; i++) {
    struct op_desc o = mk(MLX5_OPCODE_RDMA_WRITE, 1 + i * 3 + (i == 3 ? 2 : 0), R + 200000 + 64 * i, 0);
    o.lkey = 0; /* inline */
    for (int k = 0; k < 12; k++)
      o.inl[k] = (uint8_t)(0xa0 + i * 16 + k);
    uint16_t idx = post(w, 0, &o);
    ring(w, 0);
    wait_cqe(w, 0, idx);
  }
  for (int i = 0; i < 4; i++) {
    struct op_desc o = mk(MLX5_OPCODE_ATOMIC_FA, 8, R + R_ATOMIC, L + R_ATOMIC + 8 * i);
    o.add_or_swap = (uint64_t)(i + 1);
    uint16_t idx = post(w, 0, &o);
    ring(w, 0);
    wait_cqe(w, 0, idx);
  }
  for (int i = 0; i < 4; i++) {
    struct op_desc o = mk(MLX5_OPCODE_ATOMIC_CS, 8, R + R_ATOMIC + 8, L + R_ATOMIC + 64 + 8 * i);
    o.compare = (uint64_t)(i == 2 ? 999 : 100 + i); /* one mismatching compare */
    o.add_or_swap = (uint64_t)(101 + i);
    uint16_t idx = post(w, 0, &o);
    ring(w, 0);
    wait_cqe(w, 0, idx);
  }
  {
    struct op_desc o = mk(MLX5_OPCODE_RDMA_WRITE, 64, R + 250000, L + 1024);
    uint16_t idx = post(w, 0, &o);
    ring_doca(w, 0);
    wait_cqe(w, 0, idx);
  }
  for (int s = 0; s < SWEEP_STEPS; s++) {
    uint16_t last = 0;
    for (int k = 0; k < sweep_n(s); k++) {
      struct op_desc o = mk(MLX5_OPCODE_RDMA_WRITE, 8, R + 400000 + 8 * (uint64_t)k, L + 8 * (uint64_t)(k % 512));
      last = post(w, 1, &o);
    }
    ring(w, 1);
    wait_cqe(w, 1, last);
  }
}

/* The BlueFlame WQE on QP 1: the WQE goes to the SQ, then its 64 bytes to the BF register (here
 * by the caller: 8 lanes x 8 bytes on the GPU), which rings with the CPU-convention ctrl word. */
HD uint16_t bf_prepare(struct wl *w, uint64_t out[8]) {
  struct op_desc o = mk(MLX5_OPCODE_RDMA_WRITE, 32, (uint64_t)w->R + 260000, (uint64_t)w->L + 2048);
  uint16_t idx = post(w, 1, &o);
  const uint8_t *src = w->q[1].sq + (uint32_t)(idx & (w->q[1].sq_cnt - 1)) * WQEBB;
  memcpy(out, src, 64);
  FENCE();
  w->q[1].dbr[1] = be32(w->pi[1]);
  FENCE();
  w->rings++;
  return idx;
}

#endif
