// NCCL device API GIN test program (issue 28): kernels put and signal between ranks through
// NCCL's GPU-initiated networking; every byte and signal checked by the program.
//
//   mpirun -np N nccl_gin [-s BYTES] [-n ROUNDS] [-t TIMEOUT_S]
//
// Each rank (its own NCCL node, NCCL_HOSTID) allocates two symmetric buffers (ncclMemAlloc +
// ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC)) of ROUNDS x N slots of BYTES, creates a
// device communicator with two GIN signals and launches one CTA that, per round r, puts slot
// [r][p] of its send buffer into slot [r][me] of every other rank p's receive buffer with
// SignalInc on signal 0 and waits until signal 0 reaches (r+1)(N-1); then signals every peer with
// SignalAdd{5} on signal 1 alone (no payload) and waits for 5(N-1); then flushes. The host then
// checks each received word against what its sender wrote and both signals' final values.
// Which GIN backend NCCL picked (NCCL_GIN_TYPE: 2 proxy, 3 GDAKI) is printed from the device
// communicator. A kernel that does not finish within TIMEOUT_S is reported and the rank exits 3
// (a GIN path that never delivers must not hang the test).
//
// What a run asks of the network, per rank (the figures tests/gpu/gin_check.py computes):
// ROUNDS x (N-1) puts of BYTES, each followed by a signal increment, and N-1 signal adds.
//
// Build (GPU machine; NCCL_HOME with include/ and lib/libnccl.so):
//   nvcc -O2 -std=c++17 -gencode=arch=compute_90,code=sm_90 -I$NCCL_HOME/include \
//     -I/usr/lib/x86_64-linux-gnu/openmpi/include nccl_gin.cu -L$NCCL_HOME/lib -lnccl \
//     -L/usr/lib/x86_64-linux-gnu/openmpi/lib -lmpi -o nccl_gin
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <nccl_device.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CHECK_CUDA(x)                                                                         \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      fprintf(stderr, "nccl_gin: rank %d: %s failed: %s (%s:%d)\n", g_rank, #x,               \
              cudaGetErrorString(e_), __FILE__, __LINE__);                                    \
      MPI_Abort(MPI_COMM_WORLD, 2);                                                           \
    }                                                                                         \
  } while (0)
#define CHECK_NCCL(x)                                                                         \
  do {                                                                                        \
    ncclResult_t r_ = (x);                                                                    \
    if (r_ != ncclSuccess) {                                                                  \
      fprintf(stderr, "nccl_gin: rank %d: %s failed: %s (%d): %s (%s:%d)\n", g_rank, #x,      \
              ncclGetErrorString(r_), (int)r_, ncclGetLastError(NULL), __FILE__, __LINE__);   \
      MPI_Abort(MPI_COMM_WORLD, 2);                                                           \
    }                                                                                         \
  } while (0)

static int g_rank = -1;

// The word j of the slot that rank src sends to rank dst in round r.
__host__ __device__ static inline uint32_t pattern(int src, int dst, int r, size_t j) {
  return (uint32_t)src * 2654435761u ^ (uint32_t)dst * 40503u ^ (uint32_t)r * 2246822519u ^
         (uint32_t)j;
}

__global__ void ginKernel(ncclWindow_t sendwin, ncclWindow_t recvwin, size_t bytes, int rounds,
                          struct ncclDevComm devComm, unsigned long long* out) {
  ncclGin gin{devComm, 0};
  const int n = devComm.nRanks, me = devComm.rank;
  for (int r = 0; r < rounds; r++) {
    for (int p = threadIdx.x; p < n; p += blockDim.x) {
      if (p == me) continue;
      gin.put(ncclTeamWorld(devComm), p, recvwin, ((size_t)r * n + me) * bytes, sendwin,
              ((size_t)r * n + p) * bytes, bytes, ncclGin_SignalInc{0});
    }
    gin.waitSignal(ncclCoopCta(), 0, (uint64_t)(r + 1) * (uint64_t)(n - 1));
  }
  for (int p = threadIdx.x; p < n; p += blockDim.x) {
    if (p == me) continue;
    gin.signal(ncclTeamWorld(devComm), p, ncclGin_SignalAdd{1, 5});
  }
  gin.waitSignal(ncclCoopCta(), 1, 5ull * (uint64_t)(n - 1));
  gin.flush(ncclCoopCta());
  __syncthreads();
  if (threadIdx.x == 0) {
    out[0] = gin.readSignal(0);
    out[1] = gin.readSignal(1);
  }
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static long parse_arg(const char* s, const char* what) {
  char* end = NULL;
  long v = strtol(s, &end, 0);
  if (end == s || *end != '\0' || v <= 0) {
    fprintf(stderr, "nccl_gin: %s must be a positive number, got '%s'\n", what, s);
    exit(64);
  }
  return v;
}

int main(int argc, char** argv) {
  size_t bytes = 65536;
  int rounds = 8;
  double timeout_s = 60;
  int c;
  while ((c = getopt(argc, argv, "s:n:t:")) != -1) {
    switch (c) {
      case 's': bytes = (size_t)parse_arg(optarg, "-s BYTES"); break;
      case 'n': rounds = (int)parse_arg(optarg, "-n ROUNDS"); break;
      case 't': timeout_s = (double)parse_arg(optarg, "-t TIMEOUT_S"); break;
      default:
        fprintf(stderr, "usage: nccl_gin [-s BYTES] [-n ROUNDS] [-t TIMEOUT_S]\n");
        return 64;
    }
  }
  if (bytes % 4 != 0) {
    fprintf(stderr, "nccl_gin: -s BYTES must be a multiple of 4, got %zu\n", bytes);
    return 64;
  }
  MPI_Init(&argc, &argv);
  int n;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const int me = g_rank;
  if (n < 2) {
    fprintf(stderr, "nccl_gin: needs at least 2 ranks, got %d\n", n);
    MPI_Abort(MPI_COMM_WORLD, 64);
  }
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaFree(0));

  ncclUniqueId id;
  if (me == 0) CHECK_NCCL(ncclGetUniqueId(&id));
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm;
  CHECK_NCCL(ncclCommInitRank(&comm, n, id, me));

  const size_t total = (size_t)rounds * n * bytes;
  const size_t words = bytes / 4;
  void *sendb = NULL, *recvb = NULL;
  CHECK_NCCL(ncclMemAlloc(&sendb, total));
  CHECK_NCCL(ncclMemAlloc(&recvb, total));
  ncclWindow_t sendwin, recvwin;
  CHECK_NCCL(ncclCommWindowRegister(comm, sendb, total, &sendwin, NCCL_WIN_COLL_SYMMETRIC));
  CHECK_NCCL(ncclCommWindowRegister(comm, recvb, total, &recvwin, NCCL_WIN_COLL_SYMMETRIC));

  uint32_t* host = (uint32_t*)malloc(total);
  if (host == NULL) {
    fprintf(stderr, "nccl_gin: rank %d: out of host memory for %zu bytes\n", me, total);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  for (int r = 0; r < rounds; r++)
    for (int p = 0; p < n; p++)
      for (size_t j = 0; j < words; j++)
        host[((size_t)r * n + p) * words + j] = pattern(me, p, r, j);
  CHECK_CUDA(cudaMemcpy(sendb, host, total, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemset(recvb, 0, total));

  struct ncclDevCommRequirements reqs;
  memset(&reqs, 0, sizeof(reqs));
  reqs.ginSignalCount = 2;
  reqs.ginForceEnable = true;
  reqs.ginContextCount = 1;
  struct ncclDevComm devComm;
  CHECK_NCCL(ncclDevCommCreate(comm, &reqs, &devComm));
  printf("nccl_gin: rank %d of %d: GIN type %d (2 proxy, 3 GDAKI), %d context(s), %d signals; "
         "%d rounds of %zu B to each of %d peers\n",
         me, n, devComm.ginContextCount > 0 ? (int)devComm.ginTypes[0] : -1,
         (int)devComm.ginContextCount, devComm.ginSignalCount, rounds, bytes, n - 1);
  fflush(stdout);

  unsigned long long* dout = NULL;
  CHECK_CUDA(cudaMalloc(&dout, 2 * sizeof(unsigned long long)));
  CHECK_CUDA(cudaMemset(dout, 0, 2 * sizeof(unsigned long long)));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  MPI_Barrier(MPI_COMM_WORLD);

  double t0 = now_s();
  ginKernel<<<1, 32, 0, stream>>>(sendwin, recvwin, bytes, rounds, devComm, dout);
  CHECK_CUDA(cudaGetLastError());
  cudaError_t q;
  while ((q = cudaStreamQuery(stream)) == cudaErrorNotReady) {
    if (now_s() - t0 > timeout_s) {
      fprintf(stderr, "nccl_gin: rank %d: TIMEOUT: the kernel did not finish within %.0f s "
              "(puts or signals never arrived)\n", me, timeout_s);
      fflush(stderr);
      _exit(3);
    }
    usleep(100);
  }
  CHECK_CUDA(q);
  double secs = now_s() - t0;

  unsigned long long sig[2];
  CHECK_CUDA(cudaMemcpy(sig, dout, sizeof(sig), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(host, recvb, total, cudaMemcpyDeviceToHost));
  long bad = 0;
  for (int r = 0; r < rounds; r++)
    for (int src = 0; src < n; src++)
      for (size_t j = 0; j < words; j++) {
        uint32_t got = host[((size_t)r * n + src) * words + j];
        uint32_t want = src == me ? 0 : pattern(src, me, r, j);
        if (got != want) {
          if (bad < 5)
            fprintf(stderr, "nccl_gin: rank %d: round %d from rank %d word %zu: %#x, want %#x\n",
                    me, r, src, j, got, want);
          bad++;
        }
      }
  const unsigned long long want0 = (unsigned long long)rounds * (n - 1), want1 = 5ull * (n - 1);
  int ok = bad == 0 && sig[0] == want0 && sig[1] == want1;
  printf("nccl_gin: rank %d %s: %d puts of %zu B received, %ld words wrong; signal0 %llu (want "
         "%llu), signal1 %llu (want %llu); kernel %.3f ms (%.1f us per round)\n",
         me, ok ? "OK" : "FAILED", rounds * (n - 1), bytes, bad, sig[0], want0, sig[1], want1,
         secs * 1e3, secs * 1e6 / rounds);
  fflush(stdout);

  // Every rank has its data before anyone tears down what peers may still be writing.
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK_NCCL(ncclDevCommDestroy(comm, &devComm));
  CHECK_NCCL(ncclCommWindowDeregister(comm, sendwin));
  CHECK_NCCL(ncclCommWindowDeregister(comm, recvwin));
  CHECK_NCCL(ncclMemFree(sendb));
  CHECK_NCCL(ncclMemFree(recvb));
  CHECK_CUDA(cudaFree(dout));
  CHECK_CUDA(cudaStreamDestroy(stream));
  CHECK_NCCL(ncclCommFinalize(comm));
  CHECK_NCCL(ncclCommDestroy(comm));
  free(host);
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Finalize();
  return all_ok ? 0 : 1;
}
