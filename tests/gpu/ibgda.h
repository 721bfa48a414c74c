/* Test-only: mlx5 WQEs, doorbells and CQEs exactly as NVSHMEM's IBGDA device code writes them
 * (nvshmem src/include/non_abi/device/pt-to-pt/ibgda_device.cuh; reference
 * hardware-and-hooks.md §1-2), usable from C (a CPU thread playing the GPU) and CUDA kernels.
 * Every multi-byte field is big-endian in memory. */
#ifndef SIGMATOP_TEST_IBGDA_H
#define SIGMATOP_TEST_IBGDA_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define HD __host__ __device__ static inline
#else
#define HD static inline
#endif

#define MLX5_OPCODE_RDMA_WRITE 0x08
#define MLX5_OPCODE_RDMA_READ 0x10
#define MLX5_OPCODE_ATOMIC_CS 0x11
#define MLX5_OPCODE_ATOMIC_FA 0x12
#define MLX5_WQE_CTRL_CQ_UPDATE 0x08
#define MLX5_INLINE_SEG 0x80000000u
#define WQEBB 64

HD uint32_t be32(uint32_t v) {
#ifdef __CUDA_ARCH__
  return __byte_perm(v, 0, 0x0123);
#else
  return __builtin_bswap32(v);
#endif
}
HD uint64_t be64(uint64_t v) {
  return ((uint64_t)be32((uint32_t)v) << 32) | be32((uint32_t)(v >> 32));
}
HD uint16_t be16(uint16_t v) { return (uint16_t)((v >> 8) | (v << 8)); }

/* One operation as the kernel wrote it (what sigmatop must recover). */
struct op_desc {
  uint8_t opcode;
  uint32_t bytes;
  uint64_t raddr;
  uint32_t rkey;
  uint64_t laddr;
  uint32_t lkey;
  uint64_t add_or_swap;
  uint64_t compare;
  uint8_t inl[16];
};

/* Stores a 16-byte segment as NVSHMEM does (one vector store per segment). */
HD void st16(void *dst, const uint32_t w[4]) {
  volatile uint32_t *d = (volatile uint32_t *)dst;
  d[0] = w[0];
  d[1] = w[1];
  d[2] = w[2];
  d[3] = w[3];
}

HD void ctrl_seg(uint8_t *wqe, uint16_t idx, uint8_t opcode, uint32_t qpn, uint8_t ds) {
  uint32_t w[4];
  w[0] = be32(((uint32_t)idx << 8) | opcode);
  w[1] = be32((qpn << 8) | ds);
  w[2] = be32(MLX5_WQE_CTRL_CQ_UPDATE); /* signature 0, stream 0, fm_ce_se at byte 11 */
  w[3] = 0;
  st16(wqe, w);
}

HD void raddr_seg(uint8_t *seg, uint64_t raddr, uint32_t rkey) {
  uint32_t w[4];
  uint64_t r = be64(raddr);
  memcpy(w, &r, 8);
  w[2] = be32(rkey);
  w[3] = 0;
  st16(seg, w);
}

HD void data_seg(uint8_t *seg, uint32_t bytes, uint32_t lkey, uint64_t laddr) {
  uint32_t w[4];
  uint64_t a = be64(laddr);
  w[0] = be32(bytes);
  w[1] = be32(lkey);
  memcpy(&w[2], &a, 8);
  st16(seg, w);
}

HD void atomic_seg(uint8_t *seg, uint64_t swap_add, uint64_t compare) {
  uint32_t w[4];
  uint64_t a = be64(swap_add), c = be64(compare);
  memcpy(w, &a, 8);
  memcpy(&w[2], &c, 8);
  st16(seg, w);
}

/* Writes the WQE for `o` at WQE index `idx` into `wqe` (one WQEBB). Returns its ds. */
HD uint8_t write_wqe(uint8_t *wqe, uint16_t idx, uint32_t qpn, const struct op_desc *o) {
  uint8_t ds;
  if (o->opcode == MLX5_OPCODE_RDMA_WRITE && o->lkey == 0) {
    /* inline write (<= 12 bytes): ctrl, raddr, inl(4 B header + data) -> ds 3 */
    uint32_t w[4] = {0, 0, 0, 0};
    ds = 3;
    raddr_seg(wqe + 16, o->raddr, o->rkey);
    w[0] = be32(o->bytes | MLX5_INLINE_SEG);
    memcpy((uint8_t *)w + 4, o->inl, o->bytes > 12 ? 12 : o->bytes);
    st16(wqe + 32, w);
  } else if (o->opcode == MLX5_OPCODE_ATOMIC_FA || o->opcode == MLX5_OPCODE_ATOMIC_CS) {
    ds = 4;
    raddr_seg(wqe + 16, o->raddr, o->rkey);
    atomic_seg(wqe + 32, o->add_or_swap, o->compare);
    data_seg(wqe + 48, o->bytes, o->lkey, o->laddr);
  } else {
    ds = 3;
    raddr_seg(wqe + 16, o->raddr, o->rkey);
    data_seg(wqe + 32, o->bytes, o->lkey, o->laddr);
  }
  ctrl_seg(wqe, idx, o->opcode, qpn, ds);
  return ds;
}

/* NVSHMEM ibgda_ring_db: the synthetic word {HTOBE32(prod_idx << 8), HTOBE32(qpn << 8)}. */
HD uint64_t gpu_db_word(uint32_t qpn, uint16_t prod_idx) {
  uint32_t w[2];
  uint64_t v;
  w[0] = be32((uint32_t)prod_idx << 8);
  w[1] = be32(qpn << 8);
  memcpy(&v, w, 8);
  return v;
}

/* The CQE field the kernels poll: wqe_counter (BE16 at byte 60 of a 64-byte CQE). */
#define CQE_WQE_COUNTER_OFF 60
#define CQE_OP_OWN_OFF 63

#endif
