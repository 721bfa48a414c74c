//! NCCL collectives: the profiler-event file sigmatop's NCCL plugin writes (`format`, always
//! built: the preload writes it) and, with `analysis`, the collectives read back from it and
//! joined to the verbs work requests of the same process (`model`).

pub mod format;
#[cfg(feature = "analysis")]
pub mod model;
