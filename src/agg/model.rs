//! The model of every traced process: live frames and recordings feed the same `Model`, which
//! keeps identities, endpoints, a history of cumulative snapshots and the latest sampled events.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::event::{ClockSample, DropCounters, EndpointDef, Event, Identity, Snapshot, TscClock};
use crate::wire::Frame;

/// Snapshots kept per process for windows and stepping back (at 4 Hz: 10 minutes).
pub const HISTORY: usize = 2400;
/// Sampled events kept per process for the event/doorbell views.
pub const RECENT_EVENTS: usize = 2000;

/// Identifies a traced process across hosts: its host, its pid and when its trace started. A
/// program that execs keeps its pid but starts a new trace (its record goes to `<pid>.1`): the
/// image before and the image after are two processes here, not one merged.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ProcKey {
    pub host: String,
    pub pid: u32,
    /// `Identity::start_ns` (0 where it is not known).
    pub start_ns: u64,
}

impl ProcKey {
    /// The key of the process an identity describes.
    pub fn of(id: &Identity) -> ProcKey {
        ProcKey {
            host: id.host.clone(),
            pid: id.pid,
            start_ns: id.start_ns,
        }
    }
}

/// Everything known about one traced process.
#[derive(Clone, Debug, Default)]
pub struct ProcessState {
    pub identity: Identity,
    pub endpoints: BTreeMap<u32, EndpointDef>,
    /// Latest state per endpoint (from updates), e.g. "RTS", "closed".
    pub ep_state: HashMap<u32, String>,
    /// libfabric endpoints: the address hashes of the peers inserted in their address vector
    /// (the "av" updates), for endpoints that name their peer per operation.
    pub av: HashMap<u32, Vec<u64>>,
    pub history: VecDeque<Snapshot>,
    pub recent: VecDeque<Event>,
    pub clock: TscClock,
    /// The process said goodbye (clean exit).
    pub said_bye: bool,
    /// The connection closed or the record ended.
    pub exited: bool,
    /// The last problem with this source (bad frame, cut record).
    pub problem: Option<String>,
    /// What the process could not send to this reader, which read too slowly (`Frame::Missed`):
    /// (frames, sampled events in them), cumulative.
    pub missed: (u64, u64),
}

impl ProcessState {
    /// The address-vector hashes of endpoint `ep` (empty for most endpoints).
    pub fn av_of(&self, ep: u32) -> &[u64] {
        self.av.get(&ep).map_or(&[], |v| v)
    }

    pub fn last(&self) -> Option<&Snapshot> {
        self.history.back()
    }

    /// The layers this process used (`Layer::bit()` set): what its latest snapshot says, with
    /// the layers of its endpoints and counted operations (all a record of schema 1, which did
    /// not say, can tell). `identity.layers` is what was enabled.
    pub fn layers_used(&self) -> u32 {
        let mut m = self.last().map_or(0, |s| s.layers_used);
        m |= self.endpoints.values().fold(0, |m, d| m | d.layer.bit());
        if let Some(s) = self.last() {
            m |= s
                .counts
                .iter()
                .filter_map(|c| crate::event::Op::from_u8(c.op))
                .fold(0, |m, op| m | op.layer().bit());
        }
        m
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

/// A remote host followed through its relay (`sigmatop attach HOST...`).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct HostLink {
    /// The destination as the user gave it (`node7`, `user@node7`, `ssh://user@node7:2222`).
    pub destination: String,
    /// The host name its relay reported in its hello (None until then): the `host` of its
    /// processes.
    pub host: Option<String>,
    pub state: LinkState,
    /// The remote sigmatop's version, from its hello.
    pub version: Option<String>,
    /// Connections started so far (1 on the first try).
    pub attempts: u32,
}

impl HostLink {
    /// The name rows show: the host name the relay reported, else the destination.
    pub fn name(&self) -> &str {
        self.host.as_deref().unwrap_or(&self.destination)
    }
}

/// Where the link to one remote host stands.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(tag = "state", content = "reason", rename_all = "lowercase")]
pub enum LinkState {
    /// The transport (ssh) is starting, or the relay has not said hello yet.
    #[default]
    Connecting,
    /// The relay said hello and its frames arrive.
    Up,
    /// The link ended: the transport's own last line (ssh's stderr), a bad stream, a version
    /// mismatch. Retried with backoff unless the reason cannot go away by itself.
    Lost(String),
}

impl LinkState {
    /// "up", "connecting", "lost: REASON".
    pub fn label(&self) -> String {
        match self {
            LinkState::Connecting => "connecting".into(),
            LinkState::Up => "up".into(),
            LinkState::Lost(r) => format!("lost: {r}"),
        }
    }
}

/// The model of all processes.
#[derive(Default)]
pub struct Model {
    pub processes: BTreeMap<ProcKey, ProcessState>,
    /// Messages about sources (refused sockets, bad frames), newest last.
    pub messages: Vec<String>,
    /// Remote hosts in the order they were given (empty for a local attach, a run or a replay).
    pub links: Vec<HostLink>,
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
                    if u.state == "av" {
                        if let Some(peer) = &u.peer {
                            let hashes = p.av.entry(u.id).or_default();
                            if !hashes.contains(&peer.addr_hash) {
                                hashes.push(peer.addr_hash);
                            }
                        }
                        continue;
                    }
                    if let Some(peer) = u.peer.clone()
                        && let Some(d) = p.endpoints.get_mut(&u.id)
                    {
                        d.peer = peer;
                    }
                    p.ep_state.insert(u.id, u.state);
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
            Frame::Missed { frames, events } => p.missed = (frames, events),
        }
    }

    /// Frames (and the sampled events in them) the processes could not send to this reader
    /// because it read too slowly, summed over the processes.
    pub fn missed(&self) -> (u64, u64) {
        self.processes
            .values()
            .fold((0, 0), |a, p| (a.0 + p.missed.0, a.1 + p.missed.1))
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
            let key = ProcKey::of(&pr.identity);
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

    /// The earliest process start (ns, CLOCK_REALTIME), 0 when none is known.
    pub fn first_start_ns(&self) -> u64 {
        self.processes
            .values()
            .map(|p| p.identity.start_ns)
            .filter(|s| *s > 0)
            .min()
            .unwrap_or(0)
    }
}

/// Converts a process's clock samples for event timestamps.
pub fn clock_of(samples: &[ClockSample]) -> TscClock {
    TscClock::new(samples.to_vec())
}
