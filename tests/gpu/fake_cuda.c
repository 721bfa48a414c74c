/* Test-only stand-in for libcuda.so.1 where there is no GPU (CI): the driver entry points the
 * workload and sigmatop use, over host memory. "Device" memory is host memory the fake allocated
 * (cuPointerGetAttribute says DEVICE for it); a registered host range's device pointer is its host
 * address; copies are memcpy (deferred to the next synchronize, after a pause, once the program
 * called fake_cuda_slow_copies(ms)); cuMemFree unmaps. Registration follows the real driver's rules seen on the H200
 * (reference §8): IoMemory on ordinary RAM is refused, a second registration of a page is
 * CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED; cuPointerGetAttribute says DEVICE for "device"
 * memory, HOST for registered host memory and fails for any other address, as the driver does.
 * The current context's device is FAKE_CUDA_DEVICE (default 0). Resolved like cudart does: dlsym
 * of cuGetProcAddress_v2, then its self-lookup. Build: gcc -shared -fPIC -Wl,-soname,libcuda.so.1 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/mman.h>

typedef int CUresult;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct { uint64_t p, n; } devs[256], regs[256];
static int ndev, nreg;
static long pagesz(void) { return sysconf(_SC_PAGESIZE); }

CUresult cuInit(unsigned f) { (void)f; return 0; }
CUresult cuCtxGetCurrent(void **c) { *c = (void *)0x1; return 0; }
CUresult cuCtxSetCurrent(void *c) { (void)c; return 0; }
CUresult cuCtxGetDevice(int *d) {
  const char *e = getenv("FAKE_CUDA_DEVICE");
  *d = e ? atoi(e) : 0;
  return 0;
}
CUresult cuStreamCreate(void **s, unsigned f) { (void)f; *s = (void *)0x2; return 0; }
/* A slow copy engine on request (fake_cuda_slow_copies, below): async copies wait in a list and
 * run at the next synchronize, after a pause; until then a copy is "in flight" and reads its
 * source only then, as a DMA engine does. */
static int slow_ms;
static struct { void *dst; uint64_t src; size_t n; } pend[1024];
static int npend;
void fake_cuda_slow_copies(int ms) { __atomic_store_n(&slow_ms, ms, __ATOMIC_RELEASE); }
CUresult cuStreamSynchronize(void *s) {
  (void)s;
  pthread_mutex_lock(&mu);
  int n = npend;
  pthread_mutex_unlock(&mu);
  if (!n) return 0;
  usleep((useconds_t)__atomic_load_n(&slow_ms, __ATOMIC_ACQUIRE) * 1000);
  pthread_mutex_lock(&mu);
  for (int i = 0; i < npend; i++)
    memcpy(pend[i].dst, (void *)pend[i].src, pend[i].n);
  npend = 0;
  pthread_mutex_unlock(&mu);
  return 0;
}
CUresult cuMemcpyDtoHAsync_v2(void *dst, uint64_t src, size_t n, void *s) {
  (void)s;
  if (__atomic_load_n(&slow_ms, __ATOMIC_ACQUIRE)) {
    pthread_mutex_lock(&mu);
    if (npend < 1024) {
      pend[npend].dst = dst;
      pend[npend].src = src;
      pend[npend++].n = n;
      pthread_mutex_unlock(&mu);
      return 0;
    }
    pthread_mutex_unlock(&mu);
  }
  memcpy(dst, (void *)src, n);
  return 0;
}
/* "Device" memory is mapped whole pages, unmapped by cuMemFree: a read after the free faults, as
 * a DMA from freed GPU memory would be an error. */
CUresult cuMemAlloc_v2(uint64_t *p, size_t n) {
  size_t len = (n + 4095) & ~4095ul;
  void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return 2;
  pthread_mutex_lock(&mu);
  devs[ndev].p = (uint64_t)m;
  devs[ndev++].n = n;
  pthread_mutex_unlock(&mu);
  *p = (uint64_t)m;
  return 0;
}
CUresult cuMemFree_v2(uint64_t p) {
  pthread_mutex_lock(&mu);
  for (int i = 0; i < ndev; i++)
    if (devs[i].p == p && devs[i].n) {
      munmap((void *)p, (devs[i].n + 4095) & ~4095ul);
      devs[i].n = 0;
      pthread_mutex_unlock(&mu);
      return 0;
    }
  pthread_mutex_unlock(&mu);
  return 1;
}
static int is_dev(uint64_t a) {
  for (int i = 0; i < ndev; i++)
    if (a >= devs[i].p && a < devs[i].p + devs[i].n) return 1;
  return 0;
}
static int is_reg(uint64_t a) {
  for (int i = 0; i < nreg; i++)
    if (regs[i].n && a >= regs[i].p && a < regs[i].p + regs[i].n) return 1;
  return 0;
}
CUresult cuPointerGetAttribute(void *out, int attr, uint64_t p) {
  if (attr == 2) { /* MEMORY_TYPE */
    if (!is_dev(p) && !is_reg(p)) return 1; /* unknown to the driver: CUDA_ERROR_INVALID_VALUE */
    *(unsigned *)out = is_dev(p) ? 2 : 1;
    return 0;
  }
  if (attr == 9) { *(int *)out = 0; return is_dev(p) ? 0 : 1; }
  return 1;
}
CUresult cuMemHostRegister_v2(void *p, size_t n, unsigned flags) {
  uint64_t a = (uint64_t)p & ~(uint64_t)(pagesz() - 1), e = ((uint64_t)p + n + pagesz() - 1) & ~(uint64_t)(pagesz() - 1);
  if (flags & 4) return 1; /* IoMemory on RAM: CUDA_ERROR_INVALID_VALUE */
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nreg; i++)
    if (regs[i].n && a < regs[i].p + regs[i].n && e > regs[i].p) {
      pthread_mutex_unlock(&mu);
      return 712;
    }
  regs[nreg].p = a;
  regs[nreg++].n = e - a;
  pthread_mutex_unlock(&mu);
  return 0;
}
CUresult cuMemHostRegister(void *p, size_t n, unsigned flags) { return cuMemHostRegister_v2(p, n, flags); }
CUresult cuMemHostGetDevicePointer_v2(uint64_t *d, void *p, unsigned f) {
  (void)f;
  for (int i = 0; i < nreg; i++)
    if (regs[i].n && (uint64_t)p >= regs[i].p && (uint64_t)p < regs[i].p + regs[i].n) {
      *d = (uint64_t)p;
      return 0;
    }
  return 1;
}
CUresult cuMemHostUnregister(void *p) {
  uint64_t a = (uint64_t)p & ~(uint64_t)(pagesz() - 1);
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nreg; i++)
    if (regs[i].n && regs[i].p == a) {
      regs[i].n = 0;
      pthread_mutex_unlock(&mu);
      return 0;
    }
  pthread_mutex_unlock(&mu);
  return 713;
}
CUresult cuMemGetHandleForAddressRange(void *h, uint64_t d, size_t n, int type, unsigned long long f) {
  (void)d; (void)n; (void)f;
  if (type != 1) return 1;
  *(int *)h = eventfd(0, 0);
  return 0;
}
CUresult cuGetExportTable(const void **t, const void *id) { (void)t; (void)id; return 500; }

CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, unsigned long long flags, int *st);
CUresult cuGetProcAddress(const char *sym, void **pfn, int ver, unsigned long long flags) {
  return cuGetProcAddress_v2(sym, pfn, ver, flags, NULL);
}
static const struct { const char *name; void *v2, *v1; } table[] = {
  {"cuGetProcAddress", (void *)cuGetProcAddress_v2, (void *)cuGetProcAddress},
  {"cuInit", (void *)cuInit, (void *)cuInit},
  {"cuCtxGetCurrent", (void *)cuCtxGetCurrent, (void *)cuCtxGetCurrent},
  {"cuCtxSetCurrent", (void *)cuCtxSetCurrent, (void *)cuCtxSetCurrent},
  {"cuCtxGetDevice", (void *)cuCtxGetDevice, (void *)cuCtxGetDevice},
  {"cuStreamCreate", (void *)cuStreamCreate, (void *)cuStreamCreate},
  {"cuStreamSynchronize", (void *)cuStreamSynchronize, (void *)cuStreamSynchronize},
  {"cuMemcpyDtoHAsync", (void *)cuMemcpyDtoHAsync_v2, (void *)cuMemcpyDtoHAsync_v2},
  {"cuMemAlloc", (void *)cuMemAlloc_v2, (void *)cuMemAlloc_v2},
  {"cuMemFree", (void *)cuMemFree_v2, (void *)cuMemFree_v2},
  {"cuPointerGetAttribute", (void *)cuPointerGetAttribute, (void *)cuPointerGetAttribute},
  {"cuMemHostRegister", (void *)cuMemHostRegister_v2, (void *)cuMemHostRegister},
  {"cuMemHostGetDevicePointer", (void *)cuMemHostGetDevicePointer_v2, NULL},
  {"cuMemHostUnregister", (void *)cuMemHostUnregister, (void *)cuMemHostUnregister},
  {"cuMemGetHandleForAddressRange", (void *)cuMemGetHandleForAddressRange, (void *)cuMemGetHandleForAddressRange},
  {"cuGetExportTable", (void *)cuGetExportTable, (void *)cuGetExportTable},
};
CUresult cuGetProcAddress_v2(const char *sym, void **pfn, int ver, unsigned long long flags, int *st) {
  (void)flags;
  if (ver > 13000) return 1;
  *pfn = NULL;
  for (unsigned i = 0; i < sizeof table / sizeof table[0]; i++)
    if (!strcmp(table[i].name, sym)) {
      *pfn = ver >= 12000 ? table[i].v2 : table[i].v1;
      break;
    }
  if (st) *st = *pfn ? 0 : 1;
  return 0;
}
