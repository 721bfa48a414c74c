//! What the join reports (`NcclReport` and its rows, the timeline of calls, operations, steps
//! and work requests) and what it takes (`Post`, `ProcessInput`): data only, filled by
//! `nccl::model`.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::nccl::format::Rec;

/// One verbs post as the join needs it (from the process's record).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Post {
    pub tsc: u64,
    pub tid: u32,
    pub qpn: u32,
    /// `event::Op` as u8.
    pub op: u8,
    pub bytes: u64,
}

/// One process's NCCL file and what the join needs of its record.
#[derive(Clone, Debug, Default)]
pub struct ProcessInput {
    pub host: String,
    pub pid: u32,
    pub recs: Vec<Rec>,
    pub posts: Vec<Post>,
    pub problem: Option<String>,
}

/// A row per (process, communicator, function, algorithm, protocol).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CollRow {
    pub host: String,
    pub pid: u32,
    /// The rank in this communicator.
    pub rank: u32,
    pub nranks: u32,
    /// NCCL's communicator id (hex).
    pub comm: String,
    pub comm_name: String,
    pub func: String,
    /// A part of calls of this function (Send and Recv of AlltoAll, Gather, Scatter, a Group):
    /// its row comes under theirs and its calls are not counted again there.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub part_of: String,
    pub algo: String,
    pub proto: String,
    /// Channels of the last one.
    pub channels: u32,
    /// How many.
    pub count: u64,
    /// NCCL's element count × the datatype size, summed (AllReduce: the buffer; AllGather: each
    /// rank's part; ReduceScatter: each rank's result; Send/Recv: the message).
    pub bytes: u64,
    /// From the host call (`Coll`/`P2p` start), or the end of the call before it on the same
    /// communicator (point-to-point: same direction and peer) when that came later, to the last
    /// of its proxy operations' stop; summed.
    pub time_ns: u64,
    /// Bus bandwidth over `time_ns` (nccl-tests' definition), GB/s.
    pub busbw_gbs: f64,
    /// Verbs work requests joined to them, and their bytes.
    pub wrs: u64,
    pub wr_bytes: u64,
    /// Not completed when the record ended (no stop of the call or of a proxy operation).
    pub incomplete: u64,
    /// From the GPU's view (NCCL's KernelCh events), over the completed calls whose kernel
    /// times came: their GPU time (first channel's start to last channel's stop), summed, and
    /// the bus bandwidth over it; 0 without kernel events.
    pub gpu_calls: u64,
    pub gpu_time_ns: u64,
    pub gpu_busbw_gbs: f64,
}

/// Per communicator: how ranks arrived at each collective and each call made of parts (same
/// function and sequence number).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Arrivals {
    pub comm: String,
    pub collectives: u64,
    /// Largest and median spread between the first and the last rank's start, ns.
    pub max_spread_ns: u64,
    pub median_spread_ns: u64,
    /// The rank that arrived last at the collective of the largest spread (a stalled rank).
    pub max_spread_last_rank: u32,
    /// rank → times it was the last to arrive.
    pub last_rank: BTreeMap<u32, u64>,
    /// The same from the GPU's view (each rank's first kernel start, NCCL's KernelCh events),
    /// over the calls whose kernel start every rank recorded; 0: none.
    pub gpu_collectives: u64,
    pub gpu_max_spread_ns: u64,
    pub gpu_median_spread_ns: u64,
    pub gpu_max_spread_last_rank: u32,
    pub gpu_last_rank: BTreeMap<u32, u64>,
}

/// How the join went, summed over processes.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct JoinStats {
    /// IB net-plugin QP events, those NCCL gave without a parent step, and those that joined a
    /// post (the others are counted in `qp_events_unjoined`).
    pub qp_events: u64,
    pub qp_events_without_step: u64,
    pub qp_events_joined: u64,
    pub qp_events_unjoined: u64,
    /// QP events whose length differs from the joined post's bytes.
    pub qp_length_mismatches: u64,
    pub socket_events: u64,
    pub proxy_steps: u64,
    /// Proxy steps that said they posted work (SendWait, RecvWait, RecvFlushWait) and that no
    /// verbs work request sigmatop recorded joined: profiler events for work requests sigmatop
    /// never saw (a verbs layer off, a record cut, a post outside the traced libraries).
    pub steps_without_wr: u64,
    /// Verbs posts of NCCL processes, those joined by a QP event, by a proxy step, and neither.
    pub wrs: u64,
    pub wrs_via_qp_event: u64,
    pub wrs_via_step: u64,
    pub wrs_unjoined: u64,
    /// Records the plugin could not keep (its queue was full) and events of types it skips.
    pub dropped_records: u64,
    pub unknown_events: u64,
    /// The NCCL profiler interface the events were read through (the `INIT` records' word 14:
    /// 5; 0 when the file does not say).
    pub profiler_version: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct NcclReport {
    pub collectives: Vec<CollRow>,
    /// Per rank, communicator, function and message size (power-of-two buckets).
    pub by_size: Vec<SizeRow>,
    /// Every call of every rank, in each rank's order of host calls.
    pub calls: Vec<CallRec>,
    /// How GPU timestamps were converted, when there were any.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub gpu_clock: String,
    /// Per process, the calls with their proxy operations, steps and work requests on the
    /// record's clock (for the Perfetto export).
    #[serde(skip)]
    pub timelines: Vec<Timeline>,
    pub arrivals: Vec<Arrivals>,
    /// Per communicator, the first collective that did not complete everywhere (none: every
    /// collective every rank started completed).
    pub stalled: Vec<Stalled>,
    pub join: JoinStats,
    pub problems: Vec<String>,
}

/// One NCCL call as a rank made it (`export --json`'s `nccl.calls[]`, `report --calls`): a
/// collective, a point-to-point call, or a call NCCL split into point-to-point parts (AlltoAll,
/// Gather, Scatter: `kind` "api") or a user's group of sends and receives (`func` "Group"), whose
/// parts name it as their `parent`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct CallRec {
    pub host: String,
    pub pid: u32,
    pub rank: u32,
    pub nranks: u32,
    /// NCCL's communicator id (hex).
    pub comm: String,
    /// "collective", "p2p", or "api" (a call NCCL made of point-to-point parts, or a user's group).
    pub kind: &'static str,
    /// A collective: NCCL's sequence number (per function, in its communicator); a
    /// point-to-point call: its number to that peer in that direction (from 1); an "api" call:
    /// its number among the rank's calls of that function in the communicator (from 1). The
    /// same call has the same number on every rank.
    pub seq: u64,
    /// As the user called it: AllReduce, AlltoAll, Gather, Scatter, Group, Send, Recv...
    pub func: String,
    /// The index in `calls` of the call this one is a part of (a Send of an AlltoAll).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parent: Option<usize>,
    /// Point-to-point: the peer rank.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<u32>,
    /// NCCL's count and the datatype's size; bytes = their product (a Group: its sends' bytes).
    pub count: u64,
    pub dtype_size: u64,
    pub bytes: u64,
    /// The power of two at or above `bytes` (NCCL Inspector's buckets; 0 for 0 bytes).
    pub size_bucket: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub algo: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub proto: Option<&'static str>,
    pub channels: u32,
    /// CLOCK_REALTIME ns of the host call (NCCL's start of the event).
    pub host_call_ns: u64,
    /// When its last proxy operation (or its stop, if later) ended; none: not completed.
    pub end_ns: Option<u64>,
    /// Its own time (from the host call, or the end of the call before it on the same stream
    /// of work when that came later, to `end_ns`), as the rows sum it.
    pub time_ns: Option<u64>,
    /// Its kernel's first start and last stop over channels (NCCL's KernelCh events, the GPU's
    /// globaltimer converted to the record's clock: `gpu_clock` of the report says how).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_start_ns: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_end_ns: Option<u64>,
    /// Verbs work requests joined to it (through its proxy steps), and their bytes; a call made
    /// of parts: theirs summed.
    pub wrs: u64,
    pub wr_bytes: u64,
}

/// Per rank, communicator, function and message size (power-of-two buckets, as NCCL Inspector
/// keys them): the calls as the user made them (parts are not counted again).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SizeRow {
    pub host: String,
    pub pid: u32,
    pub rank: u32,
    pub nranks: u32,
    pub comm: String,
    pub func: String,
    /// Calls of bytes in (size_bucket / 2, size_bucket].
    pub size_bucket: u64,
    pub count: u64,
    pub bytes: u64,
    /// Completed calls' own time, summed, and the bus bandwidth over it (nccl-tests' definition).
    pub time_ns: u64,
    pub busbw_gbs: f64,
    /// Completed calls' GPU time (first kernel start to last stop), summed, and the bus
    /// bandwidth over it; 0 without kernel events.
    pub gpu_time_ns: u64,
    pub gpu_busbw_gbs: f64,
}

/// One process's NCCL calls with their proxy operations, steps and joined work requests, on the
/// record's TSC (the verbs events' clock): what `export --perfetto` draws.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timeline {
    pub host: String,
    pub pid: u32,
    pub calls: Vec<TlCall>,
    pub ops: Vec<TlOp>,
    pub steps: Vec<TlStep>,
    /// The work requests joined to a call.
    pub wrs: Vec<TlWr>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct TlCall {
    /// NCCL's communicator id and this rank's place in it.
    pub comm_id: u64,
    pub comm_name: String,
    pub rank: u32,
    pub nranks: u32,
    /// Host call and end (TSC); end none: not completed.
    pub start: u64,
    pub end: Option<u64>,
    /// Its index in the report's `calls`.
    pub rec: usize,
    /// The call it is a part of (an index in this timeline's `calls`).
    pub parent: Option<usize>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TlOp {
    /// Index in the timeline's `calls`.
    pub call: usize,
    pub channel: u8,
    pub peer: u32,
    pub send: bool,
    pub steps: u32,
    pub start: u64,
    pub stop: Option<u64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TlStep {
    /// Index in the timeline's `ops`.
    pub op: usize,
    pub step: u32,
    /// NCCL's transSize (the last state's).
    pub bytes: u64,
    pub start: u64,
    pub stop: Option<u64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TlWr {
    pub tid: u32,
    pub tsc: u64,
    /// `event::Op` as u8.
    pub op: u8,
    pub bytes: u64,
    /// Index in the timeline's `calls`.
    pub call: usize,
}

/// A collective some ranks started and that did not complete before the record ended: a hung
/// job's first question is which ranks it waits for.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Stalled {
    pub comm: String,
    pub func: String,
    /// NCCL's sequence number of the collective in its communicator.
    pub seq: u64,
    pub nranks: u32,
    /// Ranks that started it, those of them that never saw it complete, and the ranks that never
    /// started it: the ones the others wait for.
    pub started: Vec<u32>,
    pub incomplete: Vec<u32>,
    pub waiting_for: Vec<u32>,
    /// rank → the last sequence number it completed in this communicator (a rank killed loses
    /// its last ~20 ms of records: the lowest figure is the rank the job stopped on).
    pub last_completed: BTreeMap<u32, u64>,
}
