/* Memory the NIC may touch: the memory-key table (what a NIC's MPT is) and the copies.
 *
 * Keys are mlx5-shaped 32-bit mkeys, (index << 8) | variant, with the index drawn from the
 * host-wide device segment so no two processes hand out the same key; lkey == rkey as on mlx5.
 * The table is an open-addressed hash read by the NIC thread without locks.
 *
 * GPU memory: when the process has libcuda loaded and an MR (or umem) lies in device memory, the
 * NIC thread copies with cuMemcpy in the registering thread's CUDA context. Nothing here
 * initialises CUDA itself; without libcuda every buffer is host memory.
 */
#include "nic.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MR_SLOTS 16384u
#define TOMB ((struct tn_mr *)1)

static struct tn_mr *mrs[MR_SLOTS];
static pthread_mutex_t mr_lock = PTHREAD_MUTEX_INITIALIZER;

uint32_t tn_mr_key_alloc(void)
{
	uint32_t idx = tn_id_alloc(TN_ID_MKEY);
	if (!idx)
		return 0;
	return (idx << 8) | ((idx * 0x5bu + 0x17u) & 0xff);
}

static uint32_t slot_of(uint32_t key)
{
	return ((key >> 8) * 2654435761u) & (MR_SLOTS - 1);
}

int tn_mr_insert(struct tn_mr *mr)
{
	pthread_mutex_lock(&mr_lock);
	uint32_t s = slot_of(mr->key);
	for (uint32_t i = 0; i < MR_SLOTS; i++, s = (s + 1) & (MR_SLOTS - 1)) {
		struct tn_mr *cur = mrs[s];
		if (!cur || cur == TOMB) {
			__atomic_store_n(&mrs[s], mr, __ATOMIC_RELEASE);
			pthread_mutex_unlock(&mr_lock);
			return 0;
		}
	}
	pthread_mutex_unlock(&mr_lock);
	return ENOMEM;
}

void tn_mr_remove(struct tn_mr *mr)
{
	pthread_mutex_lock(&mr_lock);
	uint32_t s = slot_of(mr->key);
	for (uint32_t i = 0; i < MR_SLOTS && mrs[s]; i++, s = (s + 1) & (MR_SLOTS - 1)) {
		if (mrs[s] == mr) {
			__atomic_store_n(&mrs[s], TOMB, __ATOMIC_RELEASE);
			break;
		}
	}
	pthread_mutex_unlock(&mr_lock);
	tn_nic_quiesce(); /* the NIC thread may still hold it for one packet */
}

struct tn_mr *tn_mr_find(uint32_t key)
{
	uint32_t s = slot_of(key);
	for (uint32_t i = 0; i < MR_SLOTS; i++, s = (s + 1) & (MR_SLOTS - 1)) {
		struct tn_mr *m = __atomic_load_n(&mrs[s], __ATOMIC_ACQUIRE);
		if (!m)
			return NULL;
		if (m != TOMB && m->key == key)
			return m;
	}
	return NULL;
}

uint8_t tn_mr_check(const struct tn_mr *mr, uint32_t pdn, uint64_t addr, uint64_t len, uint32_t need,
		    uint8_t synd)
{
	if (!mr || mr->pdn != pdn)
		return synd;
	if ((need & mr->access) != need)
		return synd;
	if (addr < mr->iova || len > mr->len || addr - mr->iova > mr->len - len)
		return synd;
	return 0;
}

void *tn_mr_ptr(const struct tn_mr *mr, uint64_t addr)
{
	return mr->addr + (addr - mr->iova);
}

/* ---- CUDA, only where the process already has it ---- */

typedef int (*cu_ptr_attr_fn)(void *data, int attr, uint64_t ptr);
typedef int (*cu_memcpy_async_fn)(uint64_t dst, uint64_t src, size_t n, void *stream);
typedef int (*cu_ctx_fn)(void *ctx);
typedef int (*cu_ctx_get_fn)(void **ctx);
typedef int (*cu_stream_create_fn)(void **stream, unsigned flags);
typedef int (*cu_stream_sync_fn)(void *stream);

static struct {
	int tried;
	cu_ptr_attr_fn ptr_attr;
	cu_memcpy_async_fn memcpy_async;
	cu_ctx_fn set_current;
	cu_ctx_get_fn get_current;
	cu_stream_create_fn stream_create;
	cu_stream_sync_fn stream_sync;
	void *ctx;            /* the context GPU buffers were registered in */
} cu;
static __thread void *thread_ctx, *thread_stream;

static void cuda_load(void)
{
	if (__atomic_load_n(&cu.tried, __ATOMIC_ACQUIRE))
		return;
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (h) {
		cu.ptr_attr = (cu_ptr_attr_fn)dlsym(h, "cuPointerGetAttribute");
		cu.memcpy_async = (cu_memcpy_async_fn)dlsym(h, "cuMemcpyAsync");
		cu.set_current = (cu_ctx_fn)dlsym(h, "cuCtxSetCurrent");
		cu.get_current = (cu_ctx_get_fn)dlsym(h, "cuCtxGetCurrent");
		cu.stream_create = (cu_stream_create_fn)dlsym(h, "cuStreamCreate");
		cu.stream_sync = (cu_stream_sync_fn)dlsym(h, "cuStreamSynchronize");
		if (!cu.ptr_attr || !cu.memcpy_async || !cu.set_current || !cu.get_current || !cu.stream_create ||
		    !cu.stream_sync)
			cu.ptr_attr = NULL;
	}
	__atomic_store_n(&cu.tried, 1, __ATOMIC_RELEASE);
}

int tn_cuda_available(void)
{
	cuda_load();
	return cu.ptr_attr != NULL;
}

int tn_mem_is_gpu(const void *p)
{
	if (!tn_cuda_available() || !p)
		return 0;
	unsigned int type = 0;
	/* CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2, CU_MEMORYTYPE_DEVICE = 2 */
	if (cu.ptr_attr(&type, 2, (uint64_t)(uintptr_t)p) != 0 || type != 2)
		return 0;
	if (!cu.ctx) {
		void *c = NULL;
		/* CU_POINTER_ATTRIBUTE_CONTEXT = 1: the allocation's own context, else the caller's */
		if ((cu.ptr_attr(&c, 1, (uint64_t)(uintptr_t)p) != 0 || !c) && cu.get_current(&c) != 0)
			c = NULL;
		cu.ctx = c;
	}
	return 1;
}

/* Copies through the GPU on a non-blocking stream of the NIC's own: a copy on the legacy default
 * stream would wait for the running kernel, which waits for the NIC. */
int tn_copy(void *dst, int dst_gpu, const void *src, int src_gpu, size_t n)
{
	if (!n)
		return 0;
	if (!dst_gpu && !src_gpu) {
		memcpy(dst, src, n);
		return 0;
	}
	if (!cu.memcpy_async || !cu.ctx)
		return EFAULT;
	if (thread_ctx != cu.ctx) {
		if (cu.set_current(cu.ctx))
			return EFAULT;
		thread_ctx = cu.ctx;
		thread_stream = NULL;
	}
	if (!thread_stream && cu.stream_create(&thread_stream, 1 /* CU_STREAM_NON_BLOCKING */))
		return EFAULT;
	if (cu.memcpy_async((uint64_t)(uintptr_t)dst, (uint64_t)(uintptr_t)src, n, thread_stream))
		return EFAULT;
	return cu.stream_sync(thread_stream) ? EFAULT : 0;
}

/* ---- numbered objects (control path only) ---- */

struct obj {
	int kind;
	uint32_t id;
	void *p;
	struct obj *next;
};
static struct obj *objs;
static pthread_mutex_t obj_lock = PTHREAD_MUTEX_INITIALIZER;

int tn_obj_put(int kind, uint32_t id, void *p)
{
	struct obj *o = malloc(sizeof *o);
	if (!o)
		return ENOMEM;
	o->kind = kind;
	o->id = id;
	o->p = p;
	pthread_mutex_lock(&obj_lock);
	o->next = objs;
	objs = o;
	pthread_mutex_unlock(&obj_lock);
	return 0;
}

void *tn_obj_get(int kind, uint32_t id)
{
	void *p = NULL;
	pthread_mutex_lock(&obj_lock);
	for (struct obj *o = objs; o; o = o->next)
		if (o->kind == kind && o->id == id) {
			p = o->p;
			break;
		}
	pthread_mutex_unlock(&obj_lock);
	return p;
}

int tn_obj_any(int kind, int (*pred)(const void *obj, const void *arg), const void *arg)
{
	int hit = 0;
	pthread_mutex_lock(&obj_lock);
	for (struct obj *o = objs; o && !hit; o = o->next)
		hit = o->kind == kind && pred(o->p, arg);
	pthread_mutex_unlock(&obj_lock);
	return hit;
}

void tn_obj_del(int kind, uint32_t id)
{
	pthread_mutex_lock(&obj_lock);
	for (struct obj **pp = &objs; *pp; pp = &(*pp)->next)
		if ((*pp)->kind == kind && (*pp)->id == id) {
			struct obj *o = *pp;
			*pp = o->next;
			free(o);
			break;
		}
	pthread_mutex_unlock(&obj_lock);
}
