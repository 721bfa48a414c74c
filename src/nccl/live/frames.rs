//! What the live NCCL frames carry (`wire::Frame::Nccl`, `NcclWaits`, `NcclCalls`): the data
//! the tracker (`nccl::live`) fills and readers take, serde-serialized. Data only.

use serde::{Deserialize, Serialize};

/// What one process sends: cumulative, so a reader that misses frames loses nothing but time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NcclLive {
    /// CLOCK_REALTIME ns of the newest record the tracker read.
    pub at_ns: u64,
    pub comms: Vec<CommLive>,
    /// Records the plugin's queue could not keep (full), events of types it does not read.
    pub dropped_records: u64,
    pub unknown_events: u64,
    /// Profiler events that name a call or operation the tracker never saw start (a proxy
    /// operation of an unknown parent, a stop of an unknown call), and calls or operations not
    /// followed because [`MAX_OPEN`] were open: counted, never dropped silently.
    pub untracked: u64,
}

/// One communicator of the process.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CommLive {
    /// NCCL's communicator id (`commId`: the same on every rank).
    pub comm_id: u64,
    pub name: String,
    pub nranks: u32,
    pub rank: u32,
    pub rows: Vec<RowLive>,
    /// Collectives (not point-to-point calls) started and completed.
    pub started: u64,
    pub completed: u64,
    /// The newest collective started, and the sequence number of the newest completed.
    pub last_started: Option<CollAt>,
    pub last_completed: Option<u64>,
    /// The oldest collective started and not completed (none: nothing is open).
    pub oldest_open: Option<CollAt>,
    /// CLOCK_REALTIME ns at which the newest completed collective ended (0: none yet). A
    /// program enqueues collectives ahead of the GPU: the oldest open one has waited since the
    /// later of its start and this.
    pub last_completed_ns: u64,
    /// (sequence number, start CLOCK_REALTIME ns) of the latest [`RECENT`] collectives started.
    pub recent: Vec<(u64, u64)>,
}

/// A collective: its sequence number in the communicator, NCCL function index
/// (`format::FUNCS`), and its host call's CLOCK_REALTIME ns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CollAt {
    pub seq: u64,
    pub func: u8,
    pub start_ns: u64,
}

/// (live protocol 5, `wire::Frame::NcclWaits`) Where each communicator of a process waits: its
/// point-to-point calls (started, completed, per peer), and the proxy operations of its oldest
/// open call with the state of each one's oldest unfinished step, from NCCL's own proxy-step
/// states. Cumulative counts; what a reader needs to say where a hang sits.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NcclWaits {
    /// CLOCK_REALTIME ns of the newest record the tracker read.
    pub at_ns: u64,
    pub comms: Vec<CommWaits>,
}

/// One communicator of the process: its point-to-point calls and its oldest open call's waits.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CommWaits {
    pub comm_id: u64,
    pub rank: u32,
    /// Point-to-point calls (Send, Recv: NCCL 2.28's AlltoAll, Gather, Scatter and grouped
    /// send/recv arrive as these) started and completed.
    pub p2p_started: u64,
    pub p2p_completed: u64,
    /// Per (function, peer): calls started and completed, and the host call of the oldest open
    /// one (0: none open). The k-th Send of rank a to b meets the k-th Recv of b from a.
    pub lanes: Vec<Lane>,
    /// The oldest open call (collective or point-to-point), whose proxy operations `waits` are.
    pub call: Option<OpenCall>,
    pub waits: Vec<OpWait>,
}

/// The point-to-point calls of one function to one peer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lane {
    /// `format::FUNCS` index (Send, Recv).
    pub func: u8,
    pub peer: u32,
    pub started: u64,
    pub completed: u64,
    /// CLOCK_REALTIME ns of the oldest open call's host call; 0: none open.
    pub oldest_open_ns: u64,
}

/// A call that has not completed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpenCall {
    pub p2p: bool,
    /// `format::FUNCS` index.
    pub func: u8,
    /// A collective's sequence number; a point-to-point call's number in its lane (from 1).
    pub seq: u64,
    /// A point-to-point call's peer (0 for a collective).
    pub peer: u32,
    /// CLOCK_REALTIME ns of its host call.
    pub start_ns: u64,
}

/// One proxy operation of an open call: where its oldest unfinished step stands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpWait {
    pub channel: u8,
    /// The rank it sends to or receives from.
    pub peer: u32,
    pub send: bool,
    /// `format::state` of its oldest unfinished step (SendGPUWait, SendPeerWait, SendWait,
    /// RecvWait, RecvFlushWait, RecvGPUWait); 0: no step in flight (between steps, or none yet).
    pub state: u8,
    /// CLOCK_REALTIME ns since it is in that state.
    pub since_ns: u64,
    /// The endpoint (QP) of the work request its proxy posted right before SendWait / RecvWait
    /// (on the same thread); 0: not known.
    pub ep: u32,
    pub steps_done: u32,
    pub steps: u32,
}

/// (live protocol 6, `wire::Frame::NcclCalls`) The calls as the user made them, by message
/// size, and from the GPU's view: per communicator the calls NCCL made of point-to-point parts
/// (AlltoAll, Gather, Scatter, a user's Group: NCCL 2.28's API events), completed calls per
/// function and power-of-two size, and the kernels' first starts on the GPU of the latest
/// collectives. Cumulative, like `NcclLive`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NcclCalls {
    /// CLOCK_REALTIME ns of the newest record the tracker read.
    pub at_ns: u64,
    pub comms: Vec<CommCalls>,
}

/// One communicator of the process.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CommCalls {
    pub comm_id: u64,
    pub rank: u32,
    /// Calls made of parts, per function (`format::FUNCS` index, or `format::GROUP_FUNC`).
    pub api_rows: Vec<ApiRow>,
    /// Completed calls as the user made them (collectives, calls made of parts, lone Send and
    /// Recv), per function and size bucket.
    pub sizes: Vec<SizeLive>,
    /// (sequence number, CLOCK_REALTIME ns of its kernel's first start on the GPU) of the
    /// latest [`RECENT`] collectives whose kernel events came.
    pub gpu_recent: Vec<(u64, u64)>,
    /// (function, number, CLOCK_REALTIME ns of its host call) of the latest [`RECENT`] calls
    /// made of parts: the k-th AlltoAll of every rank is the same call.
    pub api_recent: Vec<(u8, u64, u64)>,
}

/// The calls of one function NCCL made of point-to-point parts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiRow {
    pub func: u8,
    /// Completed calls; their bytes (NCCL's count × datatype size; a Group: its Sends'), own
    /// time (as `RowLive`'s), and Send/Recv parts.
    pub count: u64,
    pub bytes: u64,
    pub time_ns: u64,
    pub parts: u64,
    /// Started and not completed.
    pub open: u64,
}

/// Completed calls of one function and size bucket (bytes in (bucket / 2, bucket]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeLive {
    pub func: u8,
    pub bucket: u64,
    pub count: u64,
    pub bytes: u64,
    pub time_ns: u64,
    /// Their kernels' time on the GPU (first start to last stop), where kernel events came.
    pub gpu_time_ns: u64,
}

/// Per (function, algorithm, protocol, to itself): as `model::CollRow`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RowLive {
    /// `format::FUNCS` index; algo / proto: `format::ALGOS` / `PROTOS`, 255 for point-to-point.
    pub func: u8,
    pub algo: u8,
    pub proto: u8,
    /// A point-to-point call to or from the rank itself.
    pub to_self: bool,
    pub channels: u8,
    /// Completed calls, their bytes (NCCL's count × datatype size) and their time (host call,
    /// or the previous call's end on the same lane when later, to the last proxy stop).
    pub count: u64,
    pub bytes: u64,
    pub time_ns: u64,
    /// Calls started and not completed.
    pub open: u64,
}
