//! The Perfetto sink: what the correlator calls (`Sink`), the state of the trace being written,
//! and the stats of what it wrote.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::io::{self, Write};

use serde::Serialize;

use super::fields::{NAME_BUSY, NAME_PHASE};
use super::item::{Item, OpEnc, op_enc_table};
use super::late::Late;
use super::stage::Stage;
use super::window::{Chunk, Entry, OPEN_SEND, PAIRED, WINDOW_EVENTS};
use crate::correlate::doorbell::{DoorbellInfo, WqeLink};
use crate::correlate::matcher::Pair;
use crate::correlate::merge::{Merged, ThreadInfo};
use crate::correlate::{Analysis, Correlation, FxMap, PhaseTrack, Sink, TwoWay};

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
    /// NCCL: calls drawn, slices written (calls, proxy operations, steps), flows from calls to
    /// their work requests, and flows left out (a work request earlier than its call's start).
    pub nccl_calls: u64,
    pub nccl_slices: u64,
    pub nccl_flows: u64,
    pub nccl_flows_skipped: u64,
}

pub struct PerfettoSink<W: Write> {
    pub(super) stage: Stage<W>,
    pub(super) pkt: Vec<u8>,
    pub stats: PerfettoStats,
    pub(super) next_uuid: u64,
    pub(super) proc_uuid: Vec<u64>,
    pub(super) phase_uuid: Vec<u64>,
    pub(super) proc_pid: Vec<u32>,
    pub(super) thread_uuid: Vec<u64>,
    /// Per thread file: the tid its operations are annotated with; None in a process with a
    /// single thread file, where every operation is that thread's.
    pub(super) thread_tid: Vec<Option<u32>>,
    pub(super) ep_uuid: FxMap<(u32, u32), u64>,
    pub(super) gpu_uuid: HashMap<(u32, u32), u64>,
    pub(super) ep_gpu: HashMap<(u32, u32), u32>,
    pub(super) ep_label: HashMap<(u32, u32), String>,
    /// The newest event, not final until the next one arrives (its pair, target, doorbell
    /// details come in the same step of the correlator).
    pub(super) cur: Item,
    pub(super) has_cur: bool,
    pub(super) cur_seq: u64,
    /// Events before it, oldest first; `base_seq` is the first one's sequence number.
    pub(super) entries: std::collections::VecDeque<Entry>,
    pub(super) base_seq: u64,
    /// Items still open to change (doorbells awaiting WQEs, sends awaiting their receive,
    /// anything the plain encoder does not take); `pending_base` is the first one's index.
    pub(super) pending: VecDeque<Item>,
    pub(super) pending_base: u64,
    pub(super) chunks: VecDeque<Chunk>,
    pub(super) spare_chunks: Vec<Chunk>,
    /// Read position in the front chunk, and the bytes from there released but not yet staged.
    pub(super) read_off: usize,
    pub(super) run: usize,
    /// Encode final events when they enter the window (false: at release, the reference path).
    pub(super) early: bool,
    pub(super) late: BinaryHeap<Reverse<(u64, u64, Late)>>,
    pub(super) late_n: u64,
    /// Per thread file: its "blocking calls" track (0 until needed) and where its last one ended.
    pub(super) blocking_track: Vec<(u64, u64)>,
    /// Per thread file: flows (send ns, id) ending at its next event.
    pending_end: Vec<Vec<(u64, u64)>>,
    pending_n: usize,
    /// Per process: the endpoint of its last event and that endpoint's track (the merged
    /// stream interleaves processes).
    last_ep: Vec<TwoWay<u64>>,
    pub(super) last_written_ns: u64,
    /// The NCCL calls to draw (taken in `begin`).
    pub(super) nccl: Option<Box<crate::nccl::model::NcclReport>>,
    /// (process, tid, tsc, op) of each work request joined to an NCCL call → the flows it ends.
    pub(super) nccl_wr: FxMap<(u32, u32, u64, u8), Vec<u64>>,
    /// What the plain encoder needs of each op code.
    pub(super) op_enc: Box<[OpEnc; 256]>,
    /// Whether `CLOCK_DELTA`'s snapshot was written, and the time of the last operation
    /// instant that entered the window (what the next one's timestamp counts from).
    pub(super) delta_clock: bool,
    pub(super) delta_ns: u64,
}

impl<W: Write> PerfettoSink<W> {
    pub fn new(out: W) -> Self {
        PerfettoSink {
            stage: Stage::new(out),
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
            // The window's bound: `event` releases above it, after `finalize_cur` added one.
            entries: std::collections::VecDeque::with_capacity(WINDOW_EVENTS + 2),
            base_seq: 0,
            pending: VecDeque::new(),
            pending_base: 0,
            chunks: VecDeque::new(),
            spare_chunks: Vec::new(),
            read_off: 0,
            run: 0,
            early: true,
            late: BinaryHeap::new(),
            late_n: 0,
            blocking_track: Vec::new(),
            pending_end: Vec::new(),
            pending_n: 0,
            last_ep: Vec::new(),
            last_written_ns: 0,
            nccl: None,
            nccl_wr: FxMap::default(),
            op_enc: op_enc_table(),
            delta_clock: false,
            delta_ns: 0,
        }
    }

    /// Finishes writing and returns the output.
    pub fn into_inner(mut self) -> Result<W, io::Error> {
        self.flush_run();
        self.stage.flush();
        if let Some(e) = self.stage.error.take() {
            return Err(e);
        }
        self.stage.out.flush()?;
        Ok(self.stage.out)
    }
}

impl<W: Write> Sink for PerfettoSink<W> {
    fn begin(&mut self, c: &Correlation, threads: &[ThreadInfo]) {
        self.write_header(c);
        self.write_tracks(c, threads);
        self.write_counters(c);
        self.write_nccl(c);
    }

    fn tick(&mut self, now_ns: u64) {
        self.release(now_ns);
    }

    // Inlined into the correlator's loop (`Correlation::run` is generic over its sink): as a
    // call, its prologue and epilogue alone were ~20 instructions an event, and the event was
    // copied once more.
    #[inline(always)]
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
        if !self.nccl_wr.is_empty()
            && let Some(v) = self.nccl_wr.get_mut(&(m.proc, m.ev.tid, m.ev.tsc, m.ev.op))
            && let Some(f) = v.pop()
        {
            self.cur.end_flow(f);
        }
        self.has_cur = true;
        self.cur_seq = seq;
        if let Some(ns) = m.ev.blocked() {
            self.blocking_call(m, ns);
        }
        if self.entries.len() > WINDOW_EVENTS {
            // A batch at a time: a release costs a few steps before its loop.
            self.release_to(m.ns, WINDOW_EVENTS - WINDOW_EVENTS / 8);
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
        let name = match t {
            PhaseTrack::Process(_) => NAME_PHASE,
            PhaseTrack::Thread(_) => NAME_BUSY,
        };
        if let Some(track) = self.phase_track(t) {
            self.push_late(ns, Late::Begin { track, name });
        }
    }

    fn phase(&mut self, t: PhaseTrack, _begin: u64, end_ns: u64) {
        if let Some(track) = self.phase_track(t) {
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
        self.flush_run();
        self.stage.flush();
        if self.stage.error.is_none()
            && let Err(e) = self.stage.out.flush()
        {
            self.stage.error = Some(e);
        }
    }
}
