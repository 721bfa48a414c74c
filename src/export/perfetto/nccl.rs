//! NCCL in the trace: per rank, each call as a slice (category "nccl") on a track per
//! communicator under the process ("NCCL comm 7773728f r0/2"), named as the user made it and
//! its size, with its sequence number, algorithm, protocol, channels, bytes and work requests as
//! arguments; the parts of a call NCCL split (AlltoAll's Sends and Recvs) on the communicator's
//! "parts" track under it; each proxy operation on a track per channel, direction and peer under
//! the communicator ("ch0 send → r1"), and its steps on a "steps" track under that. Slices that
//! overlap on one track (calls enqueued ahead of the GPU, steps in flight together) go on the
//! next free lane, a track of the same name with "(2)", "(3)"... A flow goes from each call to
//! every verbs work request joined to it (the work request's instant on its QP's track).

use std::collections::HashMap;
use std::io::Write;

use super::PerfettoSink;
use super::fields::*;
use super::late::Late;
use crate::correlate::Correlation;
use crate::nccl::model::NcclReport;

/// Flow ids of NCCL's flows start here (the operation flows are 1 + a sequence number).
pub(super) const FLOW_BASE: u64 = 1 << 62;

/// One slice to write: on `track`, [begin, end] ns.
struct Slice {
    track: u64,
    begin: u64,
    end: u64,
    name: String,
    uints: Vec<(u64, u64)>,
    strs: Vec<(u64, String)>,
    flows: Vec<u64>,
}

/// Tracks of one name under one parent, one per lane of slices that overlap.
#[derive(Default)]
struct Lanes {
    /// (track, end of its last slice).
    tracks: Vec<(u64, u64)>,
}

impl Lanes {
    /// Lanes whose first is an existing track.
    fn first(track: u64) -> Lanes {
        Lanes {
            tracks: vec![(track, 0)],
        }
    }
}

impl<W: Write> PerfettoSink<W> {
    /// The NCCL calls to draw (`nccl::model::load` of the same recording).
    pub fn set_nccl(&mut self, r: NcclReport) {
        self.nccl = Some(Box::new(r));
    }

    /// A lane of `lanes` free at `begin` (its last slice ended before), its track defined on
    /// first use under `parent` as `name` (the first, unless the lanes start with a track) or
    /// "name (k)".
    fn lane(&mut self, lanes: &mut Lanes, parent: u64, name: &str, begin: u64, end: u64) -> u64 {
        if let Some(l) = lanes.tracks.iter_mut().find(|l| l.1 < begin) {
            l.1 = end;
            return l.0;
        }
        let u = self.uuid();
        let k = lanes.tracks.len();
        let label = if k == 0 {
            name.to_string()
        } else {
            format!("{name} ({})", k + 1)
        };
        self.track(u, Some(parent), &label, |_| {});
        lanes.tracks.push((u, end));
        u
    }

    /// Tracks and slices of every NCCL call, proxy operation and step, and the flows' sources;
    /// the work requests that end the flows are noted for `event`.
    pub(super) fn write_nccl(&mut self, c: &Correlation) {
        let Some(rep) = self.nccl.take() else { return };
        let mut slices: Vec<Slice> = Vec::new();
        let mut flow = FLOW_BASE;
        for tl in &rep.timelines {
            let Some(pi) = c
                .rec
                .processes
                .iter()
                .position(|p| p.identity.pid == tl.pid && p.identity.host == tl.host)
            else {
                continue;
            };
            let clock = &c.clocks[pi];
            let ns = |t: u64| clock.to_real_ns(t);
            let proc_track = self.proc_uuid[pi];
            // The record's last NCCL time: where calls and operations still open end.
            let last = tl
                .calls
                .iter()
                .map(|k| k.end.unwrap_or(k.start))
                .chain(tl.ops.iter().map(|o| o.stop.unwrap_or(o.start)))
                .chain(tl.steps.iter().map(|s| s.stop.unwrap_or(s.start)))
                .max()
                .unwrap_or(0);
            let span = |b: u64, e: Option<u64>| {
                let b = ns(b);
                (b, ns(e.unwrap_or(last)).max(b + 1))
            };
            let mut comm_track: HashMap<u64, u64> = HashMap::new();
            let mut parts_track: HashMap<u64, u64> = HashMap::new();
            let mut names: HashMap<u64, String> = HashMap::new();
            let mut lanes: HashMap<(u64, u32), Lanes> = HashMap::new();
            let mut call_slice: Vec<usize> = Vec::with_capacity(tl.calls.len());
            // Calls in host-call order (the timeline's order): the lanes fill left to right.
            for call in &tl.calls {
                let r = &rep.calls[call.rec];
                let ct = match comm_track.get(&call.comm_id) {
                    Some(&t) => t,
                    None => {
                        let u = self.uuid();
                        let mut name = format!(
                            "NCCL comm {:08x} r{}/{}",
                            call.comm_id >> 32,
                            call.rank,
                            call.nranks
                        );
                        if !call.comm_name.is_empty() {
                            name.push_str(&format!(" {}", call.comm_name));
                        }
                        self.track(u, Some(proc_track), &name, |_| {});
                        comm_track.insert(call.comm_id, u);
                        lanes.insert((u, 0), Lanes::first(u));
                        names.insert(u, name);
                        u
                    }
                };
                let (b, e) = span(call.start, call.end);
                let track = if call.parent.is_some() {
                    let parent = match parts_track.get(&call.comm_id) {
                        Some(&t) => t,
                        None => {
                            let u = self.uuid();
                            self.track(u, Some(ct), "parts", |_| {});
                            parts_track.insert(call.comm_id, u);
                            u
                        }
                    };
                    let mut l = lanes.remove(&(parent, 0)).unwrap_or_default();
                    let t = self.lane(&mut l, parent, "parts", b, e);
                    lanes.insert((parent, 0), l);
                    t
                } else {
                    let mut l = lanes.remove(&(ct, 0)).unwrap_or_default();
                    let name = names.get(&ct).cloned().unwrap_or_default();
                    let t = self.lane(&mut l, ct, &name, b, e);
                    lanes.insert((ct, 0), l);
                    t
                };
                let mut uints = vec![
                    (AN_SEQ, r.seq),
                    (AN_BYTES, r.bytes),
                    (AN_COUNT, r.count),
                    (AN_CHANNELS, r.channels as u64),
                    (AN_WRS, r.wrs),
                    (AN_WR_BYTES, r.wr_bytes),
                    (AN_COMPLETED, r.end_ns.is_some() as u64),
                ];
                if let Some(p) = r.peer {
                    uints.push((AN_PEER, p as u64));
                }
                if let (Some(a), Some(z)) = (r.gpu_start_ns, r.gpu_end_ns) {
                    uints.push((AN_GPU_START, a));
                    uints.push((AN_GPU_NS, z.saturating_sub(a)));
                }
                let mut strs = vec![(AN_COMM, r.comm.clone())];
                if let Some(a) = r.algo {
                    strs.push((AN_ALGO, a.to_string()));
                }
                if let Some(p) = r.proto {
                    strs.push((AN_PROTO, p.to_string()));
                }
                let mut name = format!("{} {}", r.func, human(r.bytes));
                if let Some(p) = r.peer {
                    name.push_str(&format!(
                        " {} r{p}",
                        if r.func.starts_with("Send") {
                            "→"
                        } else {
                            "←"
                        }
                    ));
                }
                call_slice.push(slices.len());
                self.stats.nccl_calls += 1;
                slices.push(Slice {
                    track,
                    begin: b,
                    end: e,
                    name,
                    uints,
                    strs,
                    flows: Vec::new(),
                });
            }
            // Proxy operations: a track per (communicator, channel, direction, peer).
            let mut op_track: Vec<u64> = Vec::with_capacity(tl.ops.len());
            let mut op_tracks: HashMap<(u64, u8, bool, u32), u64> = HashMap::new();
            let mut op_slice: Vec<Option<usize>> = Vec::with_capacity(tl.ops.len());
            for op in &tl.ops {
                let Some(call) = tl.calls.get(op.call) else {
                    op_track.push(0);
                    op_slice.push(None);
                    continue;
                };
                let Some(&ct) = comm_track.get(&call.comm_id) else {
                    op_track.push(0);
                    op_slice.push(None);
                    continue;
                };
                let key = (call.comm_id, op.channel, op.send, op.peer);
                let group = match op_tracks.get(&key) {
                    Some(&t) => t,
                    None => {
                        let u = self.uuid();
                        let name = if op.send {
                            format!("ch{} send → r{}", op.channel, op.peer)
                        } else {
                            format!("ch{} recv ← r{}", op.channel, op.peer)
                        };
                        self.track(u, Some(ct), &name, |_| {});
                        op_tracks.insert(key, u);
                        lanes.insert((u, 0), Lanes::first(u));
                        names.insert(u, name);
                        u
                    }
                };
                let (b, e) = span(op.start, op.stop);
                let mut l = lanes.remove(&(group, 0)).unwrap_or_default();
                let name = names.get(&group).cloned().unwrap_or_default();
                let t = self.lane(&mut l, group, &name, b, e);
                lanes.insert((group, 0), l);
                op_track.push(group);
                op_slice.push(Some(slices.len()));
                let r = &rep.calls[call.rec];
                slices.push(Slice {
                    track: t,
                    begin: b,
                    end: e,
                    name: format!(
                        "{} {} #{} ch{}",
                        if op.send { "send" } else { "recv" },
                        r.func,
                        r.seq,
                        op.channel
                    ),
                    uints: vec![
                        (AN_SEQ, r.seq),
                        (AN_CHANNEL, op.channel as u64),
                        (AN_PEER, op.peer as u64),
                        (AN_STEPS, op.steps as u64),
                    ],
                    strs: vec![(AN_SIDE, if op.send { "send" } else { "recv" }.to_string())],
                    flows: Vec::new(),
                });
            }
            // Steps: on the "steps" lanes under their operation's track.
            for s in &tl.steps {
                let Some(&group) = op_track.get(s.op).filter(|&&g| g != 0) else {
                    continue;
                };
                let (b, e) = span(s.start, s.stop);
                let mut l = lanes.remove(&(group, 1)).unwrap_or_default();
                let t = self.lane(&mut l, group, "steps", b, e);
                lanes.insert((group, 1), l);
                slices.push(Slice {
                    track: t,
                    begin: b,
                    end: e,
                    name: format!("step {}", s.step),
                    uints: vec![(AN_STEP, s.step as u64), (AN_BYTES, s.bytes)],
                    strs: Vec::new(),
                    flows: Vec::new(),
                });
            }
            // Flows: from each call to its work requests, ended by `event`.
            for w in &tl.wrs {
                let Some(&si) = call_slice.get(w.call) else {
                    continue;
                };
                if ns(w.tsc) < slices[si].begin {
                    self.stats.nccl_flows_skipped += 1;
                    continue;
                }
                flow += 1;
                slices[si].flows.push(flow);
                self.nccl_wr
                    .entry((pi as u32, w.tid, w.tsc, w.op))
                    .or_default()
                    .push(flow);
            }
        }
        // In time order; at one time an end before a begin (a lane's next slice starts where
        // its last one ended).
        let mut packets: Vec<(u64, bool, usize)> = Vec::with_capacity(slices.len() * 2);
        for (i, s) in slices.iter().enumerate() {
            packets.push((s.begin, true, i));
            packets.push((s.end, false, i));
        }
        packets.sort_by_key(|p| (p.0, p.1, p.2));
        let mut slices: Vec<Option<Slice>> = slices.into_iter().map(Some).collect();
        for (t, begin, i) in packets {
            if begin {
                let Some(s) = slices[i].as_mut() else {
                    continue;
                };
                let track = s.track;
                let l = Late::Slice {
                    track,
                    name: std::mem::take(&mut s.name),
                    uints: std::mem::take(&mut s.uints),
                    strs: std::mem::take(&mut s.strs),
                    flows: std::mem::take(&mut s.flows),
                };
                self.push_late(t, l);
            } else if let Some(s) = slices[i].take() {
                self.push_late(t, Late::SliceEnd { track: s.track });
            }
        }
    }
}

/// Bytes as the slice names show them (B, KiB, MiB, GiB).
pub(super) fn human(b: u64) -> String {
    let (v, unit) = if b < 1 << 10 {
        return format!("{b} B");
    } else if b < 1 << 20 {
        (b as f64 / 1024.0, "KiB")
    } else if b < 1 << 30 {
        (b as f64 / 1048576.0, "MiB")
    } else {
        (b as f64 / (1u64 << 30) as f64, "GiB")
    };
    let n = format!("{v:.3}");
    format!("{} {unit}", n.trim_end_matches('0').trim_end_matches('.'))
}
