//! The `sigmatop` command line: launch programs under the preload, attach to traced processes,
//! replay, export and report recordings. Wires the core (live sources, model) to the dashboard.
//!
//! - `args`: the verbs and their flags (clap).
//! - `run`: `sigmatop run` and `sigmatop --record DIR -- CMD`: a program under the preload.
//! - `attach`: `sigmatop attach`: the dashboard, or printed snapshots, of running processes.
//! - `replay`: `sigmatop replay` and `sigmatop demo`: the dashboard driven by a recording.
//! - `export`: `sigmatop export`: JSON aggregates and Perfetto traces of recordings.
//! - `report`: `sigmatop report`: the text report of recordings.
//! - `serve`: `sigmatop serve`: this node's counters on /metrics for Prometheus.
//! - `preload`: finding the preload library (beside, ../lib, or the embedded copy's cache).
//! - `relay`: `sigmatop relay`: this host's traced processes on stdout for `attach HOST`.
//! - `remote`: `attach HOST...`: ssh / `--via` transports, their links, retries and merge.
//! - `hostlist`: Slurm's hostlist syntax (`node[01-16,20]`).
//! - `runs`: choosing among several runs in one record directory (`--run N`).
//! - `dashboard`: the terminal loop: a `Source`, the model, the view model, key handling.
//! - `live_feed`: live sockets (and the launched program) as a dashboard `Source`.
//! - `final_state`: the final states a run's processes leave, for those too short to connect to.
//! - `view_model`: the model at a view time translated into the dashboard's `ViewModel`.
//! - `table`: plain-text tables of reports and matrices.
//! - `child`: exit codes and signals of the programs sigmatop starts.
//! - `diagnose`: why a run traced nothing (a layer switched off, Open MPI's ob1 PML).

pub mod args;
pub mod attach;
pub mod child;
pub mod dashboard;
pub mod diagnose;
pub mod export;
pub mod final_state;
pub mod hostlist;
pub mod live_feed;
pub mod preload;
pub mod relay;
pub mod remote;
pub mod replay;
pub mod report;
pub mod run;
pub mod runs;
pub mod serve;
pub mod table;
pub mod view_model;

pub use args::*;
