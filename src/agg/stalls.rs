//! Stalled edges (issue 36): a QP with send work outstanding and no completion for longer than
//! the threshold, named with its process (host, rank, pid), its peer and its queue. One per edge
//! (a process and the peer its QPs talk to): several stalled QPs of one process to one peer are
//! one edge, its first QP named and the others counted. The dashboard's first warning, the
//! headless run's start/clear lines (`StallWatch`) and the JSON all read [`stalls`].
//!
//! Not a stall: a QP in error (its work is flushed: the failed-operations warning says so), a
//! destroyed one, one whose completions sigmatop cannot see (an extended CQ), a process that has
//! exited, and a process that stopped reporting (it is silent: its own numbers stand still; the
//! others' view of it is what says where they wait).

use std::collections::BTreeMap;

use super::at::ModelAt;
use super::peers::Peers;
use crate::queue::QueueState;

/// A process that stopped reporting (silent: `agg::waits::silent_after`, 1 s at the default
/// 250 ms snapshots): its queues are not judged.
pub use super::waits::SILENT_NS;

/// Who is on the other side of a stalled edge.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PeerName {
    /// A traced process: its host, rank and pid.
    Process {
        host: String,
        rank: Option<u32>,
        pid: u32,
    },
    /// Not traced: its address as the QP connected to it (`10.0.1.1 qp 0x10c`).
    Address(String),
    /// Not known (the QP never reached RTR with a peer sigmatop could read).
    Unknown,
}

impl PeerName {
    /// As a warning names the far end: host and rank ("node2 r1"), host and pid without a rank,
    /// the address of an untraced peer.
    pub fn short(&self) -> String {
        match self {
            PeerName::Process {
                host,
                rank: Some(r),
                ..
            } => format!("{host} r{r}"),
            _ => self.text(),
        }
    }

    /// "node2 r3 pid 4711", "10.0.1.1 qp 0x10c", "an unknown peer".
    pub fn text(&self) -> String {
        match self {
            PeerName::Process { host, rank, pid } => match rank {
                Some(r) => format!("{host} r{r} pid {pid}"),
                None => format!("{host} pid {pid}"),
            },
            PeerName::Address(a) => a.clone(),
            PeerName::Unknown => "an unknown peer".into(),
        }
    }
}

/// One stalled edge at the view time.
#[derive(Clone, Debug, PartialEq)]
pub struct Stall {
    /// Index of the process in `ModelAt::procs`.
    pub proc: u32,
    pub host: String,
    pub rank: Option<u32>,
    pub pid: u32,
    pub peer: PeerName,
    /// The first stalled QP of the edge (lowest QPN): its endpoint, QPN, queue.
    pub ep: u32,
    pub qpn: Option<u32>,
    pub queue: QueueState,
    /// Stalled QPs of the edge, the first one included.
    pub qps: u32,
    /// Send work requests outstanding over the edge's stalled QPs.
    pub outstanding: u64,
    /// The longest time without a completion among them (ns, at the view time).
    pub stalled_ns: u64,
}

impl Stall {
    /// "node1 r0 pid 4711": the process as warnings name it.
    pub fn who(&self) -> String {
        match self.rank {
            Some(r) => format!("{} r{r} pid {}", self.host, self.pid),
            None => format!("{} pid {}", self.host, self.pid),
        }
    }

    /// The warning's text, short enough for an 80-column terminal: "stalled QP 0x107 node1 r0
    /// pid 4711 → node2 r1: 12 WRs, none done in 4.1s" (the peer by host and rank, by pid
    /// without a rank, by address when it is not traced; "+2" for more stalled QPs of the edge).
    pub fn text(&self) -> String {
        let qp = match self.qpn {
            Some(n) => format!("QP 0x{n:x}"),
            None => format!("endpoint {}", self.ep),
        };
        let more = if self.qps > 1 {
            format!(" +{}", self.qps - 1)
        } else {
            String::new()
        };
        let when = if self.queue.sq_completed == 0 {
            format!(
                "none done since posted {:.1}s ago",
                self.queue.sq_oldest_ns as f64 / 1e9
            )
        } else {
            format!("none done in {:.1}s", self.stalled_ns as f64 / 1e9)
        };
        format!(
            "stalled {qp}{more} {} → {}: {} WR{}, {when}",
            self.who(),
            self.peer.short(),
            crate::agg::count_text(self.outstanding),
            if self.outstanding == 1 { "" } else { "s" },
        )
    }
}

impl Stall {
    /// The warning for a status line: "stalled QP 0x107 node1 r0 → node2 r1: 12 WRs 4.1s".
    pub fn short_text(&self) -> String {
        let who = match self.rank {
            Some(r) => format!("{} r{r}", self.host),
            None => format!("{} pid {}", self.host, self.pid),
        };
        let qp = match self.qpn {
            Some(n) => format!("QP 0x{n:x}"),
            None => format!("endpoint {}", self.ep),
        };
        format!(
            "stalled {qp} {who} → {}: {} WR{} {:.1}s",
            self.peer.short(),
            crate::agg::count_text(self.outstanding),
            if self.outstanding == 1 { "" } else { "s" },
            self.stalled_ns.max(self.queue.sq_oldest_ns) as f64 / 1e9
        )
    }
}

/// The queue state of a process's endpoint at view time `t` (`QueueState::at`).
pub fn queue_at(q: &QueueState, sent_at_ns: u64, t: u64) -> QueueState {
    q.at(sent_at_ns, t)
}

/// Whether process `i` of `at` reports: it has not exited and it is not silent (`agg::waits`:
/// the one rule of silence, which the silent-process warning follows).
pub fn reporting(at: &ModelAt, i: usize) -> bool {
    let a = &at.procs[i];
    !a.p.exited && at.silent_ns(i as u32).is_none()
}

/// The name of the peer of endpoint `ep` of process `pi`, and its process when it is traced.
fn peer_name(at: &ModelAt, peers: &Peers, pi: usize, ep: u32) -> (PeerName, Option<usize>) {
    let a = &at.procs[pi];
    let Some(def) = a.p.endpoints.get(&ep) else {
        return (PeerName::Unknown, None);
    };
    let p = peers.of(pi as u32, def, a.p.av_of(ep));
    if let Some(o) = p.process
        && let Some(b) = at.procs.get(o as usize)
    {
        let name = PeerName::Process {
            host: b.key.host.clone(),
            rank: b.p.identity.rank,
            pid: b.key.pid,
        };
        return (name, Some(o as usize));
    }
    // Not traced: by its address, or the host of a traced process on it (`agg::peers`).
    let name = match p.addr {
        Some(addr) => {
            let host = addr.host_of.and_then(|h| at.procs.get(h as usize));
            PeerName::Address(addr.text(host.map(|h| h.key.host.as_str())))
        }
        None => PeerName::Unknown,
    };
    (name, None)
}

/// A peer's address as a user reads it: the IPv4 address of a v4-mapped GID (RoCE), `lid N` for
/// what stands in for the GID on a LID-routed path (InfiniBand without a GRH: the LID in the last
/// two bytes, the rest zero), the IPv6 text otherwise (`event::port_addr_text`).
pub fn address_text(g: &[u8; 16]) -> String {
    crate::event::port_addr_text(g)
}

/// Which processes' queues are judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// A live view (or a replay at its view time): processes that report now.
    Reporting,
    /// A record read whole (`report`, `export --json`): every process as it ended, a process
    /// whose record was cut by a kill included, each judged at its last snapshot (what it was
    /// waiting on when the record ends).
    AtTheirEnd,
}

/// When process `i`'s queues are judged in `scope` (CLOCK_REALTIME ns): the view time for a
/// process that reports, its last snapshot for a record read whole; None when it is not judged
/// (silent, exited in a live view, or no queues by the view time). The stalled edges and each
/// endpoint's queue in the JSON read queues at this one time, so they agree.
pub fn judged_at(at: &ModelAt, i: usize, scope: Scope) -> Option<u64> {
    let a = at.procs.get(i)?;
    let qs = a.p.queues.as_ref()?;
    match scope {
        Scope::Reporting if qs.at_ns <= at.t && reporting(at, i) => Some(at.t),
        Scope::Reporting => None,
        Scope::AtTheirEnd => Some(
            a.p.history
                .last_head()
                .map_or(qs.at_ns, |s| s.at_ns.max(qs.at_ns)),
        ),
    }
}

/// Every stalled edge at the view time, the longest stalled first.
pub fn stalls(at: &ModelAt, threshold_ns: u64) -> Vec<Stall> {
    stalls_in(at, threshold_ns, Scope::Reporting)
}

/// [`stalls`] of the processes `scope` names.
pub fn stalls_in(at: &ModelAt, threshold_ns: u64, scope: Scope) -> Vec<Stall> {
    let mut found: Vec<(usize, u32, QueueState)> = Vec::new();
    for (i, a) in at.procs.iter().enumerate() {
        let Some(qs) = a.p.queues.as_ref() else {
            continue;
        };
        let Some(when) = judged_at(at, i, scope) else {
            continue;
        };
        for q in &qs.queues {
            let q = queue_at(q, qs.at_ns, when);
            if q.stalled(threshold_ns) {
                found.push((i, q.ep, q));
            }
        }
    }
    if found.is_empty() {
        return Vec::new();
    }
    // Peers are resolved only when something stalled (a view of processes alone has none).
    let built;
    let peers: &Peers = if at.peers.is_empty() {
        built = Peers::build(
            at.procs
                .iter()
                .map(|a| (&a.p.identity, a.p.endpoints_with_ports())),
        );
        &built
    } else {
        &at.peers
    };
    let mut edges: BTreeMap<(usize, PeerName), Stall> = BTreeMap::new();
    for (i, ep, q) in found {
        let (peer, peer_proc) = peer_name(at, peers, i, ep);
        // A peer that stopped reporting is what the silent-process warning names: the edge
        // waits on it, it is not an edge of its own.
        if scope == Scope::Reporting
            && peer_proc.is_some_and(|o| !at.procs[o].p.exited && !reporting(at, o))
        {
            continue;
        }
        let a = &at.procs[i];
        let qpn = a.p.endpoints.get(&ep).and_then(|d| d.qpn);
        let e = edges.entry((i, peer.clone())).or_insert_with(|| Stall {
            proc: i as u32,
            host: a.key.host.clone(),
            rank: a.p.identity.rank,
            pid: a.key.pid,
            peer,
            ep,
            qpn,
            queue: q.clone(),
            qps: 0,
            outstanding: 0,
            stalled_ns: 0,
        });
        e.qps += 1;
        e.outstanding += q.sq_outstanding();
        e.stalled_ns = e.stalled_ns.max(q.sq_stalled_ns);
        if qpn < e.qpn {
            e.ep = ep;
            e.qpn = qpn;
            e.queue = q;
        }
    }
    let mut v: Vec<Stall> = edges.into_values().collect();
    v.sort_by(|a, b| b.stalled_ns.cmp(&a.stalled_ns).then(a.proc.cmp(&b.proc)));
    v
}

/// Says stalled edges as they start and as they clear, for a log (`sigmatop run --headless`):
/// one line when an edge stalls, one when it moves again (or its QP ended).
#[derive(Debug, Default)]
pub struct StallWatch {
    /// (host, pid, QPN or endpoint) → (the edge's text when it started, stalled since ns).
    shown: BTreeMap<(String, u32, u64), (String, u64)>,
}

impl StallWatch {
    /// The lines to print at view time `t`.
    pub fn check(&mut self, at: &ModelAt, threshold_ns: u64) -> Vec<String> {
        let mut lines = Vec::new();
        let mut now = BTreeMap::new();
        for s in stalls(at, threshold_ns) {
            let key = (
                s.host.clone(),
                s.pid,
                s.qpn.map_or(1 << 32 | s.ep as u64, u64::from),
            );
            let since = at.t.saturating_sub(s.stalled_ns);
            match self.shown.remove(&key) {
                Some(v) => {
                    now.insert(key, v);
                }
                None => {
                    lines.push(format!("⚠ {}", s.text()));
                    now.insert(key, (format!("{} → {}", s.who(), s.peer.text()), since));
                }
            }
        }
        for ((_, _, q), (edge, since)) in std::mem::take(&mut self.shown) {
            let qp = if q >> 32 == 0 {
                format!("QP 0x{q:x}")
            } else {
                format!("endpoint {}", q as u32)
            };
            lines.push(format!(
                "✓ {edge}, {qp}: moving again after {:.1}s stalled",
                at.t.saturating_sub(since) as f64 / 1e9
            ));
        }
        self.shown = now;
        lines
    }

    /// The end of a run (every process ended): each edge still said as stalled is cleared, as
    /// moving again when its QP's last queue has no send work outstanding (its work completed
    /// between the last look and the end), as ended with its work outstanding otherwise. So a
    /// log's stall line is always followed by its end.
    pub fn finish(&mut self, at: &ModelAt) -> Vec<String> {
        let mut lines = Vec::new();
        for ((host, pid, q), (edge, since)) in std::mem::take(&mut self.shown) {
            let qp = if q >> 32 == 0 {
                format!("QP 0x{q:x}")
            } else {
                format!("endpoint {}", q as u32)
            };
            let outstanding = at
                .procs
                .iter()
                .find(|a| a.key.host == host && a.key.pid == pid)
                .and_then(|a| {
                    let ep = if q >> 32 == 0 {
                        a.p.endpoints
                            .values()
                            .find(|d| d.qpn == Some(q as u32))
                            .map(|d| d.id)?
                    } else {
                        q as u32
                    };
                    let qs = a.p.queues.as_ref()?;
                    qs.queues
                        .iter()
                        .find(|x| x.ep == ep)
                        .map(|x| x.sq_outstanding())
                });
            lines.push(match outstanding {
                Some(0) => format!(
                    "✓ {edge}, {qp}: moving again after {:.1}s stalled (done at the end)",
                    at.t.saturating_sub(since) as f64 / 1e9
                ),
                Some(n) => format!(
                    "✗ {edge}, {qp}: its process ended with {} WR{} outstanding, stalled since {:.1}s before",
                    crate::agg::count_text(n),
                    if n == 1 { "" } else { "s" },
                    at.t.saturating_sub(since) as f64 / 1e9
                ),
                None => format!("✗ {edge}, {qp}: its process ended while it was stalled"),
            });
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_read_as_users_write_them() {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&[10, 0, 1, 1]);
        assert_eq!(address_text(&g), "10.0.1.1");
        let mut l = [0u8; 16];
        l[15] = 3;
        assert_eq!(address_text(&l), "lid 3");
        let mut v6 = [0u8; 16];
        v6[0] = 0xfe;
        v6[1] = 0x80;
        v6[15] = 1;
        assert_eq!(address_text(&v6), "fe80::1");
    }

    #[test]
    fn a_queue_ages_with_the_view_time_only_while_work_is_outstanding() {
        let q = QueueState {
            sq_posted: 10,
            sq_completed: 4,
            sq_signaled_outstanding: 2,
            sq_oldest_ns: 1_000,
            sq_stalled_ns: 500,
            rq_posted: 3,
            rq_completed: 3,
            rq_oldest_ns: 0,
            last_completion_ns: Some(500),
            ..Default::default()
        };
        let a = queue_at(&q, 100, 350);
        assert_eq!(
            (
                a.sq_oldest_ns,
                a.sq_stalled_ns,
                a.rq_oldest_ns,
                a.last_completion_ns
            ),
            (1_250, 750, 0, Some(750))
        );
    }

    /// Process 100 on node0, started at `t0`, with one verbs QP (endpoint 1, QPN 0x107).
    fn one_qp(t0: u64) -> (crate::agg::Model, crate::agg::ProcKey) {
        use crate::event::{EndpointDef, EndpointKind, Identity, Layer};
        use crate::wire::Frame;
        let mut m = crate::agg::Model::new();
        let k = crate::agg::ProcKey {
            host: "node0".into(),
            pid: 100,
            start_ns: t0,
        };
        m.apply(
            &k,
            Frame::hello(Identity {
                host: k.host.clone(),
                pid: k.pid,
                start_ns: t0,
                ..Default::default()
            }),
        );
        m.apply(
            &k,
            Frame::Endpoints(vec![EndpointDef {
                id: 1,
                layer: Layer::Ibverbs,
                kind: EndpointKind::VerbsQp,
                label: "qp 0x107".into(),
                transport: String::new(),
                peer: Default::default(),
                qpn: Some(0x107),
                gpu: None,
                created_ns: t0,
            }]),
        );
        (m, k)
    }

    /// A stall crossed between two queue frames (the preload sends one per interval): the
    /// stalled edges and the endpoint's queue in the JSON are judged at the one view time, so a
    /// report that lists the edge marks its QP stalled too (CI once saw the edge listed and the
    /// QP's queue, read at its frame 0.2 s earlier, not yet stalled).
    #[test]
    fn the_edge_and_its_queue_are_judged_at_one_time() {
        use crate::event::Snapshot;
        use crate::queue::Queues;
        use crate::wire::Frame;
        const S: u64 = 1_000_000_000;
        const T0: u64 = 1_700_000_000 * S;
        let hang = crate::agg::warnings::hang_ns();
        let (mut m, k) = one_qp(T0);
        let frame_at = T0 + hang;
        let snap = |seq: u64, at_ns: u64| {
            Frame::Snapshot(Snapshot {
                at_ns,
                seq,
                ..Default::default()
            })
        };
        m.apply(&k, snap(1, frame_at));
        // 0.1 s short of the threshold at its frame.
        m.apply(
            &k,
            Frame::Queues(Queues {
                at_ns: frame_at,
                queues: vec![QueueState {
                    ep: 1,
                    sq_posted: 3,
                    sq_signaled_outstanding: 1,
                    sq_oldest_ns: hang - S / 10,
                    sq_stalled_ns: hang - S / 10,
                    ..Default::default()
                }],
            }),
        );
        m.apply(&k, snap(2, frame_at + S / 5));
        let r = m.report();
        assert_eq!(r.stalls.len(), 1, "{:?}", r.stalls);
        let q = r.processes[0].endpoints[0].queue.as_ref().expect("queue");
        assert!(q.stalled, "{q:?}");
        assert_eq!(q.at_ns, frame_at + S / 5);
        assert!(
            (q.sq_stalled_s - (hang + S / 10) as f64 / 1e9).abs() < 1e-6,
            "{q:?}"
        );
    }

    /// The end of a run clears every stall still said: as moving again when its QP's work all
    /// completed before the end (between the last look and the exit), as ended with its work
    /// outstanding otherwise.
    #[test]
    fn the_end_of_a_run_clears_each_stall_by_what_its_queue_says() {
        use crate::agg::AtOptions;
        use crate::event::Snapshot;
        use crate::queue::Queues;
        use crate::wire::Frame;
        const S: u64 = 1_000_000_000;
        const T0: u64 = 1_700_000_000 * S;
        for (completed, want) in [
            (
                3,
                "✓ node0 pid 100 → an unknown peer, QP 0x107: moving again after ",
            ),
            (
                1,
                "✗ node0 pid 100 → an unknown peer, QP 0x107: its process ended with 2 WRs outstanding",
            ),
        ] {
            let (mut m, k) = one_qp(T0);
            let queue = |at_ns: u64, done: u64| {
                Frame::Queues(Queues {
                    at_ns,
                    queues: vec![QueueState {
                        ep: 1,
                        sq_posted: 3,
                        sq_completed: done,
                        sq_signaled_outstanding: 3 - done,
                        sq_oldest_ns: 4 * S,
                        sq_stalled_ns: 4 * S,
                        ..Default::default()
                    }],
                })
            };
            let snap = |seq: u64, at_ns: u64| {
                Frame::Snapshot(Snapshot {
                    at_ns,
                    seq,
                    ..Default::default()
                })
            };
            m.apply(&k, snap(1, T0 + 5 * S));
            m.apply(&k, queue(T0 + 5 * S, 0));
            let mut w = StallWatch::default();
            let at = ModelAt::new(&m, &AtOptions::default());
            let said = w.check(&at, 2 * S);
            assert_eq!(said.len(), 1, "{said:?}");
            assert!(said[0].starts_with("⚠ stalled QP 0x107 "), "{said:?}");
            m.apply(&k, snap(2, T0 + 6 * S));
            m.apply(&k, queue(T0 + 6 * S, completed));
            m.source_closed(&k, None);
            let at = ModelAt::new(&m, &AtOptions::default());
            let end = w.finish(&at);
            assert_eq!(end.len(), 1, "{end:?}");
            assert!(end[0].starts_with(want), "{end:?}");
            assert!(w.finish(&at).is_empty(), "said once");
        }
    }
}
