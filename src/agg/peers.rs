//! Who is on the other side of an endpoint: the one answer that the dashboard, `report`,
//! `export`, `serve` and the correlator all use.
//!
//! - UCX endpoints and connected libfabric endpoints carry the hash of the peer's address
//!   (`Peer::addr_hash`), which is one of the peer process's `own_addr_hashes`.
//! - Verbs and devx QPs are addressed by (port address, QPN): the GID of a path with a GRH, the
//!   LID of an InfiniBand path without one (`event::lid_as_gid`), and the QP number. The preload
//!   hashes both sides the same way after RTR (`event::qp_addr_hash`), so a QP's
//!   `Peer::addr_hash` names the process owning the QP it connected to, across hosts.
//! - The peer QP itself is found by its number in [`QpIndex`], among the QPs whose own port
//!   address (the preload's `event::LOCAL_ADDR_STATE` update) is the peer's address: never by
//!   the QPN alone. QPNs are per device, so equal numbers on two hosts (or two NICs) are common:
//!   a client whose untraced server had its own QPN was shown talking to itself (issue 36). A
//!   QP whose own address is not known is matched only inside the process the hash named, or
//!   where the record has no address of the peer either (devx records made before addresses
//!   were: the number alone, loopback first, only when unambiguous, as they always were read).
//! - A peer that is not traced is named by its address ([`PeerAddr`]): `10.0.1.1 qp 0x10c`,
//!   `lid 3 qp 0x10c`, or the host of a traced process on that port address; never as a
//!   process.
//! - An address hash claimed by two processes (two runs in one record, a hash collision) names
//!   neither: a wrong peer in a matrix misleads more than a missing one.
//!
//! Processes are numbered by their position in the list `Peers::build` was given.

use std::collections::HashMap;

use crate::event::{EndpointDef, EndpointKind, Identity, PortText, port_addr_text, qp_addr_hash};

/// A port address: a GID, or a LID as `event::lid_as_gid` writes it.
pub type PortAddr = [u8; 16];

/// The owners of address hashes and the QPs of a list of processes.
#[derive(Clone, Debug, Default)]
pub struct Peers {
    /// addr_hash → owning process.
    owner: HashMap<u64, u32>,
    /// Address hashes claimed by more than one process (ignored for resolution), sorted.
    ambiguous: Vec<u64>,
    qps: QpIndex,
    /// Port address → a process whose QPs use it (for the host of an untraced peer on it);
    /// None when processes of different hosts claim it (a default GID on two machines).
    ports: HashMap<PortAddr, Option<u32>>,
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
    /// Verbs / devx QPs: the peer's address, traced or not.
    pub addr: Option<PeerAddr>,
}

impl EndpointPeer {
    /// Neither a traced process nor several: the peer is not traced (or not identified).
    pub fn untraced(&self) -> bool {
        self.process.is_none() && !self.several
    }
}

/// The address of a verbs / devx QP's peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr {
    /// Its port address (GID, or LID as `event::lid_as_gid` writes it), when the record has it.
    pub port: Option<PortAddr>,
    /// Its QP number.
    pub qpn: u32,
    /// A traced process whose QPs use that port address: the peer is on its host.
    pub host_of: Option<u32>,
}

impl PeerAddr {
    /// The port address alone: `10.0.1.1`, `lid 3`, `fe80::2c9:300:0:3`.
    pub fn port_text(&self) -> Option<String> {
        self.port.as_ref().map(port_addr_text)
    }

    /// How an untraced peer is named: `node1 qp 0x10c` on a known host, else `10.0.1.1 qp
    /// 0x10c` (`lid 3 qp 0x10c` on an InfiniBand path without a GRH), else `qp 0x10c`.
    pub fn text(&self, host: Option<&str>) -> String {
        match host {
            Some(h) => format!("{h} qp 0x{:x}", self.qpn),
            None => self.to_string(),
        }
    }
}

/// `10.0.1.1 qp 0x10c`, `lid 3 qp 0x10c`, `qp 0x10c` (no address in the record).
impl std::fmt::Display for PeerAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(g) = &self.port {
            write!(f, "{} ", PortText(g))?;
        }
        write!(f, "qp 0x{:x}", self.qpn)
    }
}

/// The own port address of QP endpoint `d`: `local`, what its `event::LOCAL_ADDR_STATE` update
/// said, else (records made before that update) the local GID its verbs RTR peer text names
/// (`... | local mlx5_0:1 guid ... qpn 0x10c gid ::ffff:10.0.2.1 mtu 4096`). None for other
/// endpoints, and where neither says (an old record's LID-routed or devx QP).
pub fn own_port(d: &EndpointDef, local: Option<PortAddr>) -> Option<PortAddr> {
    if !matches!(d.kind, EndpointKind::VerbsQp | EndpointKind::DevxQp) {
        return None;
    }
    local.or_else(|| port_from_rtr_text(&d.peer.text))
}

fn port_from_rtr_text(text: &str) -> Option<PortAddr> {
    let local = text.split(" | local ").nth(1)?;
    let g = local
        .split_whitespace()
        .skip_while(|w| *w != "gid")
        .nth(1)?;
    let g = g.parse::<std::net::Ipv6Addr>().ok()?.octets();
    (g != [0; 16]).then_some(g)
}

impl Peers {
    /// True when built from no process (a view of processes alone builds none).
    pub fn is_empty(&self) -> bool {
        self.owner.is_empty() && self.qps.is_empty()
    }

    /// Builds the owner map and the QP index from each process's identity and endpoints (as their
    /// updates left them: the peer each connected to last), each endpoint with its own port
    /// address where it is a QP whose address is known ([`own_port`]).
    pub fn build<'a, E>(procs: impl IntoIterator<Item = (&'a Identity, E)>) -> Peers
    where
        E: IntoIterator<Item = (&'a EndpointDef, Option<PortAddr>)>,
    {
        let mut claims: HashMap<u64, u32> = HashMap::new();
        let mut ambiguous = Vec::new();
        let mut qps = QpIndex::default();
        let mut ports: HashMap<PortAddr, Option<u32>> = HashMap::new();
        let mut hosts: Vec<&str> = Vec::new();
        for (i, (identity, endpoints)) in procs.into_iter().enumerate() {
            let i = i as u32;
            hosts.push(&identity.host);
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
            for (d, port) in endpoints {
                if let Some(q) = d.qpn {
                    qps.add(i, d.id, q, d.peer.qpn, port);
                }
                if let Some(g) = port {
                    let e = ports.entry(g).or_insert(Some(i));
                    if e.is_some_and(|o| hosts[o as usize] != identity.host) {
                        *e = None;
                    }
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
            ports,
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

    /// A traced process whose QPs use port address `g` (None: none, or processes of several
    /// hosts).
    pub fn on_port(&self, g: &PortAddr) -> Option<u32> {
        self.ports.get(g).copied().flatten()
    }

    /// The other side of endpoint `def` of process `proc`; `av` holds the address hashes of its
    /// address vector (libfabric endpoints that name their peer per operation), if any.
    pub fn of(&self, proc: u32, def: &EndpointDef, av: &[u64]) -> EndpointPeer {
        let by_hash = self.owner(def.peer.addr_hash);
        let qp = match (def.qpn, def.peer.qpn) {
            (Some(local), Some(remote)) => {
                let confirmed = def.peer.port_addr().map(|_| def.peer.addr_hash);
                self.qps.resolve(proc, local, remote, confirmed, by_hash)
            }
            _ => None,
        };
        let addr = def.peer.qpn.map(|qpn| {
            let port = def.peer.port_addr();
            PeerAddr {
                port,
                qpn,
                host_of: port.and_then(|g| self.on_port(&g)),
            }
        });
        let mut out = EndpointPeer {
            process: by_hash.or(qp.map(|(p, _)| p)),
            qp,
            by_hash,
            several: false,
            addr,
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

/// One traced QP in the index.
#[derive(Clone, Copy, Debug)]
struct QpEntry {
    proc: u32,
    ep: u32,
    /// The QPN this QP connected to.
    peer_qpn: Option<u32>,
    /// Its own port address, when known.
    port: Option<PortAddr>,
}

/// Every traced QP by its local QPN, for matching a QP to the peer QP it connected to.
#[derive(Clone, Debug, Default)]
pub struct QpIndex {
    qps: Vec<QpEntry>,
    by_qpn: HashMap<u32, Vec<usize>>,
}

impl QpIndex {
    pub fn is_empty(&self) -> bool {
        self.qps.is_empty()
    }

    /// QP `ep` of `proc`, numbered `qpn`, connected to QPN `peer_qpn`, on port address `port`.
    pub fn add(
        &mut self,
        proc: u32,
        ep: u32,
        qpn: u32,
        peer_qpn: Option<u32>,
        port: Option<PortAddr>,
    ) {
        let i = self.qps.len();
        self.qps.push(QpEntry {
            proc,
            ep,
            peer_qpn,
            port,
        });
        self.by_qpn.entry(qpn).or_default().push(i);
    }

    /// The QP that QP `local` of `proc`, connected to QPN `remote`, talks to. `peer_hash` is
    /// the peer's address as the record confirms it (`event::qp_addr_hash` of the peer's port
    /// address and `remote`: `Peer::port_addr` checked it), None where the record has no
    /// address of the peer that its hash confirms (devx QPs recorded before addresses were).
    ///
    /// Candidates are the QPs numbered `remote` that did not connect elsewhere (their own peer
    /// QPN is `local` or not known) and whose own port address is the peer's: a QP whose
    /// address is known and another, or not known while the peer's is, is no candidate,
    /// whatever its number. Only where neither address is in the record (those older devx
    /// records: the fixtures of the GPU machine) does the number decide, among QPs of unknown
    /// address. When the address hash already named the process (`known_peer`), the answer is
    /// its QP numbered `remote` (unless that QP's address is known and another); else the
    /// candidate in `proc` itself (a loopback connection); else the only process's. None when
    /// several processes qualify (two runs in one record): a wrong peer is worse than none.
    pub fn resolve(
        &self,
        proc: u32,
        local: u32,
        remote: u32,
        peer_hash: Option<u64>,
        known_peer: Option<u32>,
    ) -> Option<(u32, u32)> {
        let at_peer = |x: &QpEntry| match (peer_hash, x.port) {
            (Some(h), Some(g)) => qp_addr_hash(&g, remote) == h,
            (Some(_), None) | (None, Some(_)) => false,
            // Neither address in the record: the number alone, as such records always were.
            (None, None) => true,
        };
        let cands = self
            .by_qpn
            .get(&remote)?
            .iter()
            .map(|&i| self.qps[i])
            .filter(|x| x.peer_qpn.is_none_or(|q| q == local));
        // Several QPs numbered alike in one process (a QPN reused after a destroy): the latest.
        let found = |x: QpEntry| (x.proc, x.ep);
        if let Some(k) = known_peer {
            return cands
                .clone()
                .rfind(|x| x.proc == k && (x.port.is_none() || at_peer(x)))
                .map(found);
        }
        let cands = cands.filter(at_peer);
        if let Some(own) = cands.clone().rfind(|x| x.proc == proc) {
            return Some(found(own));
        }
        let first = cands.clone().next()?.proc;
        if cands.clone().all(|c| c.proc == first) {
            cands.clone().next_back().map(found)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Layer, Peer, lid_as_gid};

    /// `::ffff:10.0.h.1`, the GID of simulated host h.
    fn gid(h: u8) -> PortAddr {
        let mut g = [0u8; 16];
        g[10..12].copy_from_slice(&[0xff, 0xff]);
        g[12..].copy_from_slice(&[10, 0, h, 1]);
        g
    }

    #[test]
    fn qp_index_needs_the_peer_address_then_prefers_the_hash_then_loopback() {
        let (a, b, c) = (gid(1), gid(2), gid(3));
        let mut q = QpIndex::default();
        // Process 0 on host a: QP 0x10 → 0x20 (process 1) and QP 0x30 looped to itself.
        q.add(0, 1, 0x10, Some(0x20), Some(a));
        q.add(0, 2, 0x30, Some(0x30), Some(a));
        // Process 1 on host b: QP 0x20 → 0x10.
        q.add(1, 7, 0x20, Some(0x10), Some(b));
        // Process 2 on host c reuses QPN 0x30, looped to itself too.
        q.add(2, 3, 0x30, Some(0x30), Some(c));
        // Processes 3 and 4, both on host c (two runs in one record): a QP 0x40, no known peer.
        q.add(3, 1, 0x40, None, Some(c));
        q.add(4, 1, 0x40, None, Some(c));
        // Process 5: a QP 0x50 whose own address is not known.
        q.add(5, 1, 0x50, None, None);

        let h = |g: &PortAddr, q: u32| Some(qp_addr_hash(g, q));
        assert_eq!(q.resolve(0, 0x10, 0x20, h(&b, 0x20), None), Some((1, 7)));
        assert_eq!(q.resolve(1, 0x20, 0x10, h(&a, 0x10), None), Some((0, 1)));
        // Loopback: each process's own QP, not the other host's equal number.
        assert_eq!(q.resolve(0, 0x30, 0x30, h(&a, 0x30), None), Some((0, 2)));
        assert_eq!(q.resolve(2, 0x30, 0x30, h(&c, 0x30), None), Some((2, 3)));
        // The right number at another address: nobody (the peer is not traced).
        assert_eq!(q.resolve(0, 0x10, 0x20, h(&c, 0x20), None), None);
        assert_eq!(q.resolve(0, 0x30, 0x30, h(&b, 0x30), None), None);
        // No address to check against: the number alone names nobody.
        assert_eq!(q.resolve(0, 0x11, 0x50, h(&a, 0x50), None), None);
        // No peer address in the record either (a devx record from before addresses): only QPs
        // of unknown address qualify, by number, as such records always did.
        assert_eq!(q.resolve(0, 0x10, 0x20, None, None), None);
        assert_eq!(q.resolve(0, 0x11, 0x50, None, None), Some((5, 1)));
        q.add(7, 2, 0x60, Some(0x60), None);
        q.add(8, 2, 0x60, Some(0x60), None);
        assert_eq!(
            q.resolve(7, 0x60, 0x60, None, None),
            Some((7, 2)),
            "loopback"
        );
        assert_eq!(q.resolve(9, 0x61, 0x60, None, None), None, "two processes");
        // The address hash named process 1: only its QPs count; one of unknown address too.
        assert_eq!(q.resolve(0, 0x10, 0x20, h(&b, 0x20), Some(1)), Some((1, 7)));
        assert_eq!(q.resolve(0, 0x10, 0x20, h(&b, 0x20), Some(2)), None);
        assert_eq!(q.resolve(0, 0x11, 0x50, h(&b, 0x50), Some(5)), Some((5, 1)));
        // Two processes qualify: no answer rather than a wrong one.
        assert_eq!(q.resolve(0, 0x11, 0x40, h(&c, 0x40), None), None);
        // A QP numbered 0x20 that connected elsewhere is no candidate.
        assert_eq!(q.resolve(6, 0x99, 0x20, h(&b, 0x20), None), None);
        // Unknown QPN.
        assert_eq!(q.resolve(0, 0x10, 0x77, h(&b, 0x77), None), None);
    }

    fn ident(host: &str, own: &[u64]) -> Identity {
        Identity {
            host: host.into(),
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

    /// A QP `qpn` connected to QP `peer_qpn` at port address `peer`, as the preload defines it
    /// after RTR.
    fn qp(id: u32, qpn: u32, peer: PortAddr, peer_qpn: u32) -> EndpointDef {
        let mut d = ep(id, qp_addr_hash(&peer, peer_qpn), Some(qpn), Some(peer_qpn));
        d.peer.gid = Some(peer);
        d
    }

    fn with_ports(
        eps: &[(EndpointDef, Option<PortAddr>)],
    ) -> impl Iterator<Item = (&EndpointDef, Option<PortAddr>)> {
        eps.iter().map(|(d, p)| (d, *p))
    }

    #[test]
    fn hashes_claimed_twice_name_nobody() {
        let a = ident("a", &[0xa, 0xc]);
        let b = ident("b", &[0xb, 0xc]);
        let none: [(EndpointDef, Option<PortAddr>); 0] = [];
        let p = Peers::build([(&a, with_ports(&none)), (&b, with_ports(&none))]);
        assert_eq!(p.owner(0xa), Some(0));
        assert_eq!(p.owner(0xb), Some(1));
        assert_eq!(p.owner(0xc), None);
        assert_eq!(p.owner(0), None);
        assert_eq!(p.ambiguous(), &[0xc]);
    }

    #[test]
    fn endpoint_peer_by_hash_then_by_qpn_at_the_address() {
        let (ga, gb) = (gid(1), gid(2));
        // a's QP 0x11 added no own address (a devx QP whose GID the preload could not read)
        // but its own port address is known; b's QP 0x21 connected to it.
        let a = ident("a", &[qp_addr_hash(&ga, 0x10)]);
        let b = ident("b", &[qp_addr_hash(&gb, 0x20), qp_addr_hash(&gb, 0x21)]);
        let a_eps = [
            (qp(1, 0x10, gb, 0x20), Some(ga)),
            (qp(2, 0x11, gb, 0x21), Some(ga)),
        ];
        let b_eps = [
            (qp(7, 0x20, ga, 0x10), Some(gb)),
            (qp(8, 0x21, ga, 0x11), Some(gb)),
        ];
        let p = Peers::build([(&a, with_ports(&a_eps)), (&b, with_ports(&b_eps))]);
        let by_hash = p.of(0, &a_eps[0].0, &[]);
        assert_eq!(by_hash.process, Some(1));
        assert_eq!(by_hash.by_hash, Some(1));
        assert_eq!(by_hash.qp, Some((1, 7)));
        let by_qpn = p.of(1, &b_eps[1].0, &[]);
        assert_eq!(by_qpn.process, Some(0));
        assert_eq!(by_qpn.by_hash, None);
        assert_eq!(by_qpn.qp, Some((0, 2)));
        // An endpoint without a peer of its own: its address vector decides.
        let rdm = ep(3, 0, None, None);
        let b2 = ident("b", &[0xb]);
        let c = ident("c", &[0xc]);
        let none: [(EndpointDef, Option<PortAddr>); 0] = [];
        let p3 = Peers::build([
            (&a, with_ports(&a_eps)),
            (&b2, with_ports(&none)),
            (&c, with_ports(&none)),
        ]);
        assert_eq!(p3.of(0, &rdm, &[0xb, 0xb]).process, Some(1));
        let many = p3.of(0, &rdm, &[0xb, 0xc]);
        assert!(many.several && many.process.is_none() && !many.untraced());
        let gone = p3.of(0, &rdm, &[0xdead]);
        assert!(gone.untraced());
        assert_eq!(gone.addr, None);
    }

    /// Issue 36: ib_write_bw between simulated hosts 1 (server) and 2 (client), the server
    /// untraced; both QPs are numbered 0x10c. The client's QP connected to 10.0.1.1 qp 0x10c:
    /// the number alone named the client itself.
    #[test]
    fn equal_qpns_on_two_hosts_with_the_peer_untraced() {
        let (srv, cli) = (gid(1), gid(2));
        let client = ident("h2", &[qp_addr_hash(&cli, 0x10c)]);
        let c_eps = [(qp(1, 0x10c, srv, 0x10c), Some(cli))];
        let p = Peers::build([(&client, with_ports(&c_eps))]);
        let x = p.of(0, &c_eps[0].0, &[]);
        assert_eq!((x.process, x.qp, x.by_hash), (None, None, None));
        assert!(x.untraced());
        let addr = x.addr.expect("the peer's address");
        assert_eq!(
            (addr.port, addr.qpn, addr.host_of),
            (Some(srv), 0x10c, None)
        );
        assert_eq!(addr.text(None), "10.0.1.1 qp 0x10c");

        // The same in a record made before the "local" update: the RTR text names the local
        // GID, and a QP whose address is not known at all is no candidate either.
        let mut old = c_eps[0].0.clone();
        old.peer.text = "qpn 0x10c gid ::ffff:10.0.1.1 lid 0 | local mlx5_0:1 guid \
             02c903000a000201 qpn 0x10c gid ::ffff:10.0.2.1 mtu 4096"
            .into();
        assert_eq!(own_port(&old, None), Some(cli));
        for port in [own_port(&old, None), None] {
            let eps = [(old.clone(), port)];
            let p = Peers::build([(&client, with_ports(&eps))]);
            let x = p.of(0, &eps[0].0, &[]);
            assert_eq!((x.process, x.qp), (None, None), "own port {port:?}");
        }

        // A traced process of host 1 (another program, another QP) names the host.
        let other = ident("h1", &[qp_addr_hash(&srv, 0x200)]);
        let o_eps = [(qp(4, 0x200, gid(9), 0x300), Some(srv))];
        let p = Peers::build([(&client, with_ports(&c_eps)), (&other, with_ports(&o_eps))]);
        let x = p.of(0, &c_eps[0].0, &[]);
        assert!(x.untraced());
        let addr = x.addr.expect("address");
        assert_eq!(addr.host_of, Some(1));
        assert_eq!(addr.text(Some("h1")), "h1 qp 0x10c");

        // Both traced: each QP's peer is the other process's QP.
        let server = ident("h1", &[qp_addr_hash(&srv, 0x10c)]);
        let s_eps = [(qp(1, 0x10c, cli, 0x10c), Some(srv))];
        let p = Peers::build([(&client, with_ports(&c_eps)), (&server, with_ports(&s_eps))]);
        let x = p.of(0, &c_eps[0].0, &[]);
        assert_eq!((x.process, x.qp), (Some(1), Some((1, 1))));
        let y = p.of(1, &s_eps[0].0, &[]);
        assert_eq!((y.process, y.qp), (Some(0), Some((0, 1))));
    }

    /// Issue 40 item 6: two processes on simulated hosts 1 and 2 (NVSHMEM's PEs, ibgda_host),
    /// each with an RC QP to the other and a loopback QP connected to itself; QPNs collide
    /// across the hosts (0x100 ↔ 0x100, both loopbacks 0x103). Each loopback QP's peer is its
    /// own process and its own QP, never the other host's equal number nor nobody; and so in a
    /// record that has no address at all (devx records of the GPU machine), by number alone.
    #[test]
    fn a_qp_connected_to_itself_is_its_own_process_across_hosts() {
        let (g1, g2) = (gid(1), gid(2));
        let p1 = ident("h1", &[qp_addr_hash(&g1, 0x100), qp_addr_hash(&g1, 0x103)]);
        let p2 = ident("h2", &[qp_addr_hash(&g2, 0x100), qp_addr_hash(&g2, 0x103)]);
        let e1 = [
            (qp(1, 0x100, g2, 0x100), Some(g1)),
            (qp(2, 0x103, g1, 0x103), Some(g1)),
        ];
        let e2 = [
            (qp(1, 0x100, g1, 0x100), Some(g2)),
            (qp(2, 0x103, g2, 0x103), Some(g2)),
        ];
        let p = Peers::build([(&p1, with_ports(&e1)), (&p2, with_ports(&e2))]);
        for (me, eps) in [(0u32, &e1), (1, &e2)] {
            let other = 1 - me;
            let rc = p.of(me, &eps[0].0, &[]);
            assert_eq!(
                (rc.process, rc.qp),
                (Some(other), Some((other, 1))),
                "RC of {me}"
            );
            let lo = p.of(me, &eps[1].0, &[]);
            assert_eq!(
                (lo.process, lo.qp, lo.by_hash),
                (Some(me), Some((me, 2)), Some(me)),
                "loopback of {me}"
            );
            assert!(!lo.untraced());
            let addr = lo.addr.expect("address");
            assert_eq!((addr.port, addr.qpn), (Some(eps[1].1.unwrap()), 0x103));
        }
        // Without the own-address hashes (a hash that names nobody, as before the preload added
        // them for devx QPs): the QP index still finds the QP at its own address.
        let (q1, q2) = (ident("h1", &[]), ident("h2", &[]));
        let p = Peers::build([(&q1, with_ports(&e1)), (&q2, with_ports(&e2))]);
        for (me, eps) in [(0u32, &e1), (1, &e2)] {
            let lo = p.of(me, &eps[1].0, &[]);
            assert_eq!((lo.process, lo.qp), (Some(me), Some((me, 2))), "{me}");
        }
        // A record without any address (peer GID, own port, hashes): the number alone, and
        // the loopback is the process's own QP rather than the other host's 0x103.
        let bare = |id, qpn, peer_qpn| (ep(id, 0, Some(qpn), Some(peer_qpn)), None);
        let b1 = [bare(1, 0x100, 0x100), bare(2, 0x103, 0x103)];
        let b2 = [bare(1, 0x100, 0x100), bare(2, 0x103, 0x103)];
        let p = Peers::build([(&q1, with_ports(&b1)), (&q2, with_ports(&b2))]);
        for (me, eps) in [(0u32, &b1), (1, &b2)] {
            let lo = p.of(me, &eps[1].0, &[]);
            assert_eq!((lo.process, lo.qp), (Some(me), Some((me, 2))), "bare {me}");
        }
    }

    /// The same on an InfiniBand port without a GRH: LIDs 12 (server, untraced) and 13.
    #[test]
    fn equal_qpns_by_lid_with_the_peer_untraced() {
        let (srv, cli) = (lid_as_gid(12), lid_as_gid(13));
        let client = ident("h12", &[qp_addr_hash(&cli, 0x101)]);
        let c_eps = [(qp(1, 0x101, srv, 0x101), Some(cli))];
        let p = Peers::build([(&client, with_ports(&c_eps))]);
        let x = p.of(0, &c_eps[0].0, &[]);
        assert!(x.untraced() && x.qp.is_none());
        assert_eq!(x.addr.expect("address").text(None), "lid 12 qp 0x101");
    }

    #[test]
    fn addresses_read_as_people_write_them() {
        let mut fe80 = [0u8; 16];
        fe80[..2].copy_from_slice(&[0xfe, 0x80]);
        fe80[8..12].copy_from_slice(&[0x02, 0xc9, 0x03, 0x00]);
        fe80[15] = 3;
        for (g, text) in [
            (gid(1), "10.0.1.1 qp 0x10c"),
            (lid_as_gid(3), "lid 3 qp 0x10c"),
            (fe80, "fe80::2c9:300:0:3 qp 0x10c"),
        ] {
            let a = PeerAddr {
                port: Some(g),
                qpn: 0x10c,
                host_of: None,
            };
            assert_eq!(a.text(None), text);
        }
        // A peer GID that is not what the hash was made of (a devx record of a LID-routed
        // path before the fix) is no address.
        let mut d = qp(1, 0x10, gid(1), 0x20);
        d.peer.addr_hash = qp_addr_hash(&lid_as_gid(5), 0x20);
        let x = Peers::default().of(0, &d, &[]);
        assert_eq!(x.addr.expect("address").text(None), "qp 0x20");
    }
}
