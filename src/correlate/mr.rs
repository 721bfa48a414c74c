//! Memory regions → the process a one-sided operation targets.
//!
//! Every traced process records its `ibv_reg_mr` / `_iova2` / `ibv_reg_dmabuf_mr`
//! registrations (address as peers use it, length, lkey, rkey, access) and `ibv_dereg_mr`
//! (`ProcessRecord::MemRegion`). A one-sided operation (verbs RDMA write/read/atomics, GPU WQEs)
//! carries its remote address in `addr` and its rkey in `aux` (all 32 bits since schema 2; the
//! low 16 bits in older records). Its target is the process owning a region with
//! `raddr ∈ [addr, addr + len)` and that rkey (`rkey & 0xffff == aux` where `aux` fits 16 bits):
//! looked up first among the regions of the QP's peer process (when the topology knows it),
//! otherwise among the regions of every process (kept only when exactly one process matches).
//! Regions alive at the operation's time are preferred; a deregistered one still matches when
//! nothing alive does (clocks of different hosts are only so good).
//!
//! Not covered: devx/GPU memory (`mlx5dv_devx_umem_reg` has no rkey; the mkeys that NVSHMEM and
//! DOCA use come from devx MKEY objects, which are not decoded), memory windows, and implicit ODP
//! (whole address space) registrations, which match any address of their process.

use serde::Serialize;

use super::FxMap;
use super::merge::Merged;
use crate::event::MemRegion;
use crate::trace::reader::ProcessRecording;

/// One registered region.
#[derive(Clone, Debug, Default, Serialize)]
pub struct MrEntry {
    /// Index of the owning process.
    pub process: u32,
    pub addr: u64,
    pub len: u64,
    pub lkey: u32,
    pub rkey: u32,
    pub access: u32,
    pub registered_ns: u64,
    pub deregistered_ns: Option<u64>,
    /// One-sided operations (and their bytes) attributed to this region.
    pub ops: u64,
    pub bytes: u64,
}

impl MrEntry {
    fn contains(&self, a: u64) -> bool {
        a >= self.addr && a - self.addr < self.len.max(1)
    }
    fn alive_at(&self, ns: u64) -> bool {
        self.registered_ns <= ns && self.deregistered_ns.is_none_or(|d| d >= ns)
    }
}

/// How an operation's target was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum How {
    /// A region of the QP's peer process.
    QpPeer,
    /// The QP's peer is unknown: the only process with a matching region.
    Search,
}

/// Result of a lookup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    Found {
        mr: usize,
        process: u32,
        how: How,
    },
    /// No region matches (of the peer, or of anyone when the peer is unknown).
    NoRegion,
    /// The peer is unknown and regions of several processes match.
    Ambiguous,
}

/// All regions of all processes, indexed by the low 16 bits of their rkey.
#[derive(Clone, Debug, Default)]
pub struct MrTable {
    pub entries: Vec<MrEntry>,
    by_rkey16: FxMap<u16, Vec<usize>>,
}

impl MrTable {
    pub fn build(procs: &[ProcessRecording]) -> MrTable {
        let mut t = MrTable::default();
        for (i, p) in procs.iter().enumerate() {
            // Live registrations of this process by (rkey, addr, len) → entry index.
            let mut live: FxMap<(u32, u64, u64), usize> = FxMap::default();
            for m in &p.mrs {
                t.add(i as u32, m, &mut live);
            }
        }
        t
    }

    fn add(&mut self, process: u32, m: &MemRegion, live: &mut FxMap<(u32, u64, u64), usize>) {
        let key = (m.rkey, m.addr, m.len);
        if m.registered {
            // The same registration seen twice (ibv_reg_mr calling ibv_reg_mr_iova2): one.
            if live.contains_key(&key) {
                return;
            }
            let idx = self.entries.len();
            self.entries.push(MrEntry {
                process,
                addr: m.addr,
                len: m.len,
                lkey: m.lkey,
                rkey: m.rkey,
                access: m.access,
                registered_ns: m.at_ns,
                ..Default::default()
            });
            self.by_rkey16.entry(m.rkey as u16).or_default().push(idx);
            live.insert(key, idx);
        } else if let Some(idx) = live.remove(&key) {
            self.entries[idx].deregistered_ns = Some(m.at_ns);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The region a one-sided operation at `ns` to (`raddr`, `rkey16`) targets, looked up in
    /// `peer`'s regions when the QP's peer is known, else in everyone's.
    pub fn lookup(&self, peer: Option<u32>, raddr: u64, rkey: u32, ns: u64) -> Lookup {
        let Some(cands) = self.by_rkey16.get(&(rkey as u16)) else {
            return Lookup::NoRegion;
        };
        // A key wider than 16 bits is a whole rkey (schema 2): it must match all of it. One that
        // fits 16 bits is the same whether it was cut (schema 1) or not.
        let matching = cands
            .iter()
            .copied()
            .filter(|&i| rkey <= 0xffff || self.entries[i].rkey == rkey)
            .filter(|&i| peer.is_none_or(|p| self.entries[i].process == p))
            .filter(|&i| self.entries[i].contains(raddr));
        // Prefer a region alive at `ns`; among several, the latest registered.
        let mut best: Option<(bool, u64, usize)> = None;
        let mut procs: [Option<u32>; 2] = [None, None];
        for i in matching {
            let e = &self.entries[i];
            match procs {
                [None, _] => procs[0] = Some(e.process),
                [Some(p), None] if p != e.process => procs[1] = Some(e.process),
                _ => {}
            }
            let k = (e.alive_at(ns), e.registered_ns, i);
            if best.is_none_or(|b| (k.0, k.1) > (b.0, b.1)) {
                best = Some(k);
            }
        }
        match (best, procs[1]) {
            (None, _) => Lookup::NoRegion,
            (Some(_), Some(_)) if peer.is_none() => Lookup::Ambiguous,
            (Some((_, _, i)), _) => Lookup::Found {
                mr: i,
                process: self.entries[i].process,
                how: if peer.is_some() {
                    How::QpPeer
                } else {
                    How::Search
                },
            },
        }
    }
}

/// Per endpoint: where its one-sided bytes went.
#[derive(Clone, Debug, Default, Serialize)]
pub struct EpTargets {
    pub process: u32,
    pub ep: u32,
    /// "exe pid@host" of the issuing process and the endpoint's label (filled by the export).
    pub process_label: String,
    pub endpoint: String,
    /// The QP's peer process from the topology (label), if known.
    pub peer: Option<String>,
    /// The single target process of its attributed bytes (label), null when none or several.
    pub target: Option<String>,
    /// Target process label → bytes.
    pub targets: std::collections::BTreeMap<String, u64>,
    pub ops: u64,
    pub bytes: u64,
    pub unattributed_bytes: u64,
    #[serde(skip)]
    pub by_proc: FxMap<u32, u64>,
}

/// One-sided operations and their attribution to target processes.
#[derive(Clone, Debug, Default, Serialize)]
pub struct OneSidedStats {
    /// One-sided operations that did not fail, and their payload bytes.
    pub ops: u64,
    pub bytes: u64,
    /// Attributed to a target process through a memory region.
    pub attributed_ops: u64,
    pub attributed_bytes: u64,
    /// … of which through a region of the QP's peer, or by search (peer unknown).
    pub via_qp_peer_ops: u64,
    pub via_search_ops: u64,
    /// Not attributed: no region matched (of the peer, or of anyone).
    pub no_region_ops: u64,
    pub no_region_bytes: u64,
    /// Not attributed: the peer is unknown and regions of several processes matched.
    pub ambiguous_ops: u64,
    /// Memory regions recorded (registrations, after de-duplication).
    pub regions: u64,
    pub endpoints: Vec<EpTargets>,
    /// The regions (at most `MAX_MRS_LISTED`, the most used first).
    pub mrs: Vec<MrListed>,
    pub note: String,
}

/// Regions listed in the JSON at most.
pub const MAX_MRS_LISTED: usize = 10_000;

#[derive(Clone, Debug, Default, Serialize)]
pub struct MrListed {
    /// "exe pid@host" of the owner (`process` is its index).
    pub process_label: String,
    #[serde(flatten)]
    pub mr: MrEntry,
}

/// Streaming attribution state.
#[derive(Default)]
pub struct Attributor {
    pub table: MrTable,
    stats: OneSidedStats,
    eps: FxMap<(u32, u32), EpTargets>,
}

impl Attributor {
    pub fn new(procs: &[ProcessRecording]) -> Attributor {
        Attributor {
            table: MrTable::build(procs),
            ..Default::default()
        }
    }

    /// A one-sided operation of `proc` on endpoint `ep` whose QP peer is `peer`: returns the
    /// target process when a region names it.
    pub fn feed(&mut self, m: &Merged, peer: Option<u32>) -> Option<u32> {
        let (proc, ep, raddr, rkey, bytes, ns) =
            (m.proc, m.ev.ep, m.ev.addr, m.ev.aux, m.ev.bytes, m.ns);
        let s = &mut self.stats;
        s.ops += 1;
        s.bytes += bytes;
        let e = self.eps.entry((proc, ep)).or_insert_with(|| EpTargets {
            process: proc,
            ep,
            ..Default::default()
        });
        e.ops += 1;
        e.bytes += bytes;
        match self.table.lookup(peer, raddr, rkey, ns) {
            Lookup::Found { mr, process, how } => {
                s.attributed_ops += 1;
                s.attributed_bytes += bytes;
                match how {
                    How::QpPeer => s.via_qp_peer_ops += 1,
                    How::Search => s.via_search_ops += 1,
                }
                let m = &mut self.table.entries[mr];
                m.ops += 1;
                m.bytes += bytes;
                *e.by_proc.entry(process).or_default() += bytes;
                Some(process)
            }
            Lookup::NoRegion => {
                s.no_region_ops += 1;
                s.no_region_bytes += bytes;
                e.unattributed_bytes += bytes;
                None
            }
            Lookup::Ambiguous => {
                s.ambiguous_ops += 1;
                e.unattributed_bytes += bytes;
                None
            }
        }
    }

    pub fn finish(self) -> (OneSidedStats, MrTable) {
        let mut s = self.stats;
        s.regions = self.table.entries.len() as u64;
        let mut eps: Vec<EpTargets> = self.eps.into_values().collect();
        eps.sort_by_key(|e| (e.process, e.ep));
        s.endpoints = eps;
        s.note = "devx/GPU memory (mlx5dv_devx_umem_reg; mkeys from devx MKEY objects) is not recorded: one-sided operations into it stay unattributed".into();
        (s, self.table)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mr(addr: u64, len: u64, rkey: u32, at: u64, reg: bool) -> MemRegion {
        MemRegion {
            addr,
            len,
            lkey: rkey,
            rkey,
            access: 7,
            registered: reg,
            at_ns: at,
        }
    }

    fn table(per_proc: &[&[MemRegion]]) -> MrTable {
        let mut t = MrTable::default();
        for (i, ms) in per_proc.iter().enumerate() {
            let mut live = FxMap::default();
            for m in *ms {
                t.add(i as u32, m, &mut live);
            }
        }
        t
    }

    #[test]
    fn peer_first_then_search_and_ambiguity() {
        let t = table(&[
            &[mr(0x1000, 0x1000, 0x1_0042, 1, true)],
            &[
                mr(0x1000, 0x1000, 0x2_0042, 1, true),
                // Duplicate registration record: one entry.
                mr(0x1000, 0x1000, 0x2_0042, 1, true),
                mr(0x9000, 0x100, 0x77, 1, true),
            ],
        ]);
        assert_eq!(t.entries.len(), 3);
        // Peer known: its region.
        assert!(matches!(
            t.lookup(Some(1), 0x1800, 0x42, 5),
            Lookup::Found {
                process: 1,
                how: How::QpPeer,
                ..
            }
        ));
        // Peer known, address outside its regions.
        assert_eq!(t.lookup(Some(1), 0x2000, 0x42, 5), Lookup::NoRegion);
        // Peer unknown: two processes match → ambiguous; a unique one is found.
        assert_eq!(t.lookup(None, 0x1800, 0x42, 5), Lookup::Ambiguous);
        assert!(matches!(
            t.lookup(None, 0x90ff, 0x77, 5),
            Lookup::Found {
                process: 1,
                how: How::Search,
                ..
            }
        ));
        assert_eq!(t.lookup(None, 0x9100, 0x77, 5), Lookup::NoRegion);
        assert_eq!(t.lookup(None, 0x9000, 0x78, 5), Lookup::NoRegion);
    }

    #[test]
    fn reregistration_prefers_the_live_region() {
        let t = table(&[&[
            mr(0x1000, 0x100, 0x5, 1, true),
            mr(0x1000, 0x100, 0x5, 10, false),
            mr(0x1000, 0x100, 0x5, 20, true),
        ]]);
        assert_eq!(t.entries.len(), 2);
        assert_eq!(t.entries[0].deregistered_ns, Some(10));
        let Lookup::Found { mr, .. } = t.lookup(Some(0), 0x1000, 5, 30) else {
            panic!()
        };
        assert_eq!(mr, 1);
        let Lookup::Found { mr, .. } = t.lookup(Some(0), 0x1000, 5, 5) else {
            panic!()
        };
        assert_eq!(mr, 0);
    }
}
