//! The NCCL profiler-event file (`<record>/<host>/nccl-<pid>.stn`): what sigmatop's NCCL
//! profiler plugin (preload/src/nccl) writes and what `report` / `export` read. Pure layout and
//! decoding over bytes; docs/FORMAT.md, "NCCL profiler events".
//!
//! A 16-byte header (`SIGMATOP-NCCL v1`), then fixed records of [`WORDS`] little-endian u64
//! words. Every record: word 0 the timestamp (the preload's hot-path clock, the TSC where it is
//! invariant: the verbs events' clock), word 1 `tid | kind << 32 | etype << 40 | state << 48`,
//! word 2 the event id (the handle sigmatop gave NCCL), word 3 the parent's id (0: none), word 4
//! the communicator (the context id of its `init`), words 5.. the payload of the kind (see
//! [`Rec`]'s accessors).

/// The file's first 16 bytes.
pub const MAGIC: &[u8; 16] = b"SIGMATOP-NCCL v1";
/// u64 words per record.
pub const WORDS: usize = 15;
/// Bytes per record.
pub const REC_BYTES: usize = WORDS * 8;

/// Record kinds (word 1, bits 32..40).
pub mod kind {
    /// A communicator's `init`: payload commId, nranks, nNodes, rank, activation mask, name
    /// (words 10..14), and in word 14 the profiler interface NCCL's events came through (5; 0
    /// in files written before it was noted).
    pub const INIT: u8 = 1;
    /// `startEvent`.
    pub const START: u8 = 2;
    /// `stopEvent`.
    pub const STOP: u8 = 3;
    /// `recordEventState`: payload state args.
    pub const STATE: u8 = 4;
    /// A communicator's `finalize`.
    pub const FINALIZE: u8 = 5;
    /// A clock sample: payload tsc (word 0), CLOCK_MONOTONIC ns, CLOCK_REALTIME ns.
    pub const CLOCK: u8 = 6;
    /// Written last by the plugin: records it could not keep (its ring was full), events of
    /// types it does not know.
    pub const TOTALS: u8 = 7;
    /// (aggregate mode, written at exit) One communicator's host calls of one function: payload
    /// function index, calls, bytes. Older files hold none.
    pub const COUNTS: u8 = 8;
}

/// NCCL's event types (`ncclProfileColl` ...), as in `nccl_profiler.h` (2.28).
pub mod etype {
    pub const GROUP: u8 = 0;
    pub const COLL: u8 = 1;
    pub const P2P: u8 = 2;
    pub const PROXY_OP: u8 = 3;
    pub const PROXY_STEP: u8 = 4;
    pub const PROXY_CTRL: u8 = 5;
    pub const KERNEL_CH: u8 = 6;
    pub const NET_PLUGIN: u8 = 7;
    /// (profiler v5, NCCL 2.28) The API events: a group (`groupDepth` 1: NCCL's own, around
    /// one API call; more: the user's `ncclGroupStart`), a collective API call, a
    /// point-to-point API call (AlltoAll, Gather and Scatter arrive as one group of these per
    /// call), a kernel launch. Written since sigmatop 0.9: older files hold none.
    pub const GROUP_API: u8 = 8;
    pub const COLL_API: u8 = 9;
    pub const P2P_API: u8 = 10;
    pub const KERNEL_LAUNCH: u8 = 11;
    /// Any other (a type newer than those above).
    pub const OTHER: u8 = 15;
    /// The event-type bit NCCL uses for the index above (`1 << i`).
    pub const fn bit(i: u8) -> u64 {
        1u64 << i
    }
}

/// `ncclProfileNetPlugin` plugin ids: type in the upper 16 bits, version below.
pub const NET_TYPE_IB: u64 = 1 << 16;
pub const NET_TYPE_SOCK: u64 = 2 << 16;
pub const NET_TYPE_MASK: u64 = 0xffff_0000;

/// Proxy step states (`ncclProfilerProxyStep*`).
pub mod state {
    pub const SEND_GPU_WAIT: u8 = 8;
    pub const SEND_WAIT: u8 = 9;
    pub const RECV_WAIT: u8 = 10;
    pub const RECV_FLUSH_WAIT: u8 = 11;
    pub const RECV_GPU_WAIT: u8 = 12;
    pub const SEND_PEER_WAIT: u8 = 20;
    /// `ncclProfilerKernelChStop`: payload word 0 the kernel's stop on the GPU's globaltimer.
    pub const KERNEL_CH_STOP: u8 = 22;
    /// GroupApi states: `ncclGroupStart` returned, `ncclGroupEnd` called.
    pub const GROUP_START_API_STOP: u8 = 23;
    pub const GROUP_END_API_START: u8 = 24;
}

/// NCCL's function names (`ncclFuncToString`, 2.28) by index; 255: another.
pub const FUNCS: &[&str] = &[
    "AllGather",
    "AllReduce",
    "AlltoAll",
    "Broadcast",
    "Gather",
    "Recv",
    "Reduce",
    "ReduceScatter",
    "Scatter",
    "SendRecv",
    "Send",
];
/// Algorithms (`ncclAlgoToString`).
pub const ALGOS: &[&str] = &[
    "TREE",
    "RING",
    "COLLNET_DIRECT",
    "COLLNET_CHAIN",
    "NVLS",
    "NVLS_TREE",
    "PAT",
];
/// Protocols (`ncclProtoToString`).
pub const PROTOS: &[&str] = &["LL", "LL128", "SIMPLE"];
/// Data types (`ncclDatatypeToString`) and their sizes in bytes.
pub const DATATYPES: &[(&str, u64)] = &[
    ("ncclInt8", 1),
    ("ncclUint8", 1),
    ("ncclInt32", 4),
    ("ncclUint32", 4),
    ("ncclInt64", 8),
    ("ncclUint64", 8),
    ("ncclFloat16", 2),
    ("ncclFloat32", 4),
    ("ncclFloat64", 8),
    ("ncclBfloat16", 2),
    ("ncclFloat8e4m3", 1),
    ("ncclFloat8e5m2", 1),
];

/// Index of `name` in `table`, 255 when absent.
pub fn index_of(table: &[&str], name: &[u8]) -> u8 {
    table
        .iter()
        .position(|t| t.as_bytes() == name)
        .map_or(255, |i| i as u8)
}

/// Index of a data type name, 255 when absent.
pub fn datatype_index(name: &[u8]) -> u8 {
    DATATYPES
        .iter()
        .position(|(t, _)| t.as_bytes() == name)
        .map_or(255, |i| i as u8)
}

/// The name at `i` of `table`, "?" when out of range.
pub fn name(table: &[&'static str], i: u8) -> &'static str {
    table.get(i as usize).copied().unwrap_or("?")
}

/// The function index of a user's group of point-to-point calls ("Group").
pub const GROUP_FUNC: u8 = 254;

/// The name of a function index ([`FUNCS`], or [`GROUP_FUNC`]).
pub fn func_name(f: u8) -> &'static str {
    if f == GROUP_FUNC {
        "Group"
    } else {
        name(FUNCS, f)
    }
}

/// The power of two at or above `bytes` (0 for 0).
pub fn size_bucket(bytes: u64) -> u64 {
    if bytes == 0 {
        0
    } else {
        bytes.checked_next_power_of_two().unwrap_or(1 << 63)
    }
}

/// How a group of point-to-point API calls is named: AlltoAll, Gather, Scatter when NCCL made
/// them of one API call (depth 1) in the shape of that call, "Group" for a user's group; none
/// for a lone Send or Recv (no parent).
pub fn group_func(depth: u64, sends: &[u64], recvs: &[u64], nranks: u32) -> Option<u8> {
    let n = nranks as usize;
    if depth >= 2 {
        return Some(GROUP_FUNC);
    }
    let all_eq = |v: &[u64], c: u64| v.iter().all(|&x| x == c);
    let c = sends.first().or(recvs.first()).copied().unwrap_or(0);
    if n >= 2 && sends.len() == n && recvs.len() == n && all_eq(sends, c) && all_eq(recvs, c) {
        return Some(index_of(FUNCS, b"AlltoAll"));
    }
    if n >= 2 && sends.len() == 1 && recvs.len() == n && all_eq(recvs, c) {
        return Some(index_of(FUNCS, b"Gather"));
    }
    if n >= 2 && sends.len() == n && recvs.len() == 1 && all_eq(sends, c) {
        return Some(index_of(FUNCS, b"Scatter"));
    }
    if sends.len() + recvs.len() > 1 {
        return Some(GROUP_FUNC);
    }
    None
}

/// One record.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rec(pub [u64; WORDS]);

impl Rec {
    pub fn new(tsc: u64, tid: u32, kind: u8, etype: u8, state: u8) -> Rec {
        let mut w = [0u64; WORDS];
        w[0] = tsc;
        w[1] = tid as u64 | (kind as u64) << 32 | (etype as u64) << 40 | (state as u64) << 48;
        Rec(w)
    }
    pub fn tsc(&self) -> u64 {
        self.0[0]
    }
    pub fn tid(&self) -> u32 {
        self.0[1] as u32
    }
    pub fn kind(&self) -> u8 {
        (self.0[1] >> 32) as u8
    }
    pub fn etype(&self) -> u8 {
        (self.0[1] >> 40) as u8
    }
    pub fn state(&self) -> u8 {
        (self.0[1] >> 48) as u8
    }
    pub fn id(&self) -> u64 {
        self.0[2]
    }
    pub fn parent(&self) -> u64 {
        self.0[3]
    }
    pub fn comm(&self) -> u64 {
        self.0[4]
    }
    /// Payload word `i` (0 = word 5).
    pub fn p(&self, i: usize) -> u64 {
        self.0.get(5 + i).copied().unwrap_or(0)
    }
    pub fn to_bytes(&self, out: &mut [u8; REC_BYTES]) {
        for (i, w) in self.0.iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
    }
}

/// Packs a collective's strings and small fields into one payload word.
pub fn pack_coll(func: u8, datatype: u8, algo: u8, proto: u8, channels: u8, warps: u8) -> u64 {
    func as u64
        | (datatype as u64) << 8
        | (algo as u64) << 16
        | (proto as u64) << 24
        | (channels as u64) << 32
        | (warps as u64) << 40
}

/// The fields [`pack_coll`] packed: (func, datatype, algo, proto, channels, warps).
pub fn unpack_coll(w: u64) -> (u8, u8, u8, u8, u8, u8) {
    (
        w as u8,
        (w >> 8) as u8,
        (w >> 16) as u8,
        (w >> 24) as u8,
        (w >> 32) as u8,
        (w >> 40) as u8,
    )
}

/// What a file held: its records, and where it stopped if it was cut or damaged.
#[derive(Debug, Default)]
pub struct Decoded {
    pub recs: Vec<Rec>,
    /// `Some(reason)` when the file does not start with [`MAGIC`] or ends inside a record (a
    /// process killed mid-write): the records before are kept.
    pub problem: Option<String>,
}

/// Decodes a whole file. Never panics: bad input gives a problem line and the records before it.
pub fn decode(bytes: &[u8]) -> Decoded {
    let mut d = Decoded::default();
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        d.problem = Some("not a sigmatop NCCL event file (bad header)".into());
        return d;
    }
    let body = &bytes[MAGIC.len()..];
    let whole = body.len() / REC_BYTES;
    for c in body.chunks_exact(REC_BYTES).take(whole) {
        let mut w = [0u64; WORDS];
        for (i, x) in w.iter_mut().enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(&c[i * 8..i * 8 + 8]);
            *x = u64::from_le_bytes(b);
        }
        d.recs.push(Rec(w));
    }
    if !body.len().is_multiple_of(REC_BYTES) {
        d.problem = Some(format!(
            "cut short: {} bytes after the last whole record",
            body.len() % REC_BYTES
        ));
    }
    d
}

/// The communicator name packed into payload words 5..9 of an `INIT` record (up to 32 bytes).
pub fn pack_name(name: &[u8], out: &mut [u64]) {
    for (i, chunk) in name.chunks(8).take(out.len()).enumerate() {
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        out[i] = u64::from_le_bytes(b);
    }
}

/// The name [`pack_name`] packed (lossy UTF-8, up to the first NUL).
pub fn unpack_name(words: &[u64]) -> String {
    let mut b: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    if let Some(end) = b.iter().position(|&c| c == 0) {
        b.truncate(end);
    }
    String::from_utf8_lossy(&b).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_cut_files_keep_what_came_before() {
        let mut r = Rec::new(123, 77, kind::START, etype::COLL, 0);
        r.0[2] = 0x51;
        r.0[6] = pack_coll(1, 7, 1, 2, 8, 16);
        let mut bytes = MAGIC.to_vec();
        let mut b = [0u8; REC_BYTES];
        r.to_bytes(&mut b);
        bytes.extend_from_slice(&b);
        bytes.extend_from_slice(&b[..5]);
        let d = decode(&bytes);
        assert_eq!(d.recs, vec![r]);
        assert_eq!(d.recs[0].tid(), 77);
        assert_eq!(d.recs[0].kind(), kind::START);
        assert_eq!(d.recs[0].etype(), etype::COLL);
        assert_eq!(unpack_coll(d.recs[0].p(1)), (1, 7, 1, 2, 8, 16));
        assert!(d.problem.unwrap().contains("5 bytes"));
        assert!(decode(b"garbage").problem.is_some());
        let mut w = [0u64; 4];
        pack_name(b"nccl-tests comm", &mut w);
        assert_eq!(unpack_name(&w), "nccl-tests comm");
        assert_eq!(index_of(FUNCS, b"AllReduce"), 1);
        assert_eq!(index_of(FUNCS, b"Nope"), 255);
        assert_eq!(DATATYPES[datatype_index(b"ncclFloat32") as usize].1, 4);
    }
}
