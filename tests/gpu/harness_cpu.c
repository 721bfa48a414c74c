/* CPU check of the NVSHMEM harness (tests/gpu/nvshmem_harness.c) with the stand-in libcuda
 * (tests/gpu/fake_cuda.c, which refuses IoMemory on RAM as the real driver does, reference §8):
 * resolves the driver the way cudart does (dlsym of cuGetProcAddress_v2, its self-lookup, then
 * every entry point through it), allocates a devx UAR on the software NIC and registers it the way
 * NVSHMEM's IBGDA transport does (Portable|Mapped|IoMemory at reg_addr, then its device pointer),
 * then registers an ordinary RAM page with IoMemory, which must still be refused. Prints
 *   harness_cpu uar_register=R uar_dptr=D ram_iomem=Q
 * (CUresult of each call; D = 0 when the device pointer was found). Without the harness R is 1
 * (refused); with it, or under sigmatop (which registers its shadow page instead), R = D = 0; Q is
 * 1 in every case. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

typedef int (*gpa_v2_fn)(const char *, void **, int, unsigned long long, int *);
typedef int (*reg_fn)(void *, size_t, unsigned);
typedef int (*dptr_fn)(uint64_t *, void *, unsigned);
typedef int (*unreg_fn)(void *);

static void *lookup(gpa_v2_fn gpa, const char *name)
{
	void *p = NULL;
	int st = 0;
	if (gpa(name, &p, 12000, 0, &st) || !p) {
		fprintf(stderr, "harness_cpu: no %s\n", name);
		exit(2);
	}
	return p;
}

int main(void)
{
	void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
	if (!cuda) {
		fprintf(stderr, "harness_cpu: %s\n", dlerror());
		return 2;
	}
	gpa_v2_fn gpa = (gpa_v2_fn)dlsym(cuda, "cuGetProcAddress_v2");
	if (!gpa)
		return 2;
	gpa = (gpa_v2_fn)lookup(gpa, "cuGetProcAddress");
	reg_fn reg = (reg_fn)lookup(gpa, "cuMemHostRegister");
	dptr_fn dptr = (dptr_fn)lookup(gpa, "cuMemHostGetDevicePointer");
	unreg_fn unreg = (unreg_fn)lookup(gpa, "cuMemHostUnregister");

	int n = 0;
	struct ibv_device **devs = ibv_get_device_list(&n);
	if (!devs || n < 1)
		return 2;
	struct ibv_context *ctx = ibv_open_device(devs[0]);
	if (!ctx)
		return 2;
	struct mlx5dv_devx_uar *uar = mlx5dv_devx_alloc_uar(ctx, 1u << 31 /* NC_DEDICATED */);
	if (!uar)
		return 2;
	const unsigned flags = 1 | 2 | 4; /* PORTABLE | DEVICEMAP | IOMEMORY */
	int r = reg(uar->reg_addr, 8, flags);
	uint64_t d = 0;
	int dr = r == 0 ? dptr(&d, uar->reg_addr, 0) : -1;
	void *ram = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (ram == MAP_FAILED)
		return 2;
	int q = reg((char *)ram + 0x800, 8, flags);
	printf("harness_cpu uar_register=%d uar_dptr=%d ram_iomem=%d\n", r, dr == 0 && d ? 0 : 1, q);
	fflush(stdout);
	if (r == 0)
		unreg(uar->reg_addr);
	mlx5dv_devx_free_uar(uar);
	ibv_close_device(ctx);
	ibv_free_device_list(devs);
	return 0;
}
