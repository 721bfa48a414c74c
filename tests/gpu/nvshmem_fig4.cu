// Paper Fig. 4 with NVIDIA's device code (issue 11, Benchmark): the latency of single NVSHMEM
// device operations over IBGDA, one PE timing each call with %globaltimer while the other PE only
// serves as the target. Every operation goes through NVSHMEM 3.4.5's own device library (WQE
// building, doorbell, CQ polling); nothing here touches a WQE or a doorbell.
//   put     nvshmem_long_p + nvshmem_quiet      (8-byte inline RDMA write, wait for its CQE)
//   get     nvshmem_long_g                      (8-byte RDMA read, wait for the data)
//   atomic  nvshmem_long_atomic_fetch_add       (8-byte fetch-add, wait for the old value)
//   put64   nvshmem_long_put_nbi (64 B) + quiet (RDMA write with a data segment)
// Usage (under mpirun, two PEs): nvshmem_fig4 OUTDIR [samples [warmup]]
// PE 0 writes OUTDIR/<op>.ns (one latency in ns per line) and then OUTDIR/pe0.done; PE 1 waits for
// that file on the host, so no kernel of PE 1 competes for the GPU while PE 0 measures (two
// processes share the one GPU by time slicing unless MPS runs). Then PE 1 checks what arrived:
// the last put's value and the fetch-add count, and prints "fig4 check ok" or exits 1.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#define CK(x)                                                                        \
    do {                                                                             \
        cudaError_t e_ = (x);                                                        \
        if (e_ != cudaSuccess) {                                                     \
            fprintf(stderr, "fig4: %s: %s (%s:%d)\n", #x, cudaGetErrorString(e_), __FILE__, \
                    __LINE__);                                                       \
            exit(2);                                                                 \
        }                                                                            \
    } while (0)

__device__ __forceinline__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

enum { OP_PUT, OP_GET, OP_ATOMIC, OP_PUT64, OPS };
static const char *NAMES[OPS] = {"put", "get", "atomic", "put64"};

// sym layout (longs): [0] put target, [1] get source, [2] fetch-add counter, [8..16) put64 target,
// [16..24) put64 source.
__global__ void bench(int op, long *sym, long *sink, unsigned long long *ns, int warm, int n,
                      int peer) {
    long acc = 0;
    for (int i = -warm; i < n; i++) {
        unsigned long long t0 = now_ns();
        switch (op) {
            case OP_PUT:
                nvshmem_long_p(sym, i + warm + 1, peer);
                nvshmem_quiet();
                break;
            case OP_GET:
                acc += nvshmem_long_g(sym + 1, peer);
                break;
            case OP_ATOMIC:
                acc += nvshmem_long_atomic_fetch_add(sym + 2, 1, peer);
                break;
            case OP_PUT64:
                nvshmem_long_put_nbi(sym + 8, sym + 16, 8, peer);
                nvshmem_quiet();
                break;
        }
        unsigned long long t1 = now_ns();
        if (i >= 0) ns[i] = t1 - t0;
    }
    sink[0] = acc;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: nvshmem_fig4 OUTDIR [samples [warmup]]\n");
        return 2;
    }
    std::string dir = argv[1];
    int n = argc > 2 ? atoi(argv[2]) : 2000;
    int warm = argc > 3 ? atoi(argv[3]) : 200;
    CK(cudaSetDevice(0));
    CK(cudaFree(0));
    nvshmem_init();
    int me = nvshmem_my_pe(), npes = nvshmem_n_pes();
    if (npes != 2) {
        fprintf(stderr, "fig4: needs exactly two PEs\n");
        return 2;
    }
    long *sym = (long *)nvshmem_malloc(4096);
    CK(cudaMemset(sym, 0, 4096));
    long *sink;
    unsigned long long *ns;
    CK(cudaMalloc(&sink, sizeof(long)));
    CK(cudaMalloc(&ns, sizeof(unsigned long long) * n));
    CK(cudaDeviceSynchronize());
    nvshmem_barrier_all();
    std::string done = dir + "/pe0.done";
    if (me == 0) {
        unsigned long long *h = (unsigned long long *)malloc(sizeof(unsigned long long) * n);
        for (int op = 0; op < OPS; op++) {
            bench<<<1, 1>>>(op, sym, sink, ns, warm, n, 1);
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(h, ns, sizeof(unsigned long long) * n, cudaMemcpyDeviceToHost));
            std::string f = dir + "/" + NAMES[op] + ".ns";
            FILE *o = fopen(f.c_str(), "w");
            if (!o) {
                perror(f.c_str());
                return 2;
            }
            for (int i = 0; i < n; i++) fprintf(o, "%llu\n", h[i]);
            fclose(o);
        }
        FILE *d = fopen(done.c_str(), "w");
        if (d) fclose(d);
        printf("fig4 pe0 ops=%d samples=%d warmup=%d\n", OPS, n, warm);
    } else {
        for (int waited = 0; access(done.c_str(), F_OK) != 0; waited++) {
            if (waited > 600000) {
                fprintf(stderr, "fig4: PE 0 never finished\n");
                return 2;
            }
            usleep(1000);
        }
    }
    nvshmem_barrier_all();
    int rc = 0;
    if (me == 1) {
        long h[3];
        CK(cudaMemcpy(h, sym, sizeof h, cudaMemcpyDeviceToHost));
        long want_put = warm + n, want_add = warm + n;
        if (h[0] == want_put && h[2] == want_add) {
            printf("fig4 check ok put=%ld fetch_add=%ld\n", h[0], h[2]);
        } else {
            printf("fig4 check FAILED put=%ld (want %ld) fetch_add=%ld (want %ld)\n", h[0],
                   want_put, h[2], want_add);
            rc = 1;
        }
    }
    nvshmem_free(sym);
    nvshmem_finalize();
    return rc;
}
