/* Test harness (issue 11, item 3), never part of sigmatop: lets NVSHMEM's IoMemory registration of
 * the software NIC's UAR through in UNTRACED runs.
 *
 * A real UAR is MMIO, and NVSHMEM's IBGDA transport maps it into the GPU with
 * cudaHostRegister(uar->reg_addr, size, Portable|Mapped|IoMemory). The software NIC's UAR is an
 * ordinary RAM page, which CUDA refuses with IoMemory (CUDA_ERROR_INVALID_VALUE, reference §8).
 * This LD_PRELOAD library wraps the driver's cuMemHostRegister and, only when the driver refused
 * IoMemory for a range that the NIC says is one of its UARs (testnic_uar_contains, exported by
 * tests/testnic's libmlx5), registers it again without the flag. Everything else passes through.
 *
 * cudart (static, inside NVSHMEM's transport) reaches the driver as reference §8 describes:
 * dlsym(libcuda, "cuGetProcAddress_v2"), then a self-lookup of "cuGetProcAddress" through it, then
 * every entry point through the pointer that self-lookup returned. So this library exports dlsym,
 * hands out its own cuGetProcAddress[_v2], answers the self-lookup with itself and returns its
 * cuMemHostRegister wrapper for the versions that select the _v2 / v1 ABI.
 *
 * Traced runs preload "libsigmatop_preload.so:this". sigmatop's dlsym comes first and calls libc's
 * dlsym directly, so this library's dlsym is never reached there: sigmatop sees NVSHMEM's flags
 * exactly as passed and takes its real-hardware branch (a shadow page registered without
 * IoMemory; the UAR itself is never registered). The exit line says what this library did:
 *   nvshmem_harness: pid=P lookups_wrapped=N uar_retries=M other_refusals=K
 * (0 wrapped lookups = the harness was bypassed, as under sigmatop).
 *
 * Build: gcc -O2 -shared -fPIC -o libnvshmem_harness.so nvshmem_harness.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef int CUresult;
typedef CUresult (*gpa_v2_fn)(const char *, void **, int, uint64_t, int *);
typedef CUresult (*gpa_v1_fn)(const char *, void **, int, uint64_t);
typedef CUresult (*host_register_fn)(void *, size_t, unsigned);
typedef void *(*dlsym_fn)(void *, const char *);
typedef int (*uar_contains_fn)(const void *, size_t);

#define CUDA_ERROR_INVALID_VALUE 1
#define CU_MEMHOSTREGISTER_IOMEMORY 4u

/* Read by the dlsym trampoline below: libc's dlsym. */
dlsym_fn nvshmem_harness_real_dlsym __attribute__((visibility("hidden")));
static gpa_v2_fn real_gpa_v2;
static gpa_v1_fn real_gpa_v1;
static host_register_fn real_register_v2, real_register_v1;
static unsigned long lookups_wrapped, uar_retries, other_refusals;

static void resolve_dlsym(void)
{
	if (__atomic_load_n(&nvshmem_harness_real_dlsym, __ATOMIC_ACQUIRE))
		return;
	/* The next dlsym after this library: libc's (dlvsym with RTLD_NEXT is resolved relative to
	 * this library even when an earlier preload also exports dlvsym). */
	void *p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
	if (!p)
		p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
	__atomic_store_n(&nvshmem_harness_real_dlsym, (dlsym_fn)p, __ATOMIC_RELEASE);
}

__attribute__((constructor(101))) static void harness_init(void)
{
	resolve_dlsym();
}

__attribute__((destructor)) static void harness_fini(void)
{
	fprintf(stderr, "nvshmem_harness: pid=%d lookups_wrapped=%lu uar_retries=%lu other_refusals=%lu\n",
		(int)getpid(), lookups_wrapped, uar_retries, other_refusals);
}

/* Whether the software NIC (if it is this process's libmlx5) says [p, p+n) is one of its UARs. */
static int nic_uar(const void *p, size_t n)
{
	void *h = dlopen("libmlx5.so.1", RTLD_LAZY | RTLD_NOLOAD);
	if (!h)
		return 0;
	uar_contains_fn f = (uar_contains_fn)nvshmem_harness_real_dlsym(h, "testnic_uar_contains");
	int yes = f && f(p, n);
	dlclose(h);
	return yes;
}

static CUresult host_register(host_register_fn real, void *p, size_t n, unsigned flags)
{
	CUresult r = real(p, n, flags);
	if (r != CUDA_ERROR_INVALID_VALUE || !(flags & CU_MEMHOSTREGISTER_IOMEMORY))
		return r;
	if (!nic_uar(p, n)) {
		__atomic_fetch_add(&other_refusals, 1, __ATOMIC_RELAXED);
		return r;
	}
	CUresult r2 = real(p, n, flags & ~CU_MEMHOSTREGISTER_IOMEMORY);
	__atomic_fetch_add(&uar_retries, 1, __ATOMIC_RELAXED);
	fprintf(stderr,
		"nvshmem_harness: cuMemHostRegister(%p, %zu, 0x%x) on a software-NIC UAR: IoMemory refused on RAM "
		"(error %d); registered without it: %d\n",
		p, n, flags, r, r2);
	return r2;
}

static CUresult wrap_register_v2(void *p, size_t n, unsigned flags)
{
	return host_register(real_register_v2, p, n, flags);
}

static CUresult wrap_register_v1(void *p, size_t n, unsigned flags)
{
	return host_register(real_register_v1, p, n, flags);
}

static CUresult wrap_gpa_v2(const char *sym, void **pfn, int ver, uint64_t flags, int *status);
static CUresult wrap_gpa_v1(const char *sym, void **pfn, int ver, uint64_t flags);

/* Replaces the driver's answer for `sym` at `ver` with a wrapper where this library has one for
 * that ABI variant (versions as in reference §6). */
static void wrap_answer(const char *sym, void **pfn, int ver)
{
	if (!sym || !pfn || !*pfn)
		return;
	if (!strcmp(sym, "cuGetProcAddress")) {
		if (ver >= 12000) {
			if (*pfn != (void *)wrap_gpa_v2)
				real_gpa_v2 = (gpa_v2_fn)*pfn;
			*pfn = (void *)wrap_gpa_v2;
		} else if (ver >= 11030) {
			if (*pfn != (void *)wrap_gpa_v1)
				real_gpa_v1 = (gpa_v1_fn)*pfn;
			*pfn = (void *)wrap_gpa_v1;
		} else {
			return;
		}
	} else if (!strcmp(sym, "cuMemHostRegister")) {
		if (ver >= 6050) {
			real_register_v2 = (host_register_fn)*pfn;
			*pfn = (void *)wrap_register_v2;
		} else if (ver >= 4000) {
			real_register_v1 = (host_register_fn)*pfn;
			*pfn = (void *)wrap_register_v1;
		} else {
			return;
		}
	} else {
		return;
	}
	__atomic_fetch_add(&lookups_wrapped, 1, __ATOMIC_RELAXED);
}

static CUresult wrap_gpa_v2(const char *sym, void **pfn, int ver, uint64_t flags, int *status)
{
	CUresult r = real_gpa_v2(sym, pfn, ver, flags, status);
	if (r == 0)
		wrap_answer(sym, pfn, ver);
	return r;
}

static CUresult wrap_gpa_v1(const char *sym, void **pfn, int ver, uint64_t flags)
{
	CUresult r = real_gpa_v1(sym, pfn, ver, flags);
	if (r == 0)
		wrap_answer(sym, pfn, ver);
	return r;
}

/* dlsym for every handle but RTLD_NEXT (the trampoline sends that straight to libc so that the
 * caller's return address, which RTLD_NEXT is relative to, is the program's). */
__attribute__((visibility("hidden"))) void *nvshmem_harness_dlsym(void *handle, const char *name)
{
	resolve_dlsym();
	void *r = nvshmem_harness_real_dlsym ? nvshmem_harness_real_dlsym(handle, name) : NULL;
	if (!r || !name || name[0] != 'c' || name[1] != 'u')
		return r;
	if (!strcmp(name, "cuGetProcAddress_v2")) {
		real_gpa_v2 = (gpa_v2_fn)r;
		__atomic_fetch_add(&lookups_wrapped, 1, __ATOMIC_RELAXED);
		return (void *)wrap_gpa_v2;
	}
	if (!strcmp(name, "cuGetProcAddress")) {
		real_gpa_v1 = (gpa_v1_fn)r;
		__atomic_fetch_add(&lookups_wrapped, 1, __ATOMIC_RELAXED);
		return (void *)wrap_gpa_v1;
	}
	if (!strcmp(name, "cuMemHostRegister_v2")) {
		real_register_v2 = (host_register_fn)r;
		__atomic_fetch_add(&lookups_wrapped, 1, __ATOMIC_RELAXED);
		return (void *)wrap_register_v2;
	}
	if (!strcmp(name, "cuMemHostRegister")) {
		real_register_v1 = (host_register_fn)r;
		__atomic_fetch_add(&lookups_wrapped, 1, __ATOMIC_RELAXED);
		return (void *)wrap_register_v1;
	}
	return r;
}

/* Exported dlsym (x86-64): RTLD_NEXT ((void *)-1) jumps to libc's dlsym with the caller's return
 * address intact; any other handle goes through nvshmem_harness_dlsym. */
__asm__(".text\n"
	".globl dlsym\n"
	".type dlsym, @function\n"
	"dlsym:\n"
	"	cmpq $-1, %rdi\n"
	"	jne nvshmem_harness_dlsym\n"
	"	movq nvshmem_harness_real_dlsym(%rip), %rax\n"
	"	testq %rax, %rax\n"
	"	jz nvshmem_harness_dlsym\n"
	"	jmp *%rax\n"
	".size dlsym, .-dlsym\n");
