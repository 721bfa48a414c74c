//! The trace's first packets: interned categories, event names, annotation names and peer
//! labels with the sequence defaults, then the clock snapshot that makes REALTIME the trace clock.

use std::io::Write;

use super::PerfettoSink;
use super::fields::*;
use crate::correlate::Correlation;
use crate::event::Op;
use crate::export::proto::{self, begin, end, string, uint};

impl<W: Write> PerfettoSink<W> {
    pub(super) fn write_header(&mut self, c: &Correlation) {
        // Interned data and defaults.
        let p = &mut self.pkt;
        p.clear();
        uint(p, P_SEQ_ID, SEQ);
        uint(p, P_SEQ_FLAGS, SEQ_CLEARED | SEQ_NEEDS);
        uint(p, P_FIRST_ON_SEQ, 1);
        // Packets without a clock of their own are operation instants, on the incremental clock
        // (its snapshot comes before the first of them); every other timed packet names REALTIME.
        let d = begin(p, P_DEFAULTS);
        uint(p, P_TS_CLOCK, CLOCK_DELTA);
        end(p, d);
        let i = begin(p, P_INTERNED);
        for (iid, name) in [
            (CAT_OP, "op"),
            (CAT_PHASE, "phase"),
            (CAT_FLOW, "flow"),
            (CAT_NCCL, "nccl"),
        ] {
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
}
