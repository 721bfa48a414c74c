//! NCCL collectives: the profiler-event file sigmatop's NCCL plugin writes (`format`, always
//! built: the preload writes it) and, with `analysis`, the collectives read back from it and
//! joined to the verbs work requests of the same process (`model`); `live`, always built too:
//! what the plugin streams over the live socket, and the tracker that computes it.

pub mod format;
pub mod live;
#[cfg(feature = "analysis")]
pub mod model;
#[cfg(test)]
pub(crate) mod synth;
