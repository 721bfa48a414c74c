//! Packets written outside the event stream, ordered by time: counter samples, phase and busy
//! slices, blocking calls, and the markers that end flows whose receiver recorded nothing later.

use std::cmp::Reverse;
use std::io::Write;

use super::PerfettoSink;
use super::encode::uint_annotation;
use super::fields::*;
use crate::correlate::merge::Merged;
use crate::export::proto::{begin, end, fixed64, int, string, uint};

/// Packets written outside the event stream, ordered by time.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Late {
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
    /// An NCCL slice (category "nccl"): its name, unsigned and string arguments (interned
    /// names), and the flows it starts.
    Slice {
        track: u64,
        name: String,
        uints: Vec<(u64, u64)>,
        strs: Vec<(u64, String)>,
        flows: Vec<u64>,
    },
    SliceEnd {
        track: u64,
    },
}

impl<W: Write> PerfettoSink<W> {
    /// A call that returned at `m.ns` after blocking `blocked_ns`: a slice on its thread's
    /// "blocking calls" track, kept in time order and nested.
    pub(super) fn blocking_call(&mut self, m: &Merged, blocked_ns: u64) {
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

    pub(super) fn push_late(&mut self, ns: u64, l: Late) {
        self.late_n += 1;
        self.late.push(Reverse((ns, self.late_n, l)));
    }

    fn write_late(&mut self, ns: u64, l: Late) {
        self.pkt.clear();
        uint(&mut self.pkt, P_TIMESTAMP, ns);
        uint(&mut self.pkt, P_TS_CLOCK, CLOCK_REALTIME);
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
                uint_annotation(&mut self.pkt, AN_BLOCKED_NS, dur_ns);
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
            Late::Slice {
                track,
                name,
                uints,
                strs,
                flows,
            } => {
                uint(&mut self.pkt, TE_TYPE, TYPE_BEGIN);
                uint(&mut self.pkt, TE_TRACK, track);
                uint(&mut self.pkt, TE_CATEGORY_IIDS, CAT_NCCL);
                string(&mut self.pkt, TE_NAME, &name);
                for (k, v) in uints {
                    uint_annotation(&mut self.pkt, k, v);
                }
                for (k, v) in strs {
                    let d = begin(&mut self.pkt, TE_ANNOT);
                    uint(&mut self.pkt, DA_NAME_IID, k);
                    string(&mut self.pkt, DA_STRING, &v);
                    end(&mut self.pkt, d);
                }
                self.stats.nccl_flows += flows.len() as u64;
                for f in flows {
                    fixed64(&mut self.pkt, TE_FLOW, f);
                }
            }
            Late::SliceEnd { track } => {
                uint(&mut self.pkt, TE_TYPE, TYPE_END);
                uint(&mut self.pkt, TE_TRACK, track);
                self.stats.nccl_slices += 1;
            }
        }
        end(&mut self.pkt, te);
        self.emit();
        self.last_written_ns = self.last_written_ns.max(ns);
    }

    /// Writes late packets due at or before `ns`.
    pub(super) fn drain_late(&mut self, ns: u64) {
        while let Some(Reverse((t, _, _))) = self.late.peek() {
            if *t > ns {
                break;
            }
            if let Some(Reverse((t, _, l))) = self.late.pop() {
                self.write_late(t, l);
            }
        }
    }
}
