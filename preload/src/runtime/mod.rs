//! The runtime: what every traced process runs whatever it traces. Per-thread counters and
//! rings, the endpoint registry, the collector thread with its record and live socket, the fork
//! handlers and the end-of-image flush, every `SIGMATOP_*` variable, the clock, the raw OS calls
//! and symbol lookup.
//!
//! May use: itself (in the order below, each file only those above it) and the core crate. Never
//! `interpose`, `layers` nor `bench`: a layer hands the runtime what it needs through a table that
//! lib.rs fills (fork holds and child hooks in `fork::install`, before-flush steps in
//! `lifecycle::install`, the bench's after-chunk hook in `collector::after_each_chunk`).
//!
//! Floors, lowest first: `os`, `ptrmap`, `held`, `drops`, `dl` (leaves) < `config` < `clock` <
//! `thread` < `registry` < `fork`, `server`, `final_state` < `collector` < `lifecycle`.

pub mod clock;
pub mod collector;
pub mod config;
pub mod dl;
pub mod drops;
pub mod final_state;
pub mod fork;
pub mod held;
pub mod lifecycle;
pub mod os;
pub mod ptrmap;
pub mod registry;
pub mod server;
pub mod thread;
