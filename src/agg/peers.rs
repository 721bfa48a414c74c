//! Who is on the other side of an endpoint: the one answer that the dashboard, `report`,
//! `export` and the correlator all use.
//!
//! - UCX endpoints and connected libfabric endpoints carry the hash of the peer's address
//!   (`Peer::addr_hash`), which is one of the peer process's `own_addr_hashes`.
//! - Verbs QPs: the preload hashes (GID, QPN) of both sides the same way after RTR, so a QP's
//!   `Peer::addr_hash` names the process owning the QP it connected to, across hosts.
//! - QPs whose hash names no traced process (devx QPs on a context the preload cannot read a GID
//!   from, such as an emulated NIC) are matched by QPN alone through [`QpIndex`]: QPNs are per
//!   device, so equal numbers on two hosts (or two NICs) are common, and the index answers only
//!   when the match is unambiguous.
//! - An address hash claimed by two processes (two runs in one record, a hash collision) names
//!   neither: a wrong peer in a matrix misleads more than a missing one.
//!
//! Processes are numbered by their position in the list `Peers::build` was given.

use std::collections::HashMap;

use crate::event::{EndpointDef, Identity};

/// The owners of address hashes and the QPs of a list of processes.
#[derive(Clone, Debug, Default)]
pub struct Peers {
    /// addr_hash → owning process.
    owner: HashMap<u64, u32>,
    /// Address hashes claimed by more than one process (ignored for resolution), sorted.
    ambiguous: Vec<u64>,
    qps: QpIndex,
}

/// The other side of one endpoint.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EndpointPeer {
    /// The peer process: by address hash, else the process of the peer QP, else the one process
    /// behind every address in the endpoint's address vector.
    pub process: Option<u32>,
    /// Verbs / devx QPs: the peer QP (process, endpoint) when it was traced.
    pub qp: Option<(u32, u32)>,
    /// The process the address hash named (without the QPN match).
    pub by_hash: Option<u32>,
    /// The endpoint talks to several traced processes (a libfabric RDM endpoint): its counters
    /// cannot say which bytes went where.
    pub several: bool,
}

impl EndpointPeer {
    /// Neither a traced process nor several: the peer is not traced (or not identified).
    pub fn untraced(&self) -> bool {
        self.process.is_none() && !self.several
    }
}

impl Peers {
    /// True when built from no process (a view of processes alone builds none).
    pub fn is_empty(&self) -> bool {
        self.owner.is_empty() && self.qps.is_empty()
    }

    /// Builds the owner map and the QP index from each process's identity and endpoints (as their
    /// updates left them: the peer each connected to last).
    pub fn build<'a, E>(procs: impl IntoIterator<Item = (&'a Identity, E)>) -> Peers
    where
        E: IntoIterator<Item = &'a EndpointDef>,
    {
        let mut claims: HashMap<u64, u32> = HashMap::new();
        let mut ambiguous = Vec::new();
        let mut qps = QpIndex::default();
        for (i, (identity, endpoints)) in procs.into_iter().enumerate() {
            let i = i as u32;
            for &h in &identity.own_addr_hashes {
                if h == 0 {
                    continue;
                }
                match claims.get(&h) {
                    Some(&o) if o != i => ambiguous.push(h),
                    _ => {
                        claims.insert(h, i);
                    }
                }
            }
            for d in endpoints {
                if let Some(q) = d.qpn {
                    qps.add(i, d.id, q, d.peer.qpn);
                }
            }
        }
        ambiguous.sort_unstable();
        ambiguous.dedup();
        for h in &ambiguous {
            claims.remove(h);
        }
        Peers {
            owner: claims,
            ambiguous,
            qps,
        }
    }

    /// The process owning `addr_hash` (None for 0, unknown or ambiguous hashes).
    pub fn owner(&self, addr_hash: u64) -> Option<u32> {
        self.owner.get(&addr_hash).copied()
    }

    /// Address hashes claimed by more than one process, sorted.
    pub fn ambiguous(&self) -> &[u64] {
        &self.ambiguous
    }

    /// The other side of endpoint `def` of process `proc`; `av` holds the address hashes of its
    /// address vector (libfabric endpoints that name their peer per operation), if any.
    pub fn of(&self, proc: u32, def: &EndpointDef, av: &[u64]) -> EndpointPeer {
        let by_hash = self.owner(def.peer.addr_hash);
        let qp = match (def.qpn, def.peer.qpn) {
            (Some(local), Some(remote)) => self.qps.resolve(proc, local, remote, by_hash),
            _ => None,
        };
        let mut out = EndpointPeer {
            process: by_hash.or(qp.map(|(p, _)| p)),
            qp,
            by_hash,
            several: false,
        };
        if out.process.is_none() {
            let mut owners = av.iter().filter_map(|h| self.owner(*h));
            if let Some(first) = owners.next() {
                if owners.all(|o| o == first) {
                    out.process = Some(first);
                } else {
                    out.several = true;
                }
            }
        }
        out
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
    pub fn is_empty(&self) -> bool {
        self.qps.is_empty()
    }

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
    use crate::event::{EndpointKind, Layer, Peer};

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

    fn ident(own: &[u64]) -> Identity {
        Identity {
            own_addr_hashes: own.to_vec(),
            ..Default::default()
        }
    }

    fn ep(id: u32, hash: u64, qpn: Option<u32>, peer_qpn: Option<u32>) -> EndpointDef {
        EndpointDef {
            id,
            layer: Layer::Ibverbs,
            kind: EndpointKind::VerbsQp,
            label: String::new(),
            transport: String::new(),
            peer: Peer {
                addr_hash: hash,
                qpn: peer_qpn,
                ..Default::default()
            },
            qpn,
            gpu: None,
            created_ns: 0,
        }
    }

    #[test]
    fn hashes_claimed_twice_name_nobody() {
        let a = ident(&[0xa, 0xc]);
        let b = ident(&[0xb, 0xc]);
        let none: [EndpointDef; 0] = [];
        let p = Peers::build([(&a, none.iter()), (&b, none.iter())]);
        assert_eq!(p.owner(0xa), Some(0));
        assert_eq!(p.owner(0xb), Some(1));
        assert_eq!(p.owner(0xc), None);
        assert_eq!(p.owner(0), None);
        assert_eq!(p.ambiguous(), &[0xc]);
    }

    #[test]
    fn endpoint_peer_by_hash_then_by_qpn() {
        let a = ident(&[0xa]);
        let b = ident(&[0xb]);
        let a_eps = [
            ep(1, 0xb, Some(0x10), Some(0x20)),
            ep(2, 0, Some(0x11), Some(0x21)),
        ];
        let b_eps = [
            ep(7, 0xa, Some(0x20), Some(0x10)),
            ep(8, 0, Some(0x21), Some(0x11)),
        ];
        let p = Peers::build([(&a, a_eps.iter()), (&b, b_eps.iter())]);
        let by_hash = p.of(0, &a_eps[0], &[]);
        assert_eq!(by_hash.process, Some(1));
        assert_eq!(by_hash.by_hash, Some(1));
        assert_eq!(by_hash.qp, Some((1, 7)));
        let by_qpn = p.of(1, &b_eps[1], &[]);
        assert_eq!(by_qpn.process, Some(0));
        assert_eq!(by_qpn.by_hash, None);
        assert_eq!(by_qpn.qp, Some((0, 2)));
        // An endpoint without a peer of its own: its address vector decides.
        let rdm = ep(3, 0, None, None);
        assert_eq!(p.of(0, &rdm, &[0xb, 0xb]).process, Some(1));
        let c = ident(&[0xc]);
        let p3 = Peers::build([(&a, a_eps.iter()), (&b, b_eps.iter()), (&c, [].iter())]);
        let many = p3.of(0, &rdm, &[0xb, 0xc]);
        assert!(many.several && many.process.is_none() && !many.untraced());
        let gone = p3.of(0, &rdm, &[0xdead]);
        assert!(gone.untraced());
    }
}
