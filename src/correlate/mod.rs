//! Post-mortem correlation (paper §IV-D): record directories of many processes on many hosts →
//! one time-ordered stream of events with converted timestamps, the peer process of every
//! operation, sends paired with receives, and activity phases. Docs: docs/CORRELATE.md.
//!
//! `Correlation::new` builds the static part (clocks, topology) from the process files; `run`
//! streams every event once, in time order, through the matcher and the phase detector and hands
//! each event, pair and phase boundary to a `Sink` (the Perfetto writer, or nothing for reports).

pub mod clock;
pub mod doorbell;
pub mod gpu;
pub mod matcher;
pub mod merge;
pub mod mr;
pub mod topology;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use serde::Serialize;

use crate::event::{Layer, Op, flags};
use crate::trace::reader::{Problem, Recording};
use clock::ProcClock;
use doorbell::{Associator, DoorbellInfo, DoorbellStats, WqeLink};
use matcher::{MatchStats, Matcher, Pair};
use merge::{Merged, Merger, ThreadInfo};
use mr::{Attributor, MrTable, OneSidedStats};
use topology::Topology;

/// Default gap that separates two bursts of activity (phases).
pub const DEFAULT_PHASE_GAP_NS: u64 = 1_000_000;
/// Phases kept per process for the report (later ones are counted, not kept).
pub const MAX_PHASES: usize = 100_000;

/// A fast non-cryptographic hasher for the small integer keys of the hot loop (FxHash).
#[derive(Clone, Copy, Default)]
pub struct FxHasher(u64);

impl FxHasher {
    #[inline]
    fn add(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.add(b as u64);
        }
    }
    #[inline]
    fn write_u8(&mut self, v: u8) {
        self.add(v as u64);
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.add(v as u64);
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.add(v);
    }
    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.add(v as u64);
    }
    #[inline]
    fn write_isize(&mut self, v: isize) {
        self.add(v as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// HashMap with `FxHasher`.
pub type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// The values of the last two endpoint ids looked up, kept per process by the per-event paths:
/// the merged stream interleaves processes, and a process mostly alternates between two
/// endpoints (say, its send endpoint and the worker its receives are posted on).
#[derive(Clone, Copy, Debug)]
pub struct TwoWay<V: Copy> {
    /// Most recent first; `u32::MAX` is no key (and never found).
    keys: [u32; 2],
    vals: [V; 2],
}

impl<V: Copy + Default> Default for TwoWay<V> {
    fn default() -> Self {
        TwoWay {
            keys: [u32::MAX; 2],
            vals: [V::default(); 2],
        }
    }
}

impl<V: Copy> TwoWay<V> {
    /// The value kept for `key`, made the most recent.
    #[inline]
    pub fn get(&mut self, key: u32) -> Option<V> {
        if key == u32::MAX {
            None
        } else if self.keys[0] == key {
            Some(self.vals[0])
        } else if self.keys[1] == key {
            self.keys.swap(0, 1);
            self.vals.swap(0, 1);
            Some(self.vals[0])
        } else {
            None
        }
    }

    /// Keeps `v` for `key`, forgetting the older of the two.
    #[inline]
    pub fn put(&mut self, key: u32, v: V) {
        self.keys = [key, self.keys[0]];
        self.vals = [v, self.vals[0]];
    }
}

/// Static part of the correlation.
pub struct Correlation<'r> {
    pub rec: &'r Recording,
    pub clocks: Vec<ProcClock>,
    pub topo: Topology,
    /// Index of each process's host in `hosts`.
    pub host_of: Vec<u32>,
    pub hosts: Vec<String>,
}

impl<'r> Correlation<'r> {
    pub fn new(rec: &'r Recording) -> Correlation<'r> {
        let mut hosts: Vec<String> = rec
            .processes
            .iter()
            .map(|p| p.identity.host.clone())
            .collect();
        hosts.sort();
        hosts.dedup();
        let host_of: Vec<u32> = rec
            .processes
            .iter()
            .map(|p| hosts.partition_point(|h| h < &p.identity.host) as u32)
            .collect();
        // TSC rate per host from processes with at least two samples.
        let mut host_rate: HashMap<u32, f64> = HashMap::new();
        let first: Vec<ProcClock> = rec
            .processes
            .iter()
            .map(|p| ProcClock::new(&p.clocks, None))
            .collect();
        for (i, c) in first.iter().enumerate() {
            if let Some(r) = c.rate() {
                host_rate.entry(host_of[i]).or_insert(r);
            }
        }
        let mut clocks: Vec<ProcClock> = rec
            .processes
            .iter()
            .enumerate()
            .map(|(i, p)| {
                if first[i].rate().is_some() {
                    first[i].clone()
                } else {
                    ProcClock::new(&p.clocks, host_rate.get(&host_of[i]).copied())
                }
            })
            .collect();
        // Processes of one host share the TSC: measure how far their conversions disagree.
        let n = clocks.len();
        let mut measured = vec![0u64; n];
        for i in 0..n {
            for j in i + 1..n {
                if host_of[i] != host_of[j] {
                    continue;
                }
                if let Some(d) = clocks[i].disagreement(&clocks[j]) {
                    measured[i] = measured[i].max(d);
                    measured[j] = measured[j].max(d);
                }
            }
        }
        for (c, d) in clocks.iter_mut().zip(measured) {
            c.note_same_host(d);
        }
        Correlation {
            rec,
            clocks,
            topo: Topology::build(&rec.processes),
            host_of,
            hosts,
        }
    }

    /// "exe pid@host" (with the rank when there is one: "r0", or "child of r0" for a process
    /// a rank forked).
    pub fn proc_label(&self, i: u32) -> String {
        let Some(p) = self.rec.processes.get(i as usize) else {
            return format!("process #{i}");
        };
        let id = &p.identity;
        match (p.child_of_rank, id.rank) {
            (Some(r), _) => format!("{} child of r{} {}@{}", id.exe, r, id.pid, id.host),
            (None, Some(r)) => format!("{} r{} {}@{}", id.exe, r, id.pid, id.host),
            (None, None) => format!("{} {}@{}", id.exe, id.pid, id.host),
        }
    }

    /// Worst clock error of two processes' conversions (u64::MAX when one is unknown).
    pub fn pair_bound_ns(&self, a: u32, b: u32) -> u64 {
        let e = |i: u32| self.clocks.get(i as usize).map_or(u64::MAX, |c| c.err_ns);
        e(a).saturating_add(e(b))
    }

    /// Streams every event through matching and phase detection into `sink` (generic, so that
    /// a concrete sink's per-event calls are inlined into the loop; `&mut dyn Sink` works too).
    pub fn run<S: Sink + ?Sized>(&self, opts: &RunOptions, sink: &mut S) -> Analysis {
        let nproc = self.rec.processes.len();
        let mut merger = Merger::new(&self.rec.processes, &self.clocks);
        let mut a = Analysis {
            proc_events: vec![0; nproc],
            proc_phases: vec![Vec::new(); nproc],
            proc_phases_dropped: vec![0; nproc],
            phase_gap_ns: opts.phase_gap_ns.max(1),
            ..Default::default()
        };
        sink.begin(self, &merger.threads);
        let mut matcher = Matcher::default();
        let mut assoc = Associator::new(&self.rec.processes);
        let mut attr = Attributor::new(&self.rec.processes);
        let gap = opts.phase_gap_ns.max(1);
        // Phase detectors: one per process, one per thread file.
        let nthreads = merger.threads.len();
        let mut procs = vec![ProcRun::default(); nproc];
        let mut det_thread = vec![Burst::default(); nthreads];
        let tick = (gap / 2).max(1);
        let mut next_tick = 0u64;
        let mut seq: u64 = 0;
        let mut first_ns = None;
        let mut last_ns = 0;
        let info = op_info_table();
        while let Some(m) = merger.next_event() {
            if seq == 0 {
                first_ns = Some(m.ns);
            }
            last_ns = m.ns;
            if m.ns >= next_tick {
                // Close bursts that went quiet, so their ends reach the sink in time.
                for (i, pr) in procs.iter_mut().enumerate() {
                    if let Some((b, e, n)) = pr.det.close_if_idle(m.ns, gap) {
                        a.push_phase(i, b, e, n);
                        sink.phase(PhaseTrack::Process(i as u32), b, e);
                    }
                }
                for (i, d) in det_thread.iter_mut().enumerate() {
                    if let Some((b, e, _)) = d.close_if_idle(m.ns, gap) {
                        sink.phase(PhaseTrack::Thread(i as u32), b, e);
                    }
                }
                next_tick = m.ns.saturating_add(tick);
                sink.tick(m.ns);
            }
            let p = m.proc as usize;
            let Some(pr) = procs.get_mut(p) else { break };
            let (closed, started) = pr.det.feed(m.ns, gap);
            pr.events += 1;
            if let Some((b, e, n)) = closed {
                a.push_phase(p, b, e, n);
                sink.phase(PhaseTrack::Process(m.proc), b, e);
            }
            if started {
                sink.phase_begin(PhaseTrack::Process(m.proc), m.ns);
            }
            if let Some(d) = det_thread.get_mut(m.thread as usize) {
                let (closed, started) = d.feed(m.ns, gap);
                if let Some((b, e, _)) = closed {
                    sink.phase(PhaseTrack::Thread(m.thread), b, e);
                }
                if started {
                    sink.phase_begin(PhaseTrack::Thread(m.thread), m.ns);
                }
            }
            let oi = info[m.ev.op as usize];
            // The peer of an endpoint, remembered per process (the merged stream interleaves
            // processes, each usually on few endpoints); libfabric's is per operation.
            let peer = if oi & I_KNOWN != 0 && oi & I_OFI == 0 {
                let c = &mut pr.peers;
                c.get(m.ev.ep).unwrap_or_else(|| {
                    let v = self.topo.ep(m.proc, m.ev.ep).and_then(|e| e.peer);
                    c.put(m.ev.ep, v);
                    v
                })
            } else {
                self.topo.peer_of(m.proc, &m.ev)
            };
            let mut target = None;
            if m.ev.flags & flags::ERROR == 0 && oi & I_KNOWN != 0 {
                if oi & I_ONE_SIDED != 0 {
                    target = attr.feed(&m, peer);
                }
                // One-sided operations move data to (write, atomic) or from (read) the process
                // owning the region; the QP's peer when no region names it.
                if oi & (I_TX | I_RX) != 0 {
                    let other = target.or(peer);
                    if other.is_none() {
                        a.tx_unresolved_bytes += m.ev.bytes;
                    }
                    let d = other.unwrap_or(crate::agg::matrix::UNTRACED);
                    pr.cell.add(
                        oi & I_TX != 0,
                        d,
                        m.ev.bytes,
                        m.proc,
                        &mut a.tx_matrix,
                        &mut a.read_matrix,
                    );
                }
            }
            sink.event(seq, &m, peer);
            if let Some(t) = target {
                sink.target(seq, t);
            }
            if oi & I_DOORBELL != 0 {
                if let Some(info) = assoc.doorbell(seq, &m) {
                    sink.doorbell(seq, &info);
                }
            } else if oi & I_WQE != 0
                && let Some(link) = assoc.wqe(&m)
            {
                sink.doorbell_wqe(&link, seq, &m);
            }
            if matcher::has_role(m.ev.op) {
                // A verbs message goes to the receive queue of the peer QP.
                let peer_ep = if oi & I_VERBS_MSG != 0 {
                    self.topo.ep(m.proc, m.ev.ep).and_then(|e| e.peer_ep)
                } else {
                    None
                };
                if let Some(pair) = matcher.feed(seq, m.ns, m.proc, m.thread, &m.ev, peer, peer_ep)
                {
                    if pair.recv_immediate && pair.recv_ns < pair.send_ns {
                        a.causality_violations += 1;
                    }
                    sink.pair(&pair);
                }
            }
            seq += 1;
        }
        for (i, pr) in procs.iter_mut().enumerate() {
            if let Some((b, e, n)) = pr.det.close() {
                a.push_phase(i, b, e, n);
                sink.phase(PhaseTrack::Process(i as u32), b, e);
            }
            pr.cell
                .flush(i as u32, &mut a.tx_matrix, &mut a.read_matrix);
            a.proc_events[i] = pr.events;
        }
        a.events = seq;
        for (i, d) in det_thread.iter_mut().enumerate() {
            if let Some((b, e, _)) = d.close() {
                sink.phase(PhaseTrack::Thread(i as u32), b, e);
            }
        }
        matcher.finish();
        a.matching = matcher.stats;
        a.doorbells = assoc.finish();
        (a.one_sided, a.mrs) = attr.finish();
        a.first_ns = first_ns.unwrap_or(0);
        a.last_ns = last_ns;
        a.problems = std::mem::take(&mut merger.problems);
        a.threads = std::mem::take(&mut merger.threads);
        sink.end(&a);
        a
    }
}

#[derive(Clone, Copy, Debug)]
pub struct RunOptions {
    pub phase_gap_ns: u64,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            phase_gap_ns: DEFAULT_PHASE_GAP_NS,
        }
    }
}

/// Where a phase boundary belongs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PhaseTrack {
    Process(u32),
    /// Index of the thread file in the merge.
    Thread(u32),
}

/// Receives the merged stream. Calls come in this order for each event: `tick` (now and then),
/// `phase` (bursts that ended), `phase_begin` (a burst this event starts), `event`, then
/// `doorbell` or `doorbell_wqe` for doorbells and recovered WQEs, `pair`.
pub trait Sink {
    fn begin(&mut self, _c: &Correlation, _threads: &[ThreadInfo]) {}
    /// Called at least every half phase gap of merged time, before the event at `now_ns`.
    fn tick(&mut self, _now_ns: u64) {}
    /// An event, numbered in merge order by `seq`, with the resolved other side.
    fn event(&mut self, _seq: u64, _m: &Merged, _peer: Option<u32>) {}
    /// A send paired with a receive, reported with the later of the two events.
    fn pair(&mut self, _p: &Pair) {}
    /// The doorbell just reported by `event` (as `seq`), with its recomputed producer-index range.
    fn doorbell(&mut self, _seq: u64, _info: &DoorbellInfo) {}
    /// The one-sided operation just reported by `event` (as `seq`) targets a memory region of
    /// process `target`.
    fn target(&mut self, _seq: u64, _target: u32) {}
    /// The WQE just reported by `event` (as `seq`) belongs to the doorbell `link.doorbell_seq`.
    fn doorbell_wqe(&mut self, _link: &WqeLink, _seq: u64, _m: &Merged) {}
    /// A burst of activity starts with the event about to be reported.
    fn phase_begin(&mut self, _t: PhaseTrack, _ns: u64) {}
    /// A burst of activity `[begin, end]` (ns) that ended.
    fn phase(&mut self, _t: PhaseTrack, _begin: u64, _end: u64) {}
    fn end(&mut self, _a: &Analysis) {}
}

/// A sink that keeps nothing (reports need only the `Analysis`).
pub struct NoSink;
impl Sink for NoSink {}

/// Gap-based burst detector.
#[derive(Clone, Copy, Debug, Default)]
struct Burst {
    active: bool,
    begin: u64,
    last: u64,
    n: u64,
}

impl Burst {
    /// Feeds an event; returns the burst it closed (begin, end, events) and whether it starts
    /// a new one.
    #[inline]
    fn feed(&mut self, ns: u64, gap: u64) -> (Option<(u64, u64, u64)>, bool) {
        let closed = if self.active && ns.saturating_sub(self.last) > gap {
            Some((self.begin, self.last, self.n))
        } else {
            None
        };
        let started = !self.active || closed.is_some();
        if started {
            self.active = true;
            self.begin = ns;
            self.n = 0;
        }
        self.last = ns;
        self.n += 1;
        (closed, started)
    }
    fn close_if_idle(&mut self, now: u64, gap: u64) -> Option<(u64, u64, u64)> {
        if self.active && now.saturating_sub(self.last) > gap {
            self.close()
        } else {
            None
        }
    }
    fn close(&mut self) -> Option<(u64, u64, u64)> {
        if !self.active {
            return None;
        }
        self.active = false;
        Some((self.begin, self.last, self.n))
    }
}

/// What the correlator asks of an op code, one table lookup per event (`op_info_table`).
const I_KNOWN: u8 = 1;
const I_OFI: u8 = 2;
const I_ONE_SIDED: u8 = 4;
/// `Op::toward_peer`: Some(true), Some(false).
const I_TX: u8 = 8;
const I_RX: u8 = 16;
const I_DOORBELL: u8 = 32;
/// `Associator::is_wqe`.
const I_WQE: u8 = 64;
/// A verbs message (SEND, SEND_IMM, RDMA_WRITE_IMM), which lands on the peer QP.
const I_VERBS_MSG: u8 = 128;

fn op_info_table() -> [u8; 256] {
    let mut t = [0u8; 256];
    for (v, slot) in t.iter_mut().enumerate() {
        let Some(op) = Op::from_u8(v as u8) else {
            continue;
        };
        let mut i = I_KNOWN;
        if op.layer() == Layer::Libfabric {
            i |= I_OFI;
        }
        if op.one_sided() {
            i |= I_ONE_SIDED;
        }
        match op.toward_peer() {
            Some(true) => i |= I_TX,
            Some(false) => i |= I_RX,
            None => {}
        }
        if op == Op::GpuDoorbell {
            i |= I_DOORBELL;
        } else if Associator::is_wqe(op) {
            i |= I_WQE;
        }
        if matches!(op, Op::VerbsSend | Op::VerbsSendImm | Op::VerbsWriteImm) {
            i |= I_VERBS_MSG;
        }
        *slot = i;
    }
    t
}

/// The per-process state of the event loop.
#[derive(Clone, Copy, Debug, Default)]
struct ProcRun {
    det: Burst,
    events: u64,
    peers: TwoWay<Option<u32>>,
    cell: Cell,
}

/// The matrix cell a process's data operations added to last, with the bytes not yet added
/// to the map: a stream of operations to one other side costs one map update, not one each.
#[derive(Clone, Copy, Debug, Default)]
struct Cell {
    /// Other side, `TX` when it is a `tx_matrix` cell, `VALID` when there is one.
    key: u64,
    bytes: u64,
}

impl Cell {
    const TX: u64 = 1 << 32;
    const VALID: u64 = 1 << 33;

    #[inline(always)]
    fn add(
        &mut self,
        tx: bool,
        d: u32,
        bytes: u64,
        proc: u32,
        txm: &mut FxMap<(u32, u32), u64>,
        rdm: &mut FxMap<(u32, u32), u64>,
    ) {
        let key = d as u64 | if tx { Self::TX } else { 0 } | Self::VALID;
        if key != self.key {
            self.flush(proc, txm, rdm);
            self.key = key;
        }
        self.bytes += bytes;
    }

    /// Adds the kept bytes to their cell (made even for 0 bytes, as each operation makes it).
    fn flush(
        &mut self,
        proc: u32,
        txm: &mut FxMap<(u32, u32), u64>,
        rdm: &mut FxMap<(u32, u32), u64>,
    ) {
        if self.key & Self::VALID == 0 {
            return;
        }
        let m = if self.key & Self::TX != 0 { txm } else { rdm };
        *m.entry((proc, self.key as u32)).or_default() += self.bytes;
        self.key = 0;
        self.bytes = 0;
    }
}

/// A burst of activity of one process.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Phase {
    pub begin_ns: u64,
    pub end_ns: u64,
    pub events: u64,
}

/// What one pass over the events found.
#[derive(Clone, Debug, Default)]
pub struct Analysis {
    pub events: u64,
    pub proc_events: Vec<u64>,
    pub first_ns: u64,
    pub last_ns: u64,
    /// Payload bytes of data-moving operations, (issuer, other side) → bytes, from events; the
    /// other side is `agg::matrix::UNTRACED` when it is not traced or not identified.
    pub tx_matrix: FxMap<(u32, u32), u64>,
    /// (issuer, target) → bytes of one-sided reads: they moved from target to issuer. Kept
    /// apart from `tx_matrix` so that each cell stays with the process whose events made it.
    pub read_matrix: FxMap<(u32, u32), u64>,
    pub tx_unresolved_bytes: u64,
    pub matching: MatchStats,
    /// Doorbell → WQE association.
    pub doorbells: DoorbellStats,
    /// One-sided operations attributed to their target through memory regions.
    pub one_sided: OneSidedStats,
    /// The memory regions of every process, with the operations attributed to each.
    pub mrs: MrTable,
    /// Immediate receives that appear before their send (clocks misaligned beyond the bound).
    pub causality_violations: u64,
    pub proc_phases: Vec<Vec<Phase>>,
    pub proc_phases_dropped: Vec<u64>,
    /// The gap that separated phases.
    pub phase_gap_ns: u64,
    pub threads: Vec<ThreadInfo>,
    /// Thread files that could not be read or stopped early.
    pub problems: Vec<Problem>,
}

impl Analysis {
    fn push_phase(&mut self, p: usize, b: u64, e: u64, n: u64) {
        if self.proc_phases[p].len() < MAX_PHASES {
            self.proc_phases[p].push(Phase {
                begin_ns: b,
                end_ns: e,
                events: n,
            });
        } else {
            self.proc_phases_dropped[p] += 1;
        }
    }
}

#[cfg(test)]
mod two_way_tests {
    use super::TwoWay;

    #[test]
    fn keeps_the_last_two_keys() {
        let mut c: TwoWay<u64> = TwoWay::default();
        assert_eq!(c.get(1), None);
        c.put(1, 10);
        c.put(2, 20);
        assert_eq!(
            (c.get(1), c.get(2), c.get(1)),
            (Some(10), Some(20), Some(10))
        );
        // 1 was used last: 3 pushes out 2.
        c.put(3, 30);
        assert_eq!((c.get(2), c.get(1), c.get(3)), (None, Some(10), Some(30)));
    }
}
