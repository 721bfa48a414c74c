//! The GPU path: `driver` the real CUDA driver entry points sigmatop calls itself, `doorbell` the
//! GPU doorbell shadow pages, their forwarding poller and WQE recovery, `cuda` the CUDA driver
//! hooks (`cuGetProcAddress` and the doorbell hijack's entry points).
//!
//! May use: the runtime and `interpose`; inside, lowest first, `driver` < `doorbell` < `cuda`
//! (each only those below it).

pub mod cuda;
pub mod doorbell;
pub mod driver;
