//! mlx5 send WQEs parsed out of a send-queue ring snapshot, and the bounded walk over the WQEBBs
//! one doorbell covers.
//!
//! Layouts are those of reference §1 (rdma-core `providers/mlx5/mlx5dv.h`, NVSHMEM
//! `ibgda_device.cuh`). Every multi-byte field is big-endian. Segments are read modulo the ring,
//! so a WQE that spans the end of the ring parses like any other.
//!
//! - `segments`: the segment layouts (ctrl, address vector, raddr, atomic, data), their
//!   constants and the parsed [`Wqe`].
//! - `opcode`: the table of send opcodes (`MLX5_OPCODE_*`): code, variant, name.
//! - `parse`: one WQE out of a ring snapshot, segment by segment in each opcode's order.
//! - `walk`: the bounded walk over the WQEs one doorbell step covers, checking each ctrl index.

mod opcode;
mod parse;
mod segments;
mod walk;

pub use super::doorbell::WqeRange;
pub use opcode::Opcode;
pub use parse::{WqeError, parse_ctrl, parse_wqe};
pub use segments::*;
pub use walk::{WalkError, WalkOutcome, WqeWalker, walk_new_wqes};

#[cfg(test)]
mod tests;
