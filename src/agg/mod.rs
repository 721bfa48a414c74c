//! Aggregation: one model of every traced process (live frames or a recording feed the same
//! `Model`), with per-endpoint, per-process, per-rank and per-node totals, windowed rates, peer
//! resolution across processes and the communication matrices.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::Serialize;

use crate::event::{
    ClockSample, Dir, DropCounters, EndpointDef, EndpointKind, Event, Identity, Op, Snapshot,
    TscClock, UNATTRIBUTED_EP,
};
use crate::wire::Frame;

/// Snapshots kept per process for windows and stepping back (at 4 Hz: 10 minutes).
pub const HISTORY: usize = 2400;
/// Sampled events kept per process for the event/doorbell views.
pub const RECENT_EVENTS: usize = 2000;

/// Identifies a traced process across hosts.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct ProcKey {
    pub host: String,
    pub pid: u32,
}

/// Everything known about one traced process.
#[derive(Clone, Debug, Default)]
pub struct ProcessState {
    pub identity: Identity,
    pub endpoints: BTreeMap<u32, EndpointDef>,
    /// Latest state per endpoint (from updates), e.g. "RTS", "closed".
    pub ep_state: HashMap<u32, String>,
    pub history: VecDeque<Snapshot>,
    pub recent: VecDeque<Event>,
    pub clock: TscClock,
    /// The process said goodbye (clean exit).
    pub said_bye: bool,
    /// The connection closed or the record ended.
    pub exited: bool,
    /// The last problem with this source (bad frame, cut record).
    pub problem: Option<String>,
}

impl ProcessState {
    pub fn last(&self) -> Option<&Snapshot> {
        self.history.back()
    }

    fn push_snapshot(&mut self, s: Snapshot) {
        if self.history.len() >= HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(s);
    }

    /// The snapshot at or before `at_ns` (the oldest kept when none is that old).
    pub fn snapshot_at(&self, at_ns: u64) -> Option<&Snapshot> {
        let idx = self.history.partition_point(|s| s.at_ns <= at_ns);
        if idx == 0 {
            self.history.front()
        } else {
            self.history.get(idx - 1)
        }
    }
}

/// Totals of traffic in one direction over a period.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Flow {
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    pub tx_ops: u64,
    pub rx_ops: u64,
    pub other_ops: u64,
}

impl Flow {
    pub fn add_op(&mut self, op: u8, ops: u64, bytes: u64) {
        match Op::from_u8(op).map(|o| o.dir()) {
            Some(Dir::Tx) => {
                self.tx_bytes += bytes;
                self.tx_ops += ops;
            }
            Some(Dir::Rx) => {
                self.rx_bytes += bytes;
                self.rx_ops += ops;
            }
            _ => self.other_ops += ops,
        }
    }
    pub fn add(&mut self, o: &Flow) {
        self.tx_bytes += o.tx_bytes;
        self.rx_bytes += o.rx_bytes;
        self.tx_ops += o.tx_ops;
        self.rx_ops += o.rx_ops;
        self.other_ops += o.other_ops;
    }
    pub fn ops(&self) -> u64 {
        self.tx_ops + self.rx_ops + self.other_ops
    }
}

/// The model of all processes.
#[derive(Default)]
pub struct Model {
    pub processes: BTreeMap<ProcKey, ProcessState>,
    /// Messages about sources (refused sockets, bad frames), newest last.
    pub messages: Vec<String>,
}

/// Counters of one endpoint over a period, by op code.
pub type OpTable = BTreeMap<u8, (u64, u64)>;

impl Model {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn process_mut(&mut self, key: &ProcKey) -> &mut ProcessState {
        self.processes.entry(key.clone()).or_default()
    }

    /// Applies one live frame from the process `key`.
    pub fn apply(&mut self, key: &ProcKey, frame: Frame) {
        let p = self.process_mut(key);
        match frame {
            Frame::Hello { identity, .. } | Frame::Identity(identity) => p.identity = identity,
            Frame::Endpoints(defs) => {
                for d in defs {
                    p.endpoints.insert(d.id, d);
                }
            }
            Frame::Updates(ups) => {
                for u in ups {
                    if let Some(peer) = u.peer.clone()
                        && u.state != "av"
                        && let Some(d) = p.endpoints.get_mut(&u.id)
                    {
                        d.peer = peer;
                    }
                    if u.state != "av" {
                        p.ep_state.insert(u.id, u.state);
                    }
                }
            }
            Frame::Clock(c) => p.clock.push(c),
            Frame::Snapshot(s) => p.push_snapshot(s),
            Frame::Events(evs) => {
                for e in evs {
                    if p.recent.len() >= RECENT_EVENTS {
                        p.recent.pop_front();
                    }
                    p.recent.push_back(e);
                }
            }
            Frame::Bye { .. } => {
                p.said_bye = true;
                p.exited = true;
            }
        }
    }

    /// Marks a process whose source ended.
    pub fn source_closed(&mut self, key: &ProcKey, problem: Option<String>) {
        let p = self.process_mut(key);
        p.exited = true;
        if let Some(m) = problem {
            p.problem = Some(m);
        }
    }

    /// Loads a whole recording (identities, endpoints, clocks and every snapshot).
    pub fn from_recording(rec: &crate::trace::reader::Recording) -> Model {
        let mut m = Model::new();
        for pr in &rec.processes {
            let key = ProcKey {
                host: pr.identity.host.clone(),
                pid: pr.identity.pid,
            };
            m.apply(&key, Frame::hello(pr.identity.clone()));
            m.apply(&key, Frame::Endpoints(pr.endpoints.clone()));
            m.apply(&key, Frame::Updates(pr.updates.clone()));
            for c in &pr.clocks {
                m.apply(&key, Frame::Clock(*c));
            }
            for s in &pr.snapshots {
                m.apply(&key, Frame::Snapshot(s.clone()));
            }
            let p = m.process_mut(&key);
            p.exited = true;
            p.said_bye = pr.end.is_some();
            if pr.is_cut() {
                p.problem = Some("record cut: the process did not shut down cleanly".into());
            }
        }
        for prob in &rec.problems {
            m.messages.push(prob.to_string());
        }
        m
    }

    /// Finds the process that owns an address hash.
    pub fn owner_of(&self, addr_hash: u64) -> Option<&ProcKey> {
        if addr_hash == 0 {
            return None;
        }
        self.processes
            .iter()
            .find(|(_, p)| p.identity.own_addr_hashes.contains(&addr_hash))
            .map(|(k, _)| k)
    }

    /// Per-endpoint op counters between two snapshots (cumulative when `from` is None).
    pub fn diff(to: &Snapshot, from: Option<&Snapshot>) -> BTreeMap<u32, OpTable> {
        let mut out: BTreeMap<u32, OpTable> = BTreeMap::new();
        for c in &to.counts {
            let e = out.entry(c.ep).or_default().entry(c.op).or_default();
            e.0 += c.ops;
            e.1 += c.bytes;
        }
        if let Some(f) = from {
            for c in &f.counts {
                if let Some(e) = out.get_mut(&c.ep).and_then(|t| t.get_mut(&c.op)) {
                    e.0 = e.0.saturating_sub(c.ops);
                    e.1 = e.1.saturating_sub(c.bytes);
                }
            }
        }
        out
    }

    /// Latest time seen in any snapshot.
    pub fn latest_ns(&self) -> u64 {
        self.processes
            .values()
            .filter_map(|p| p.last().map(|s| s.at_ns))
            .max()
            .unwrap_or(0)
    }

    /// Sum of drop counters over all processes (latest snapshot of each).
    pub fn drops(&self) -> DropCounters {
        let mut d = DropCounters::default();
        for p in self.processes.values() {
            if let Some(s) = p.last() {
                d.add(&s.drops);
            }
        }
        d
    }

    /// The aggregate report of the whole model (cumulative totals), for `export --json`,
    /// `attach --json` and tests.
    pub fn report(&self) -> Report {
        let mut r = Report {
            schema: Report::SCHEMA,
            ..Default::default()
        };
        let mut rank_idx: BTreeMap<u32, usize> = BTreeMap::new();
        let mut host_idx: BTreeMap<String, usize> = BTreeMap::new();
        for p in self.processes.values() {
            if let Some(rank) = p.identity.rank {
                let n = rank_idx.len();
                rank_idx.entry(rank).or_insert(n);
            }
            let n = host_idx.len();
            host_idx.entry(p.identity.host.clone()).or_insert(n);
        }
        // Stable order: ranks and hosts sorted.
        let ranks: Vec<u32> = rank_idx.keys().copied().collect();
        let hosts: Vec<String> = host_idx.keys().cloned().collect();
        let rank_pos: HashMap<u32, usize> =
            ranks.iter().enumerate().map(|(i, r)| (*r, i)).collect();
        let host_pos: HashMap<&str, usize> = hosts
            .iter()
            .enumerate()
            .map(|(i, h)| (h.as_str(), i))
            .collect();
        let mut rank_matrix = vec![vec![0u64; ranks.len()]; ranks.len()];
        let mut node_matrix = vec![vec![0u64; hosts.len()]; hosts.len()];

        for (key, p) in &self.processes {
            let Some(last) = p.last() else {
                r.processes.push(ProcessReport::empty(key, p));
                continue;
            };
            let mut per_ep = Model::diff(last, None);
            // Endpoints without traffic are listed too: an idle endpoint is information.
            for id in p.endpoints.keys() {
                per_ep.entry(*id).or_default();
            }
            let mut pr = ProcessReport::empty(key, p);
            pr.drops = last.drops;
            pr.events = last.events;
            for (ep, ops) in &per_ep {
                let def = p.endpoints.get(ep);
                let mut er = EndpointReport {
                    id: *ep,
                    layer: def.map(|d| d.layer.name().to_string()).unwrap_or_default(),
                    kind: def
                        .map(|d| d.kind.name())
                        .unwrap_or(if *ep == UNATTRIBUTED_EP {
                            EndpointKind::Unattributed.name()
                        } else {
                            "unknown"
                        })
                        .to_string(),
                    label: def.map(|d| d.label.clone()).unwrap_or_else(|| {
                        if *ep == UNATTRIBUTED_EP {
                            "(unattributed)".into()
                        } else {
                            format!("ep#{ep}")
                        }
                    }),
                    transport: def.map(|d| d.transport.clone()).unwrap_or_default(),
                    state: p.ep_state.get(ep).cloned().unwrap_or_default(),
                    peer: None,
                    peer_text: def.map(|d| d.peer.text.clone()).unwrap_or_default(),
                    flow: Flow::default(),
                    ops: BTreeMap::new(),
                };
                let peer_key = def.and_then(|d| self.owner_of(d.peer.addr_hash));
                if let Some(pk) = peer_key {
                    let pp = &self.processes[pk];
                    er.peer = Some(PeerRef {
                        host: pk.host.clone(),
                        pid: pk.pid,
                        rank: pp.identity.rank,
                    });
                }
                for (op, (n, b)) in ops {
                    er.flow.add_op(*op, *n, *b);
                    let name = Op::from_u8(*op)
                        .map(|o| o.name().to_string())
                        .unwrap_or_else(|| format!("op{op}"));
                    let e = er.ops.entry(name).or_insert(OpTotals { ops: 0, bytes: 0 });
                    e.ops += n;
                    e.bytes += b;
                }
                pr.flow.add(&er.flow);
                if let (Some(pk), Some(src_rank)) = (peer_key, p.identity.rank)
                    && let Some(dst_rank) = self.processes[pk].identity.rank
                    && let (Some(&i), Some(&j)) = (rank_pos.get(&src_rank), rank_pos.get(&dst_rank))
                {
                    rank_matrix[i][j] += er.flow.tx_bytes;
                }
                if let Some(pk) = peer_key
                    && let (Some(&i), Some(&j)) = (
                        host_pos.get(key.host.as_str()),
                        host_pos.get(pk.host.as_str()),
                    )
                {
                    node_matrix[i][j] += er.flow.tx_bytes;
                }
                pr.endpoints.push(er);
            }
            r.totals.add(&pr.flow);
            r.processes.push(pr);
        }
        r.drops = self.drops();
        r.rank_matrix = Matrix {
            labels: ranks.iter().map(|r| format!("r{r}")).collect(),
            bytes: rank_matrix,
        };
        r.node_matrix = Matrix {
            labels: hosts,
            bytes: node_matrix,
        };
        r.messages = self.messages.clone();
        r
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct OpTotals {
    pub ops: u64,
    pub bytes: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct PeerRef {
    pub host: String,
    pub pid: u32,
    pub rank: Option<u32>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct EndpointReport {
    pub id: u32,
    pub layer: String,
    pub kind: String,
    pub label: String,
    pub transport: String,
    pub state: String,
    /// The traced process on the other side, when it is in this model.
    pub peer: Option<PeerRef>,
    pub peer_text: String,
    #[serde(flatten)]
    pub flow: Flow,
    /// By operation name: calls and payload bytes.
    pub ops: BTreeMap<String, OpTotals>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ProcessReport {
    pub host: String,
    pub pid: u32,
    pub rank: Option<u32>,
    pub exe: String,
    pub mode: String,
    pub layers: String,
    pub clean_exit: bool,
    pub problem: Option<String>,
    pub events: u64,
    pub drops: DropCounters,
    #[serde(flatten)]
    pub flow: Flow,
    pub endpoints: Vec<EndpointReport>,
}

impl ProcessReport {
    fn empty(key: &ProcKey, p: &ProcessState) -> ProcessReport {
        ProcessReport {
            host: key.host.clone(),
            pid: key.pid,
            rank: p.identity.rank,
            exe: p.identity.exe.clone(),
            mode: p.identity.mode().name().to_string(),
            layers: crate::event::layer_names(p.identity.layers),
            clean_exit: p.said_bye,
            problem: p.problem.clone(),
            ..Default::default()
        }
    }
}

/// A square matrix of bytes sent from row to column.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Matrix {
    pub labels: Vec<String>,
    pub bytes: Vec<Vec<u64>>,
}

/// What `export --json` writes; schema in docs/JSON.md.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub schema: u32,
    pub totals: Flow,
    pub drops: DropCounters,
    pub processes: Vec<ProcessReport>,
    pub rank_matrix: Matrix,
    pub node_matrix: Matrix,
    pub messages: Vec<String>,
}

impl Report {
    pub const SCHEMA: u32 = 1;
}

/// Converts a process's clock samples for event timestamps.
pub fn clock_of(samples: &[ClockSample]) -> TscClock {
    TscClock::new(samples.to_vec())
}
