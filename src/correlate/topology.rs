//! Topology: which traced process is on the other side of each endpoint and operation.
//!
//! - UCX endpoints and connected libfabric endpoints carry the hash of the peer's address
//!   (`Peer::addr_hash`), which is one of the peer process's `own_addr_hashes`.
//! - libfabric RDM endpoints name their peer per operation by `fi_addr`; the endpoint's "av"
//!   updates map each `fi_addr` to the hash of the address inserted in the address vector.
//! - Verbs and devx QPs, and the owners of address hashes, are resolved by `agg::peers` (the one
//!   resolution the dashboard and `report` use too): a QP's peer by its address (port address
//!   and QPN), never by the QPN alone; each QP's own port address is its "local" update.

use std::collections::HashMap;

use super::FxMap;
use crate::agg::peers::{Peers, own_port};
use crate::event::{EndpointDef, Event, LOCAL_ADDR_STATE, Layer, Op};
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
    /// Verbs / devx QPs: their own port address (the `event::LOCAL_ADDR_STATE` update).
    pub local: Option<[u8; 16]>,
}

impl EpTopo {
    /// The endpoint's address vector names several traced processes.
    pub fn several_peers(&self) -> bool {
        self.peer.is_none() && {
            let mut it = self.av.values();
            it.next().is_some_and(|&first| it.any(|&p| p != first))
        }
    }

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
    /// Owners of address hashes and the QP index (the resolution shared with the dashboard).
    pub peers: Peers,
}

/// libfabric's FI_ADDR_UNSPEC, and the saturated value the preload stores in `aux` for it.
const FI_ADDR_UNSPEC: u64 = u64::MAX;
const AUX_UNSPEC: u16 = 0xffff;

impl Topology {
    pub fn build(procs: &[ProcessRecording]) -> Topology {
        let mut t = Topology::default();
        // Endpoints as their updates left them (the peer each connected to last); the address
        // vector entries of libfabric endpoints, resolved once the owners are known.
        let mut av: Vec<(usize, u32, u64, u64)> = Vec::new();
        for (i, p) in procs.iter().enumerate() {
            let mut eps: FxMap<u32, EpTopo> = FxMap::default();
            for d in &p.endpoints {
                let e = eps.entry(d.id).or_default();
                e.def = Some(d.clone());
            }
            for u in &p.updates {
                let e = eps.entry(u.id).or_default();
                let Some(peer) = &u.peer else { continue };
                if u.state == LOCAL_ADDR_STATE {
                    e.local = peer.gid.or(e.local);
                } else if u.state == "av" {
                    if let Some(n) = peer
                        .text
                        .strip_prefix("fi_addr ")
                        .and_then(|s| s.trim().parse::<u64>().ok())
                    {
                        av.push((i, u.id, n, peer.addr_hash));
                    }
                } else if let Some(d) = e.def.as_mut() {
                    d.peer = peer.clone();
                }
            }
            t.eps.push(eps);
        }
        t.peers = Peers::build(procs.iter().zip(&t.eps).map(|(p, eps)| {
            (
                &p.identity,
                eps.values()
                    .filter_map(|e| e.def.as_ref().map(|d| (d, own_port(d, e.local)))),
            )
        }));
        for (i, ep, fi_addr, hash) in av {
            if let Some(o) = t.peers.owner(hash)
                && let Some(e) = t.eps[i].get_mut(&ep)
            {
                e.av.insert(fi_addr, o);
            }
        }
        for (i, eps) in t.eps.iter_mut().enumerate() {
            for e in eps.values_mut() {
                let Some(d) = &e.def else { continue };
                // The address vector is resolved per operation below (`peer_of`).
                let peer = t.peers.of(i as u32, d, &[]);
                e.peer_ep = peer.qp;
                e.peer = peer.process;
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
