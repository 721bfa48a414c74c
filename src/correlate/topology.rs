//! Topology: which traced process is on the other side of each endpoint and operation.
//!
//! - UCX endpoints and connected libfabric endpoints carry the hash of the peer's address
//!   (`Peer::addr_hash`), which is one of the peer process's `own_addr_hashes`.
//! - libfabric RDM endpoints name their peer per operation by `fi_addr`; the endpoint's "av"
//!   updates map each `fi_addr` to the hash of the address inserted in the address vector.
//! - Verbs QPs: the local QPN (+ GID) of one side equals the remote QPN (+ GID) the other side
//!   connected to (`Peer::qpn`/`gid` after RTR).

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
        // Verbs: (qpn, gid) → process, for QPs.
        let mut qp_owner: HashMap<(u32, Option<[u8; 16]>), u32> = HashMap::new();
        for (i, p) in procs.iter().enumerate() {
            for d in &p.endpoints {
                if let Some(q) = d.qpn {
                    qp_owner.insert((q, None), i as u32);
                }
            }
        }
        for (i, p) in procs.iter().enumerate() {
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
            for e in eps.values_mut() {
                let Some(d) = &e.def else { continue };
                e.peer = t.owner.get(&d.peer.addr_hash).copied().or_else(|| {
                    // A QP connected to a QPN that another traced process owns. Without GIDs on
                    // both sides the QPN alone decides, and only when it is not our own.
                    d.peer
                        .qpn
                        .and_then(|q| qp_owner.get(&(q, None)).copied())
                        .filter(|&o| o != i as u32)
                });
            }
            t.eps.push(eps);
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
