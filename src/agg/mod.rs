//! Aggregation: one model of every traced process (live frames or a recording feed the same
//! `Model`), and everything the front ends ask of it.
//!
//! - `model`: the `Model` of processes, endpoints, snapshot history and sampled events.
//! - `peers`: who is on the other side of each endpoint (address hashes, QP numbers): one answer
//!   for the dashboard, `report`, `export` and the correlator.
//! - `matrix`: the rows and labels of the rank, node and GPU matrices, and the folding of
//!   process × process bytes into them.
//! - `window`: time-window arithmetic: totals, rates now and over a window, history positions.
//! - `at`: the whole model at one view time (endpoints with peers and rates, node and rank rows,
//!   matrices, GPU rows).
//! - `snapshots`: the compact snapshot history of one process.
//! - `history`: bandwidth and doorbell series up to a view time.
//! - `report`: cumulative totals per process, endpoint and operation (the JSON report).
//! - `nccl`: NCCL collectives per communicator across processes, live, and the hung collective.
//! - `waits`: who the others wait for: processes that stopped reporting (silent), and the far
//!   end of receives that do not complete (the root of the chain of waits).
//! - `warnings`: rules over the state at a view time (skew, drops, doorbell storms).
//! - `gpu_stop`: what a GPU stop is (data, below `at`).
//! - `gpu_stops`: GPUs whose QPs stopped ringing doorbells while their process reports, the
//!   first to stop named.
//! - `stalls`: stalled edges: QPs with send work outstanding and no completion past the
//!   threshold, with their process and peer.

pub mod at;
pub mod gpu_stop;
pub mod gpu_stops;
pub mod history;
pub mod matrix;
pub mod model;
pub mod nccl;
pub mod peers;
pub mod report;
pub mod silence;
pub mod snapshots;
pub mod stalls;
pub mod sums;
pub mod waits;
pub mod warnings;
pub mod window;

pub use at::{AtCache, AtOptions, Detail, ModelAt};
pub use matrix::Matrix;
pub use model::{
    HISTORY, HISTORY_BYTES, HostLink, LinkState, Model, NotAnswering, OpTable, ProcKey,
    ProcessState, RECENT_EVENTS, RecentEvents, WINDOW_FLOOR_NS, clock_of,
};
pub use report::{
    EndpointReport, Flow, LiveMissed, OpTotals, PeerRef, ProcessRef, ProcessReport, QuietReport,
    Report, WaitReport, Waiter,
};
pub use window::Window;

/// A count with thousands separators: "1,204".
pub fn count_text(n: u64) -> String {
    let d = n.to_string();
    let mut out = String::with_capacity(d.len() + d.len() / 3);
    for (i, c) in d.chars().enumerate() {
        if i > 0 && (d.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
