/* Test-only devx emulation: what the "device" knows about each QP (for the test NIC thread). */
#ifndef SIGMATOP_TEST_DEVX_EMU_H
#define SIGMATOP_TEST_DEVX_EMU_H
#include <stdint.h>
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif
struct emu_qp {
  uint32_t qpn, st, sq_cnt, uar_page, state;
  uint64_t sq_base; /* wq umem address + wq_umem_offset + RQ bytes */
  uint64_t db;      /* the real UAR doorbell register (reg_addr) */
};
int emu_qp_info(int i, struct emu_qp *out);
void emu_dmabuf_bind(int fd, void *addr);

/* The mlx5dv entry points the workloads call (prototypes as in mlx5dv.h, opaque types). */
struct mlx5dv_devx_uar {
  void *reg_addr;
  void *base_addr;
  uint32_t page_id;
  long mmap_off;
  uint64_t comp_mask;
};
struct mlx5dv_devx_umem {
  uint32_t umem_id;
};
struct mlx5dv_devx_umem_in {
  void *addr;
  size_t size;
  uint32_t access;
  uint64_t pgsz_bitmap;
  uint64_t comp_mask;
  int dmabuf_fd;
};
void *mlx5dv_open_device(void *device, void *attr);
struct mlx5dv_devx_uar *mlx5dv_devx_alloc_uar(void *ctx, uint32_t flags);
void mlx5dv_devx_free_uar(struct mlx5dv_devx_uar *u);
struct mlx5dv_devx_umem *mlx5dv_devx_umem_reg(void *ctx, void *addr, size_t size, uint32_t access);
struct mlx5dv_devx_umem *mlx5dv_devx_umem_reg_ex(void *ctx, struct mlx5dv_devx_umem_in *in);
int mlx5dv_devx_umem_dereg(struct mlx5dv_devx_umem *m);
void *mlx5dv_devx_obj_create(void *ctx, const void *in, size_t inlen, void *out, size_t outlen);
int mlx5dv_devx_obj_modify(void *obj, const void *in, size_t inlen, void *out, size_t outlen);
int mlx5dv_devx_obj_destroy(void *obj);
#ifdef __cplusplus
}
#endif
#endif
