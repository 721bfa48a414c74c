//! The event schema shared by the live wire protocol and the record format: layers, operations,
//! endpoints and their peers, process identity and clock calibration. One version for both.

use serde::{Deserialize, Serialize};

mod clock;
pub use clock::{ClockSample, TscClock};

/// Version of the schema below; bumped on any incompatible change. Carried in the wire hello and in
/// every record file header. 2: `OpCount` has `refused`, `posted` and `posted_bytes`, `Snapshot`
/// has `layers_used`, an event's `aux` holds 32 bits. Records of version 1 are read through
/// [`v1`] (their counts have no refusals or posted receives, their `aux` fits 16 bits).
pub const SCHEMA_VERSION: u16 = 2;

/// How much the preload records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[repr(u8)]
pub enum Mode {
    /// Counters only: per thread, per endpoint, per operation kind.
    Aggregate = 0,
    /// Counters plus one timestamped event per data-moving operation.
    #[default]
    Simple = 1,
    /// Simple plus progress calls and completions.
    Full = 2,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "aggregate" | "agg" => Some(Mode::Aggregate),
            "simple" => Some(Mode::Simple),
            "full" => Some(Mode::Full),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Mode::Aggregate => "aggregate",
            Mode::Simple => "simple",
            Mode::Full => "full",
        }
    }
    pub fn from_u8(v: u8) -> Mode {
        match v {
            0 => Mode::Aggregate,
            2 => Mode::Full,
            _ => Mode::Simple,
        }
    }
}

/// An interposed library. The bit positions form the `layers` mask.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord, Hash)]
#[repr(u8)]
pub enum Layer {
    Ucx = 0,
    Libfabric = 1,
    Ibverbs = 2,
    Mlx5 = 3,
    Cuda = 4,
}

impl Layer {
    pub const ALL: [Layer; 5] = [
        Layer::Ucx,
        Layer::Libfabric,
        Layer::Ibverbs,
        Layer::Mlx5,
        Layer::Cuda,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Layer::Ucx => "ucx",
            Layer::Libfabric => "libfabric",
            Layer::Ibverbs => "ibverbs",
            Layer::Mlx5 => "mlx5",
            Layer::Cuda => "cuda",
        }
    }
    pub fn parse(s: &str) -> Option<Layer> {
        match s.trim().to_ascii_lowercase().as_str() {
            "ucx" | "ucp" => Some(Layer::Ucx),
            "libfabric" | "ofi" | "fabric" => Some(Layer::Libfabric),
            "ibverbs" | "verbs" => Some(Layer::Ibverbs),
            "mlx5" | "mlx5dv" | "devx" => Some(Layer::Mlx5),
            "cuda" => Some(Layer::Cuda),
            _ => None,
        }
    }
    pub fn bit(self) -> u32 {
        1 << (self as u32)
    }
    pub fn from_u8(v: u8) -> Option<Layer> {
        Layer::ALL.get(v as usize).copied()
    }
}

/// Names of the layers set in `mask`, comma separated.
pub fn layer_names(mask: u32) -> String {
    let mut out = String::new();
    for l in Layer::ALL {
        if mask & l.bit() != 0 {
            if !out.is_empty() {
                out.push(',');
            }
            out.push_str(l.name());
        }
    }
    out
}

/// Which way the payload of an operation moves, seen from the process that issued it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Dir {
    /// Bytes leave this process (send, put, write, atomic operand).
    Tx,
    /// Bytes arrive at this process (receive, get, read).
    Rx,
    /// No payload (flush, progress, completion polling).
    None,
}

macro_rules! ops {
    ($( $v:ident = $n:expr, $name:expr, $dir:ident, $layer:ident; )*) => {
        /// Every operation kind sigmatop counts, over all layers. The numeric values are part of the
        /// schema (wire and disk): append only.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Hash, PartialOrd, Ord)]
        #[repr(u8)]
        pub enum Op { $( $v = $n, )* }
        impl Op {
            pub const ALL: &'static [Op] = &[ $( Op::$v, )* ];
            /// Every byte value → its op: a table, since the correlator asks once per event.
            const BY_U8: [Option<Op>; 256] = {
                let mut t = [None; 256];
                $( t[$n as usize] = Some(Op::$v); )*
                t
            };
            #[inline]
            pub fn from_u8(v: u8) -> Option<Op> {
                Self::BY_U8[v as usize]
            }
            /// Stable lower-case name used in JSON, tables and filters.
            pub fn name(self) -> &'static str {
                match self { $( Op::$v => $name, )* }
            }
            /// Ops that can block the calling thread (`ucp_ep_flush`, `ucp_worker_flush`,
            /// `ibv_get_cq_event`): for them `addr` is how long the call blocked, in the
            /// event's clock ticks (ns after the correlator's merge), the event's time being
            /// its return; 0 for the non-blocking forms (`ucp_*_flush_nb*`).
            #[inline]
            pub fn blocks(self) -> bool {
                matches!(self, Op::UcxEpFlush | Op::UcxWorkerFlush | Op::VerbsCqEvent)
            }
            /// A receive the program posts and the library completes later (tag, stream and AM
            /// receives, libfabric msg and tagged receives, verbs RECV / SRQ_RECV): its post is
            /// counted as `posted`, its completion as the operation, with the bytes that arrived.
            #[inline]
            pub fn is_receive(self) -> bool {
                matches!(
                    self,
                    Op::UcxTagRecv
                        | Op::UcxAmRecvData
                        | Op::UcxStreamRecv
                        | Op::OfiRecv
                        | Op::OfiTRecv
                        | Op::VerbsRecv
                        | Op::VerbsSrqRecv
                )
            }
            #[inline]
            pub fn dir(self) -> Dir {
                match self { $( Op::$v => Dir::$dir, )* }
            }
            #[inline]
            pub fn layer(self) -> Layer {
                match self { $( Op::$v => Layer::$layer, )* }
            }
        }
    };
}

ops! {
    UcxPut = 0, "put", Tx, Ucx;
    UcxGet = 1, "get", Rx, Ucx;
    UcxTagSend = 2, "tag_send", Tx, Ucx;
    UcxTagSendSync = 3, "tag_send_sync", Tx, Ucx;
    UcxTagRecv = 4, "tag_recv", Rx, Ucx;
    UcxAmSend = 5, "am_send", Tx, Ucx;
    UcxAmRecvData = 6, "am_recv_data", Rx, Ucx;
    UcxStreamSend = 7, "stream_send", Tx, Ucx;
    UcxStreamRecv = 8, "stream_recv", Rx, Ucx;
    UcxAtomic = 9, "atomic", Tx, Ucx;
    UcxEpFlush = 10, "ep_flush", None, Ucx;
    UcxWorkerFlush = 11, "worker_flush", None, Ucx;
    UcxProgress = 12, "progress", None, Ucx;
    UcxEpError = 13, "ep_error", None, Ucx;
    OfiRead = 16, "read", Rx, Libfabric;
    OfiWrite = 17, "write", Tx, Libfabric;
    OfiSend = 18, "send", Tx, Libfabric;
    OfiRecv = 19, "recv", Rx, Libfabric;
    OfiTSend = 20, "tsend", Tx, Libfabric;
    OfiTRecv = 21, "trecv", Rx, Libfabric;
    OfiCqRead = 22, "cq_read", None, Libfabric;
    OfiAtomic = 23, "atomic", Tx, Libfabric;
    VerbsSend = 32, "SEND", Tx, Ibverbs;
    VerbsSendImm = 33, "SEND_IMM", Tx, Ibverbs;
    VerbsWrite = 34, "RDMA_WRITE", Tx, Ibverbs;
    VerbsWriteImm = 35, "RDMA_WRITE_IMM", Tx, Ibverbs;
    VerbsRead = 36, "RDMA_READ", Rx, Ibverbs;
    VerbsAtomicCas = 37, "ATOMIC_CS", Tx, Ibverbs;
    VerbsAtomicFa = 38, "ATOMIC_FA", Tx, Ibverbs;
    VerbsRecv = 39, "RECV", Rx, Ibverbs;
    VerbsSrqRecv = 40, "SRQ_RECV", Rx, Ibverbs;
    VerbsPollCq = 41, "poll_cq", None, Ibverbs;
    VerbsOther = 42, "OTHER", Tx, Ibverbs;
    VerbsCqEvent = 43, "get_cq_event", None, Ibverbs;
    VerbsSendDone = 44, "send_done", None, Ibverbs;
    GpuDoorbell = 48, "doorbell", None, Mlx5;
    GpuWrite = 49, "RDMA_WRITE", Tx, Mlx5;
    GpuRead = 50, "RDMA_READ", Rx, Mlx5;
    GpuAtomic = 51, "ATOMIC", Tx, Mlx5;
    GpuSend = 52, "SEND", Tx, Mlx5;
    GpuOther = 53, "OTHER", None, Mlx5;
}

/// Number of distinct op codes reserved in per-endpoint counter tables.
pub const OP_SLOTS: usize = 64;

/// Event flags (a bit set in `RawEvent::flags`).
pub mod flags {
    /// The operation was an inject / inline send.
    pub const INLINE: u8 = 1;
    /// The call returned an error (the operation did not start).
    pub const ERROR: u8 = 2;
    /// The operation completed immediately (no request handle).
    pub const IMMEDIATE: u8 = 4;
    /// Signaled / completion requested.
    pub const SIGNALED: u8 = 8;
}

/// One traced operation as it sits in a per-thread ring: fixed size, no pointers, written by the
/// application thread and read by the collector.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct RawEvent {
    /// TSC (or CLOCK_MONOTONIC ns where there is no TSC) at the call.
    pub tsc: u64,
    /// Payload bytes, or the completion count for polling calls.
    pub bytes: u64,
    /// Remote address (RMA), tag (tagged), the time a blocking call blocked (`Op::blocks`, in
    /// clock ticks), or 0.
    pub addr: u64,
    /// Endpoint id (see `EndpointDef`), 0 = unattributed.
    pub ep: u32,
    /// `Op` as u8.
    pub op: u8,
    /// `flags::*`.
    pub flags: u8,
    /// Layer-specific: the rkey (all 32 bits), AM id, fi_addr, WQE index, ...
    pub aux: u32,
}

/// The id of the endpoint that collects traffic sigmatop cannot attribute to a known endpoint.
pub const UNATTRIBUTED_EP: u32 = 0;

/// What a traced endpoint is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub enum EndpointKind {
    Unattributed,
    /// A `ucp_ep_h`.
    UcpEp,
    /// A `ucp_worker_h`: receives and flushes that name no endpoint.
    UcpWorker,
    /// A libfabric `fid_ep`.
    FiEp,
    /// A libfabric completion queue.
    FiCq,
    /// An ibverbs queue pair.
    VerbsQp,
    /// An ibverbs shared receive queue.
    VerbsSrq,
    /// An ibverbs completion queue.
    VerbsCq,
    /// A devx-created QP, driven from the GPU or CPU through its UAR.
    DevxQp,
}

impl EndpointKind {
    pub fn name(self) -> &'static str {
        match self {
            EndpointKind::Unattributed => "unattributed",
            EndpointKind::UcpEp => "ucp_ep",
            EndpointKind::UcpWorker => "ucp_worker",
            EndpointKind::FiEp => "fi_ep",
            EndpointKind::FiCq => "fi_cq",
            EndpointKind::VerbsQp => "qp",
            EndpointKind::VerbsSrq => "srq",
            EndpointKind::VerbsCq => "cq",
            EndpointKind::DevxQp => "devx_qp",
        }
    }
}

/// Who is on the other side of an endpoint, as far as the process can tell.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, Hash)]
pub struct Peer {
    /// FNV-1a hash of the opaque address blob the endpoint was created with (UCX worker address,
    /// libfabric AV address). Matches the `own_addr_hashes` of the peer process.
    pub addr_hash: u64,
    /// Printable address where there is one (socket address, fi_addr, QPN/GID).
    pub text: String,
    /// Remote QP number for verbs / devx QPs.
    pub qpn: Option<u32>,
    /// Verbs / devx QPs: the remote port address the path routes by: its GID, or on a path
    /// without a GRH (InfiniBand within a subnet) its LID as [`lid_as_gid`] writes it. With
    /// `qpn` it is what `addr_hash` hashes ([`qp_addr_hash`]). Records of devx QPs made before
    /// this held the mailbox's remote GID even on a LID-routed path: a reader trusts the field
    /// only where it hashes to `addr_hash` ([`Peer::port_addr`]).
    pub gid: Option<[u8; 16]>,
}

/// The `EndpointUpdate::state` of a verbs / devx QP's own port address, sent right before the
/// update of its RTR transition: `peer.gid` is the address the QP's path uses on this side (the
/// local GID of a GRH path, the port's LID as [`lid_as_gid`] writes it otherwise), `peer.qpn`
/// the QP's own number, `peer.addr_hash` their [`qp_addr_hash`] (an own address of the process).
/// A reader that does not know this state ends with the RTR update's state and peer all the
/// same: it comes after.
pub const LOCAL_ADDR_STATE: &str = "local";

/// What stands in for the GID of a LID-routed path (InfiniBand without a GRH) in the address
/// hash: the LID in the last two bytes, big-endian.
pub fn lid_as_gid(lid: u16) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[14..].copy_from_slice(&lid.to_be_bytes());
    g
}

/// The LID of a port address written by [`lid_as_gid`] (14 zero bytes and a LID other than
/// 0): no GID has that form (`::/112` is no unicast GID prefix).
pub fn gid_as_lid(g: &[u8; 16]) -> Option<u16> {
    let lid = u16::from_be_bytes([g[14], g[15]]);
    (g[..14].iter().all(|&b| b == 0) && lid != 0).then_some(lid)
}

/// The 20-byte key both ends of a verbs / devx connection hash: the port address (GID, or
/// [`lid_as_gid`]) then the QPN (u32 little-endian). A QP's peer `addr_hash` equals the
/// `own_addr_hashes` entry the peer process added for that QP.
pub fn qp_addr_hash(gid: &[u8; 16], qpn: u32) -> u64 {
    let mut k = [0u8; 20];
    k[..16].copy_from_slice(gid);
    k[16..].copy_from_slice(&qpn.to_le_bytes());
    fnv1a64(&k)
}

/// A port address as people read it: `10.0.1.1` for an IPv4-mapped GID (RoCE v2 over IPv4),
/// `lid 3` for a LID ([`lid_as_gid`]), the IPv6 text otherwise (`fe80::2c9:300:0:3`).
pub fn port_addr_text(g: &[u8; 16]) -> String {
    PortText(g).to_string()
}

/// [`port_addr_text`] as a `Display`, which allocates nothing.
pub struct PortText<'a>(pub &'a [u8; 16]);

impl std::fmt::Display for PortText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(lid) = gid_as_lid(self.0) {
            return write!(f, "lid {lid}");
        }
        let v6 = std::net::Ipv6Addr::from(*self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => write!(f, "{v4}"),
            None => write!(f, "{v6}"),
        }
    }
}

impl Peer {
    /// The remote port address of a verbs / devx QP (GID, or LID as [`lid_as_gid`]), when `gid`
    /// is the one `addr_hash` was made of (see `gid`). None for other endpoints.
    pub fn port_addr(&self) -> Option<[u8; 16]> {
        let (g, q) = (self.gid?, self.qpn?);
        (g != [0; 16] && qp_addr_hash(&g, q) == self.addr_hash).then_some(g)
    }
}

/// A traced endpoint: defined once (control path), then referred to by id in counters and events.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointDef {
    pub id: u32,
    pub layer: Layer,
    pub kind: EndpointKind,
    /// Local name: "ep#3", "qp 0x2a40", provider name...
    pub label: String,
    /// Transport or provider (RC/UC/UD, tcp, shm, "tcp;ofi_rxm").
    pub transport: String,
    pub peer: Peer,
    /// Local QP number for verbs/devx endpoints.
    pub qpn: Option<u32>,
    /// Owning GPU for GPU-driven QPs.
    pub gpu: Option<u32>,
    /// When it was created (ns, CLOCK_REALTIME).
    pub created_ns: u64,
}

/// A change of state of an endpoint after its definition (QP state transitions, close).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointUpdate {
    pub id: u32,
    pub state: String,
    pub peer: Option<Peer>,
    pub at_ns: u64,
}

/// Who the traced process is. Carried in the wire hello and in the record's process file.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub host: String,
    pub pid: u32,
    pub ppid: u32,
    pub uid: u32,
    /// The program name (basename of /proc/self/exe).
    pub exe: String,
    /// Global rank from OMPI_COMM_WORLD_RANK, PMI_RANK, PMIX_RANK, SLURM_PROCID or RANK.
    pub rank: Option<u32>,
    pub local_rank: Option<u32>,
    pub world_size: Option<u32>,
    pub mode: u8,
    /// Bit set of `Layer::bit()` that are enabled.
    pub layers: u32,
    /// Live event sampling: one event in `sample` is sent on the socket (the record keeps all).
    pub sample: u32,
    /// Hashes of this process's own addresses (UCX worker addresses, libfabric endpoint names):
    /// a peer's `Peer::addr_hash` equal to one of these means the peer is this process.
    pub own_addr_hashes: Vec<u64>,
    /// Start time of the process trace (ns, CLOCK_REALTIME).
    pub start_ns: u64,
    /// sigmatop version that produced the stream.
    pub version: String,
}

impl Identity {
    pub fn mode(&self) -> Mode {
        Mode::from_u8(self.mode)
    }
}

/// Counters of one endpoint and operation kind: how many operations and how many payload bytes.
///
/// - `ops` / `bytes`: operations the library accepted and their payload; for a receive
///   (`Op::is_receive`), receives that completed and the bytes that *arrived*, taken from the
///   completion (UCX receive info and callbacks, libfabric CQ entries, verbs work completions).
/// - `posted` / `posted_bytes`: receive buffers posted and their size. A receive whose completion
///   sigmatop cannot see (docs/DESIGN.md, "Received bytes") stays here, never in `bytes`.
/// - `refused`: posts the library refused (`-FI_EAGAIN`, a UCX error status, a verbs `bad_wr`):
///   not operations, so not in `ops`; a sign that the provider was busy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpCount {
    pub ep: u32,
    pub op: u8,
    pub ops: u64,
    pub bytes: u64,
    /// Operations that failed: a failed call, an error completion (counted in `ops` too).
    pub errors: u64,
    pub refused: u64,
    pub posted: u64,
    pub posted_bytes: u64,
}

impl Op {
    /// Operations whose `aux` is an rkey (or its low 16 bits) and `addr` a remote address.
    pub fn one_sided(self) -> bool {
        matches!(
            self,
            Op::VerbsWrite
                | Op::VerbsWriteImm
                | Op::VerbsRead
                | Op::VerbsAtomicCas
                | Op::VerbsAtomicFa
                | Op::GpuWrite
                | Op::GpuRead
                | Op::GpuAtomic
        )
    }

    /// Which way an operation's payload moves between its issuer and the other side: `Some(true)`
    /// to it (sends, writes, atomics), `Some(false)` from it (one-sided reads), `None` when it
    /// moves none between them (receives, whose bytes the sender already counts; control calls).
    /// Every matrix (process, rank, node, GPU; recorded and live) counts by this.
    pub fn toward_peer(self) -> Option<bool> {
        match self.dir() {
            Dir::Tx => Some(true),
            Dir::Rx if self.one_sided() => Some(false),
            _ => None,
        }
    }
}

impl OpCount {
    /// True when every counter is zero.
    pub fn is_empty(&self) -> bool {
        self.ops == 0
            && self.bytes == 0
            && self.errors == 0
            && self.refused == 0
            && self.posted == 0
            && self.posted_bytes == 0
    }
}

/// Everything sigmatop did not keep, by cause. Never silently dropped: shown and exported.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DropCounters {
    /// Events lost because a per-thread ring was full.
    pub ring_full: u64,
    /// Events not written to the record (I/O error, disk full).
    pub record_lost: u64,
    /// Sampled events not sent to live readers (sampling or slow reader).
    pub live_not_sent: u64,
    /// Operations on endpoints created before sigmatop saw them (counted as unattributed).
    pub unattributed_ops: u64,
    /// Doorbells whose covered range merged several rings.
    pub coalesced_doorbells: u64,
    /// WQEs that did not parse.
    pub unparsable_wqes: u64,
    /// Endpoints past the per-process table size (their ops go to the unattributed row).
    pub endpoint_overflow: u64,
    /// Hooks that failed and were disabled (the call went through untraced).
    pub hook_failures: u64,
}

impl DropCounters {
    pub fn total_events_lost(&self) -> u64 {
        self.ring_full + self.record_lost
    }
    pub fn add(&mut self, o: &DropCounters) {
        self.ring_full += o.ring_full;
        self.record_lost += o.record_lost;
        self.live_not_sent += o.live_not_sent;
        self.unattributed_ops += o.unattributed_ops;
        self.coalesced_doorbells += o.coalesced_doorbells;
        self.unparsable_wqes += o.unparsable_wqes;
        self.endpoint_overflow += o.endpoint_overflow;
        self.hook_failures += o.hook_failures;
    }
}

/// A point-in-time copy of a process's cumulative counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Snapshot {
    /// CLOCK_REALTIME ns when it was taken.
    pub at_ns: u64,
    /// Sequence number, per process, from 0.
    pub seq: u64,
    /// Cumulative counts since start, non-zero entries only.
    pub counts: Vec<OpCount>,
    pub drops: DropCounters,
    /// Events produced so far (all threads): every event when recording, else the events kept
    /// for live viewers (one in `Identity::sample` per thread).
    pub events: u64,
    pub threads: u32,
    /// Bit set of `Layer::bit()` of the layers this process used so far: a layer that defined
    /// an endpoint or counted an operation (`Identity::layers` is what was enabled).
    pub layers_used: u32,
}

/// A decoded event as readers see it (from the record or the live sample stream).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub tsc: u64,
    pub tid: u32,
    pub ep: u32,
    pub op: u8,
    pub flags: u8,
    pub aux: u32,
    pub bytes: u64,
    pub addr: u64,
}

impl Event {
    /// How long the call blocked (`Op::blocks`, its `addr`), when it did.
    #[inline]
    pub fn blocked(&self) -> Option<u64> {
        // `Op::blocks` on the code itself: one bit per op code below 64
        // (`tests::blocked_is_op_blocks`).
        const BLOCKS: u64 = (1 << Op::UcxEpFlush as u8)
            | (1 << Op::UcxWorkerFlush as u8)
            | (1 << Op::VerbsCqEvent as u8);
        let blocks = (BLOCKS.checked_shr(self.op as u32).unwrap_or(0) & 1) != 0;
        (self.addr != 0 && blocks).then_some(self.addr)
    }

    pub fn from_raw(r: &RawEvent, tid: u32) -> Event {
        Event {
            tsc: r.tsc,
            tid,
            ep: r.ep,
            op: r.op,
            flags: r.flags,
            aux: r.aux,
            bytes: r.bytes,
            addr: r.addr,
        }
    }
}

/// The types of schema version 1 whose layout version 2 changed, to read older records and
/// streams: they convert to the current types with nothing refused, nothing posted and no layer
/// known to be used (version 1 counted a receive's posted size in `bytes`; it is read back as it
/// was written).
pub mod v1 {
    use serde::Deserialize;

    use super::DropCounters;

    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
    pub struct OpCount {
        pub ep: u32,
        pub op: u8,
        pub ops: u64,
        pub bytes: u64,
        pub errors: u64,
    }

    #[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
    pub struct Snapshot {
        pub at_ns: u64,
        pub seq: u64,
        pub counts: Vec<OpCount>,
        pub drops: DropCounters,
        pub events: u64,
        pub threads: u32,
    }

    impl From<OpCount> for super::OpCount {
        fn from(c: OpCount) -> super::OpCount {
            super::OpCount {
                ep: c.ep,
                op: c.op,
                ops: c.ops,
                bytes: c.bytes,
                errors: c.errors,
                ..Default::default()
            }
        }
    }

    impl From<Snapshot> for super::Snapshot {
        fn from(s: Snapshot) -> super::Snapshot {
            super::Snapshot {
                at_ns: s.at_ns,
                seq: s.seq,
                counts: s.counts.into_iter().map(Into::into).collect(),
                drops: s.drops,
                events: s.events,
                threads: s.threads,
                layers_used: 0,
            }
        }
    }
}

/// FNV-1a, 64 bit: stable across processes and builds, used to match address blobs.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A memory region registered (or deregistered) by the process: `ibv_reg_mr`,
/// `ibv_reg_mr_iova2`, `ibv_reg_dmabuf_mr`, `ibv_dereg_mr`. One-sided operations of a peer name
/// it by remote address (in `[addr, addr + len)`) and rkey. Control path only.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemRegion {
    /// Start of the region as peers address it: the virtual address for `ibv_reg_mr`, the IOVA
    /// for `_iova2` and dmabuf registrations.
    pub addr: u64,
    pub len: u64,
    pub lkey: u32,
    pub rkey: u32,
    /// `ibv_access_flags` of the registration.
    pub access: u32,
    /// false: this record is the deregistration of the region named by `rkey`/`addr`/`len`.
    pub registered: bool,
    /// When (ns, CLOCK_REALTIME).
    pub at_ns: u64,
}

#[cfg(test)]
mod tests {
    /// `Event::blocked` (a bit mask) answers as `Op::blocks` for every byte value.
    #[test]
    fn blocked_is_op_blocks() {
        use super::{Event, Op};
        for v in 0..=255u8 {
            for addr in [0u64, 1, 12_345] {
                let ev = Event {
                    op: v,
                    addr,
                    ..Default::default()
                };
                let want = Op::from_u8(v).is_some_and(Op::blocks) && addr != 0;
                assert_eq!(ev.blocked(), want.then_some(addr), "op {v}, addr {addr}");
            }
        }
    }

    use super::*;

    #[test]
    fn op_codes_round_trip_and_are_unique() {
        let mut seen = [false; 256];
        for &op in Op::ALL {
            assert!(!seen[op as usize], "duplicate op code {}", op as u8);
            seen[op as usize] = true;
            assert_eq!(Op::from_u8(op as u8), Some(op));
            assert!((op as usize) < OP_SLOTS);
        }
        assert_eq!(Op::from_u8(200), None);
    }

    #[test]
    fn modes_and_layers_parse() {
        assert_eq!(Mode::parse("FULL"), Some(Mode::Full));
        assert_eq!(Mode::parse("bogus"), None);
        assert_eq!(Layer::parse("ofi"), Some(Layer::Libfabric));
        assert_eq!(
            layer_names(Layer::Ucx.bit() | Layer::Cuda.bit()),
            "ucx,cuda"
        );
    }
}

/// How a process ended, as the parent that reaped it said (preload/src/reap.rs writes the line
/// `signal N` or `exit N` for a child that did not exit 0; docs/FORMAT.md, `<pid>.exit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcessEnd {
    /// Killed by this signal.
    Signal(i32),
    /// Exited with this (non-zero) status.
    Exit(i32),
}

impl ProcessEnd {
    /// Parses the one line of a `.exit` file; None for anything else (the file is outside input).
    pub fn parse(text: &str) -> Option<ProcessEnd> {
        let line = text.strip_suffix('\n').unwrap_or(text);
        let (word, n) = line.split_once(' ')?;
        let n: i32 = n.parse().ok()?;
        match word {
            "signal" if (1..=64).contains(&n) => Some(ProcessEnd::Signal(n)),
            "exit" if (1..=255).contains(&n) => Some(ProcessEnd::Exit(n)),
            _ => None,
        }
    }

    /// "killed by SIGSEGV (signal 11)", "exited with status 3".
    pub fn describe(self) -> String {
        match self {
            ProcessEnd::Signal(s) => format!("killed by {} (signal {s})", signal_name(s)),
            ProcessEnd::Exit(c) => format!("exited with status {c}"),
        }
    }

    /// What the dashboard's state column says: "SIGSEGV", "exit 3".
    pub fn short(self) -> String {
        match self {
            ProcessEnd::Signal(s) => signal_name(s),
            ProcessEnd::Exit(c) => format!("exit {c}"),
        }
    }
}

/// "SIGTERM" for the common signals; "signal N" otherwise.
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

#[cfg(test)]
mod process_end_tests {
    use super::ProcessEnd;

    #[test]
    fn status_lines_parse_and_anything_else_is_refused() {
        assert_eq!(
            ProcessEnd::parse("signal 11\n"),
            Some(ProcessEnd::Signal(11))
        );
        assert_eq!(ProcessEnd::parse("exit 3"), Some(ProcessEnd::Exit(3)));
        for bad in [
            "",
            "signal",
            "signal 0",
            "signal 99",
            "exit 0",
            "exit 256",
            "exit -1",
            "kill 9",
            "signal 11 12",
            "signal 11\n\n",
        ] {
            assert_eq!(ProcessEnd::parse(bad), None, "{bad:?}");
        }
        assert_eq!(
            ProcessEnd::Signal(11).describe(),
            "killed by SIGSEGV (signal 11)"
        );
        assert_eq!(ProcessEnd::Exit(3).short(), "exit 3");
    }
}
