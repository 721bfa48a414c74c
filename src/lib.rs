//! sigmatop core: the event schema, wire protocol, record format, decoders, the model and what
//! reads it, shared by the preload library, the command-line tool and the exporters.
//!
//! Always built (the preload links only these):
//! - `event`: the event, endpoint, identity and snapshot schema (one schema for wire and disk).
//! - `wire`: the live protocol over the Unix socket (postcard frames, version in the hello).
//! - `trace`: the record directory: format, writer (used in-process) and reader.
//! - `decode`: pure decoders of mlx5 doorbell words, WQEs and devx mailboxes.
//! - `nccl`: the NCCL profiler-event file (and, with `analysis`, collectives joined to verbs).
//! - `queue`: outstanding work per QP (posted, completed, ages, error completions) and its ages.
//!
//! With the `analysis` feature (no terminal UI):
//! - `agg`: the model of every traced process, peers, matrices, windows, reports, warnings.
//! - `correlate`: post-mortem correlation of recordings (clocks, topology, pairs, doorbells).
//! - `export`: Perfetto traces and JSON aggregates.
//! - `live`: finding and reading the sockets of traced processes.
//! - `relay`: the relay protocol (`sigmatop relay` → `attach HOST`) and the merge of untrusted
//!   relay streams into one model.
//!
//! With the `cli` feature (the default): `cli`, the command line and the dashboard's driver.
//! With the `testing` feature (tests, fuzz targets): `harness_io` and `decode::harness`.

pub mod decode;
pub mod event;
#[cfg(feature = "testing")]
pub mod harness_io;
pub mod nccl;
pub mod queue;
pub mod trace;
pub mod wire;

#[cfg(feature = "analysis")]
pub mod agg;
#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "analysis")]
pub mod correlate;
#[cfg(feature = "analysis")]
pub mod export;
#[cfg(feature = "analysis")]
pub mod live;
#[cfg(feature = "analysis")]
pub mod relay;
