/* Test-only workload for CI (no GPU): NVSHMEM IBGDA's host set-up against the devx emulation,
 * the driver reached like cudart reaches it (dlopen libcuda.so.1 -> dlsym cuGetProcAddress_v2 ->
 * self-lookup -> every entry point through it; here libcuda is tests/gpu/fake_cuda.c), and CPU
 * threads playing the GPU: they build WQEs in NVSHMEM's formats in "device" memory and store
 * doorbells to the pointer cuMemHostGetDevicePointer returned (the shadow page under sigmatop).
 * With DEVX_CPU_HOST_QUEUES=1 the send queues are host memory registered with the driver
 * (NVSHMEM_IBGDA_FORCE_NIC_BUF_MEMTYPE=hostmem), the rest stays in "device" memory.
 * DEVX_CPU_SHARED_UAR=1 binds both QPs to one UAR and adds rounds of back-to-back doorbells of
 * the two QPs on that one register; DEVX_CPU_REUSE=N rounds that reuse every send-queue slot
 * before sigmatop's (held) copy of them ran; DEVX_CPU_DOORBELLS=N runs N doorbells of one RDMA
 * write each on QP 0, each waited for, instead of all that (benches/poller_callgrind.py: the
 * poller's price of one doorbell).
 * At the end the QPs are torn down as NVSHMEM does (UAR unregistered, QP destroyed, umems
 * deregistered, UAR freed, the GPU send queue freed); DEVX_CPU_SLOW_TEARDOWN=MS keeps the last
 * WQE copies in flight MS ms across it.
 * Usage: devx_cpu WQE_LIST_FILE. Prints results (identical with and without sigmatop) on stdout. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "scenario.h"

typedef int (*gpa2_t)(const char *, void **, int, unsigned long long, int *);
static int (*p_alloc)(uint64_t *, size_t);
static int (*p_reg)(void *, size_t, unsigned);
static int (*p_dptr)(uint64_t *, void *, unsigned);
static int (*p_unreg)(void *);
static int (*p_handle)(void *, uint64_t, size_t, int, unsigned long long);
static int (*p_free)(uint64_t);
static void (*p_slow)(int); /* the stand-in's fake_cuda_slow_copies (not in a real driver) */

static int f_alloc(void **p, size_t n) {
  uint64_t d;
  int r = p_alloc(&d, n);
  *p = (void *)d;
  return r;
}
static int f_reg(void *p, size_t n, unsigned fl) { return p_reg(p, n, fl); }
/* A send queue in host memory the GPU can reach: pinned and registered (the fake's device
 * pointer of a registered page is its host address, so the "GPU threads" write it in place). */
static int f_host_wq(void **p, size_t n) {
  void *m = aligned_alloc(4096, (n + 4095) & ~4095ul);
  if (!m) return 2;
  memset(m, 0, n);
  *p = m;
  return p_reg(m, n, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP);
}
static int f_dptr(void **d, void *p) {
  uint64_t x;
  int r = p_dptr(&x, p, 0);
  *d = (void *)x;
  return r;
}
static int f_unreg(void *p) { return p_unreg(p); }
static int f_fd(void *p, size_t n, int *fd) { return p_handle(fd, (uint64_t)p, n, 1, 0); }
static int f_free(void *p) { return p_free((uint64_t)p); }
static void f_rd(void *dst, uint64_t src, size_t n) { memcpy(dst, (void *)src, n); }
static void f_wr(uint64_t dst, const void *src, size_t n) { memcpy((void *)dst, src, n); }

static void resolve(void) {
  void *h = dlopen("libcuda.so.1", RTLD_NOW);
  if (!h)
    die("dlopen libcuda.so.1");
  gpa2_t g = (gpa2_t)dlsym(h, "cuGetProcAddress_v2");
  if (!g)
    die("dlsym cuGetProcAddress_v2");
  gpa2_t gpa = NULL;
  int st;
  if (g("cuGetProcAddress", (void **)&gpa, 13000, 0, &st) || !gpa)
    die("cuGetProcAddress self-lookup");
  if (gpa("cuMemAlloc", (void **)&p_alloc, 13000, 0, &st) ||
      gpa("cuMemHostRegister", (void **)&p_reg, 13000, 0, &st) ||
      gpa("cuMemHostGetDevicePointer", (void **)&p_dptr, 13000, 0, &st) ||
      gpa("cuMemHostUnregister", (void **)&p_unreg, 13000, 0, &st) ||
      gpa("cuMemGetHandleForAddressRange", (void **)&p_handle, 13000, 0, &st) ||
      gpa("cuMemFree", (void **)&p_free, 13000, 0, &st) || !p_alloc || !p_reg || !p_dptr || !p_unreg ||
      !p_handle || !p_free)
    die("driver entry points");
  p_slow = (void (*)(int))dlsym(h, "fake_cuda_slow_copies");
  int (*init)(unsigned) = NULL;
  gpa("cuInit", (void **)&init, 13000, 0, &st);
  if (init)
    init(0);
}

/* The multi-thread batch: THREADS "GPU threads" each reserve PER slots of QP 1 with an atomic
 * and write their WQEs; after a barrier one of them rings once for all. */
#define SHARED_ROUNDS 200
#define THREADS 4
#define PER 32
static struct wl *W;
static pthread_barrier_t bar;
static uint16_t batch_start;
static void *batch_thread(void *arg) {
  long t = (long)arg;
  for (int k = 0; k < PER; k++) {
    uint16_t idx = (uint16_t)__atomic_fetch_add(&W->batch_prod, 1, __ATOMIC_RELAXED);
    uint32_t rel = (uint16_t)(idx - batch_start);
    struct op_desc o = mk(rel % 3 == 2 ? MLX5_OPCODE_RDMA_READ : MLX5_OPCODE_RDMA_WRITE, 16 + rel % 4,
                          (uint64_t)W->R + 500000 + 64 * (uint64_t)rel, (uint64_t)W->L + 700000 + 64 * (uint64_t)rel);
    post_at(W, 1, idx, &o, W->batch_base + rel);
  }
  pthread_barrier_wait(&bar);
  if (t == 0) {
    W->pi[1] = (uint16_t)(batch_start + THREADS * PER);
    W->nlog = W->batch_base + THREADS * PER;
    ring(W, 1);
    wait_cqe(W, 1, (uint16_t)(W->pi[1] - 1));
  }
  return NULL;
}

static uint64_t fnv(const uint8_t *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

int main(int argc, char **argv) {
  resolve();
  static struct drv d = {f_alloc, f_reg, f_dptr, f_unreg, f_fd, f_rd, f_wr, 0, NULL, f_free};
  const char *hq = getenv("DEVX_CPU_HOST_QUEUES");
  if (hq && *hq == '1')
    d.wq_alloc = f_host_wq;
  static struct setup s;
  setup_qps(&d, &s);
  static struct nic n;
  nic_start(&n, &d, &s);
  W = calloc(1, sizeof *W);
  for (int i = 0; i < NQP; i++)
    W->q[i] = s.q[i];
  if (f_alloc((void **)&W->L, BUF_BYTES) || f_alloc((void **)&W->R, BUF_BYTES))
    die("buffers");
  for (uint32_t i = 0; i < BUF_BYTES; i++)
    W->L[i] = (uint8_t)(i * 7 + 3), W->R[i] = (uint8_t)(i * 13 + 1);
  memset(W->R + R_ATOMIC, 0, 16);
  *(uint64_t *)(W->R + R_ATOMIC + 8) = 100;

  /* DEVX_CPU_DOORBELLS=N: N doorbells of one RDMA write each on QP 0, each waited for, and
   * nothing else (the bench prices one doorbell: no range a copy could miss). */
  const char *nd = getenv("DEVX_CPU_DOORBELLS");
  if (nd && atoi(nd) > 0) {
    for (int r = 0; r < atoi(nd); r++) {
      struct op_desc o = mk(MLX5_OPCODE_RDMA_WRITE, 8, (uint64_t)W->R + 840000 + 8 * (uint64_t)(r % 1024),
                            (uint64_t)W->L + 8 * (uint64_t)(r % 512));
      uint16_t i = post(W, 0, &o);
      ring(W, 0);
      wait_cqe(W, 0, i);
    }
    goto done;
  }

  scenario_single(W);

  /* BlueFlame: the WQE's 64 bytes stored to the BF register, body first, ctrl word last. */
  uint64_t bf[8];
  uint16_t idx = bf_prepare(W, bf);
  volatile uint64_t *reg = W->q[1].db;
  for (int k = 1; k < 8; k++)
    reg[k] = bf[k];
  FENCE();
  reg[0] = bf[0];
  wait_cqe(W, 1, idx);

  /* DEVX_CPU_STOP=PATH: stopped until PATH exists (the process goes on, its QPs stay up),
   * then ringing until PATH.done exists: what a hung kernel and its resumption look like. */
  const char *stop = getenv("DEVX_CPU_STOP");
  if (stop && *stop) {
    char done[4096];
    snprintf(done, sizeof done, "%s.done", stop);
    printf("STOPPED\n");
    fflush(stdout);
    while (access(stop, F_OK) != 0)
      usleep(1000);
    printf("RESUMED\n");
    fflush(stdout);
    for (uint64_t k = 0; access(done, F_OK) != 0; k++) {
      struct op_desc o = mk(MLX5_OPCODE_RDMA_WRITE, 8, (uint64_t)W->R + 830000 + 8 * (k % 512),
                            (uint64_t)W->L + 8 * (k % 512));
      uint16_t idx = post(W, 0, &o);
      ring(W, 0);
      wait_cqe(W, 0, idx);
      usleep(1000);
    }
  }

  /* DEVX_CPU_SHARED_UAR=1 (QP 1 bound to QP 0's UAR): SHARED_ROUNDS rounds of one write on
   * each QP, rung back to back on the one register (QP 0's doorbell, then QP 1's), each round
   * waited for. Between two reads of the register the second doorbell hides the first. */
  if (s.shared_uar) {
    for (int r = 0; r < SHARED_ROUNDS; r++) {
      uint64_t off = 8 * (uint64_t)(r % 512);
      struct op_desc a = mk(MLX5_OPCODE_RDMA_WRITE, 8, (uint64_t)W->R + 800000 + off, (uint64_t)W->L + off);
      struct op_desc b = mk(MLX5_OPCODE_RDMA_WRITE, 16, (uint64_t)W->R + 810000 + 2 * off, (uint64_t)W->L + 2 * off);
      uint16_t ia = post(W, 0, &a), ib = post(W, 1, &b);
      ring(W, 0);
      ring(W, 1);
      wait_cqe(W, 0, ia);
      wait_cqe(W, 1, ib);
    }
  }

  /* DEVX_CPU_REUSE=N: N rounds of a whole ring (SQ_CNT one-WQEBB writes) on QP 1 under one
   * doorbell each, with the stand-in's copies held 50 ms until the poller's synchronize: the
   * NIC completes a round at once and the next round rewrites every slot before the copy of
   * the last one reads them (the GPU reusing slots faster than sigmatop copies them). */
  const char *reuse = getenv("DEVX_CPU_REUSE");
  if (reuse && atoi(reuse) > 0) {
    if (!p_slow)
      die("DEVX_CPU_REUSE needs the stand-in libcuda (fake_cuda_slow_copies)");
    p_slow(50);
    for (int r = 0; r < atoi(reuse); r++) {
      uint16_t last = 0;
      for (uint32_t k = 0; k < SQ_CNT; k++) {
        struct op_desc o = mk(MLX5_OPCODE_RDMA_WRITE, 8, (uint64_t)W->R + 820000 + 8 * (uint64_t)(k % 2048),
                              (uint64_t)W->L + 8 * (uint64_t)(k % 512));
        last = post(W, 1, &o);
      }
      ring(W, 1);
      wait_cqe(W, 1, last);
    }
    p_slow(0);
  }

  /* DEVX_CPU_SLOW_TEARDOWN=MS: from the batch on, the stand-in's copies stay in flight MS ms
   * (until the poller's next synchronize), so the batch's WQE copy is still reading the send
   * queue while the program destroys the QP and frees the queue (teardown below). */
  const char *slow = getenv("DEVX_CPU_SLOW_TEARDOWN");
  if (slow && atoi(slow) > 0) {
    if (!p_slow)
      die("DEVX_CPU_SLOW_TEARDOWN needs the stand-in libcuda (fake_cuda_slow_copies)");
    p_slow(atoi(slow));
  }
  batch_start = W->pi[1];
  W->batch_prod = batch_start;
  W->batch_base = W->nlog;
  pthread_barrier_init(&bar, NULL, THREADS);
  pthread_t th[THREADS];
  for (long t = 0; t < THREADS; t++)
    pthread_create(&th[t], NULL, batch_thread, (void *)t);
  for (int t = 0; t < THREADS; t++)
    pthread_join(th[t], NULL);

  /* DEVX_CPU_FORK=1: a fork child that exits at once, as a forked worker of a GPU process
   * does; its exit time is printed (the preload's doorbell poller is the parent's alone). */
  const char *fk = getenv("DEVX_CPU_FORK");
  if (fk && *fk == '1') {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    pid_t pid = fork();
    if (pid == 0)
      _exit(0);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
      die("fork child");
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("FORK child_exit_ms=%ld\n",
           (long)((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000));
  }

done:
  nic_stop(&n);
  printf("RESULT local=%016llx remote=%016llx\n", (unsigned long long)fnv(W->L, BUF_BYTES),
         (unsigned long long)fnv(W->R, BUF_BYTES));
  printf("RESULT atomic=%llu cas=%llu\n", (unsigned long long)*(uint64_t *)(W->R + R_ATOMIC),
         (unsigned long long)*(uint64_t *)(W->R + R_ATOMIC + 8));
  printf("NIC wqes=%llu bad=%llu\n", (unsigned long long)n.wqes, (unsigned long long)n.bad);
  printf("DOORBELLS %u\n", W->rings);
  printf("WQES %u\n", W->nlog);
  if (argc > 1) {
    FILE *f = fopen(argv[1], "w");
    if (!f)
      die("open WQE list");
    for (uint32_t i = 0; i < W->nlog && i < MAX_LOG; i++) {
      struct oplog *l = &W->log[i];
      fprintf(f, "wqe qpn=%#x idx=%u opcode=%#x bytes=%u raddr=%#llx rkey=%#x\n", l->qpn, l->idx,
              l->opcode, l->bytes, (unsigned long long)l->raddr, l->rkey);
    }
    fclose(f);
  }
  teardown_qps(&d, &s);
  return n.bad ? 1 : 0;
}
