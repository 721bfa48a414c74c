//! Topology: which traced process is on the other side of each endpoint and operation.
//!
//! - UCX endpoints and connected libfabric endpoints carry the hash of the peer's address
//!   (`Peer::addr_hash`), which is one of the peer process's `own_addr_hashes`.
//! - libfabric RDM endpoints name their peer per operation by `fi_addr`; the endpoint's "av"
//!   updates map each `fi_addr` to the hash of the address inserted in the address vector.
//! - Verbs QPs: the local QPN (+ GID) of one side equals the remote QPN (+ GID) the other side
//!   connected to (`Peer::qpn`/`gid` after RTR); the preload hashes (GID, QPN) into
//!   `Peer::addr_hash` and the owner's `own_addr_hashes`, which decides across hosts.
//! - QPs whose hash names no traced process (devx QPs on a context the preload cannot read a
//!   GID from, such as an emulated NIC) are matched by QPN alone through [`QpIndex`]: QPNs are
//!   per device, so equal numbers on two hosts (or two NICs) are common, and the index only
//!   answers when the match is unambiguous.

use std::collections::HashMap;

use super::FxMap;
use crate::event::{EndpointDef, Event, Layer, Op};
use crate::trace::reader::ProcessRecording;

/// What the correlator knows of one endpoint.
#[derive(Clone, Debug, Default)]
pub struct EpTopo {
    pub def: Option<EndpointDef>,
    /// The peer process of a connected endpoint (index into the processes).
    pub peer: Option<u32>,
    /// libfabric: fi_addr → peer process.
    pub av: HashMap<u64, u32>,
    /// Verbs / devx QPs: the peer QP (process, endpoint) when it was traced.
    pub peer_ep: Option<(u32, u32)>,
}

impl EpTopo {
    /// The only process this endpoint talks to, when there is exactly one.
    pub fn single_peer(&self) -> Option<u32> {
        if let Some(p) = self.peer {
            return Some(p);
        }
        let mut it = self.av.values();
        let first = *it.next()?;
        it.all(|&p| p == first).then_some(first)
    }
}

/// Endpoints of every process, resolved to peer processes.
#[derive(Clone, Debug, Default)]
pub struct Topology {
    /// Per process: endpoint id → what is known.
    pub eps: Vec<FxMap<u32, EpTopo>>,
    /// addr_hash → owning process.
    pub owner: HashMap<u64, u32>,
    /// Address hashes claimed by more than one process (ignored for resolution).
    pub ambiguous: Vec<u64>,
}

/// libfabric's FI_ADDR_UNSPEC, and the saturated value the preload stores in `aux` for it.
const FI_ADDR_UNSPEC: u64 = u64::MAX;
const AUX_UNSPEC: u16 = 0xffff;

impl Topology {
    pub fn build(procs: &[ProcessRecording]) -> Topology {
        let mut t = Topology::default();
        let mut claims: HashMap<u64, u32> = HashMap::new();
        for (i, p) in procs.iter().enumerate() {
            for &h in &p.identity.own_addr_hashes {
                if h == 0 {
                    continue;
                }
                match claims.get(&h) {
                    Some(&o) if o != i as u32 => t.ambiguous.push(h),
                    _ => {
                        claims.insert(h, i as u32);
                    }
                }
            }
        }
        t.ambiguous.sort_unstable();
        t.ambiguous.dedup();
        for h in &t.ambiguous {
            claims.remove(h);
        }
        t.owner = claims;
        // Endpoints as their updates left them (the peer each connected to last).
        for p in procs {
            let mut eps: FxMap<u32, EpTopo> = FxMap::default();
            for d in &p.endpoints {
                let e = eps.entry(d.id).or_default();
                e.def = Some(d.clone());
            }
            for u in &p.updates {
                let e = eps.entry(u.id).or_default();
                let Some(peer) = &u.peer else { continue };
                if u.state == "av" {
                    if let Some(&o) = t.owner.get(&peer.addr_hash)
                        && let Some(n) = peer
                            .text
                            .strip_prefix("fi_addr ")
                            .and_then(|s| s.trim().parse::<u64>().ok())
                    {
                        e.av.insert(n, o);
                    }
                } else if let Some(d) = e.def.as_mut() {
                    d.peer = peer.clone();
                }
            }
            t.eps.push(eps);
        }
        // Peers: by address hash, and QPs by number.
        let mut qps = QpIndex::default();
        for (i, eps) in t.eps.iter().enumerate() {
            for d in eps.values().filter_map(|e| e.def.as_ref()) {
                if let Some(q) = d.qpn {
                    qps.add(i as u32, d.id, q, d.peer.qpn);
                }
            }
        }
        for (i, eps) in t.eps.iter_mut().enumerate() {
            for e in eps.values_mut() {
                let Some(d) = &e.def else { continue };
                let by_hash = t.owner.get(&d.peer.addr_hash).copied();
                let by_qpn = match (d.qpn, d.peer.qpn) {
                    (Some(local), Some(remote)) => qps.resolve(i as u32, local, remote, by_hash),
                    _ => None,
                };
                e.peer_ep = by_qpn;
                e.peer = by_hash.or(by_qpn.map(|(p, _)| p));
            }
        }
        t
    }

    pub fn ep(&self, proc: u32, ep: u32) -> Option<&EpTopo> {
        self.eps.get(proc as usize)?.get(&ep)
    }

    fn av_or_peer(e: &EpTopo, fi_addr: Option<u64>) -> Option<u32> {
        match fi_addr {
            Some(a) => e.av.get(&a).copied().or(e.peer),
            None => e.peer.or_else(|| e.single_peer()),
        }
    }

    /// The process an operation of `proc` moves data to or from (the other side).
    pub fn peer_of(&self, proc: u32, ev: &Event) -> Option<u32> {
        let e = self.ep(proc, ev.ep)?;
        let op = Op::from_u8(ev.op)?;
        match op.layer() {
            Layer::Libfabric => {
                // msg ops carry the fi_addr in `addr`; rma, tagged and atomic in `aux`.
                let fi = match op {
                    Op::OfiSend | Op::OfiRecv => Some(ev.addr).filter(|&a| a != FI_ADDR_UNSPEC),
                    _ => Some(ev.aux as u64).filter(|&a| a != AUX_UNSPEC as u64),
                };
                Self::av_or_peer(e, fi)
            }
            _ => e.peer,
        }
    }
}

/// Every traced QP by its local QPN, for matching a QP to the peer QP it connected to.
#[derive(Clone, Debug, Default)]
pub struct QpIndex {
    /// (process, endpoint, the QPN that QP connected to).
    qps: Vec<(u32, u32, Option<u32>)>,
    by_qpn: HashMap<u32, Vec<usize>>,
}

impl QpIndex {
    pub fn add(&mut self, proc: u32, ep: u32, qpn: u32, peer_qpn: Option<u32>) {
        let i = self.qps.len();
        self.qps.push((proc, ep, peer_qpn));
        self.by_qpn.entry(qpn).or_default().push(i);
    }

    /// The QP that QP `local` of `proc`, connected to QPN `remote`, talks to. Candidates are the
    /// QPs numbered `remote` that did not connect elsewhere (their own peer QPN is `local` or not
    /// known). The answer is the candidate in `known_peer` when the address hash already named
    /// the process; else the one in `proc` itself (a loopback connection, as on a single NIC);
    /// else the only process's. None when several processes qualify (equal QPNs on several
    /// hosts or NICs): a wrong peer is worse than none.
    pub fn resolve(
        &self,
        proc: u32,
        local: u32,
        remote: u32,
        known_peer: Option<u32>,
    ) -> Option<(u32, u32)> {
        let cands = self
            .by_qpn
            .get(&remote)?
            .iter()
            .map(|&i| self.qps[i])
            .filter(|x| x.2.is_none_or(|q| q == local));
        // Several QPs numbered alike in one process (a QPN reused after a destroy): the latest.
        let in_proc = |p: u32| cands.clone().rfind(|x| x.0 == p).map(|x| (x.0, x.1));
        if let Some(k) = known_peer {
            return in_proc(k);
        }
        if let Some(own) = in_proc(proc) {
            return Some(own);
        }
        let first = cands.clone().next()?.0;
        if cands.clone().all(|c| c.0 == first) {
            in_proc(first)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn qp_index_prefers_the_hash_then_loopback_then_a_unique_process() {
        let mut q = QpIndex::default();
        // Process 0: QP 0x10 → 0x20 (process 1) and QP 0x30 looped to itself.
        q.add(0, 1, 0x10, Some(0x20));
        q.add(0, 2, 0x30, Some(0x30));
        // Process 1: QP 0x20 → 0x10.
        q.add(1, 7, 0x20, Some(0x10));
        // Process 2 (another host) reuses QPN 0x30, looped to itself too.
        q.add(2, 3, 0x30, Some(0x30));
        // Process 3 and 4 both own a QP 0x40 with no known peer.
        q.add(3, 1, 0x40, None);
        q.add(4, 1, 0x40, None);

        assert_eq!(q.resolve(0, 0x10, 0x20, None), Some((1, 7)));
        assert_eq!(q.resolve(1, 0x20, 0x10, None), Some((0, 1)));
        // Loopback: each process's own QP, not the other host's equal number.
        assert_eq!(q.resolve(0, 0x30, 0x30, None), Some((0, 2)));
        assert_eq!(q.resolve(2, 0x30, 0x30, None), Some((2, 3)));
        // The address hash named process 1: only its QPs count.
        assert_eq!(q.resolve(0, 0x10, 0x20, Some(1)), Some((1, 7)));
        assert_eq!(q.resolve(0, 0x10, 0x20, Some(2)), None);
        // Two processes qualify: no answer rather than a wrong one.
        assert_eq!(q.resolve(0, 0x11, 0x40, None), None);
        // A QP numbered 0x20 that connected elsewhere is no candidate.
        assert_eq!(q.resolve(5, 0x99, 0x20, None), None);
        // Unknown QPN.
        assert_eq!(q.resolve(0, 0x10, 0x77, None), None);
    }
}
