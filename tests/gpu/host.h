/* Test-only host side shared by the CPU-emulated (devx_cpu.c) and the CUDA (gpu_workload.cu)
 * workloads: NVSHMEM IBGDA's host set-up sequence against the devx emulation (reference §3), and
 * the NIC thread that watches the real UAR page and executes the WQEs. */
#ifndef SIGMATOP_TEST_HOST_H
#define SIGMATOP_TEST_HOST_H

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "devx_emu.h"
#include "ibgda.h"

#define LOG_SQ 10 /* NVSHMEM's default: 1024 WQEBBs per SQ */
#define SQ_CNT (1u << LOG_SQ)
#define NQP 2
#define RKEY 0x5a17c0deu
#define LKEY 0x0000beefu
#define BUF_BYTES (1u << 20)

#define CU_MEMHOSTREGISTER_PORTABLE 1u
#define CU_MEMHOSTREGISTER_DEVICEMAP 2u
#define CU_MEMHOSTREGISTER_IOMEMORY 4u

/* How the workload reaches the driver and "GPU" memory (cudart or the fake libcuda). */
struct drv {
  int (*dev_alloc)(void **p, size_t n);
  int (*host_register)(void *p, size_t n, unsigned flags);
  int (*host_get_dptr)(void **d, void *p);
  int (*host_unregister)(void *p);
  int (*dmabuf_fd)(void *p, size_t n, int *fd); /* 0 on success */
  void (*rd)(void *dst, uint64_t src, size_t n); /* NIC DMA read */
  void (*wr)(uint64_t dst, const void *src, size_t n); /* NIC DMA write */
  int uar_is_device_memory; /* pass IoMemory only where the UAR is real MMIO */
  /* Where the send queues live (NULL: dev_alloc): host memory registered with the driver, as
   * NVSHMEM's NVSHMEM_IBGDA_FORCE_NIC_BUF_MEMTYPE=hostmem places them. */
  int (*wq_alloc)(void **p, size_t n);
  /* Frees a send queue from dev_alloc after its QP and umem are gone (NULL: kept). */
  int (*dev_free)(void *p);
};

struct qpdev { /* what a kernel needs per QP (device pointers) */
  uint8_t *sq;
  volatile uint64_t *db;
  volatile uint32_t *dbr;
  volatile uint8_t *cqe;
  uint32_t qpn;
  uint32_t sq_cnt;
};

/* ---- mailboxes (DEVX_SET on BE dwords) ---- */
static void mb_set(uint8_t *m, unsigned b, unsigned s, uint32_t v) {
  uint32_t dw, mask = (s == 32 ? 0xffffffffu : ((1u << s) - 1)) << (32 - s - (b & 31));
  memcpy(&dw, m + (b / 32) * 4, 4);
  dw = __builtin_bswap32(dw);
  dw = (dw & ~mask) | ((v << (32 - s - (b & 31))) & mask);
  dw = __builtin_bswap32(dw);
  memcpy(m + (b / 32) * 4, &dw, 4);
}
static void mb_set64(uint8_t *m, unsigned b, uint64_t v) {
  v = __builtin_bswap64(v);
  memcpy(m + b / 8, &v, 8);
}
static uint32_t mb_get(const uint8_t *m, unsigned b, unsigned s) {
  uint32_t dw;
  memcpy(&dw, m + (b / 32) * 4, 4);
  dw = __builtin_bswap32(dw);
  return (dw >> (32 - s - (b & 31))) & (s == 32 ? 0xffffffffu : ((1u << s) - 1));
}
#define QPC 0xc0

static void die(const char *what) {
  fprintf(stderr, "workload: %s failed\n", what);
  exit(2);
}

struct setup {
  struct mlx5dv_devx_uar *uar[NQP];
  int shared_uar; /* QP 1 uses uar[0] */
  void *obj_qp[NQP], *obj_cq[NQP];
  struct mlx5dv_devx_umem *wq_umem[NQP], *dbr_umem[NQP];
  struct qpdev q[NQP];
  void *ctx;
};

/* NVSHMEM ibgda.cpp: UAR, umems (GPU WQ, dma-buf DBR), CQ, CREATE_QP, RST2INIT/INIT2RTR/RTR2RTS,
 * then the UAR mapped into the GPU (DOCA's register+unregister probe first). */
static void setup_qps(const struct drv *d, struct setup *s) {
  s->ctx = mlx5dv_open_device(NULL, NULL);
  if (!s->ctx)
    die("mlx5dv_open_device");
  /* DEVX_CPU_SHARED_UAR=1: QP 1 is bound to QP 0's UAR, so both ring one doorbell register. */
  const char *sh = getenv("DEVX_CPU_SHARED_UAR");
  s->shared_uar = sh && *sh == '1';
  for (int i = 0; i < NQP; i++) {
    struct mlx5dv_devx_uar *uar =
        i && s->shared_uar ? s->uar[0] : mlx5dv_devx_alloc_uar(s->ctx, 1u << 31 /* NC_DEDICATED */);
    if (!uar)
      die("alloc_uar");
    s->uar[i] = uar;
    void *wq, *dbr, *cqe;
    if ((d->wq_alloc ? d->wq_alloc : d->dev_alloc)(&wq, SQ_CNT * WQEBB) || d->dev_alloc(&dbr, 64) ||
        d->dev_alloc(&cqe, 64))
      die("device alloc");
    s->wq_umem[i] = mlx5dv_devx_umem_reg(s->ctx, wq, SQ_CNT * WQEBB, 7);
    int fd = -1;
    if (d->dmabuf_fd && d->dmabuf_fd(dbr, 64, &fd) == 0 && fd >= 0) {
      struct mlx5dv_devx_umem_in in;
      memset(&in, 0, sizeof in);
      in.size = 64;
      in.access = 7;
      in.comp_mask = 1; /* MLX5DV_UMEM_MASK_DMABUF */
      in.dmabuf_fd = fd;
      emu_dmabuf_bind(fd, dbr);
      s->dbr_umem[i] = mlx5dv_devx_umem_reg_ex(s->ctx, &in);
    } else {
      s->dbr_umem[i] = mlx5dv_devx_umem_reg(s->ctx, dbr, 64, 7);
    }
    if (!s->wq_umem[i] || !s->dbr_umem[i])
      die("umem_reg");
    uint8_t in[0x880 / 8], out[0x80 / 8];
    memset(in, 0, sizeof in);
    mb_set(in, 0, 16, 0x400); /* CREATE_CQ */
    s->obj_cq[i] = mlx5dv_devx_obj_create(s->ctx, in, sizeof in, out, sizeof out);
    uint32_t cqn = mb_get(out, 0x48, 24);
    memset(in, 0, sizeof in);
    mb_set(in, 0, 16, 0x500);             /* CREATE_QP */
    mb_set(in, QPC + 0x08, 8, 0);         /* st = RC */
    mb_set(in, QPC + 0x13, 2, 3);         /* pm_state = MIGRATED */
    mb_set(in, QPC + 0x28, 24, 1);        /* pd */
    mb_set(in, QPC + 0x51, 4, LOG_SQ);    /* log_sq_size */
    mb_set(in, QPC + 0x49, 4, 0);         /* log_rq_size */
    mb_set(in, QPC + 0x68, 24, uar->page_id);
    mb_set(in, QPC + 0x88, 24, i);        /* user_index */
    mb_set(in, QPC + 0x3e8, 24, cqn);     /* cqn_snd */
    mb_set(in, QPC + 0x4e8, 24, cqn);     /* cqn_rcv */
    mb_set64(in, QPC + 0x500, 0);         /* dbr_addr: offset in the DBR umem */
    mb_set(in, QPC + 0x565, 3, 1);        /* rq_type = SRQ */
    mb_set(in, QPC + 0x683, 1, 1);        /* dbr_umem_valid */
    mb_set(in, QPC + 0x720, 32, s->dbr_umem[i]->umem_id);
    mb_set64(in, 0x800, 0);               /* wq_umem_offset */
    mb_set(in, 0x840, 32, s->wq_umem[i]->umem_id);
    mb_set(in, 0x860, 1, 1);              /* wq_umem_valid */
    memset(out, 0, sizeof out);
    s->obj_qp[i] = mlx5dv_devx_obj_create(s->ctx, in, sizeof in, out, sizeof out);
    if (!s->obj_qp[i])
      die("CREATE_QP");
    uint32_t qpn = mb_get(out, 0x48, 24);
    static const uint16_t mods[3] = {0x502, 0x503, 0x504};
    for (int k = 0; k < 3; k++) {
      memset(in, 0, sizeof in);
      mb_set(in, 0, 16, mods[k]);
      mb_set(in, 0x48, 24, qpn);
      if (mods[k] == 0x503) {
        mb_set(in, QPC + 0xa8, 24, qpn); /* remote_qpn: loopback */
        mb_set(in, QPC + 0x40, 3, 5);    /* mtu 4096 */
      }
      if (mlx5dv_devx_obj_modify(s->obj_qp[i], in, sizeof in, out, sizeof out))
        die("modify QP");
    }
    unsigned fl = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                  (d->uar_is_device_memory ? CU_MEMHOSTREGISTER_IOMEMORY : 0);
    /* DOCA's probe (doca_gpu_verbs_can_gpu_register_uar): register, then unregister at once. */
    /* QP 0 maps an NC_DEDICATED doorbell (8 bytes), QP 1 a BlueFlame register (512 bytes);
     * with a shared UAR, QP 0 maps the 512 bytes and QP 1 uses that mapping. */
    size_t regsz = i == 1 || s->shared_uar ? 512 : 8;
    void *db;
    if (i && s->shared_uar) {
      db = (void *)s->q[0].db;
    } else {
      if (d->host_register(uar->reg_addr, regsz, fl) == 0)
        d->host_unregister(uar->reg_addr);
      /* NVSHMEM ibgda_nic_mem_gpu_map. */
      if (d->host_register(uar->reg_addr, regsz, fl))
        die("host register of the UAR");
      if (d->host_get_dptr(&db, uar->reg_addr))
        die("host device pointer of the UAR");
    }
    s->q[i].sq = (uint8_t *)wq;
    s->q[i].db = (volatile uint64_t *)db;
    s->q[i].dbr = (volatile uint32_t *)dbr;
    s->q[i].cqe = (volatile uint8_t *)cqe;
    s->q[i].qpn = qpn;
    s->q[i].sq_cnt = SQ_CNT;
    uint8_t ff[64];
    memset(ff, 0xff, sizeof ff); /* no completion yet: wqe_counter 0xffff */
    d->wr((uint64_t)cqe, ff, sizeof ff);
  }
}

static void teardown_qps(const struct drv *d, struct setup *s) {
  for (int i = 0; i < NQP; i++) {
    int own_uar = !(i && s->shared_uar);
    if (own_uar)
      d->host_unregister(s->uar[i]->reg_addr);
    mlx5dv_devx_obj_destroy(s->obj_qp[i]);
    mlx5dv_devx_obj_destroy(s->obj_cq[i]);
    mlx5dv_devx_umem_dereg(s->wq_umem[i]);
    mlx5dv_devx_umem_dereg(s->dbr_umem[i]);
    if (own_uar)
      mlx5dv_devx_free_uar(s->uar[i]);
    /* NVSHMEM frees a QP's GPU queue once the QP is destroyed. */
    if (d->dev_free && !d->wq_alloc)
      d->dev_free(s->q[i].sq);
  }
}

/* ---- the NIC ---- */
struct nic_qp {
  struct emu_qp info;
  uint64_t dbr; /* the doorbell record ([1] = send counter, BE) */
  uint64_t last;
  uint16_t ci;
  uint64_t cqe;
};
struct nic {
  const struct drv *d;
  struct nic_qp q[NQP];
  int n;
  volatile int stop;
  uint64_t rings, wqes, bad;
  pthread_t th;
  uint8_t tmp[BUF_BYTES];
};

static void nic_exec(struct nic *n, struct nic_qp *q, const uint8_t *w) {
  uint32_t c0 = be32(*(const uint32_t *)w), c1 = be32(*(const uint32_t *)(w + 4));
  uint8_t opcode = c0 & 0xff;
  uint16_t idx = (uint16_t)(c0 >> 8);
  uint64_t raddr = be64(*(const uint64_t *)(w + 16));
  uint32_t rkey = be32(*(const uint32_t *)(w + 24));
  n->wqes++;
  if (rkey != RKEY || ((c1 >> 8) != q->info.qpn) || idx != q->ci) {
    n->bad++;
  } else if (opcode == MLX5_OPCODE_RDMA_WRITE) {
    uint32_t bc = be32(*(const uint32_t *)(w + 32));
    if (bc & MLX5_INLINE_SEG) {
      n->d->wr(raddr, w + 36, bc & 0x7fffffff);
    } else {
      uint64_t la = be64(*(const uint64_t *)(w + 40));
      if (bc > BUF_BYTES) bc = BUF_BYTES;
      n->d->rd(n->tmp, la, bc);
      n->d->wr(raddr, n->tmp, bc);
    }
  } else if (opcode == MLX5_OPCODE_RDMA_READ) {
    uint32_t bc = be32(*(const uint32_t *)(w + 32));
    uint64_t la = be64(*(const uint64_t *)(w + 40));
    if (bc > BUF_BYTES) bc = BUF_BYTES;
    n->d->rd(n->tmp, raddr, bc);
    n->d->wr(la, n->tmp, bc);
  } else if (opcode == MLX5_OPCODE_ATOMIC_FA || opcode == MLX5_OPCODE_ATOMIC_CS) {
    uint64_t sa = be64(*(const uint64_t *)(w + 32)), cmp = be64(*(const uint64_t *)(w + 40));
    uint64_t la = be64(*(const uint64_t *)(w + 56)), old, nv;
    n->d->rd(&old, raddr, 8);
    nv = opcode == MLX5_OPCODE_ATOMIC_FA ? old + sa : (old == cmp ? sa : old);
    n->d->wr(raddr, &nv, 8);
    n->d->wr(la, &old, 8);
  } else {
    n->bad++;
  }
  if (w[11] & MLX5_WQE_CTRL_CQ_UPDATE) {
    uint8_t cq[4];
    uint16_t ctr = be16(idx);
    memcpy(cq, &ctr, 2);
    cq[2] = 0;
    cq[3] = 0; /* op_own: MLX5_CQE_REQ << 4, owner 0 */
    n->d->wr(q->cqe + CQE_WQE_COUNTER_OFF, cq, 4);
  }
}

static void *nic_main(void *arg) {
  struct nic *n = (struct nic *)arg;
  uint8_t w[WQEBB];
  while (!n->stop) {
    int any = 0;
    for (int i = 0; i < n->n; i++) {
      struct nic_qp *q = &n->q[i];
      uint64_t v = *(volatile uint64_t *)q->info.db;
      if (v == q->last)
        continue;
      q->last = v;
      any = 1;
      n->rings++;
      uint32_t c0 = be32((uint32_t)v), c1 = be32((uint32_t)(v >> 32));
      uint16_t idx = (uint16_t)(c0 >> 8);
      uint8_t opcode = c0 & 0xff, ds = c1 & 0xff;
      uint16_t end = (opcode == 0 && ds == 0) ? idx : (uint16_t)(idx + (ds * 16 + 63) / 64);
      if ((c1 >> 8) != q->info.qpn) {
        /* Another QP's doorbell on a shared register. This NIC polls RAM and may have missed
         * this QP's own doorbell under it (hardware would not): run what the record says. The
         * check that no doorbell was lost is sigmatop's record, not this NIC. */
        uint32_t rec = 0;
        n->d->rd(&rec, q->dbr + 4, 4);
        end = (uint16_t)be32(rec);
      } else if ((uint16_t)(end - q->ci) > q->info.sq_cnt) {
        /* Its own doorbell, behind what this NIC already ran from the record under another
         * QP's doorbell (a doorbell sigmatop made up from the record after that): no new work.
         * Hardware never gets here, as it never runs from the record. */
        continue;
      }
      while (q->ci != end) {
        n->d->rd(w, q->info.sq_base + (uint64_t)(q->ci & (q->info.sq_cnt - 1)) * WQEBB, WQEBB);
        nic_exec(n, q, w);
        q->ci++;
      }
    }
    if (!any)
      __builtin_ia32_pause();
  }
  return NULL;
}

static void nic_start(struct nic *n, const struct drv *d, struct setup *s) {
  memset(n, 0, sizeof *n);
  n->d = d;
  for (int i = 0; i < NQP; i++) {
    if (!emu_qp_info(i, &n->q[i].info))
      die("emu_qp_info");
    n->q[i].cqe = (uint64_t)s->q[i].cqe;
    n->q[i].dbr = (uint64_t)s->q[i].dbr;
    n->q[i].last = *(volatile uint64_t *)n->q[i].info.db;
  }
  n->n = NQP;
  if (pthread_create(&n->th, NULL, nic_main, n))
    die("NIC thread");
}

static void nic_stop(struct nic *n) {
  n->stop = 1;
  pthread_join(n->th, NULL);
}

#endif
