//! The view model: plain data that the core fills from live or replayed samples and the dashboard draws.
//!
//! Every rate is per second and every byte count is in bytes; the dashboard converts to bits when the
//! user asks. Nothing here does I/O, and every field has a sensible empty default, so the core can
//! fill only what it knows.

use serde::{Deserialize, Serialize};

/// Everything one frame of the dashboard shows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ViewModel {
    /// Totals and labels for the top line.
    pub header: Header,
    /// One row per traced process (Overview tab).
    pub processes: Vec<ProcessRow>,
    /// One row per QP / UCX endpoint / libfabric endpoint, plus unattributed rows (QPs tab).
    pub endpoints: Vec<EndpointRow>,
    /// One row per GPU that initiates RDMA (GPUs tab).
    pub gpus: Vec<GpuRow>,
    /// Per-node egress/ingress (Nodes tab).
    pub nodes: Vec<NodeRow>,
    /// Per-rank egress/ingress (Nodes tab).
    pub ranks: Vec<RankRow>,
    /// Communication matrices (Matrix tab).
    pub matrices: Matrices,
    /// GPU-initiated doorbells (Doorbells tab).
    pub doorbells: DoorbellModel,
    /// Total (tx, rx) bytes/s per sample, oldest first (Overview sparkline).
    pub bandwidth_history: Vec<(f64, f64)>,
    /// Seconds between two samples of `bandwidth_history` (0: not known): the chart's time axis.
    pub bandwidth_interval_s: f64,
    /// Loss and error counters, always shown in the status line.
    pub status: StatusCounters,
    /// Number of samples kept in history (0 when the source keeps none).
    pub history_len: usize,
    /// Index of the sample shown, `0..history_len`; `history_len - 1` is the newest.
    pub history_pos: usize,
    /// Live warnings, most important first (the core computes them from the model).
    pub warnings: Vec<crate::warnings::Warning>,
    /// NCCL collectives (Collectives tab).
    pub collectives: CollectivesModel,
}

/// NCCL collectives: per communicator and collective, per rank, and what was lost.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CollectivesModel {
    pub rows: Vec<CollRow>,
    pub ranks: Vec<CollRankRow>,
    /// One per communicator: the ranks' arrival at its latest collectives.
    pub arrivals: Vec<CollArrivals>,
    /// Records the NCCL plugin could not keep, events of types it does not read, events naming a
    /// call or operation it never saw start.
    pub dropped_records: u64,
    pub unknown_events: u64,
    pub untracked: u64,
    /// The hung-collective threshold, seconds.
    pub hang_s: f64,
}

/// One row per (communicator, collective, algorithm, protocol).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CollRow {
    /// The communicator: NCCL's id, its first 8 hex digits.
    pub comm: String,
    /// Ranks reporting / ranks in it: "2/2".
    pub ranks: String,
    pub func: String,
    pub algo: String,
    pub proto: String,
    pub channels: u32,
    /// Completed (the rank that completed the most), their bytes per rank, the slowest rank's
    /// time in them, and the bus bandwidth over it (bytes/s, nccl-tests' definition).
    pub count: u64,
    pub bytes: u64,
    pub time_s: f64,
    pub busbw_bps: f64,
    /// Calls open now on all ranks.
    pub open: u64,
}

/// One rank of a communicator.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CollRankRow {
    pub comm: String,
    pub rank: u32,
    pub host: String,
    pub pid: u32,
    pub started: u64,
    pub completed: u64,
    /// The oldest collective open on it ("AllReduce #225") and for how long, seconds.
    pub open: String,
    pub open_s: f64,
    /// Open past the hung-collective threshold.
    pub hung: bool,
    /// Among the latest collectives: times it arrived last, its mean lag behind the first, s.
    pub last_arrivals: u64,
    pub mean_lag_s: f64,
    /// "silent 3.1s" (no frame for longer than the threshold), "exited", or "".
    pub state: String,
    /// Where its oldest open call waits, per proxy operation, closest to a hang's cause first:
    /// "ch1→r2 network QP 0x2a1 3 WRs · ch0←r0 data" (empty: nothing open, or not known).
    #[serde(default)]
    pub waits: String,
    /// One of them waits on the network or a GPU (the colour of the column).
    #[serde(default)]
    pub waits_hot: bool,
}

/// The arrival spread of a communicator's latest collectives.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CollArrivals {
    pub comm: String,
    pub name: String,
    pub collectives: u64,
    pub median_spread_s: f64,
    pub max_spread_s: f64,
    /// The last rank to arrive at the collective of the largest spread (the straggler).
    pub max_last_rank: Option<u32>,
    /// The same from the GPU's view (the kernels' first starts, NCCL's KernelCh events): 0
    /// compared when the plugin had none. The host figures above are the host calls.
    #[serde(default)]
    pub gpu_collectives: u64,
    #[serde(default)]
    pub gpu_median_spread_s: f64,
    #[serde(default)]
    pub gpu_max_spread_s: f64,
    #[serde(default)]
    pub gpu_max_last_rank: Option<u32>,
}

/// Totals and labels for the header line.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Header {
    /// Where the data comes from: "live", "replay out/", "demo".
    pub source: String,
    /// Collection mode: "aggregate", "simple", "full" (or "mixed").
    pub mode: String,
    /// Number of nodes (hosts) seen.
    pub nodes: u32,
    /// Number of MPI/NCCL ranks seen.
    pub ranks: u32,
    /// Number of traced processes.
    pub processes: u32,
    /// Number of QPs and endpoints (every row of the QPs view but the unattributed ones).
    pub qps: u32,
    /// The same rows by kind, as the header names them: ("QPs", 48), ("CQs", 24); ("endpoints",
    /// 16), ("workers", 4). Empty: the header says "{qps} QPs".
    pub row_kinds: Vec<(String, u32)>,
    /// Total egress, bytes/s.
    pub tx_bps: f64,
    /// Total ingress, bytes/s.
    pub rx_bps: f64,
    /// Window the windowed figures cover, as the source computed them ("10s", "all").
    pub window: String,
    /// How long the view is (seconds since its first process started) when that is shorter
    /// than the window, or the window is "all": the windowed figures are averages over this
    /// long, for every process (None: the window is whole).
    #[serde(default)]
    pub window_span_s: Option<f64>,
    /// In a view of the past: each process's figures are those of its own latest snapshot at
    /// or before the view time (processes snapshot apart, every 250 ms); the oldest of those
    /// snapshots is this many seconds before the view time (None: the newest data).
    #[serde(default)]
    pub snapshot_lag_s: Option<f64>,
    /// Time of the sample, already formatted ("12:04:18" live, "t+12.004s" in replay).
    pub clock: String,
}

/// One traced process.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProcessRow {
    pub host: String,
    pub pid: u32,
    /// MPI/NCCL rank when known.
    pub rank: Option<u32>,
    /// A process a rank forked (with or without an exec): that rank (`rank` is None). Shown as
    /// `↳0`, "under rank 0".
    pub child_of_rank: Option<u32>,
    /// "aggregate", "simple" or "full".
    pub mode: String,
    /// Enabled layers: "ibverbs", "mlx5", "cuda", "ucx", "libfabric".
    pub layers: Vec<String>,
    /// Egress bytes/s.
    pub tx_bps: f64,
    /// Ingress bytes/s.
    pub rx_bps: f64,
    /// Work requests (posted operations) per second.
    pub ops_per_s: f64,
    /// Egress bytes since the start (for an exited process: its final total).
    pub tx_bytes: u64,
    /// Ingress bytes since the start.
    pub rx_bytes: u64,
    /// Events dropped by this process's rings.
    pub drops: u64,
    /// The process has exited; its totals are kept.
    pub exited: bool,
    /// How it ended when that was not a plain exit: "SIGSEGV", "exit 3" (empty otherwise, or
    /// while it runs). Shown in the state column instead of "exited".
    pub end: String,
    /// It has not exited but sends nothing (stopped, or hung hard): seconds since its last
    /// frame (its "now" rates are then 0: not known). Shown as "silent 6.2s".
    #[serde(default)]
    pub silent_s: Option<f64>,
}

/// The far end of a QP or endpoint, as far as it is known.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Peer {
    pub host: String,
    pub rank: Option<u32>,
    /// Remote QPN in hex ("0x1b07") or endpoint label; empty when unknown.
    pub id: String,
}

impl Peer {
    /// "node1 r5 0x1b07", skipping unknown parts; "—" when nothing is known.
    pub fn label(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if !self.host.is_empty() {
            parts.push(self.host.clone());
        }
        if let Some(r) = self.rank {
            parts.push(format!("r{r}"));
        }
        if !self.id.is_empty() {
            parts.push(self.id.clone());
        }
        if parts.is_empty() {
            "—".to_string()
        } else {
            parts.join(" ")
        }
    }
}

/// One QP, UCX endpoint or libfabric endpoint; or the traffic that could not be attributed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct EndpointRow {
    pub host: String,
    pub rank: Option<u32>,
    pub pid: u32,
    /// "verbs", "mlx5", "ucx", "ofi".
    pub layer: String,
    /// QPN in hex ("0x2a40") or an endpoint label ("ep#4").
    pub local_id: String,
    pub peer: Peer,
    /// "RC", "UD", "DC", "tcp", "rc_mlx5", ...
    pub transport: String,
    /// "RTS", "ERR", ... ; empty when the layer has no state.
    pub state: String,
    /// Egress bytes/s at the latest sample.
    pub tx_bps: f64,
    /// Ingress bytes/s at the latest sample.
    pub rx_bps: f64,
    /// Egress bytes/s averaged over the window.
    pub tx_bps_window: f64,
    /// Ingress bytes/s averaged over the window.
    pub rx_bps_window: f64,
    /// Egress bytes since the start.
    pub tx_bytes: u64,
    /// Ingress bytes since the start.
    pub rx_bytes: u64,
    /// Work requests per second.
    pub ops_per_s: f64,
    /// Operations by opcode since the start, e.g. ("RDMA_WRITE", 1234), ("RECV", 80).
    pub ops_by_opcode: Vec<(String, u64)>,
    /// Doorbells per second (None when the layer has no doorbell).
    pub doorbells_per_s: Option<f64>,
    /// Receive buffers (receive WRs, posted receives) posted and not yet completed (None when
    /// none was ever posted).
    pub posted: Option<u64>,
    /// Posts the library refused since the start (provider busy): not operations.
    pub refused: u64,
    /// Operations that failed since the start (error completions other than flushes, failed
    /// calls).
    #[serde(default)]
    pub errors: u64,
    /// Traffic seen but not attributable to a QP or endpoint.
    pub unattributed: bool,
    /// The mark of the row, from the same rule as the warnings: "silent" (its process stopped
    /// reporting), "waits" (it waits on a far end a warning names), "idle" (a verbs QP with
    /// receives posted that moves nothing); empty otherwise.
    #[serde(default)]
    pub mark: String,
    /// What it waits on, for the detail pane: "r3 (node2 pid 4242), sent nothing 18.2s".
    #[serde(default)]
    pub waits_on: String,
    /// A verbs QP's (or SRQ's) outstanding work (None: not a queue sigmatop follows).
    #[serde(default)]
    pub queue: Option<QueueRow>,
}

/// A QP's work queues: outstanding work, ages, error completions (issue 36).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct QueueRow {
    /// Send work requests posted and not completed.
    pub sq_outstanding: u64,
    pub sq_posted: u64,
    pub sq_completed: u64,
    /// Seconds the oldest outstanding send work request has waited.
    pub sq_oldest_s: f64,
    /// Seconds with send work outstanding and no send completion.
    pub sq_stalled_s: f64,
    pub rq_outstanding: u64,
    pub rq_oldest_s: f64,
    /// Seconds since the last completion (None: none yet).
    pub last_completion_s: Option<f64>,
    /// Error completions by status ("transport retry exceeded", 1).
    pub errors: Vec<(String, u64)>,
    /// "live", "error", "destroyed".
    pub health: String,
    /// Stalled at the hang threshold: the row is marked, the warning names it.
    pub stalled: bool,
    /// Its completions cannot be seen (an extended CQ).
    pub blind: bool,
}

/// One GPU that drives RDMA itself (GPU-initiated doorbells).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GpuRow {
    pub host: String,
    /// The process driving it: a row per process and device, since CUDA device ordinals are
    /// per process (CUDA_VISIBLE_DEVICES gives every rank its own GPU 0).
    pub pid: u32,
    pub rank: Option<u32>,
    /// CUDA device ordinal in that process.
    pub gpu: u32,
    /// Bytes/s described by the WQEs this GPU rang for.
    pub bytes_per_s: f64,
    pub doorbells_per_s: f64,
    /// WQEs by opcode in the window, e.g. ("RDMA_WRITE", 900).
    pub opcode_mix: Vec<(String, u64)>,
    /// WQEs posted and not yet completed.
    pub inflight_wqes: u64,
}

impl GpuRow {
    /// "r3" or, without a rank, "pid 1234".
    pub fn process_label(&self) -> String {
        match self.rank {
            Some(r) => format!("r{r}"),
            None => format!("pid {}", self.pid),
        }
    }
}

/// Per-node traffic, and for `attach HOST...` the state of the link to that host.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct NodeRow {
    pub host: String,
    /// The link to this host: "up", "connecting", "lost: REASON"; empty when sigmatop follows no
    /// remote host (a local attach, a run, a replay).
    pub state: String,
    /// Traced processes seen on this host.
    pub processes: u32,
    /// Of those, the ones that are silent (not exited, no frame for a while).
    #[serde(default)]
    pub silent: u32,
    pub egress_bps: f64,
    pub ingress_bps: f64,
    pub egress_bytes: u64,
    pub ingress_bytes: u64,
}

/// Per-rank traffic.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RankRow {
    pub rank: u32,
    pub host: String,
    /// Its process is silent: seconds since its last frame ("silent 6.2s").
    #[serde(default)]
    pub silent_s: Option<f64>,
    pub egress_bps: f64,
    pub ingress_bps: f64,
    pub egress_bytes: u64,
    pub ingress_bytes: u64,
}

/// A square source × destination matrix.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Matrix {
    /// Row and column labels ("node0", "r3", "node1:gpu0").
    pub labels: Vec<String>,
    /// `bytes[src][dst]`: bytes sent in the window.
    pub bytes: Vec<Vec<f64>>,
    /// `rates[src][dst]`: bytes/s at the latest sample.
    pub rates: Vec<Vec<f64>>,
    /// The last row and column stand for peers that are not traced (labelled "untraced").
    pub untraced: bool,
}

/// The three communication matrices.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Matrices {
    pub rank: Matrix,
    pub gpu: Matrix,
    pub node: Matrix,
    /// Bytes of endpoints that talk to several peers and count them together (libfabric RDM
    /// endpoints outside a record's per-operation peers): in no cell of the rank or node matrix.
    pub left_out_bytes: f64,
    /// How many endpoints those bytes are on.
    pub left_out_endpoints: u32,
}

/// Percentiles of a distribution (HdrHistogram output).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// Doorbell rate of one GPU or QP over time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DoorbellSeries {
    /// "GPU0", "node1 GPU1", "QP 0x2a40".
    pub label: String,
    pub host: String,
    pub gpu: Option<u32>,
    /// QPN when the series is per QP.
    pub qpn: Option<u32>,
    /// Doorbells/s per sample, oldest first.
    pub rate_history: Vec<f64>,
    /// Doorbells/s now.
    pub rate_now: f64,
    /// Interval between consecutive doorbells, nanoseconds.
    pub interval_ns: Option<Percentiles>,
    /// Doorbells per second across the window's samples.
    pub rate_percentiles: Option<Percentiles>,
    /// Seconds since the last doorbell, when its QPs stopped ringing for longer than the hang
    /// threshold while the process reports (`agg::gpu_stops`); None while it rings.
    pub stopped_s: Option<f64>,
}

/// One decoded doorbell and the WQE(s) behind it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DoorbellRecord {
    /// Seconds since the start of the trace.
    pub time_s: f64,
    pub host: String,
    pub gpu: u32,
    pub qpn: u32,
    /// Producer index written in the doorbell.
    pub pi: u32,
    /// Opcode of the first WQE: "RDMA_WRITE", "ATOMIC_FA", ...; "?" when unparsable.
    pub opcode: String,
    pub bytes: u64,
    pub raddr: u64,
    pub rkey: u32,
    /// WQEs covered by this doorbell.
    pub wqes: u32,
}

/// Everything the doorbell view shows.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DoorbellModel {
    pub series: Vec<DoorbellSeries>,
    /// Latest decoded doorbells, oldest first.
    pub recent: Vec<DoorbellRecord>,
}

/// Loss and error counters: nothing is dropped silently.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StatusCounters {
    /// Events dropped because a ring was full.
    pub dropped_events: u64,
    /// Doorbells the poller saw as one (the GPU rang again before the poll).
    pub coalesced_doorbells: u64,
    /// WQEs that could not be decoded.
    pub unparsable_wqes: u64,
    /// Live frames the traced processes could not send to this viewer because it read too
    /// slowly (their queue for it was full): resolution and sampled events lost, never totals.
    pub frames_lost: u64,
    /// Posts the providers refused (busy: `-FI_EAGAIN`, an error status, a verbs `bad_wr`): not
    /// operations, not losses either; shown when there are some.
    pub refused: u64,
    /// Operations that failed (error completions other than flushes, failed calls), summed
    /// over the processes read in detail; shown when there are some.
    #[serde(default)]
    pub errors: u64,
    /// Latest error, e.g. "socket /run/…/4121.sock: bad frame" (shown with ✗).
    pub message: Option<String>,
    /// What the source is doing, a neutral note: "playing 1× · 2.3/6.2s", "replay finished",
    /// "ucx_perftest running (pid 4121) · output in …" (shown as a notice, not as an error).
    pub notice: Option<String>,
}
