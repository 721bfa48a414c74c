//! The layers: one directory or file per traced library (UCX, libfabric, libibverbs, mlx5 direct
//! verbs, the GPU path, NCCL's profiler plugin). Each interposes its library's entry points with
//! the hook idiom and records through the runtime's API.
//!
//! May use: the runtime and `interpose`; another layer only where one library sits on another,
//! one way (`mlx5` on `ibverbs` and `gpu`; inside `gpu`, `cuda` on `doorbell` on `driver`).
//! Never `bench`. Only lib.rs names them all.

pub mod gpu;
pub mod ibverbs;
pub mod mlx5;
pub mod nccl;
pub mod ofi;
pub mod ucx;
