/* Test-only GPU workload for the H200: NVSHMEM IBGDA's host set-up through cudart against the
 * devx emulation (the UAR is ordinary RAM, so no IoMemory), kernels that build WQEs in GPU memory
 * in NVSHMEM's formats and ring doorbells (scenario.h), and the test NIC thread (host.h) that
 * executes them on GPU memory with copies on its own non-blocking stream.
 *   gpu_workload test LIST_FILE   the scenario: results, doorbell count, every WQE posted
 *   gpu_workload bench            paper Fig. 4: put+quiet, get, fetch-add, ping-pong latency
 * Build: nvcc -O2 -arch=sm_90 -o gpu_workload gpu_workload.cu -L. -lmlx5emu -Xlinker -rpath,. */
#include <algorithm>
#include <cuda_runtime.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>
#include <vector>

#include "scenario.h"

#define CK(x)                                                                                      \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                                   \
      exit(3);                                                                                     \
    }                                                                                              \
  } while (0)

static cudaStream_t nic_stream;
static uint8_t *stage; /* pinned bounce buffer of the NIC's DMA */

/* bench-host: SQs, CQs and data in pinned host memory mapped into the GPU (NVSHMEM can place
 * its NIC buffers in host memory too), so the test NIC works with plain loads and stores and the
 * benchmark sees the doorbell path rather than the emulated NIC's copies. */
static int host_mode;
static struct {
  uint64_t p, n;
} hr[64];
static int nhr;
static int in_host(uint64_t a) {
  for (int i = 0; i < nhr; i++)
    if (a >= hr[i].p && a < hr[i].p + hr[i].n)
      return 1;
  return 0;
}
static int g_alloc(void **p, size_t n) {
  if (host_mode) {
    if (cudaHostAlloc(p, n, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess)
      return 1;
    memset(*p, 0, n);
    hr[nhr].p = (uint64_t)*p;
    hr[nhr++].n = n;
    return 0;
  }
  if (cudaMalloc(p, n) != cudaSuccess)
    return 1;
  return cudaMemset(*p, 0, n) != cudaSuccess;
}
static int g_reg(void *p, size_t n, unsigned fl) {
  cudaError_t e = cudaHostRegister(p, n, fl);
  return e == cudaSuccess || e == cudaErrorHostMemoryAlreadyRegistered ? 0 : (int)e;
}
static int g_dptr(void **d, void *p) { return cudaHostGetDevicePointer(d, p, 0) != cudaSuccess; }
static int g_unreg(void *p) { return cudaHostUnregister(p) != cudaSuccess; }
typedef int (*get_handle_t)(void *, unsigned long long, size_t, int, unsigned long long);
static int g_fd(void *p, size_t n, int *fd) {
  void *fn = NULL;
  cudaDriverEntryPointQueryResult q;
  if (cudaGetDriverEntryPointByVersion("cuMemGetHandleForAddressRange", &fn, 12000,
                                       cudaEnableDefault, &q) != cudaSuccess || !fn)
    return 1;
  /* dma-buf export needs the range page-aligned; the DBR buffer is a cudaMalloc (2 MiB aligned). */
  return ((get_handle_t)fn)(fd, (unsigned long long)p, n < 65536 ? 65536 : n, 1, 0);
}
static void g_rd(void *dst, uint64_t src, size_t n) {
  if (in_host(src)) {
    memcpy(dst, (const void *)src, n);
    return;
  }
  cudaMemcpyAsync(stage, (void *)src, n, cudaMemcpyDefault, nic_stream);
  cudaStreamSynchronize(nic_stream);
  memcpy(dst, stage, n);
}
static void g_wr(uint64_t dst, const void *src, size_t n) {
  if (in_host(dst)) {
    memcpy((void *)dst, src, n);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    return;
  }
  memcpy(stage, src, n);
  cudaMemcpyAsync((void *)dst, stage, n, cudaMemcpyDefault, nic_stream);
  cudaStreamSynchronize(nic_stream);
}

__global__ void k_single(struct wl *w) {
  __shared__ uint64_t bf[8];
  __shared__ uint16_t idx;
  if (threadIdx.x == 0)
    scenario_single(w);
  __syncthreads();
  if (threadIdx.x == 0)
    idx = bf_prepare(w, bf);
  __syncthreads();
  /* DOCA submit_bf_warp: 8 lanes store 8 bytes each, one 64-byte BlueFlame write. */
  if (threadIdx.x < 8)
    ((volatile uint64_t *)w->q[1].db)[threadIdx.x] = bf[threadIdx.x];
  __syncthreads();
  if (threadIdx.x == 0)
    wait_cqe(w, 1, idx);
}

/* NVSHMEM-style batched submission: every thread reserves slots with an atomic and writes its
 * WQEs; one doorbell covers all of them. */
__global__ void k_batch(struct wl *w, int per) {
  __shared__ uint16_t start;
  __shared__ uint32_t base;
  if (threadIdx.x == 0) {
    start = w->pi[1];
    base = w->nlog;
    w->batch_prod = start;
  }
  __syncthreads();
  for (int k = 0; k < per; k++) {
    uint16_t idx = (uint16_t)atomicAdd(&w->batch_prod, 1u);
    uint32_t rel = (uint16_t)(idx - start);
    struct op_desc o =
        mk(rel % 3 == 2 ? MLX5_OPCODE_RDMA_READ : MLX5_OPCODE_RDMA_WRITE, 16 + rel % 4,
           (uint64_t)w->R + 500000 + 64 * (uint64_t)rel, (uint64_t)w->L + 700000 + 64 * (uint64_t)rel);
    post_at(w, 1, idx, &o, base + rel);
  }
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) {
    w->pi[1] = (uint16_t)(start + blockDim.x * per);
    w->nlog = base + blockDim.x * per;
    ring(w, 1);
    wait_cqe(w, 1, (uint16_t)(w->pi[1] - 1));
  }
}

__device__ static inline uint64_t gtime() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* Paper Fig. 4, one persistent kernel per operation: 0 put+quiet, 1 get, 2 fetch-add, 3 ping-pong
 * (thread 0 = rank A on QP 0, thread 32 = rank B on QP 1, inline 4-byte puts). */
__global__ void k_bench(struct wl *w, int op, int warm, int iters, unsigned long long *lat) {
  uint64_t L = (uint64_t)w->L, R = (uint64_t)w->R;
  int total = warm + iters;
  if (op < 3) {
    if (threadIdx.x != 0)
      return;
    for (int it = 0; it < total; it++) {
      uint64_t t0 = gtime();
      struct op_desc o;
      if (op == 0)
        o = mk(MLX5_OPCODE_RDMA_WRITE, 8, R + 800000, L + 800000);
      else if (op == 1)
        o = mk(MLX5_OPCODE_RDMA_READ, 8, R + 800008, L + 800008);
      else {
        o = mk(MLX5_OPCODE_ATOMIC_FA, 8, R + 800016, L + 800016);
        o.add_or_swap = 1;
      }
      uint16_t idx = post(w, 0, &o);
      ring(w, 0);
      wait_cqe(w, 0, idx);
      uint64_t t1 = gtime();
      if (it >= warm)
        lat[it - warm] = t1 - t0;
    }
    return;
  }
  volatile int *flagA = (volatile int *)(L + 900000), *flagB = (volatile int *)(R + 900000);
  if (threadIdx.x == 0) {
    for (int it = 0; it < total; it++) {
      uint64_t t0 = gtime();
      struct op_desc o = mk(MLX5_OPCODE_RDMA_WRITE, 4, R + 900000, 0);
      o.lkey = 0;
      int v = it + 1;
      memcpy(o.inl, &v, 4);
      post(w, 0, &o);
      ring(w, 0);
      while (*flagA != v)
        ;
      uint64_t t1 = gtime();
      if (it >= warm)
        lat[it - warm] = t1 - t0;
    }
  } else if (threadIdx.x == 32) {
    for (int it = 0; it < total; it++) {
      int v = it + 1;
      while (*flagB != v)
        ;
      struct op_desc o = mk(MLX5_OPCODE_RDMA_WRITE, 4, L + 900000, 0);
      o.lkey = 0;
      memcpy(o.inl, &v, 4);
      post(w, 1, &o);
      ring(w, 1);
    }
  }
}

static uint64_t fnv(const uint8_t *p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

/* CPU seconds of this process's thread named `name` (the sigmatop poller). */
static double thread_cpu(const char *name) {
  DIR *d = opendir("/proc/self/task");
  double sum = 0;
  struct dirent *e;
  long hz = sysconf(_SC_CLK_TCK);
  while (d && (e = readdir(d))) {
    char p[256], comm[64] = {0};
    snprintf(p, sizeof p, "/proc/self/task/%s/comm", e->d_name);
    FILE *f = fopen(p, "r");
    if (!f)
      continue;
    if (fgets(comm, sizeof comm, f) && !strncmp(comm, name, strlen(name))) {
      fclose(f);
      snprintf(p, sizeof p, "/proc/self/task/%s/stat", e->d_name);
      f = fopen(p, "r");
      char buf[1024];
      if (f && fgets(buf, sizeof buf, f)) {
        char *s = strrchr(buf, ')');
        unsigned long ut = 0, st = 0;
        /* fields after ')': state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
        if (s && sscanf(s + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2)
          sum += (double)(ut + st) / hz;
      }
    }
    if (f)
      fclose(f);
  }
  if (d)
    closedir(d);
  return sum;
}

static double now_s() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "test";
  // bench-host and test-host: queues and buffers in pinned host memory (NVSHMEM's hostmem).
  host_mode = !strcmp(mode, "bench-host") || !strcmp(mode, "test-host");
  CK(cudaSetDevice(0));
  CK(cudaFree(0));
  CK(cudaStreamCreateWithFlags(&nic_stream, cudaStreamNonBlocking));
  CK(cudaHostAlloc((void **)&stage, BUF_BYTES, cudaHostAllocDefault));
  static struct drv d = {g_alloc, g_reg, g_dptr, g_unreg, g_fd, g_rd, g_wr, 0};
  static struct setup s;
  setup_qps(&d, &s);
  static struct nic n;
  nic_start(&n, &d, &s);

  struct wl *h = (struct wl *)calloc(1, sizeof *h);
  for (int i = 0; i < NQP; i++)
    h->q[i] = s.q[i];
  if (g_alloc((void **)&h->L, BUF_BYTES) || g_alloc((void **)&h->R, BUF_BYTES))
    die("buffers");
  std::vector<uint8_t> Lh(BUF_BYTES), Rh(BUF_BYTES);
  for (uint32_t i = 0; i < BUF_BYTES; i++)
    Lh[i] = (uint8_t)(i * 7 + 3), Rh[i] = (uint8_t)(i * 13 + 1);
  memset(&Rh[R_ATOMIC], 0, 16);
  *(uint64_t *)&Rh[R_ATOMIC + 8] = 100;
  memset(&Lh[900000], 0, 8);
  memset(&Rh[900000], 0, 8);
  CK(cudaMemcpy(h->L, Lh.data(), BUF_BYTES, cudaMemcpyDefault));
  CK(cudaMemcpy(h->R, Rh.data(), BUF_BYTES, cudaMemcpyDefault));
  struct wl *w;
  CK(cudaMalloc((void **)&w, sizeof *w));
  CK(cudaMemcpy(w, h, sizeof *h, cudaMemcpyHostToDevice));

  int rc = 0;
  if (!strncmp(mode, "bench", 5)) {
    const int warm = 1000, iters = 5000;
    unsigned long long *lat;
    CK(cudaMalloc((void **)&lat, iters * sizeof *lat));
    static const char *names[4] = {"put_quiet", "get", "atomic_fa", "ping_pong"};
    double c0 = thread_cpu("sigmatop-db"), t0 = now_s();
    for (int op = 0; op < 4; op++) {
      k_bench<<<1, 64>>>(w, op, warm, iters, lat);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      std::vector<unsigned long long> v(iters);
      CK(cudaMemcpy(v.data(), lat, iters * sizeof *lat, cudaMemcpyDeviceToHost));
      std::sort(v.begin(), v.end());
      double mean = 0;
      for (auto x : v)
        mean += x;
      printf("BENCH %s median_ns=%llu p99_ns=%llu mean_ns=%.0f\n", names[op], v[iters / 2],
             v[iters * 99 / 100], mean / iters);
    }
    double c1 = thread_cpu("sigmatop-db"), t1 = now_s();
    printf("POLLER cpu_s=%.3f wall_s=%.3f cpu_pct=%.1f\n", c1 - c0, t1 - t0,
           100.0 * (c1 - c0) / (t1 - t0));
  } else {
    k_single<<<1, 32>>>(w);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    k_batch<<<1, 32>>>(w, 4);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h, w, sizeof *h, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(Lh.data(), h->L, BUF_BYTES, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(Rh.data(), h->R, BUF_BYTES, cudaMemcpyDeviceToHost));
    printf("RESULT local=%016llx remote=%016llx\n", (unsigned long long)fnv(Lh.data(), BUF_BYTES),
           (unsigned long long)fnv(Rh.data(), BUF_BYTES));
    printf("RESULT atomic=%llu cas=%llu\n", (unsigned long long)*(uint64_t *)&Rh[R_ATOMIC],
           (unsigned long long)*(uint64_t *)&Rh[R_ATOMIC + 8]);
    printf("NIC wqes=%llu bad=%llu\n", (unsigned long long)n.wqes, (unsigned long long)n.bad);
    printf("DOORBELLS %u\n", h->rings);
    printf("WQES %u\n", h->nlog);
    if (argc > 2) {
      FILE *f = fopen(argv[2], "w");
      if (!f)
        die("open WQE list");
      for (uint32_t i = 0; i < h->nlog && i < MAX_LOG; i++) {
        struct oplog *l = &h->log[i];
        fprintf(f, "wqe qpn=%#x idx=%u opcode=%#x bytes=%u raddr=%#llx rkey=%#x\n", l->qpn, l->idx,
                l->opcode, l->bytes, (unsigned long long)l->raddr, l->rkey);
      }
      fclose(f);
    }
    rc = n.bad ? 1 : 0;
  }
  nic_stop(&n);
  teardown_qps(&d, &s);
  return rc;
}
