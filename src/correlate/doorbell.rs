//! Doorbell → WQE association (paper §IV-C/D).
//!
//! A GPU (or CPU) doorbell is an `Op::GpuDoorbell` event: `addr` = the raw 8-byte doorbell word
//! (memory bytes, big-endian), `aux` = its 16-bit WQE index, `bytes` = the WQEBBs the preload
//! counted as new. The WQEs the preload recovered for it are separate events (`GpuWrite`, ...)
//! emitted later in a batch but with exactly the doorbell's TSC and endpoint, so `(process,
//! endpoint, tsc)` names a doorbell's WQEs. The reader sorts a block by TSC, so the WQEs usually
//! follow their doorbell at once; across a block boundary they can come after later events,
//! which is why a doorbell stays open for a window of merged time.
//!
//! As a check, the producer-index range of each doorbell is recomputed per QP from the words
//! alone, the way the preload's tracker does: a GPU word (opcode 0, ds 0) names the next free
//! WQEBB, so it covers `[previous end, idx)`; a CPU/BlueFlame word names its last WQE's first
//! WQEBB, so it covers `[previous end, idx + wqebbs(ds))`; all mod 2^16, starting from 0 (a QP
//! leaves RESET with an empty send queue). A range whose size differs from the doorbell's
//! `bytes` is a mismatch; so is a doorbell with more WQEs than WQEBBs, or a WQE whose doorbell
//! is not in the record.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

use super::FxMap;
use super::merge::Merged;
use crate::decode::doorbell::{DoorbellKind, DoorbellWord};
use crate::decode::wqebbs_for_ds;
use crate::event::{Layer, Op, UNATTRIBUTED_EP};
use crate::trace::reader::ProcessRecording;

/// How long (merged ns) a doorbell waits for WQEs that were batched behind later events.
pub const WINDOW_NS: u64 = 200_000_000;
/// At most this many doorbells wait at once (the oldest is closed first).
pub const MAX_OPEN: usize = 1 << 20;

/// What the correlator knows of one doorbell when it is seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DoorbellInfo {
    /// QP number from the word.
    pub qpn: u32,
    /// WQE index in the word (`aux`).
    pub pi: u16,
    /// Start of the producer-index range: the previous doorbell's end on this QP.
    pub prev_pi: u16,
    /// End of the range (exclusive): `pi` for a GPU word, `pi + wqebbs(ds)` for a CPU word.
    pub end_pi: u16,
    /// WQEBBs the preload counted as new (`bytes`).
    pub wqebbs: u64,
    /// The word is a CPU/BlueFlame ctrl word (else a GPU word).
    pub cpu_word: bool,
    /// The recomputed range size differs from `wqebbs` (for a doorbell with new WQEBBs).
    pub pi_mismatch: bool,
}

/// A WQE matched to its doorbell.
#[derive(Clone, Copy, Debug)]
pub struct WqeLink {
    /// Merge sequence number of the doorbell event.
    pub doorbell_seq: u64,
    /// 0-based position of this WQE among the doorbell's WQEs.
    pub index: u32,
}

/// WQEs per doorbell, min / median / max over the doorbells that had new WQEBBs.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct PerDoorbell {
    pub min: u64,
    pub median: u64,
    pub max: u64,
}

/// Figures of one QP (devx or GPU-driven) with doorbells.
#[derive(Clone, Debug, Default, Serialize)]
pub struct QpDoorbells {
    /// Index of the process.
    pub process: u32,
    /// "exe pid@host" of the process and the endpoint's label (filled in by the export).
    pub process_label: String,
    pub endpoint: String,
    pub ep: u32,
    pub qpn: Option<u32>,
    pub doorbells: u64,
    /// New WQEBBs announced (sum of the doorbells' `bytes`).
    pub wqebbs: u64,
    /// WQEs associated with this QP's doorbells.
    pub wqes: u64,
    /// Over doorbells with new WQEBBs and at least one WQE.
    pub wqes_per_doorbell: PerDoorbell,
    /// Doorbells with new WQEBBs whose WQEs are not in the record (recovery off, or failed).
    pub without_wqes: u64,
    /// Doorbells that announced nothing new: the same index rung again (DOCA's double ring).
    pub duplicates: u64,
    /// Doorbells behind the last index (an earlier ring overtaken: coalesced by the poller).
    pub behind: u64,
    /// Doorbells too far ahead (more than the queue): their WQEs were not recovered.
    pub overruns: u64,
    /// Recomputed producer-index range ≠ the WQEBBs the preload counted.
    pub pi_mismatches: u64,
    /// Doorbells with more WQEs than WQEBBs.
    pub too_many_wqes: u64,
    #[serde(skip)]
    hist: BTreeMap<u64, u64>,
    #[serde(skip)]
    last_end: u16,
}

/// Totals over every QP.
#[derive(Clone, Debug, Default, Serialize)]
pub struct DoorbellStats {
    pub doorbells: u64,
    pub wqebbs: u64,
    /// WQE events (GPU-recovered) in the record.
    pub wqes: u64,
    /// WQEs matched to their doorbell.
    pub wqes_associated: u64,
    /// Doorbells with new WQEBBs and at least one WQE.
    pub doorbells_with_wqes: u64,
    pub without_wqes: u64,
    pub duplicates: u64,
    pub behind: u64,
    pub overruns: u64,
    pub pi_mismatches: u64,
    pub too_many_wqes: u64,
    /// WQEs whose doorbell (same process, endpoint and TSC) was not found in the window.
    pub orphan_wqes: u64,
    /// Doorbells of QPs unknown to the preload (endpoint 0): counted, not tracked.
    pub unknown_qp: u64,
    /// pi_mismatches + too_many_wqes + orphan_wqes.
    pub mismatches: u64,
    pub wqes_per_doorbell: PerDoorbell,
    pub qps: Vec<QpDoorbells>,
}

struct Open {
    proc: u32,
    ep: u32,
    tsc: u64,
    ns: u64,
    seq: u64,
    wqebbs: u64,
    wqes: u32,
}

/// Streaming associator: feed every merged event in order, then `finish`.
#[derive(Default)]
pub struct Associator {
    qps: FxMap<(u32, u32), QpDoorbells>,
    /// Per process: endpoint → send queue size (from the "RESET sq=N" update).
    sq_cnt: Vec<FxMap<u32, u32>>,
    open: VecDeque<Open>,
    /// (proc, ep, tsc) → index in `open` + `open_base`.
    by_key: FxMap<(u32, u32, u64), u64>,
    open_base: u64,
    wqes: u64,
    associated: u64,
    orphans: u64,
    unknown_qp: u64,
}

fn sq_cnt_of(state: &str) -> Option<u32> {
    let rest = state.strip_prefix("RESET ")?;
    rest.split_whitespace()
        .find_map(|kv| kv.strip_prefix("sq="))
        .and_then(|v| v.parse().ok())
}

impl Associator {
    pub fn new(procs: &[ProcessRecording]) -> Associator {
        let sq_cnt = procs
            .iter()
            .map(|p| {
                p.updates
                    .iter()
                    .filter_map(|u| sq_cnt_of(&u.state).map(|n| (u.id, n)))
                    .collect()
            })
            .collect();
        Associator {
            sq_cnt,
            ..Default::default()
        }
    }

    /// A doorbell: returns what was recomputed for it (None for a QP the preload did not know).
    pub fn doorbell(&mut self, seq: u64, m: &Merged) -> Option<DoorbellInfo> {
        self.expire(m.ns);
        let ev = &m.ev;
        let word = DoorbellWord::from_bytes(ev.addr.to_be_bytes());
        if ev.ep == UNATTRIBUTED_EP {
            self.unknown_qp += 1;
            return None;
        }
        let sq = self
            .sq_cnt
            .get(m.proc as usize)
            .and_then(|s| s.get(&ev.ep).copied())
            .unwrap_or(1 << 16);
        let q = self
            .qps
            .entry((m.proc, ev.ep))
            .or_insert_with(|| QpDoorbells {
                process: m.proc,
                ep: ev.ep,
                ..Default::default()
            });
        q.qpn.get_or_insert(word.qpn);
        q.doorbells += 1;
        q.wqebbs += ev.bytes;
        let cpu_word = word.kind() == DoorbellKind::Cpu;
        // The 16-bit WQE index the preload put in `aux`.
        let pi = ev.aux as u16;
        let end = if cpu_word {
            pi.wrapping_add(wqebbs_for_ds(word.ds))
        } else {
            pi
        };
        let prev = q.last_end;
        let n = end.wrapping_sub(prev) as u64;
        let mut info = DoorbellInfo {
            qpn: word.qpn,
            pi,
            prev_pi: prev,
            end_pi: end,
            wqebbs: ev.bytes,
            cpu_word,
            pi_mismatch: false,
        };
        if ev.bytes > 0 {
            if n != ev.bytes {
                q.pi_mismatches += 1;
                info.pi_mismatch = true;
            }
            q.last_end = end;
        } else if n == 0 {
            q.duplicates += 1;
        } else if !cpu_word && (prev.wrapping_sub(end) as u32) < sq {
            q.behind += 1;
        } else {
            // Too far ahead: the preload moved on to its end without recovering the WQEs.
            q.overruns += 1;
            q.last_end = end;
        }
        if ev.bytes > 0 {
            if self.open.len() >= MAX_OPEN {
                self.close_front();
            }
            let idx = self.open_base + self.open.len() as u64;
            self.by_key.insert((m.proc, ev.ep, ev.tsc), idx);
            self.open.push_back(Open {
                proc: m.proc,
                ep: ev.ep,
                tsc: ev.tsc,
                ns: m.ns,
                seq,
                wqebbs: ev.bytes,
                wqes: 0,
            });
        }
        Some(info)
    }

    /// A WQE event (GPU-recovered operation): its doorbell, when found.
    pub fn wqe(&mut self, m: &Merged) -> Option<WqeLink> {
        self.wqes += 1;
        let key = (m.proc, m.ev.ep, m.ev.tsc);
        let Some(&idx) = self.by_key.get(&key) else {
            self.orphans += 1;
            return None;
        };
        let o = &mut self.open[(idx - self.open_base) as usize];
        let link = WqeLink {
            doorbell_seq: o.seq,
            index: o.wqes,
        };
        o.wqes += 1;
        self.associated += 1;
        Some(link)
    }

    /// Whether `m` is a WQE event that `wqe` should see.
    pub fn is_wqe(op: Op) -> bool {
        op.layer() == Layer::Mlx5 && op != Op::GpuDoorbell
    }

    fn close_front(&mut self) {
        let Some(o) = self.open.pop_front() else {
            return;
        };
        self.open_base += 1;
        if self.by_key.get(&(o.proc, o.ep, o.tsc)) == Some(&(self.open_base - 1)) {
            self.by_key.remove(&(o.proc, o.ep, o.tsc));
        }
        let Some(q) = self.qps.get_mut(&(o.proc, o.ep)) else {
            return;
        };
        q.wqes += o.wqes as u64;
        if o.wqes == 0 {
            q.without_wqes += 1;
        } else {
            *q.hist.entry(o.wqes as u64).or_default() += 1;
            if o.wqes as u64 > o.wqebbs {
                q.too_many_wqes += 1;
            }
        }
    }

    fn expire(&mut self, now: u64) {
        while let Some(o) = self.open.front() {
            if o.ns.saturating_add(WINDOW_NS) >= now {
                break;
            }
            self.close_front();
        }
    }

    pub fn finish(mut self) -> DoorbellStats {
        while !self.open.is_empty() {
            self.close_front();
        }
        let mut s = DoorbellStats {
            wqes: self.wqes,
            wqes_associated: self.associated,
            orphan_wqes: self.orphans,
            unknown_qp: self.unknown_qp,
            ..Default::default()
        };
        let mut all: BTreeMap<u64, u64> = BTreeMap::new();
        let mut qps: Vec<QpDoorbells> = self.qps.into_values().collect();
        qps.sort_by_key(|q| (q.process, q.ep));
        for q in &mut qps {
            q.wqes_per_doorbell = summary(&q.hist);
            for (&k, &v) in &q.hist {
                *all.entry(k).or_default() += v;
                s.doorbells_with_wqes += v;
            }
            s.doorbells += q.doorbells;
            s.wqebbs += q.wqebbs;
            s.without_wqes += q.without_wqes;
            s.duplicates += q.duplicates;
            s.behind += q.behind;
            s.overruns += q.overruns;
            s.pi_mismatches += q.pi_mismatches;
            s.too_many_wqes += q.too_many_wqes;
        }
        s.doorbells += s.unknown_qp;
        s.wqes_per_doorbell = summary(&all);
        s.mismatches = s.pi_mismatches + s.too_many_wqes + s.orphan_wqes;
        s.qps = qps;
        s
    }
}

fn summary(h: &BTreeMap<u64, u64>) -> PerDoorbell {
    let n: u64 = h.values().sum();
    if n == 0 {
        return PerDoorbell::default();
    }
    let mut median = 0;
    let mut seen = 0;
    for (&k, &v) in h {
        seen += v;
        if seen * 2 > n {
            median = k;
            break;
        }
    }
    PerDoorbell {
        min: h.keys().next().copied().unwrap_or(0),
        median,
        max: h.keys().next_back().copied().unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Event;

    fn db(ep: u32, tsc: u64, word: DoorbellWord, wqebbs: u64) -> Merged {
        Merged {
            ns: tsc,
            proc: 0,
            thread: 0,
            ev: Event {
                tsc,
                ep,
                op: Op::GpuDoorbell as u8,
                aux: word.idx as u32,
                bytes: wqebbs,
                addr: u64::from_be_bytes(word.to_bytes()),
                ..Default::default()
            },
        }
    }

    fn wqe(ep: u32, tsc: u64) -> Merged {
        Merged {
            ns: tsc,
            proc: 0,
            thread: 0,
            ev: Event {
                tsc,
                ep,
                op: Op::GpuWrite as u8,
                bytes: 8,
                ..Default::default()
            },
        }
    }

    #[test]
    fn ranges_wqes_and_mismatches() {
        let mut a = Associator::default();
        // 2 WQEBBs, 2 WQEs; the WQEs of the second doorbell come after the third.
        let i = a
            .doorbell(0, &db(1, 10, DoorbellWord::gpu(7, 2), 2))
            .unwrap();
        assert_eq!((i.prev_pi, i.end_pi, i.pi_mismatch), (0, 2, false));
        assert_eq!(a.wqe(&wqe(1, 10)).map(|l| l.index), Some(0));
        assert_eq!(a.wqe(&wqe(1, 10)).map(|l| l.index), Some(1));
        a.doorbell(3, &db(1, 20, DoorbellWord::gpu(7, 3), 1));
        // DOCA double ring: same index, nothing new.
        a.doorbell(4, &db(1, 21, DoorbellWord::gpu(7, 3), 0));
        assert_eq!(a.wqe(&wqe(1, 20)).map(|l| l.doorbell_seq), Some(3));
        // BlueFlame/CPU word naming WQE 3, ds 3 → one WQEBB, [3, 4).
        let mut bf = DoorbellWord::gpu(7, 3);
        bf.opcode = 8;
        bf.ds = 3;
        let i = a.doorbell(5, &db(1, 30, bf, 1)).unwrap();
        assert_eq!((i.prev_pi, i.end_pi, i.cpu_word), (3, 4, true));
        a.wqe(&wqe(1, 30));
        // A gap: PI jumps by 5 while 4 WQEBBs are announced → mismatch; no WQEs.
        let i = a
            .doorbell(6, &db(1, 40, DoorbellWord::gpu(7, 9), 4))
            .unwrap();
        assert!(i.pi_mismatch);
        // A WQE without doorbell.
        assert!(a.wqe(&wqe(1, 41)).is_none());
        let s = a.finish();
        assert_eq!(s.doorbells, 5);
        assert_eq!(s.wqes, 5);
        assert_eq!(s.wqes_associated, 4);
        assert_eq!(s.duplicates, 1);
        assert_eq!(s.without_wqes, 1);
        assert_eq!(s.pi_mismatches, 1);
        assert_eq!(s.orphan_wqes, 1);
        assert_eq!(s.mismatches, 2);
        assert_eq!(s.doorbells_with_wqes, 3);
        assert_eq!(
            (
                s.wqes_per_doorbell.min,
                s.wqes_per_doorbell.median,
                s.wqes_per_doorbell.max
            ),
            (1, 1, 2)
        );
    }

    #[test]
    fn wraps_mod_2_16() {
        let mut a = Associator::default();
        a.doorbell(0, &db(1, 1, DoorbellWord::gpu(7, 0xfffe), 0xfffe));
        let i = a
            .doorbell(1, &db(1, 2, DoorbellWord::gpu(7, 2), 4))
            .unwrap();
        assert_eq!((i.prev_pi, i.end_pi, i.pi_mismatch), (0xfffe, 2, false));
    }

    #[test]
    fn sq_size_from_reset_update() {
        assert_eq!(sq_cnt_of("RESET sq=1024 uar_page=0x10"), Some(1024));
        assert_eq!(sq_cnt_of("RTS"), None);
    }
}
