/* Test-only emulation of the mlx5 direct-verbs (devx) calls NVSHMEM IBGDA makes, with the real
 * PRM mailbox layouts (reference hardware-and-hooks.md §3) and a UAR that is an ordinary page of
 * RAM (base, reg_addr = base + 0x800). It is the "device" side: it decodes CREATE_QP like the
 * firmware would, so the test's NIC thread can find each QP's SQ. Never shipped.
 * Build: gcc -shared -fPIC -O2 -o libmlx5emu.so devx_emu.c */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "devx_emu.h"

struct umem {
  struct mlx5dv_devx_umem pub;
  uint64_t addr, size;
};
struct obj {
  uint16_t type;
  uint32_t id;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct mlx5dv_devx_uar *uars[64];
static int n_uars;
static struct umem *umems[256];
static int n_umems;
static struct emu_qp qps[64];
static int n_qps;
static uint32_t next_id = 0x10;
static struct {
  int fd;
  uint64_t addr;
} dmabufs[64];
static int n_dmabufs;

/* DEVX_GET/DEVX_SET on big-endian dwords: field at bit b, width s. */
static uint32_t get(const uint8_t *m, unsigned b, unsigned s) {
  uint32_t dw;
  memcpy(&dw, m + (b / 32) * 4, 4);
  dw = __builtin_bswap32(dw);
  return (dw >> (32 - s - (b & 31))) & (s == 32 ? 0xffffffffu : ((1u << s) - 1));
}
static uint64_t get64(const uint8_t *m, unsigned b) {
  uint64_t v;
  memcpy(&v, m + b / 8, 8);
  return __builtin_bswap64(v);
}
static void set(uint8_t *m, unsigned b, unsigned s, uint32_t v) {
  uint32_t dw, mask = (s == 32 ? 0xffffffffu : ((1u << s) - 1)) << (32 - s - (b & 31));
  memcpy(&dw, m + (b / 32) * 4, 4);
  dw = __builtin_bswap32(dw);
  dw = (dw & ~mask) | ((v << (32 - s - (b & 31))) & mask);
  dw = __builtin_bswap32(dw);
  memcpy(m + (b / 32) * 4, &dw, 4);
}

void *mlx5dv_open_device(void *device, void *attr) {
  (void)device;
  (void)attr;
  return calloc(1, 4096); /* an opaque context */
}

struct mlx5dv_devx_uar *mlx5dv_devx_alloc_uar(void *ctx, uint32_t flags) {
  (void)ctx;
  (void)flags;
  long ps = sysconf(_SC_PAGESIZE);
  void *page = mmap(NULL, ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED)
    return NULL;
  struct mlx5dv_devx_uar *u = calloc(1, sizeof *u);
  pthread_mutex_lock(&mu);
  u->base_addr = page;
  u->reg_addr = (char *)page + 0x800; /* MLX5_BF_OFFSET */
  u->page_id = next_id++;
  uars[n_uars++] = u;
  pthread_mutex_unlock(&mu);
  return u;
}

void mlx5dv_devx_free_uar(struct mlx5dv_devx_uar *u) {
  if (!u)
    return;
  pthread_mutex_lock(&mu);
  for (int i = 0; i < n_uars; i++)
    if (uars[i] == u)
      uars[i] = NULL;
  pthread_mutex_unlock(&mu);
  munmap(u->base_addr, sysconf(_SC_PAGESIZE));
  free(u);
}

static struct mlx5dv_devx_umem *add_umem(uint64_t addr, uint64_t size) {
  struct umem *m = calloc(1, sizeof *m);
  pthread_mutex_lock(&mu);
  m->pub.umem_id = next_id++;
  m->addr = addr;
  m->size = size;
  umems[n_umems++] = m;
  pthread_mutex_unlock(&mu);
  return &m->pub;
}

struct mlx5dv_devx_umem *mlx5dv_devx_umem_reg(void *ctx, void *addr, size_t size, uint32_t access) {
  (void)ctx;
  (void)access;
  return add_umem((uint64_t)addr, size);
}

void emu_dmabuf_bind(int fd, void *addr) {
  pthread_mutex_lock(&mu);
  dmabufs[n_dmabufs].fd = fd;
  dmabufs[n_dmabufs++].addr = (uint64_t)addr;
  pthread_mutex_unlock(&mu);
}

struct mlx5dv_devx_umem *mlx5dv_devx_umem_reg_ex(void *ctx, struct mlx5dv_devx_umem_in *in) {
  (void)ctx;
  uint64_t addr = (uint64_t)in->addr;
  if (in->comp_mask & 1) {
    int found = 0;
    for (int i = 0; i < n_dmabufs; i++)
      if (dmabufs[i].fd == in->dmabuf_fd) {
        addr += dmabufs[i].addr;
        found = 1;
      }
    if (!found)
      return NULL;
  }
  return add_umem(addr, in->size);
}

int mlx5dv_devx_umem_dereg(struct mlx5dv_devx_umem *m) {
  pthread_mutex_lock(&mu);
  for (int i = 0; i < n_umems; i++)
    if (umems[i] && &umems[i]->pub == m) {
      free(umems[i]);
      umems[i] = NULL;
    }
  pthread_mutex_unlock(&mu);
  return 0;
}

static struct umem *umem_by_id(uint32_t id) {
  for (int i = 0; i < n_umems; i++)
    if (umems[i] && umems[i]->pub.umem_id == id)
      return umems[i];
  return NULL;
}

#define QPC 0xc0

void *mlx5dv_devx_obj_create(void *ctx, const void *in, size_t inlen, void *out, size_t outlen) {
  (void)ctx;
  const uint8_t *m = in;
  uint16_t opcode = (uint16_t)get(m, 0, 16);
  if (outlen < 16 || inlen < 16)
    return NULL;
  memset(out, 0, outlen);
  struct obj *o = calloc(1, sizeof *o);
  o->type = opcode;
  pthread_mutex_lock(&mu);
  o->id = next_id++;
  if (opcode == 0x500) { /* CREATE_QP */
    if (inlen < 0x880 / 8) {
      pthread_mutex_unlock(&mu);
      free(o);
      return NULL;
    }
    struct emu_qp *q = &qps[n_qps];
    memset(q, 0, sizeof *q);
    q->qpn = 0x1c0 + n_qps;
    o->id = q->qpn;
    uint32_t log_sq = get(m, QPC + 0x51, 4), log_rq = get(m, QPC + 0x49, 4);
    uint32_t log_rq_stride = get(m, QPC + 0x4d, 3), rq_type = get(m, QPC + 0x565, 3);
    q->st = get(m, QPC + 0x08, 8);
    q->sq_cnt = 1u << log_sq;
    q->uar_page = get(m, QPC + 0x68, 24);
    uint64_t wq_off = get64(m, 0x800);
    struct umem *wq = get(m, 0x860, 1) ? umem_by_id(get(m, 0x840, 32)) : NULL;
    uint64_t rq_bytes = rq_type == 0 ? ((uint64_t)1 << log_rq) << (log_rq_stride + 4) : 0;
    q->sq_base = wq ? wq->addr + wq_off + rq_bytes : 0;
    for (int i = 0; i < n_uars; i++)
      if (uars[i] && uars[i]->page_id == q->uar_page)
        q->db = (uint64_t)uars[i]->reg_addr;
    n_qps++;
    set(out, 0x48, 24, q->qpn);
  } else {
    set(out, 0x48, 24, o->id); /* cqn / srqn / ... at the same place */
  }
  pthread_mutex_unlock(&mu);
  return o;
}

int mlx5dv_devx_obj_modify(void *obj, const void *in, size_t inlen, void *out, size_t outlen) {
  (void)inlen;
  struct obj *o = obj;
  uint16_t opcode = (uint16_t)get(in, 0, 16);
  memset(out, 0, outlen);
  if (o->type == 0x500) {
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_qps; i++)
      if (qps[i].qpn == o->id)
        qps[i].state = opcode;
    pthread_mutex_unlock(&mu);
  }
  return 0;
}

int mlx5dv_devx_obj_destroy(void *obj) {
  free(obj);
  return 0;
}

int mlx5dv_devx_general_cmd(void *ctx, const void *in, size_t inlen, void *out, size_t outlen) {
  (void)ctx;
  (void)in;
  (void)inlen;
  memset(out, 0, outlen);
  return 0;
}

int emu_qp_info(int i, struct emu_qp *out) {
  pthread_mutex_lock(&mu);
  int ok = i < n_qps;
  if (ok)
    *out = qps[i];
  pthread_mutex_unlock(&mu);
  return ok;
}
