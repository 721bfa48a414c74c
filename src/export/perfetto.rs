//! Perfetto trace writer (protobuf `Trace`, streamed as `TracePacket`s), a `Sink` of the
//! correlator. Field numbers: reference/hardware-and-hooks.md §7 and Perfetto's protos.
//!
//! Layout of the trace:
//! - one packet sequence (`trusted_packet_sequence_id` 1); its first packet clears incremental
//!   state, sets the default timestamp clock to CLOCK_REALTIME (id 1) and interns every event
//!   name, category, annotation name and peer label; a ClockSnapshot pairs CLOCK_BOOTTIME with
//!   CLOCK_REALTIME and makes REALTIME the trace clock, so timestamps from all hosts share it;
//! - tracks: one process track per traced process (named "exe pid@host", pids made unique over
//!   hosts), a thread track per thread file under it, a custom track per endpoint / QP (under its
//!   GPU's track when the endpoint names a GPU, else under the process), a "phases" track per
//!   process, counter tracks for payload bytes/s per endpoint, per GPU (under its GPU track) and
//!   egress bytes/s per node;
//! - an instant (category "op") per recorded operation on its endpoint's track, with debug
//!   annotations (bytes or count, tag / raddr / fi_addr, AM id, tid, peer, flags);
//! - a doorbell instant (`mlx5.doorbell`) carries its QP number, producer index, the recomputed
//!   range `[prev_pi, end_pi)`, WQEBBs, and a summary of the WQEs it covered (count, bytes,
//!   opcodes, first raddr/rkey); each recovered WQE instant on the same QP track carries the
//!   doorbell's index (`doorbell_pi`) and its position (`wqe_index`); one-sided operations carry
//!   their `rkey` (low 16 bits) and, when the memory region was found, the `target` process;
//! - flows from each send to its receive (`flow_ids` on the send, `terminating_flow_ids` on the
//!   receiving side), id = 1 + the send's position in the merged stream;
//! - slices: bursts of activity per thread ("busy") and per process ("phase"), and the calls
//!   that blocked (`Op::blocks`) on a "blocking calls" track under their thread.
//!
//! Packets are written in timestamp order through a bounded reorder window (events wait there
//! until their flow and phase boundaries are known), so memory does not grow with the trace.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, HashSet, VecDeque};
use std::io::{self, Write};

use serde::Serialize;

use super::proto::{self, begin, end, fixed64, int, string, uint};
use crate::correlate::doorbell::{DoorbellInfo, WqeLink};
use crate::correlate::matcher::Pair;
use crate::correlate::merge::{Merged, ThreadInfo};
use crate::correlate::mr::one_sided;
use crate::correlate::{Analysis, Correlation, FxMap, PhaseTrack, Sink, TwoWay};
use crate::event::{Dir, Layer, Op, Snapshot};

const SEQ: u64 = 1;
// TracePacket fields.
const P_TIMESTAMP: u32 = 8;
const P_SEQ_ID: u32 = 10;
const P_TRACK_EVENT: u32 = 11;
const P_INTERNED: u32 = 12;
const P_SEQ_FLAGS: u32 = 13;
const P_CLOCK_SNAPSHOT: u32 = 6;
const P_TRACK_DESC: u32 = 60;
const P_DEFAULTS: u32 = 59;
const P_FIRST_ON_SEQ: u32 = 87;
const SEQ_CLEARED: u64 = 1;
const SEQ_NEEDS: u64 = 2;
// TrackEvent fields.
const TE_TYPE: u32 = 9;
const TE_TRACK: u32 = 11;
const TE_NAME_IID: u32 = 10;
const TE_CATEGORY_IIDS: u32 = 3;
const TE_COUNTER: u32 = 30;
const TE_FLOW: u32 = 47;
const TE_TERM_FLOW: u32 = 48;
const TE_ANNOT: u32 = 4;
const TYPE_BEGIN: u64 = 1;
const TYPE_END: u64 = 2;
const TYPE_INSTANT: u64 = 3;
const TYPE_COUNTER: u64 = 4;
// DebugAnnotation fields.
const DA_NAME_IID: u32 = 1;
const DA_UINT: u32 = 3;
const DA_STRING_IID: u32 = 17;
// Clocks.
const CLOCK_REALTIME: u64 = 1;
const CLOCK_BOOTTIME: u64 = 6;

// Interned iids.
const CAT_OP: u64 = 1;
const CAT_PHASE: u64 = 2;
const CAT_FLOW: u64 = 3;
const NAME_PHASE: u64 = 100;
const NAME_BUSY: u64 = 101;
const NAME_FLOW_END: u64 = 102;
const NAME_UNKNOWN_OP: u64 = 103;
const AN_BYTES: u64 = 1;
const AN_COUNT: u64 = 2;
const AN_TAG: u64 = 3;
const AN_RADDR: u64 = 4;
const AN_FI_ADDR: u64 = 5;
const AN_AM_ID: u64 = 6;
const AN_TID: u64 = 7;
const AN_PEER: u64 = 8;
const AN_FLAGS: u64 = 9;
const AN_QPN: u64 = 10;
const AN_PI: u64 = 11;
const AN_PREV_PI: u64 = 12;
const AN_END_PI: u64 = 13;
const AN_WQEBBS: u64 = 14;
const AN_WQES: u64 = 15;
const AN_WQE_BYTES: u64 = 16;
const AN_OPCODES: u64 = 17;
const AN_RKEY: u64 = 18;
const AN_DB_PI: u64 = 19;
const AN_WQE_INDEX: u64 = 20;
const AN_PI_MISMATCH: u64 = 21;
const AN_TARGET: u64 = 22;
const AN_BLOCKED_NS: u64 = 23;
const ANNOTATION_NAMES: [(u64, &str); 23] = [
    (AN_BYTES, "bytes"),
    (AN_COUNT, "count"),
    (AN_TAG, "tag"),
    (AN_RADDR, "raddr"),
    (AN_FI_ADDR, "fi_addr"),
    (AN_AM_ID, "am_id"),
    (AN_TID, "tid"),
    (AN_PEER, "peer"),
    (AN_FLAGS, "flags"),
    (AN_QPN, "qpn"),
    (AN_PI, "pi"),
    (AN_PREV_PI, "prev_pi"),
    (AN_END_PI, "end_pi"),
    (AN_WQEBBS, "wqebbs"),
    (AN_WQES, "wqes"),
    (AN_WQE_BYTES, "wqe_bytes"),
    (AN_OPCODES, "opcodes"),
    (AN_RKEY, "rkey"),
    (AN_DB_PI, "doorbell_pi"),
    (AN_WQE_INDEX, "wqe_index"),
    (AN_PI_MISMATCH, "pi_mismatch"),
    (AN_TARGET, "target"),
    (AN_BLOCKED_NS, "blocked_ns"),
];
// DebugAnnotation.string_value.
const DA_STRING: u32 = 6;

/// Events held back at most this long (merged time) for their flows and phase ends, and at most
/// this many.
pub const WINDOW_NS: u64 = 200_000_000;
pub const WINDOW_EVENTS: usize = 2 << 20;
/// Output is written in pieces of about this size.
const STAGED_BYTES: usize = 256 << 10;

fn op_name_iid(op: u8) -> u64 {
    if Op::from_u8(op).is_some() {
        1 + op as u64
    } else {
        NAME_UNKNOWN_OP
    }
}

fn op_name(op: Op) -> String {
    format!("{}.{}", op.layer().short(), op.name())
}

/// What the writer did.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PerfettoStats {
    pub packets: u64,
    pub op_instants: u64,
    pub flows: u64,
    /// Pairs whose send had already been written when the receive was seen (no arrow drawn).
    pub flows_outside_window: u64,
    /// WQEs whose doorbell had already been written (its WQE summary misses them).
    pub doorbell_wqes_outside_window: u64,
    /// Flows that ended on a marker because the receiving thread recorded nothing after the send.
    pub flows_ended_on_marker: u64,
    pub tracks: u64,
    pub counter_samples: u64,
    pub phase_slices: u64,
    /// Slices of blocking calls (on each thread's "blocking calls" track).
    pub blocking_slices: u64,
    /// … whose start was moved later: it fell before packets already written (a call that
    /// blocked longer than the window), or before the thread's previous blocking call ended.
    pub blocking_starts_moved: u64,
    pub bytes: u64,
}

#[derive(Default)]
struct Item {
    m: Merged,
    track: u64,
    peer: Option<u32>,
    /// The process owning the memory region a one-sided operation targets.
    target: Option<u32>,
    flow_out: u64,
    /// Flows ending here: the first two inline, more (rare) in `flow_more`.
    flow_in: [u64; 2],
    flow_more: Vec<u64>,
    /// Doorbell / WQE / one-sided details (rare enough to box).
    extra: Option<Box<Extra>>,
}

/// What a doorbell or a WQE instant carries besides the common annotations.
#[derive(Default)]
struct Extra {
    db: Option<DoorbellInfo>,
    wqes: u32,
    wqe_bytes: u64,
    /// WQEs per opcode (`Op` as u8, count), in order of first appearance.
    ops: Vec<(u8, u32)>,
    first_raddr: u64,
    first_rkey: u16,
    /// This WQE's doorbell index and position.
    wqe_of: Option<(u16, u32)>,
}

impl Item {
    fn end_flow(&mut self, f: u64) {
        match self.flow_in.iter_mut().find(|x| **x == 0) {
            Some(slot) => *slot = f,
            None => self.flow_more.push(f),
        }
    }
}

/// Packets written outside the event stream, ordered by time.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Late {
    Counter {
        track: u64,
        value: i64,
    },
    Begin {
        track: u64,
        name: u64,
    },
    End {
        track: u64,
    },
    /// A blocking call's slice on its thread's "blocking calls" track (name: the op's).
    CallBegin {
        track: u64,
        name: u64,
        dur_ns: u64,
    },
    CallEnd {
        track: u64,
    },
    FlowEnd {
        track: u64,
        flow: u64,
    },
}

/// The output: packets are gathered in `buf[..len]` and handed to `out` in large writes; the
/// first write error is kept and everything after it dropped.
struct Stage<W: Write> {
    out: W,
    buf: Box<[u8]>,
    len: usize,
    error: Option<io::Error>,
}

impl<W: Write> Stage<W> {
    fn flush(&mut self) {
        if self.error.is_none()
            && self.len > 0
            && let Err(e) = self.out.write_all(&self.buf[..self.len])
        {
            self.error = Some(e);
        }
        self.len = 0;
    }

    /// Copies bytes in; a piece of 16 KiB or more goes straight to the output.
    fn put(&mut self, mut b: &[u8]) {
        if b.len() >= 16 << 10 {
            self.flush();
            if self.error.is_none()
                && let Err(e) = self.out.write_all(b)
            {
                self.error = Some(e);
            }
            return;
        }
        while !b.is_empty() {
            if self.len == self.buf.len() {
                self.flush();
            }
            let n = b.len().min(self.buf.len() - self.len);
            self.buf[self.len..self.len + n].copy_from_slice(&b[..n]);
            self.len += n;
            b = &b[n..];
        }
    }
}

/// Encoded packets waiting in the window, in chunks of `CHUNK_BYTES`.
struct Chunk {
    buf: Box<[u8]>,
    used: usize,
}

/// One event in the window: its time, and either the length of its encoded packet (the next
/// bytes of the chunks) or, with `PENDING`, the index of its item in `pending`.
#[derive(Clone, Copy)]
struct Entry {
    ns: u64,
    what: u64,
}

const PENDING: u64 = 1 << 63;
/// An encoded send the matcher had not paired when it was encoded: its packet ends with the
/// flow it would start (id 1 + its sequence number, as `pair` gives). Unless `PAIRED` is set by
/// the time it is written, those last `OPEN_FLOW_BYTES` are cut off and the lengths redone.
const OPEN_SEND: u64 = 1 << 62;
const PAIRED: u64 = 1 << 61;
/// An encoded packet that starts a flow (counted in the stats when written).
const FLOW: u64 = 1 << 60;
const LEN_MASK: u64 = (1 << 32) - 1;
const OPEN_FLOW_BYTES: usize = 10;
const CHUNK_BYTES: usize = 1 << 20;
/// Room kept free at a chunk's end for one plain packet (at most ~330 bytes).
const PLAIN_MAX: usize = 512;

pub struct PerfettoSink<W: Write> {
    stage: Stage<W>,
    pkt: Vec<u8>,
    pub stats: PerfettoStats,
    next_uuid: u64,
    proc_uuid: Vec<u64>,
    phase_uuid: Vec<u64>,
    proc_pid: Vec<u32>,
    thread_uuid: Vec<u64>,
    /// Per thread file: the tid its operations are annotated with; None in a process with a
    /// single thread file, where every operation is that thread's.
    thread_tid: Vec<Option<u32>>,
    ep_uuid: FxMap<(u32, u32), u64>,
    gpu_uuid: HashMap<(u32, u32), u64>,
    ep_gpu: HashMap<(u32, u32), u32>,
    ep_label: HashMap<(u32, u32), String>,
    /// The newest event, not final until the next one arrives (its pair, target, doorbell
    /// details come in the same step of the correlator).
    cur: Item,
    has_cur: bool,
    cur_seq: u64,
    /// Events before it, oldest first; `base_seq` is the first one's sequence number.
    entries: VecDeque<Entry>,
    base_seq: u64,
    /// Items still open to change (doorbells awaiting WQEs, sends awaiting their receive,
    /// anything the plain encoder does not take); `pending_base` is the first one's index.
    pending: VecDeque<Item>,
    pending_base: u64,
    chunks: VecDeque<Chunk>,
    spare_chunks: Vec<Chunk>,
    /// Read position in the front chunk.
    read_off: usize,
    /// Encode final events when they enter the window (false: at release, the reference path).
    early: bool,
    late: BinaryHeap<Reverse<(u64, u64, Late)>>,
    late_n: u64,
    /// Per thread file: its "blocking calls" track (0 until needed) and where its last one ended.
    blocking_track: Vec<(u64, u64)>,
    /// Per thread file: flows (send ns, id) ending at its next event.
    pending_end: Vec<Vec<(u64, u64)>>,
    pending_n: usize,
    /// Per process: the endpoint of its last event and that endpoint's track (the merged
    /// stream interleaves processes).
    last_ep: Vec<TwoWay<u64>>,
    last_written_ns: u64,
}

impl<W: Write> PerfettoSink<W> {
    pub fn new(out: W) -> Self {
        PerfettoSink {
            stage: Stage {
                out,
                buf: vec![0; STAGED_BYTES].into_boxed_slice(),
                len: 0,
                error: None,
            },
            pkt: Vec::with_capacity(256),
            stats: PerfettoStats::default(),
            next_uuid: 1,
            proc_uuid: Vec::new(),
            phase_uuid: Vec::new(),
            proc_pid: Vec::new(),
            thread_uuid: Vec::new(),
            thread_tid: Vec::new(),
            ep_uuid: FxMap::default(),
            gpu_uuid: HashMap::new(),
            ep_gpu: HashMap::new(),
            ep_label: HashMap::new(),
            cur: Item::default(),
            has_cur: false,
            cur_seq: 0,
            entries: VecDeque::new(),
            base_seq: 0,
            pending: VecDeque::new(),
            pending_base: 0,
            chunks: VecDeque::new(),
            spare_chunks: Vec::new(),
            read_off: 0,
            early: true,
            late: BinaryHeap::new(),
            late_n: 0,
            blocking_track: Vec::new(),
            pending_end: Vec::new(),
            pending_n: 0,
            last_ep: Vec::new(),
            last_written_ns: 0,
        }
    }

    /// Finishes writing and returns the output.
    pub fn into_inner(mut self) -> Result<W, io::Error> {
        self.stage.flush();
        if let Some(e) = self.stage.error.take() {
            return Err(e);
        }
        self.stage.out.flush()?;
        Ok(self.stage.out)
    }

    /// Writes `self.pkt` as one `Trace.packet`.
    fn emit(&mut self) {
        if self.stage.error.is_some() {
            return;
        }
        let mut hdr = [0u8; 11];
        hdr[0] = 0x0A;
        let mut n = 1;
        let mut v = self.pkt.len() as u64;
        while v >= 0x80 {
            hdr[n] = (v as u8) | 0x80;
            v >>= 7;
            n += 1;
        }
        hdr[n] = v as u8;
        n += 1;
        self.stage.put(&hdr[..n]);
        self.stage.put(&self.pkt);
        self.stats.packets += 1;
        self.stats.bytes += (n + self.pkt.len()) as u64;
    }

    fn uuid(&mut self) -> u64 {
        let u = self.next_uuid;
        self.next_uuid += 1;
        self.stats.tracks += 1;
        u
    }

    /// Writes a TrackDescriptor; `body` adds fields after uuid and parent.
    fn track(
        &mut self,
        uuid: u64,
        parent: Option<u64>,
        name: &str,
        body: impl FnOnce(&mut Vec<u8>),
    ) {
        self.pkt.clear();
        uint(&mut self.pkt, P_SEQ_ID, SEQ);
        let d = begin(&mut self.pkt, P_TRACK_DESC);
        uint(&mut self.pkt, 1, uuid);
        if let Some(p) = parent {
            uint(&mut self.pkt, 5, p);
        }
        if !name.is_empty() {
            string(&mut self.pkt, 2, name);
        }
        body(&mut self.pkt);
        end(&mut self.pkt, d);
        self.emit();
    }

    fn counter_track(&mut self, parent: Option<u64>, name: &str) -> u64 {
        let u = self.uuid();
        self.track(u, parent, name, |b| {
            let c = begin(b, 8);
            uint(b, 3, 3); // UNIT_SIZE_BYTES (per second: see the name)
            end(b, c);
        });
        u
    }

    fn ep_track(&mut self, proc: u32, ep: u32) -> u64 {
        if let Some(&u) = self.ep_uuid.get(&(proc, ep)) {
            return u;
        }
        let parent = match self.ep_gpu.get(&(proc, ep)).copied() {
            Some(g) => self.gpu_track(proc, g),
            None => self.proc_uuid[proc as usize],
        };
        let name = self
            .ep_label
            .get(&(proc, ep))
            .cloned()
            .unwrap_or_else(|| format!("ep#{ep}"));
        let u = self.uuid();
        self.track(u, Some(parent), &name, |_| {});
        self.ep_uuid.insert((proc, ep), u);
        u
    }

    /// The "GPU n" track of a process (under its process track), defined on first use.
    fn gpu_track(&mut self, proc: u32, g: u32) -> u64 {
        if let Some(&u) = self.gpu_uuid.get(&(proc, g)) {
            return u;
        }
        let u = self.uuid();
        let pu = self.proc_uuid[proc as usize];
        self.track(u, Some(pu), &format!("GPU {g}"), |_| {});
        self.gpu_uuid.insert((proc, g), u);
        u
    }

    /// A call that returned at `m.ns` after blocking `blocked_ns`: a slice on its thread's
    /// "blocking calls" track, kept in time order and nested.
    fn blocking_call(&mut self, m: &Merged, blocked_ns: u64) {
        let t = m.thread as usize;
        let Some(&thread_track) = self.thread_uuid.get(t) else {
            return;
        };
        if self.blocking_track.len() <= t {
            self.blocking_track.resize(t + 1, (0, 0));
        }
        if self.blocking_track[t].0 == 0 {
            let u = self.uuid();
            self.track(u, Some(thread_track), "blocking calls", |_| {});
            self.blocking_track[t].0 = u;
        }
        let (track, prev_end) = self.blocking_track[t];
        let end_ns = m.ns;
        let want = end_ns.saturating_sub(blocked_ns);
        let start = want.max(prev_end).max(self.last_written_ns).min(end_ns);
        if start != want {
            self.stats.blocking_starts_moved += 1;
        }
        self.blocking_track[t].1 = end_ns;
        self.push_late(
            start,
            Late::CallBegin {
                track,
                name: op_name_iid(m.ev.op),
                dur_ns: blocked_ns,
            },
        );
        self.push_late(end_ns, Late::CallEnd { track });
    }

    fn push_late(&mut self, ns: u64, l: Late) {
        self.late_n += 1;
        self.late.push(Reverse((ns, self.late_n, l)));
    }

    fn write_late(&mut self, ns: u64, l: Late) {
        self.pkt.clear();
        uint(&mut self.pkt, P_TIMESTAMP, ns);
        uint(&mut self.pkt, P_SEQ_ID, SEQ);
        uint(&mut self.pkt, P_SEQ_FLAGS, SEQ_NEEDS);
        let te = begin(&mut self.pkt, P_TRACK_EVENT);
        match l {
            Late::Counter { track, value } => {
                uint(&mut self.pkt, TE_TYPE, TYPE_COUNTER);
                uint(&mut self.pkt, TE_TRACK, track);
                int(&mut self.pkt, TE_COUNTER, value);
                self.stats.counter_samples += 1;
            }
            Late::Begin { track, name } => {
                uint(&mut self.pkt, TE_TYPE, TYPE_BEGIN);
                uint(&mut self.pkt, TE_TRACK, track);
                uint(&mut self.pkt, TE_CATEGORY_IIDS, CAT_PHASE);
                uint(&mut self.pkt, TE_NAME_IID, name);
            }
            Late::End { track } => {
                uint(&mut self.pkt, TE_TYPE, TYPE_END);
                uint(&mut self.pkt, TE_TRACK, track);
                self.stats.phase_slices += 1;
            }
            Late::CallBegin {
                track,
                name,
                dur_ns,
            } => {
                uint(&mut self.pkt, TE_TYPE, TYPE_BEGIN);
                uint(&mut self.pkt, TE_TRACK, track);
                uint(&mut self.pkt, TE_CATEGORY_IIDS, CAT_OP);
                uint(&mut self.pkt, TE_NAME_IID, name);
                let d = begin(&mut self.pkt, TE_ANNOT);
                uint(&mut self.pkt, DA_NAME_IID, AN_BLOCKED_NS);
                uint(&mut self.pkt, DA_UINT, dur_ns);
                end(&mut self.pkt, d);
            }
            Late::CallEnd { track } => {
                uint(&mut self.pkt, TE_TYPE, TYPE_END);
                uint(&mut self.pkt, TE_TRACK, track);
                self.stats.blocking_slices += 1;
            }
            Late::FlowEnd { track, flow } => {
                uint(&mut self.pkt, TE_TYPE, TYPE_INSTANT);
                uint(&mut self.pkt, TE_TRACK, track);
                uint(&mut self.pkt, TE_CATEGORY_IIDS, CAT_FLOW);
                uint(&mut self.pkt, TE_NAME_IID, NAME_FLOW_END);
                fixed64(&mut self.pkt, TE_TERM_FLOW, flow);
                self.stats.flows_ended_on_marker += 1;
            }
        }
        end(&mut self.pkt, te);
        self.emit();
        self.last_written_ns = self.last_written_ns.max(ns);
    }

    /// Writes late packets due at or before `ns`.
    fn drain_late(&mut self, ns: u64) {
        while let Some(Reverse((t, _, _))) = self.late.peek() {
            if *t > ns {
                break;
            }
            if let Some(Reverse((t, _, l))) = self.late.pop() {
                self.write_late(t, l);
            }
        }
    }

    fn write_item(&mut self, it: Item) {
        self.drain_late(it.m.ns);
        if plain(&it) {
            self.write_plain_item(&it);
        } else {
            self.write_general_item(&it);
        }
    }

    /// Any operation instant, through the general encoder.
    fn write_general_item(&mut self, it: &Item) {
        let ev = &it.m.ev;
        let tid = tid_of(&self.thread_tid, it);
        let p = &mut self.pkt;
        p.clear();
        uint(p, P_TIMESTAMP, it.m.ns);
        uint(p, P_SEQ_ID, SEQ);
        uint(p, P_SEQ_FLAGS, SEQ_NEEDS);
        let te = begin(p, P_TRACK_EVENT);
        uint(p, TE_TYPE, TYPE_INSTANT);
        uint(p, TE_TRACK, it.track);
        uint(p, TE_CATEGORY_IIDS, CAT_OP);
        uint(p, TE_NAME_IID, op_name_iid(ev.op));
        // The annotations every instant has, as the plain encoder writes them (at most 8 of at
        // most 16 bytes), then the doorbell / WQE ones.
        let mut common = [0u8; 128];
        let mut w = Cursor {
            buf: &mut common,
            n: 0,
        };
        annotations(it, tid, &mut w);
        let n = w.n;
        p.extend_from_slice(&common[..n]);
        let annot = |p: &mut Vec<u8>, name: u64, v: u64| {
            let d = begin(p, TE_ANNOT);
            uint(p, DA_NAME_IID, name);
            uint(p, DA_UINT, v);
            end(p, d);
        };
        if let Some(x) = &it.extra {
            if let Some(d) = &x.db {
                annot(p, AN_QPN, d.qpn as u64);
                annot(p, AN_PI, d.pi as u64);
                annot(p, AN_PREV_PI, d.prev_pi as u64);
                annot(p, AN_END_PI, d.end_pi as u64);
                annot(p, AN_WQEBBS, d.wqebbs);
                annot(p, AN_WQES, x.wqes as u64);
                if x.wqes > 0 {
                    annot(p, AN_WQE_BYTES, x.wqe_bytes);
                    let mut ops = String::new();
                    for (i, (o, n)) in x.ops.iter().enumerate() {
                        if i > 0 {
                            ops.push_str(", ");
                        }
                        let name = Op::from_u8(*o).map_or("?", |o| o.name());
                        ops.push_str(&format!("{name}×{n}"));
                    }
                    let d = begin(p, TE_ANNOT);
                    uint(p, DA_NAME_IID, AN_OPCODES);
                    string(p, DA_STRING, &ops);
                    end(p, d);
                    annot(p, AN_RADDR, x.first_raddr);
                    annot(p, AN_RKEY, x.first_rkey as u64);
                }
                if d.pi_mismatch {
                    annot(p, AN_PI_MISMATCH, 1);
                }
            }
            if let Some((pi, i)) = x.wqe_of {
                annot(p, AN_DB_PI, pi as u64);
                annot(p, AN_WQE_INDEX, i as u64);
            }
        }
        for f in it.flow_in.iter().chain(it.flow_more.iter()) {
            if *f != 0 {
                fixed64(p, TE_TERM_FLOW, *f);
            }
        }
        // The flow a send starts comes last (see `Entry::what`'s OPEN_SEND).
        if it.flow_out != 0 {
            fixed64(p, TE_FLOW, it.flow_out);
            self.stats.flows += 1;
        }
        end(p, te);
        self.emit();
        self.stats.op_instants += 1;
        self.last_written_ns = self.last_written_ns.max(it.m.ns);
    }

    /// `write_item` for the common operation instant: straight into the output.
    fn write_plain_item(&mut self, it: &Item) {
        if self.stage.error.is_some() {
            return;
        }
        let tid = tid_of(&self.thread_tid, it);
        if self.stage.buf.len() - self.stage.len < PLAIN_MAX {
            self.stage.flush();
        }
        let n = write_plain(it, tid, &mut self.stage.buf[self.stage.len..]);
        self.stage.len += n;
        self.count_plain(it, n);
    }

    fn count_plain(&mut self, it: &Item, n: usize) {
        self.stats.packets += 1;
        self.stats.bytes += n as u64;
        self.stats.op_instants += 1;
        if it.flow_out != 0 {
            self.stats.flows += 1;
        }
    }
}

impl<W: Write> PerfettoSink<W> {
    /// Makes the newest event final: encoded into the window's chunks when nothing but its
    /// own flow can change it any more (a send not yet paired is encoded with that flow, as an
    /// OPEN_SEND), else kept as an item.
    fn finalize_cur(&mut self) {
        if !self.has_cur {
            return;
        }
        self.has_cur = false;
        if self.entries.is_empty() {
            self.base_seq = self.cur_seq;
        }
        let ns = self.cur.m.ns;
        if self.early && plain(&self.cur) && self.stage.error.is_none() {
            // A send the matcher has not paired yet may still get its flow when the receive comes.
            let open = self.cur.flow_out == 0
                && self.cur.peer.is_some()
                && crate::correlate::matcher::role(&self.cur.m.ev).is_some_and(|r| r.0);
            if open {
                self.cur.flow_out = self.cur_seq + 1;
            }
            let tid = tid_of(&self.thread_tid, &self.cur);
            let room = self
                .chunks
                .back()
                .is_some_and(|c| c.buf.len() - c.used >= PLAIN_MAX);
            if !room {
                let c = self.spare_chunks.pop().unwrap_or_else(|| Chunk {
                    buf: vec![0; CHUNK_BYTES].into_boxed_slice(),
                    used: 0,
                });
                self.chunks.push_back(c);
            }
            if let Some(c) = self.chunks.back_mut() {
                let n = write_plain(&self.cur, tid, &mut c.buf[c.used..]);
                c.used += n;
                // Counted in the stats when written (`release`).
                let what = if open {
                    OPEN_SEND
                } else if self.cur.flow_out != 0 {
                    FLOW
                } else {
                    0
                };
                self.entries.push_back(Entry {
                    ns,
                    what: what | n as u64,
                });
                return;
            }
        }
        let idx = self.pending_base + self.pending.len() as u64;
        self.pending.push_back(std::mem::take(&mut self.cur));
        self.entries.push_back(Entry {
            ns,
            what: PENDING | idx,
        });
    }

    /// The item of event `seq` while it can still change (the newest, or pending).
    fn item_at(&mut self, seq: u64) -> Option<&mut Item> {
        if seq == self.cur_seq && self.has_cur {
            return Some(&mut self.cur);
        }
        let e = self.entries.get(seq.checked_sub(self.base_seq)? as usize)?;
        if e.what & PENDING == 0 {
            return None;
        }
        let i = (e.what & !PENDING).checked_sub(self.pending_base)?;
        self.pending.get_mut(i as usize)
    }

    /// Writes the `len`-byte packet at the read position without its last field (an open
    /// send's flow), its packet and TrackEvent lengths made smaller to match.
    fn write_trimmed(&mut self, len: usize) {
        let Some(c) = self.chunks.front() else { return };
        let pkt = &c.buf[self.read_off..self.read_off + len];
        // 0x0A, packet length, then `mid` (0x40, ns, sequence id and flags, 0x5A), then the
        // TrackEvent length and body, as `write_plain` wrote them.
        let mut pos = 1;
        let _ = proto::read_varint(pkt, &mut pos);
        let mid_start = pos;
        pos += 1;
        let _ = proto::read_varint(pkt, &mut pos);
        pos += 5;
        let mid = &pkt[mid_start..pos];
        let te_len = proto::read_varint(pkt, &mut pos).unwrap_or(0) as usize;
        let body = &pkt[pos..(pos + te_len.saturating_sub(OPEN_FLOW_BYTES)).min(pkt.len())];
        let te2 = body.len() as u64;
        let mut hdr = [0u8; 48];
        let mut h = Cursor {
            buf: &mut hdr,
            n: 0,
        };
        h.put(&[0x0A]);
        h.varint((mid.len() + vlen(te2) + body.len()) as u64);
        h.put(mid);
        h.varint(te2);
        let n = h.n;
        self.stage.put(&hdr[..n]);
        self.stage.put(body);
        self.stats.packets += 1;
        self.stats.bytes += (n + body.len()) as u64;
    }

    /// Stages `run` bytes of the front chunk from the read position.
    fn stage_run(&mut self, run: &mut usize) {
        if *run == 0 {
            return;
        }
        if let Some(c) = self.chunks.front() {
            self.stage.put(&c.buf[self.read_off..self.read_off + *run]);
        }
        self.read_off += *run;
        *run = 0;
    }

    /// Writes the window's events older than `now - WINDOW_NS` (and beyond `WINDOW_EVENTS`),
    /// with the late packets due before each; runs of encoded packets go out in one copy.
    fn release(&mut self, now: u64) {
        let mut run = 0usize;
        while let Some(&e) = self.entries.front() {
            if e.ns.saturating_add(WINDOW_NS) >= now && self.entries.len() <= WINDOW_EVENTS {
                break;
            }
            self.entries.pop_front();
            self.base_seq += 1;
            let late_due = self
                .late
                .peek()
                .is_some_and(|Reverse((t, _, _))| *t <= e.ns);
            if late_due || e.what & PENDING != 0 {
                self.stage_run(&mut run);
                self.drain_late(e.ns);
            }
            if e.what & PENDING != 0 {
                self.pending_base += 1;
                if let Some(it) = self.pending.pop_front() {
                    self.write_item(it);
                }
                continue;
            }
            // The packet is the next `len` bytes; a chunk's end moves on to the next chunk.
            let used = self.chunks.front().map_or(0, |c| c.used);
            if self.read_off + run >= used {
                self.stage_run(&mut run);
                if let Some(c) = self.chunks.pop_front() {
                    self.spare_chunks.push(Chunk { used: 0, ..c });
                }
                self.read_off = 0;
            }
            let len = (e.what & LEN_MASK) as usize;
            self.stats.op_instants += 1;
            self.last_written_ns = self.last_written_ns.max(e.ns);
            if e.what & OPEN_SEND != 0 && e.what & PAIRED == 0 {
                // Never paired: written without its flow.
                self.stage_run(&mut run);
                self.write_trimmed(len);
                self.read_off += len;
                continue;
            }
            self.stats.packets += 1;
            self.stats.bytes += len as u64;
            if e.what & (FLOW | PAIRED) != 0 {
                self.stats.flows += 1;
            }
            run += len;
        }
        self.stage_run(&mut run);
    }

    fn write_header(&mut self, c: &Correlation) {
        // Interned data and defaults.
        let p = &mut self.pkt;
        p.clear();
        uint(p, P_SEQ_ID, SEQ);
        uint(p, P_SEQ_FLAGS, SEQ_CLEARED | SEQ_NEEDS);
        uint(p, P_FIRST_ON_SEQ, 1);
        let d = begin(p, P_DEFAULTS);
        uint(p, 58, CLOCK_REALTIME);
        end(p, d);
        let i = begin(p, P_INTERNED);
        for (iid, name) in [(CAT_OP, "op"), (CAT_PHASE, "phase"), (CAT_FLOW, "flow")] {
            let e = begin(p, 1);
            uint(p, 1, iid);
            string(p, 2, name);
            end(p, e);
        }
        let mut names: Vec<(u64, String)> = Op::ALL
            .iter()
            .map(|&o| (op_name_iid(o as u8), op_name(o)))
            .collect();
        names.push((NAME_PHASE, "phase".into()));
        names.push((NAME_BUSY, "busy".into()));
        names.push((
            NAME_FLOW_END,
            "flow end (receiver recorded nothing later)".into(),
        ));
        names.push((NAME_UNKNOWN_OP, "unknown op".into()));
        for (iid, name) in &names {
            let e = begin(p, 2);
            uint(p, 1, *iid);
            string(p, 2, name);
            end(p, e);
        }
        for (iid, name) in ANNOTATION_NAMES {
            let e = begin(p, 3);
            uint(p, 1, iid);
            string(p, 2, name);
            end(p, e);
        }
        for pi in 0..c.rec.processes.len() {
            let e = begin(p, 29);
            uint(p, 1, pi as u64 + 1);
            proto::bytes(p, 2, c.proc_label(pi as u32).as_bytes());
            end(p, e);
        }
        end(p, i);
        self.emit();

        // Clock snapshot: CLOCK_BOOTTIME (≈ MONOTONIC of the first process) ↔ CLOCK_REALTIME.
        let anchor = c
            .clocks
            .iter()
            .find_map(|k| k.samples().first().copied())
            .unwrap_or_default();
        let p = &mut self.pkt;
        p.clear();
        uint(p, P_SEQ_ID, SEQ);
        let s = begin(p, P_CLOCK_SNAPSHOT);
        for (id, ts) in [
            (CLOCK_BOOTTIME, anchor.mono_ns),
            (CLOCK_REALTIME, anchor.real_ns),
        ] {
            let k = begin(p, 1);
            uint(p, 1, id);
            uint(p, 2, ts);
            end(p, k);
        }
        uint(p, 2, CLOCK_REALTIME);
        end(p, s);
        self.emit();
    }

    fn write_tracks(&mut self, c: &Correlation, threads: &[ThreadInfo]) {
        let mut used: HashSet<u32> = HashSet::new();
        let mut synthetic = 1u32 << 30;
        let mut fresh = |want: u32, used: &mut HashSet<u32>| -> u32 {
            if want != 0 && used.insert(want) {
                return want;
            }
            while !used.insert(synthetic) {
                synthetic += 1;
            }
            synthetic
        };
        for (pi, p) in c.rec.processes.iter().enumerate() {
            let pid = fresh(p.identity.pid, &mut used);
            self.proc_pid.push(pid);
            let u = self.uuid();
            let label = c.proc_label(pi as u32);
            self.track(u, None, "", |b| {
                let d = begin(b, 3);
                uint(b, 1, pid as u64);
                string(b, 6, &label);
                end(b, d);
            });
            self.proc_uuid.push(u);
            let ph = self.uuid();
            self.track(ph, Some(u), "phases", |_| {});
            self.phase_uuid.push(ph);
            for d in &p.endpoints {
                if let Some(g) = d.gpu {
                    self.ep_gpu.insert((pi as u32, d.id), g);
                }
                let peer = c
                    .topo
                    .ep(pi as u32, d.id)
                    .and_then(|e| e.single_peer())
                    .map(|q| format!(" → {}", c.proc_label(q)))
                    .unwrap_or_else(|| {
                        if d.peer.text.is_empty() {
                            String::new()
                        } else {
                            format!(" → {}", d.peer.text)
                        }
                    });
                let qpn = d.qpn.map(|q| format!(" qpn {q:#x}")).unwrap_or_default();
                self.ep_label.insert(
                    (pi as u32, d.id),
                    format!("{} {} {}{qpn}{peer}", d.label, d.kind.name(), d.transport),
                );
            }
            self.ep_label
                .entry((pi as u32, 0))
                .or_insert_with(|| "(unattributed)".into());
        }
        for (ti, t) in threads.iter().enumerate() {
            let proc = t.proc as usize;
            let pid = self.proc_pid.get(proc).copied().unwrap_or(0);
            let tid = if t.tid == c.rec.processes[proc].identity.pid {
                pid
            } else {
                fresh(t.tid, &mut used)
            };
            let name = c.rec.processes[proc]
                .threads
                .iter()
                .find(|(id, _)| *id == t.tid)
                .map(|(_, n)| n.clone())
                .unwrap_or_else(|| format!("thread {}", t.tid));
            let u = self.uuid();
            let parent = self.proc_uuid[proc];
            self.track(u, Some(parent), "", |b| {
                let d = begin(b, 4);
                uint(b, 1, pid as u64);
                uint(b, 2, tid as u64);
                string(b, 5, &name);
                end(b, d);
            });
            let _ = ti;
            self.thread_uuid.push(u);
            let files = threads.iter().filter(|x| x.proc == t.proc).count();
            self.thread_tid.push((files > 1).then_some(tid));
        }
    }

    /// Counter samples from the snapshots: payload bytes/s per endpoint, egress bytes/s per node.
    fn write_counters(&mut self, c: &Correlation) {
        // Per host: (ts, proc, tx rate) for the node counter.
        let mut node_pts: Vec<Vec<(u64, u32, i64)>> = vec![Vec::new(); c.hosts.len()];
        for (pi, p) in c.rec.processes.iter().enumerate() {
            let mut prev: Option<&Snapshot> = None;
            let mut ep_tracks: HashMap<u32, u64> = HashMap::new();
            let mut gpu_tracks: BTreeMap<u32, u64> = BTreeMap::new();
            for s in &p.snapshots {
                let cur = per_ep(s);
                let prev_map = prev.map(per_ep).unwrap_or_default();
                // The first snapshot's rates run from the start of the process's trace.
                let since = prev.map_or(p.identity.start_ns, |q| q.at_ns);
                let dt = if since > 0 {
                    s.at_ns.saturating_sub(since)
                } else {
                    0
                };
                let mut tx_sum = 0i64;
                // Per GPU of this process: the payload rate of its endpoints.
                let mut gpu_sum: BTreeMap<u32, i64> = BTreeMap::new();
                for (ep, (tx, rx)) in &cur {
                    let (ptx, prx) = prev_map.get(ep).copied().unwrap_or((0, 0));
                    let rate = |a: u64, b: u64| -> i64 {
                        if dt == 0 {
                            0
                        } else {
                            (a.saturating_sub(b) as f64 * 1e9 / dt as f64) as i64
                        }
                    };
                    tx_sum += rate(*tx, ptx);
                    let track = match ep_tracks.get(ep) {
                        Some(&t) => t,
                        None => {
                            let parent = self.proc_uuid[pi];
                            let name = format!(
                                "{} bytes/s",
                                self.ep_label
                                    .get(&(pi as u32, *ep))
                                    .cloned()
                                    .unwrap_or_else(|| format!("ep#{ep}"))
                            );
                            let t = self.counter_track(Some(parent), &name);
                            ep_tracks.insert(*ep, t);
                            t
                        }
                    };
                    let value = rate(*tx, ptx) + rate(*rx, prx);
                    if let Some(&g) = self.ep_gpu.get(&(pi as u32, *ep)) {
                        *gpu_sum.entry(g).or_default() += value;
                    }
                    self.push_late(s.at_ns, Late::Counter { track, value });
                }
                for (g, value) in gpu_sum {
                    let track = match gpu_tracks.get(&g) {
                        Some(&t) => t,
                        None => {
                            let parent = self.gpu_track(pi as u32, g);
                            let t = self.counter_track(Some(parent), &format!("GPU {g} bytes/s"));
                            gpu_tracks.insert(g, t);
                            t
                        }
                    };
                    self.push_late(s.at_ns, Late::Counter { track, value });
                }
                if let Some(h) = c.host_of.get(pi) {
                    node_pts[*h as usize].push((s.at_ns, pi as u32, tx_sum));
                }
                prev = Some(s);
            }
        }
        for (h, mut pts) in node_pts.into_iter().enumerate() {
            if pts.is_empty() {
                continue;
            }
            pts.sort_unstable();
            let t = self.counter_track(None, &format!("node {} egress bytes/s", c.hosts[h]));
            let mut latest: HashMap<u32, i64> = HashMap::new();
            for (ts, proc, v) in pts {
                latest.insert(proc, v);
                let sum = latest.values().sum();
                self.push_late(
                    ts,
                    Late::Counter {
                        track: t,
                        value: sum,
                    },
                );
            }
        }
    }
}

/// (tx, rx) payload bytes per endpoint in a cumulative snapshot.
fn per_ep(s: &Snapshot) -> BTreeMap<u32, (u64, u64)> {
    let mut m: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
    for c in &s.counts {
        let e = m.entry(c.ep).or_default();
        match Op::from_u8(c.op).map(|o| o.dir()) {
            Some(Dir::Tx) => e.0 += c.bytes,
            Some(Dir::Rx) => e.1 += c.bytes,
            _ => {}
        }
    }
    m
}

impl<W: Write> Sink for PerfettoSink<W> {
    fn begin(&mut self, c: &Correlation, threads: &[ThreadInfo]) {
        self.write_header(c);
        self.write_tracks(c, threads);
        self.write_counters(c);
    }

    fn tick(&mut self, now_ns: u64) {
        self.release(now_ns);
    }

    fn event(&mut self, seq: u64, m: &Merged, peer: Option<u32>) {
        self.finalize_cur();
        let p = m.proc as usize;
        if p >= self.last_ep.len() {
            self.last_ep.resize(p + 1, TwoWay::default());
        }
        let track = match self.last_ep[p].get(m.ev.ep) {
            Some(t) => t,
            None => {
                let t = self.ep_track(m.proc, m.ev.ep);
                self.last_ep[p].put(m.ev.ep, t);
                t
            }
        };
        // The newest item is filled in place (it is most often encoded from there).
        let item = &mut self.cur;
        item.m = *m;
        item.track = track;
        item.peer = peer;
        item.target = None;
        item.flow_out = 0;
        item.flow_in = [0; 2];
        item.flow_more.clear();
        item.extra = None;
        if self.pending_n > 0
            && let Some(v) = self.pending_end.get_mut(m.thread as usize)
            && !v.is_empty()
        {
            self.pending_n -= v.len();
            for (_, f) in v.drain(..) {
                item.end_flow(f);
            }
        }
        self.has_cur = true;
        self.cur_seq = seq;
        if let Some(ns) = m.ev.blocked() {
            self.blocking_call(m, ns);
        }
        if self.entries.len() > WINDOW_EVENTS {
            self.release(m.ns);
        }
    }

    fn target(&mut self, seq: u64, target: u32) {
        if seq == self.cur_seq && self.has_cur {
            self.cur.target = Some(target);
        }
    }

    fn doorbell(&mut self, seq: u64, info: &DoorbellInfo) {
        if seq == self.cur_seq && self.has_cur {
            self.cur.extra.get_or_insert_with(Box::default).db = Some(*info);
        }
    }

    fn doorbell_wqe(&mut self, link: &WqeLink, seq: u64, m: &Merged) {
        let mut pi = None;
        match self.item_at(link.doorbell_seq) {
            Some(d) => {
                let x = d.extra.get_or_insert_with(Box::default);
                pi = x.db.map(|d| d.pi);
                if x.wqes == 0 {
                    x.first_raddr = m.ev.addr;
                    x.first_rkey = m.ev.aux;
                }
                x.wqes += 1;
                x.wqe_bytes += m.ev.bytes;
                match x.ops.iter_mut().find(|(o, _)| *o == m.ev.op) {
                    Some((_, n)) => *n += 1,
                    None => x.ops.push((m.ev.op, 1)),
                }
            }
            None => self.stats.doorbell_wqes_outside_window += 1,
        }
        if seq == self.cur_seq && self.has_cur {
            let x = self.cur.extra.get_or_insert_with(Box::default);
            x.wqe_of = Some((pi.unwrap_or(0), link.index));
        }
    }

    fn pair(&mut self, p: &Pair) {
        let flow = p.send_seq + 1;
        if p.send_seq > p.recv_seq {
            // The send is the newest event; the flow ends at the receiving thread's next event.
            if self.has_cur {
                self.cur.flow_out = flow;
            }
            let t = p.recv_thread as usize;
            if self.pending_end.len() <= t {
                self.pending_end.resize_with(t + 1, Vec::new);
            }
            self.pending_end[t].push((p.send_ns, flow));
            self.pending_n += 1;
        } else {
            // An encoded open send already carries this flow: it only needs keeping.
            let open = p
                .send_seq
                .checked_sub(self.base_seq)
                .and_then(|i| self.entries.get_mut(i as usize))
                .filter(|e| e.what & OPEN_SEND != 0);
            if let Some(e) = open {
                e.what |= PAIRED;
            } else {
                match self.item_at(p.send_seq) {
                    Some(s) => s.flow_out = flow,
                    None => {
                        self.stats.flows_outside_window += 1;
                        return;
                    }
                }
            }
            if self.has_cur {
                self.cur.end_flow(flow);
            }
        }
    }

    fn phase_begin(&mut self, t: PhaseTrack, ns: u64) {
        let (track, name) = match t {
            PhaseTrack::Process(p) => (self.phase_uuid.get(p as usize).copied(), NAME_PHASE),
            PhaseTrack::Thread(i) => (self.thread_uuid.get(i as usize).copied(), NAME_BUSY),
        };
        if let Some(track) = track {
            self.push_late(ns, Late::Begin { track, name });
        }
    }

    fn phase(&mut self, t: PhaseTrack, _begin: u64, end_ns: u64) {
        let track = match t {
            PhaseTrack::Process(p) => self.phase_uuid.get(p as usize).copied(),
            PhaseTrack::Thread(i) => self.thread_uuid.get(i as usize).copied(),
        };
        if let Some(track) = track {
            self.push_late(end_ns, Late::End { track });
        }
    }

    fn end(&mut self, _a: &Analysis) {
        // Flows whose receiving thread recorded nothing after the send end on a marker there.
        let pending: Vec<Vec<(u64, u64)>> = std::mem::take(&mut self.pending_end);
        self.pending_n = 0;
        for (thread, flows) in pending.into_iter().enumerate() {
            let Some(&track) = self.thread_uuid.get(thread) else {
                continue;
            };
            for (ns, flow) in flows {
                self.push_late(ns, Late::FlowEnd { track, flow });
            }
        }
        self.finalize_cur();
        self.release(u64::MAX);
        self.drain_late(u64::MAX);
        self.stage.flush();
        if self.stage.error.is_none()
            && let Err(e) = self.stage.out.flush()
        {
            self.stage.error = Some(e);
        }
    }
}

/// Instants the plain encoder takes: no doorbell / WQE details, and a bounded number of flows.
fn plain(it: &Item) -> bool {
    it.extra.is_none() && it.flow_more.len() <= 16
}

/// The tid an instant is annotated with (None: its process has a single thread file).
#[inline(always)]
fn tid_of(thread_tid: &[Option<u32>], it: &Item) -> Option<u32> {
    thread_tid
        .get(it.m.thread as usize)
        .copied()
        .unwrap_or(Some(it.m.ev.tid))
}

impl Cursor<'_> {
    /// A DebugAnnotation { name_iid, uint_value }.
    #[inline(always)]
    fn uint(&mut self, name: u64, v: u64) {
        self.annotation(name, &[(DA_UINT << 3) as u8], v);
    }

    /// A DebugAnnotation { name_iid, string_value_iid }.
    #[inline(always)]
    fn string_iid(&mut self, name: u64, v: u64) {
        // The field key (17 << 3) as a two-byte varint.
        const KEY: [u8; 2] = [
            0x80 | ((DA_STRING_IID << 3) & 0x7f) as u8,
            ((DA_STRING_IID << 3) >> 7) as u8,
        ];
        self.annotation(name, &KEY, v);
    }

    /// A DebugAnnotation { name_iid, <value_key>: v }; names are below 128, so is its length.
    #[inline(always)]
    fn annotation(&mut self, name: u64, value_key: &[u8], v: u64) {
        self.put(&[
            ((TE_ANNOT << 3) | proto::LEN) as u8,
            (2 + value_key.len() + vlen(v)) as u8,
            (DA_NAME_IID << 3) as u8,
            name as u8,
        ]);
        self.put(value_key);
        self.varint(v);
    }
}

/// The debug annotations of a plain instant, in the general path's order.
#[inline(always)]
fn annotations(it: &Item, tid: Option<u32>, f: &mut Cursor) {
    let ev = &it.m.ev;
    let op = Op::from_u8(ev.op);
    let dir = op.map(|o| o.dir()).unwrap_or(Dir::None);
    f.uint(if dir == Dir::None { AN_COUNT } else { AN_BYTES }, ev.bytes);
    if let Some(op) = op {
        let addr_name = match op {
            Op::UcxTagSend | Op::UcxTagSendSync | Op::UcxTagRecv | Op::OfiTSend | Op::OfiTRecv => {
                Some(AN_TAG)
            }
            Op::OfiSend | Op::OfiRecv => Some(AN_FI_ADDR).filter(|_| ev.addr != u64::MAX),
            _ if ev.addr != 0 && op.dir() != Dir::None => Some(AN_RADDR),
            _ => None,
        };
        if let Some(n) = addr_name {
            f.uint(n, ev.addr);
        }
        match op.layer() {
            Layer::Libfabric
                if ev.aux != 0xffff && !matches!(op, Op::OfiSend | Op::OfiRecv | Op::OfiCqRead) =>
            {
                f.uint(AN_FI_ADDR, ev.aux as u64)
            }
            Layer::Ucx if matches!(op, Op::UcxAmSend | Op::UcxAmRecvData) => {
                f.uint(AN_AM_ID, ev.aux as u64)
            }
            _ => {}
        }
    }
    if let Some(tid) = tid {
        f.uint(AN_TID, tid as u64);
    }
    if let Some(peer) = it.peer {
        f.string_iid(AN_PEER, peer as u64 + 1);
    }
    if ev.flags != 0 {
        f.uint(AN_FLAGS, ev.flags as u64);
    }
    if op.is_some_and(one_sided) {
        f.uint(AN_RKEY, ev.aux as u64);
    }
    if let Some(t) = it.target {
        f.string_iid(AN_TARGET, t as u64 + 1);
    }
}

/// Writes a plain instant at the front of `dst` (at least `PLAIN_MAX` long) in one pass:
/// both lengths are first given one byte, as they nearly always take, and the body is moved
/// along in the rare case they need more. Returns its length. Same fields, order and bytes as
/// the general path (tested below).
#[inline(always)]
fn write_plain(it: &Item, tid: Option<u32>, dst: &mut [u8]) -> usize {
    let mut w = Cursor { buf: dst, n: 0 };
    // Trace.packet key, length (patched).
    w.put(&[0x0A, 0]);
    w.put(&[(P_TIMESTAMP << 3) as u8]);
    w.varint(it.m.ns);
    w.put(&[
        (P_SEQ_ID << 3) as u8,
        SEQ as u8,
        (P_SEQ_FLAGS << 3) as u8,
        SEQ_NEEDS as u8,
        ((P_TRACK_EVENT << 3) | proto::LEN) as u8,
        0, // TrackEvent length (patched)
    ]);
    let te_start = w.n;
    w.put(&[
        (TE_TYPE << 3) as u8,
        TYPE_INSTANT as u8,
        (TE_TRACK << 3) as u8,
    ]);
    w.varint(it.track);
    w.put(&[
        (TE_CATEGORY_IIDS << 3) as u8,
        CAT_OP as u8,
        (TE_NAME_IID << 3) as u8,
    ]);
    w.varint(op_name_iid(it.m.ev.op));
    annotations(it, tid, &mut w);
    for &f in it.flow_in.iter().chain(it.flow_more.iter()) {
        if f != 0 {
            // TE_TERM_FLOW (48), fixed64: key 385 = 0x81 0x03.
            w.put(&[0x81, 0x03]);
            w.put(&f.to_le_bytes());
        }
    }
    if it.flow_out != 0 {
        // TE_FLOW (47), fixed64: key 377 = 0xF9 0x02. Last: an open send's is trimmed away.
        w.put(&[0xF9, 0x02]);
        w.put(&it.flow_out.to_le_bytes());
    }
    let end = w.n;
    let te_len = end - te_start;
    // Packet body: everything after its own length byte, with the TrackEvent length's bytes.
    let pkt_len = end - 2 + vlen(te_len as u64) - 1;
    if te_len < 0x80 && pkt_len < 0x80 {
        dst[te_start - 1] = te_len as u8;
        dst[1] = pkt_len as u8;
        return end;
    }
    // Longer lengths: move the TrackEvent body, then everything after the packet length.
    let te_extra = vlen(te_len as u64) - 1;
    dst.copy_within(te_start..end, te_start + te_extra);
    let mut c = Cursor {
        buf: dst,
        n: te_start - 1,
    };
    c.varint(te_len as u64);
    let pkt_extra = vlen(pkt_len as u64) - 1;
    let total_end = end + te_extra;
    dst.copy_within(2..total_end, 2 + pkt_extra);
    let mut c = Cursor { buf: dst, n: 1 };
    c.varint(pkt_len as u64);
    total_end + pkt_extra
}

/// Bytes of a varint, by the value's leading zeros.
const VLEN: [u8; 65] = {
    let mut t = [0u8; 65];
    let mut lz = 0;
    while lz <= 64 {
        let bits = 64 - lz;
        t[lz] = if bits == 0 { 1 } else { bits.div_ceil(7) as u8 };
        lz += 1;
    }
    t
};

#[inline(always)]
fn vlen(v: u64) -> usize {
    VLEN[v.leading_zeros() as usize] as usize
}

/// Writes at the front of a byte slice (the staging buffer's free part, sized beforehand).
struct Cursor<'a> {
    buf: &'a mut [u8],
    n: usize,
}

impl Cursor<'_> {
    #[inline(always)]
    fn put(&mut self, b: &[u8]) {
        self.buf[self.n..self.n + b.len()].copy_from_slice(b);
        self.n += b.len();
    }
    #[inline(always)]
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.buf[self.n] = (v as u8) | 0x80;
            self.n += 1;
            v >>= 7;
        }
        self.buf[self.n] = v as u8;
        self.n += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Event;

    /// A reproducible stream of test values.
    fn xorshift(mut x: u64) -> impl FnMut() -> u64 {
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// The fast encoder of plain operation instants writes the same bytes as the general one,
    /// over every op code (known and unknown), every field width and the optional parts.
    #[test]
    fn plain_items_encode_like_the_general_path() {
        let mut next = xorshift(0x9e37_79b9_7f4a_7c15);
        let width = |v: u64, r: u64| match r % 5 {
            0 => 0,
            1 => v & 0x7f,
            2 => v & 0xffff,
            3 => v & 0xffff_ffff,
            _ => v,
        };
        for i in 0..20_000u64 {
            let r = next();
            let ev = Event {
                tsc: next(),
                tid: next() as u32,
                ep: next() as u32,
                op: (r % 70) as u8,
                flags: if r & 0x100 != 0 { (r >> 9) as u8 } else { 0 },
                aux: (r >> 20) as u16,
                bytes: width(next(), r >> 30),
                addr: if r & 0x200 != 0 {
                    u64::MAX
                } else {
                    width(next(), r >> 33)
                },
            };
            let it = Item {
                m: Merged {
                    ns: width(next(), r >> 36) | 1,
                    proc: 0,
                    thread: (r >> 40) as u32 % 3,
                    ev,
                },
                track: width(next(), r >> 43),
                peer: (r & 0x400 != 0).then_some((r >> 46) as u32),
                target: (r & 0x4000 != 0).then_some((r >> 50) as u32),
                flow_out: if r & 0x800 != 0 { next() | 1 } else { 0 },
                flow_in: [
                    if r & 0x1000 != 0 { next() | 1 } else { 0 },
                    if r & 0x2000 != 0 { next() | 1 } else { 0 },
                ],
                flow_more: (0..(r >> 56) % 17).map(|_| next() | 1).collect(),
                extra: None,
            };
            let mut a = PerfettoSink::new(Vec::new());
            let mut b = PerfettoSink::new(Vec::new());
            for s in [&mut a, &mut b] {
                s.thread_tid = vec![Some(7), None, Some(1 << 30)];
            }
            a.write_plain_item(&it);
            b.write_general_item(&it);
            let (a, b) = (a.into_inner().unwrap(), b.into_inner().unwrap());
            assert_eq!(a, b, "item {i}: op {} {:?}", it.m.ev.op, it.m.ev);
        }
    }

    fn export(dir: &str, early: bool) -> (Vec<u8>, PerfettoStats) {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        let rec = crate::trace::reader::Recording::open(&[root]).expect("fixture opens");
        let c = Correlation::new(&rec);
        let mut sink = PerfettoSink::new(Vec::new());
        sink.early = early;
        c.run(&crate::correlate::RunOptions::default(), &mut sink);
        let stats = sink.stats.clone();
        (sink.into_inner().expect("in memory"), stats)
    }

    /// Encoding events as they enter the window (open sends trimmed when never paired) gives
    /// the same trace as encoding each one when it leaves, on the real recordings: UCX tagged
    /// traffic between 4 MPI ranks, GPU doorbells with their WQEs.
    #[test]
    fn early_encoding_equals_encoding_at_release() {
        for dir in ["fixtures/demo-moe", "fixtures/demo-gpu"] {
            let (a, sa) = export(dir, true);
            let (b, sb) = export(dir, false);
            assert!(
                a == b,
                "{dir}: traces differ ({} vs {} bytes)",
                a.len(),
                b.len()
            );
            assert_eq!(
                (sa.packets, sa.bytes, sa.flows, sa.op_instants),
                (sb.packets, sb.bytes, sb.flows, sb.op_instants),
                "{dir}"
            );
            assert_eq!(sa.bytes, a.len() as u64, "{dir}: bytes counted");
            assert!(sa.op_instants > 1000, "{dir}: {sa:?}");
        }
        // demo-moe's ranks send to each other: flows, some of whose sends were open.
        assert!(export("fixtures/demo-moe", true).1.flows > 100);
    }

    /// Random streams through the sink's calls, in the correlator's order (tick, event, target,
    /// pair), with sends paired later, at once or never (open sends trimmed), releases by time
    /// and by count, and phase packets in between: early encoding writes the same bytes.
    #[test]
    fn early_encoding_equals_encoding_at_release_on_random_streams() {
        use crate::correlate::matcher::Pair;
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        for round in 0..40 {
            let script: Vec<u64> = (0..3000).map(|_| next()).collect();
            let run = |early: bool| -> Vec<u8> {
                let mut k = PerfettoSink::new(Vec::new());
                k.early = early;
                k.proc_uuid = vec![1, 2];
                k.phase_uuid = vec![3, 4];
                k.thread_uuid = vec![5, 6, 7];
                k.thread_tid = vec![Some(10), None, Some(12)];
                let mut ns = 1_000u64;
                // Sends not yet paired, receives waiting (seq, thread, ns).
                let mut open_sends: Vec<(u64, u64)> = Vec::new();
                let mut waiting_recvs: Vec<(u64, u32, u64)> = Vec::new();
                for (seq, &r) in script.iter().enumerate() {
                    let seq = seq as u64;
                    ns += match r % 7 {
                        0 => 50_000_000 + (r >> 8) % 200_000_000,
                        _ => (r >> 8) % 5_000,
                    };
                    if r & 0x10 != 0 {
                        k.tick(ns);
                    }
                    if r & 0x3f0 == 0x20 {
                        k.phase_begin(PhaseTrack::Thread((r >> 12) as u32 % 3), ns);
                    }
                    if r & 0x3f0 == 0x30 {
                        k.phase(PhaseTrack::Process((r >> 12) as u32 % 2), 0, ns);
                    }
                    let thread = (r >> 20) as u32 % 3;
                    let kind = (r >> 24) % 4;
                    let op = match kind {
                        0 => Op::UcxTagSend,
                        1 => Op::UcxTagRecv,
                        2 => Op::VerbsWrite,
                        _ => Op::UcxProgress,
                    };
                    let m = Merged {
                        ns,
                        proc: thread % 2,
                        thread,
                        ev: Event {
                            tsc: ns,
                            tid: thread,
                            ep: (r >> 30) as u32 % 3,
                            op: op as u8,
                            flags: 0,
                            aux: (r >> 34) as u16,
                            bytes: (r >> 40) % 70_000,
                            addr: (r >> 12) % 5,
                        },
                    };
                    let peer = (r & 0x4000_0000_0000 != 0).then_some(1 - thread % 2);
                    k.event(seq, &m, peer);
                    if kind == 2 && r & 0x8000 != 0 {
                        k.target(seq, 1);
                    }
                    if kind == 0 && peer.is_some() {
                        if r & 0x1_0000 != 0
                            && let Some((rs, rt, rns)) = waiting_recvs.pop()
                        {
                            k.pair(&Pair {
                                send_seq: seq,
                                send_proc: 0,
                                send_ns: ns,
                                recv_seq: rs,
                                recv_proc: 1,
                                recv_thread: rt,
                                recv_ns: rns,
                                recv_immediate: false,
                            });
                        } else {
                            open_sends.push((seq, ns));
                        }
                    }
                    if kind == 1 {
                        if r & 0x2_0000 != 0 && !open_sends.is_empty() {
                            let i = (r >> 18) as usize % open_sends.len();
                            let (ss, sns) = open_sends.remove(i);
                            k.pair(&Pair {
                                send_seq: ss,
                                send_proc: 0,
                                send_ns: sns,
                                recv_seq: seq,
                                recv_proc: 1,
                                recv_thread: thread,
                                recv_ns: ns,
                                recv_immediate: false,
                            });
                        } else {
                            waiting_recvs.push((seq, thread, ns));
                        }
                    }
                }
                k.end(&Analysis::default());
                k.into_inner().expect("in memory")
            };
            let (a, b) = (run(true), run(false));
            assert!(a == b, "round {round}: {} vs {} bytes", a.len(), b.len());
        }
    }
}
