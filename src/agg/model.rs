//! The model of every traced process: live frames and recordings feed the same `Model`, which
//! keeps identities, endpoints, a history of cumulative snapshots and the latest sampled events.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::snapshots::{Keep, SnapshotHistory, Totals};
use crate::event::{
    ClockSample, DropCounters, EndpointDef, Event, Identity, LOCAL_ADDR_STATE, Layer, Op,
    ProcessEnd, Snapshot, TscClock,
};
use crate::wire::Frame;

/// Snapshots kept per process for windows and stepping back (at 4 Hz: 10 minutes).
pub const HISTORY: usize = 2400;
/// Bytes the snapshot histories of all processes may hold together (compact records,
/// `agg::snapshots`): a job too large for `HISTORY` snapshots of every process within it keeps a
/// shorter history, never shorter than `WINDOW_FLOOR_NS`. A host's processes (8 × 64 QPs) keep
/// the whole `HISTORY` in a tenth of it.
pub const HISTORY_BYTES: usize = 64 << 20;
/// The longest window the views offer (60 s): every process keeps what that window reads at its
/// newest snapshot, whatever the budget.
pub const WINDOW_FLOOR_NS: u64 = 60_000_000_000;
/// How much older than its process's newest snapshot a sampled event may still arrive (the
/// preload sends events every 250 ms): the clock samples that convert it are kept that long.
pub const CLOCK_LATE_NS: u64 = 10_000_000_000;
/// Sampled events kept per process for the event/doorbell views: the views read the doorbells
/// and GPU WQEs among the latest `RECENT_EVENTS` events of each process.
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
    /// QPs the NIC put in error without the program asking ("ERR by the NIC", from the device's
    /// answer to the program's QUERY_QP): kept when the QP later goes (a record's warnings say
    /// it at the end, after teardown destroyed it).
    pub nic_failed: BTreeMap<u32, String>,
    /// libfabric endpoints: the address hashes of the peers inserted in their address vector
    /// (the "av" updates), for endpoints that name their peer per operation.
    pub av: HashMap<u32, Vec<u64>>,
    /// Verbs / devx QPs: their own port address (GID, or LID as `event::lid_as_gid` writes it),
    /// from the `event::LOCAL_ADDR_STATE` updates: what a peer's QPN match is checked against
    /// (`agg::peers`).
    pub local: HashMap<u32, [u8; 16]>,
    /// Cumulative snapshots, oldest first (compact: `agg::snapshots`).
    pub history: SnapshotHistory,
    pub recent: RecentEvents,
    pub clock: TscClock,
    /// The process said goodbye (clean exit).
    pub said_bye: bool,
    /// The connection closed or the record ended.
    pub exited: bool,
    /// The last problem with this source (bad frame, cut record).
    pub problem: Option<String>,
    /// A process another traced process of the same rank started (a `fork` of an MPI rank,
    /// with or without an exec): that rank. Its own `identity.rank` is cleared, for it is not a
    /// second rank of that number (issue 25, item 4: `3 procs` and two rank 0 for `-np 2`).
    pub child_of_rank: Option<u32>,
    /// The signal that killed it, when known (the program `sigmatop run` started and reaped):
    /// e.g. 11 for a segfault (issue 25, item 8: it showed as `exited` like the others).
    pub exit_signal: Option<i32>,
    /// Its non-zero exit status, when known (the program `sigmatop run` started, or a child whose
    /// traced parent reaped it: preload/src/reap.rs).
    pub exit_code: Option<i32>,
    /// What the process could not send to this reader, which read too slowly (`Frame::Missed`):
    /// (frames, sampled events in them), cumulative.
    pub missed: (u64, u64),
    /// The NCCL plugin's collectives, as its latest `Frame::Nccl` said (none: no NCCL).
    pub nccl: Option<crate::nccl::live::NcclLive>,
    /// When its latest frame arrived, by the reader's own clock (ns, CLOCK_REALTIME; 0: not
    /// known, as in a recording): a live view judges silence by it (`agg::waits`), so that a
    /// host whose clock is off does not look silent, or alive.
    pub last_seen_ns: u64,
    /// Outstanding work per verbs QP, as its latest `Frame::Queues` said (none: it posted on
    /// no verbs QP, or its preload sends no queues).
    pub queues: Option<crate::queue::Queues>,
    /// Where its NCCL communicators wait, as its latest `Frame::NcclWaits` said.
    pub nccl_waits: Option<crate::nccl::live::NcclWaits>,
    /// Its NCCL calls as the user made them, by size, and the kernels' GPU starts, as its
    /// latest `Frame::NcclCalls` said.
    pub nccl_calls: Option<crate::nccl::live::NcclCalls>,
}

impl ProcessState {
    /// The address-vector hashes of endpoint `ep` (empty for most endpoints).
    pub fn av_of(&self, ep: u32) -> &[u64] {
        self.av.get(&ep).map_or(&[], |v| v)
    }

    /// The own port address of QP endpoint `d` (its `LOCAL_ADDR_STATE` update, else what an
    /// older record's RTR peer text says): see `agg::peers::own_port`.
    pub fn port_of(&self, d: &EndpointDef) -> Option<[u8; 16]> {
        super::peers::own_port(d, self.local.get(&d.id).copied())
    }

    /// Every endpoint with its own port address, for `agg::peers::Peers::build`.
    pub fn endpoints_with_ports(&self) -> impl Iterator<Item = (&EndpointDef, Option<[u8; 16]>)> {
        self.endpoints.values().map(|d| (d, self.port_of(d)))
    }

    /// The newest snapshot (its counters rebuilt from the history: for reports and scrapes).
    pub fn last(&self) -> Option<Cow<'_, Snapshot>> {
        self.history.last()
    }

    /// Applies one frame of this process.
    fn apply(&mut self, frame: Frame, keep: Keep) {
        match frame {
            Frame::Hello { identity, .. } | Frame::Identity(identity) => self.identity = identity,
            Frame::Endpoints(defs) => {
                for d in defs {
                    self.endpoints.insert(d.id, d);
                }
            }
            Frame::Updates(ups) => {
                for u in ups {
                    if u.state == LOCAL_ADDR_STATE {
                        if let Some(g) = u.peer.as_ref().and_then(|p| p.gid) {
                            self.local.insert(u.id, g);
                        }
                        continue;
                    }
                    if u.state == "av" {
                        if let Some(peer) = &u.peer {
                            let hashes = self.av.entry(u.id).or_default();
                            if !hashes.contains(&peer.addr_hash) {
                                hashes.push(peer.addr_hash);
                            }
                        }
                        continue;
                    }
                    if let Some(peer) = u.peer.clone()
                        && let Some(d) = self.endpoints.get_mut(&u.id)
                    {
                        d.peer = peer;
                    }
                    if u.state.ends_with(" by the NIC") {
                        self.nic_failed.insert(u.id, u.state.clone());
                    }
                    self.ep_state.insert(u.id, u.state);
                }
            }
            Frame::Clock(c) => {
                self.clock.push(c);
                self.forget_old_clock();
            }
            Frame::Snapshot(s) => {
                self.history.push(s, keep);
                self.forget_old_clock();
            }
            Frame::Events(evs) => {
                for e in evs {
                    self.recent.push(e);
                }
            }
            Frame::Bye { .. } => {
                self.said_bye = true;
                self.exited = true;
            }
            Frame::Missed { frames, events } => self.missed = (frames, events),
            Frame::Nccl(n) => self.nccl = Some(n),
            Frame::Queues(q) => self.queues = Some(q),
            Frame::NcclWaits(w) => self.nccl_waits = Some(w),
            Frame::NcclCalls(c) => self.nccl_calls = Some(c),
        }
    }

    /// Drops the clock samples nothing will convert with: those before the sample that
    /// converts the oldest kept event and the events that may still come (stamped up to
    /// `CLOCK_LATE_NS` before the newest snapshot). A live process sends one every 250 ms; a
    /// replay loads all of them first, and keeps those after the replayed time.
    fn forget_old_clock(&mut self) {
        let samples = self.clock.samples();
        if samples.len() < 64 {
            return;
        }
        let Some(newest) = self.history.last_head().map(|s| s.at_ns) else {
            return;
        };
        let cutoff = newest.saturating_sub(CLOCK_LATE_NS);
        let before = samples.partition_point(|s| s.real_ns <= cutoff);
        let Some(by_time) = before.checked_sub(1).map(|i| samples[i].tsc) else {
            return;
        };
        let limit = self.recent.iter().map(|e| e.tsc).fold(by_time, u64::min);
        self.clock.forget_before(limit);
    }

    /// The layers this process used (`Layer::bit()` set): what its latest snapshot says, with
    /// the layers of its endpoints and counted operations (all a record of schema 1, which did
    /// not say, can tell). `identity.layers` is what was enabled.
    pub fn layers_used(&self) -> u32 {
        let mut m = self.history.last_head().map_or(0, |s| s.layers_used);
        m |= self.endpoints.values().fold(0, |m, d| m | d.layer.bit());
        m | self
            .history
            .last_keys()
            .filter_map(|(_, op)| Op::from_u8(op))
            .fold(0, |m, op| m | op.layer().bit())
    }
}

/// The sampled events of one process that the views read: the doorbells and the WQEs recovered
/// behind them (mlx5-layer operations) among its latest `RECENT_EVENTS` events. The others are
/// counted, not kept: a busy job sends thousands of them per second and nothing reads them.
#[derive(Clone, Debug, Default)]
pub struct RecentEvents {
    /// (position among all events seen, event), oldest first.
    kept: VecDeque<(u64, Event)>,
    /// Events seen so far.
    seen: u64,
}

/// Is `e` one of the sampled events the views read (a doorbell or a WQE behind it: an
/// mlx5-layer operation)? The others are counted, not kept.
pub fn event_kept(e: &Event) -> bool {
    Op::from_u8(e.op).is_some_and(|o| o.layer() == Layer::Mlx5)
}

impl RecentEvents {
    pub fn push(&mut self, e: Event) {
        self.seen += 1;
        if event_kept(&e) {
            self.kept.push_back((self.seen, e));
        }
        self.forget();
    }

    /// A batch of `total` events of which only `kept` were sent, each with its index in the
    /// batch (ascending; the others were not `event_kept`): the same as pushing all of them.
    /// Indexes out of order or past `total` end the batch there.
    pub fn push_some(&mut self, kept: Vec<(u32, Event)>, total: u32) {
        let base = self.seen;
        let mut next = 0u64;
        for (i, e) in kept {
            let i = u64::from(i);
            if i < next || i >= u64::from(total) {
                break;
            }
            next = i + 1;
            self.seen = base + next;
            if event_kept(&e) {
                self.kept.push_back((self.seen, e));
            }
        }
        self.seen = base + u64::from(total);
        self.forget();
    }

    fn forget(&mut self) {
        let first = self.seen.saturating_sub(RECENT_EVENTS as u64);
        while self.kept.front().is_some_and(|(n, _)| *n <= first) {
            self.kept.pop_front();
        }
    }

    /// The kept events, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Event> + '_ {
        self.kept.iter().map(|(_, e)| e)
    }

    /// Number of kept events.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
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

/// A traced process whose socket is there but which has not said hello (its collector does not
/// accept or answer: the process is stopped, or hung hard): known by its socket alone.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NotAnswering {
    /// Since when (ns, CLOCK_REALTIME, the reader's clock): the first connection attempt.
    pub since_ns: u64,
    /// The program's name (`/proc/PID/comm`), when it could be read.
    pub exe: String,
    /// `/proc/PID/stat` says it is stopped (state T: SIGSTOP, Ctrl-Z, a debugger).
    pub stopped: bool,
}

/// The model of all processes.
#[derive(Default)]
pub struct Model {
    pub processes: BTreeMap<ProcKey, ProcessState>,
    /// Traced processes of this host that do not answer (no hello yet), by (host, pid): listed
    /// as such, never dropped (`live::LiveSource` fills it).
    pub not_answering: BTreeMap<(String, u32), NotAnswering>,
    /// Messages about sources (refused sockets, bad frames), newest last.
    pub messages: Vec<String>,
    /// Remote hosts in the order they were given (empty for a local attach, a run or a replay).
    pub links: Vec<HostLink>,
    /// Changes with every frame that changes who is who (identities, endpoints, their peers,
    /// new processes): what derived tables (owners of addresses, node and rank rows) are keyed
    /// on.
    topology: u64,
}

/// Counters of one endpoint over a period, by op code.
pub type OpTable = BTreeMap<u8, (u64, u64)>;

impl Model {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn process_mut(&mut self, key: &ProcKey) -> &mut ProcessState {
        if !self.processes.contains_key(key) {
            self.topology += 1;
        }
        self.processes.entry(key.clone()).or_default()
    }

    /// A number that changes whenever identities, endpoints, their peers or the set of
    /// processes change through `apply` / `process_mut` (not when counters move).
    pub fn topology_generation(&self) -> u64 {
        self.topology
    }

    /// How many snapshots each process keeps now.
    fn keep(&self) -> Keep {
        Keep {
            max: HISTORY,
            bytes: HISTORY_BYTES / self.processes.len().max(1),
            floor_ns: WINDOW_FLOOR_NS,
        }
    }

    /// Applies one live frame from the process `key`.
    pub fn apply(&mut self, key: &ProcKey, frame: Frame) {
        if !matches!(
            frame,
            Frame::Clock(_)
                | Frame::Snapshot(_)
                | Frame::Events(_)
                | Frame::Bye { .. }
                | Frame::Missed { .. }
                | Frame::Nccl(_)
                | Frame::Queues(_)
                | Frame::NcclWaits(_)
                | Frame::NcclCalls(_)
        ) {
            self.topology += 1;
        }
        let keep = self.keep();
        let names = matches!(frame, Frame::Hello { .. } | Frame::Identity(_));
        // One lookup for the frames of a process already known (a job sends thousands a second).
        match self.processes.get_mut(key) {
            Some(p) => p.apply(frame, keep),
            None => {
                self.topology += 1;
                self.processes
                    .entry(key.clone())
                    .or_default()
                    .apply(frame, keep);
            }
        }
        if names {
            self.mark_fork_children();
        }
    }

    /// `pid` ended as `end` says (the program `sigmatop run` started and reaped, or a child its
    /// traced parent reaped: an MPI rank under `mpirun`). Its newest record (an exec makes a
    /// second one) carries it; false when no process has that pid (on `host`, when given).
    pub fn note_end(&mut self, host: Option<&str>, pid: u32, end: ProcessEnd) -> bool {
        let Some(p) = self
            .processes
            .iter_mut()
            .filter(|(k, _)| k.pid == pid && host.is_none_or(|h| h == k.host))
            .max_by_key(|(k, _)| k.start_ns)
            .map(|(_, p)| p)
        else {
            return false;
        };
        match end {
            ProcessEnd::Signal(s) => {
                p.exit_signal = Some(s);
                p.problem = Some(end.describe());
                p.exited = true;
            }
            ProcessEnd::Exit(c) => {
                p.exit_code = Some(c);
                if p.problem.is_none() {
                    p.problem = Some(end.describe());
                }
            }
        }
        true
    }

    /// Processes whose parent is a traced process of the same host and the same rank (they
    /// inherited its rank variables through fork, and exec keeps them) are that rank's children,
    /// not ranks: their rank moves to `child_of_rank`. Run whenever an identity arrives (a child
    /// may say hello before its parent).
    fn mark_fork_children(&mut self) {
        let ranks: HashMap<(&str, u32), u32> = self
            .processes
            .iter()
            .filter_map(|(k, p)| {
                p.identity
                    .rank
                    .or(p.child_of_rank)
                    .map(|r| ((k.host.as_str(), k.pid), r))
            })
            .collect();
        let mut children = Vec::new();
        for (k, p) in &self.processes {
            let own = p.identity.rank.or(p.child_of_rank);
            let parent = ranks.get(&(k.host.as_str(), p.identity.ppid)).copied();
            // The same pid (a record before and after exec) is not its own parent.
            if own.is_some()
                && own == parent
                && p.identity.ppid != k.pid
                && p.identity.rank.is_some()
            {
                children.push(k.clone());
            }
        }
        for k in children {
            if let Some(p) = self.processes.get_mut(&k) {
                p.child_of_rank = p.identity.rank.take();
            }
        }
    }

    /// Applies the totals of one snapshot of process `key` that a relay sent without its
    /// counters (or with the whole snapshot just applied: then only its "now" is taken). False
    /// when the process has no whole snapshot yet, or too many came as totals in a row
    /// (`snapshots::MAX_TOTALS_RUN`): no honest relay sends that.
    pub fn apply_totals(&mut self, key: &ProcKey, t: &Totals) -> bool {
        self.apply_totals_with(key, 0, None, t)
    }

    /// `apply_totals`, after `unsent_events` sampled events that were counted, not sent
    /// (`RecentEvents::push_some`), and a clock sample (as `Frame::Clock`): what a relay's
    /// `Totals` frame carries, with one look-up of the process.
    pub fn apply_totals_with(
        &mut self,
        key: &ProcKey,
        unsent_events: u32,
        clock: Option<ClockSample>,
        t: &Totals,
    ) -> bool {
        let keep = self.keep();
        let Some(p) = self.processes.get_mut(key) else {
            return false;
        };
        if unsent_events > 0 {
            p.recent.push_some(Vec::new(), unsent_events);
        }
        if let Some(c) = clock {
            p.apply(Frame::Clock(c), keep);
        }
        if p.history.companion(t) {
            return true;
        }
        if !p.history.push_totals(t, keep) {
            return false;
        }
        p.forget_old_clock();
        true
    }

    /// Sampled events of process `key` that a relay sent in part (`relay::RelayFrame::Events`):
    /// false when the process is not known.
    pub fn apply_events(&mut self, key: &ProcKey, kept: Vec<(u32, Event)>, total: u32) -> bool {
        let Some(p) = self.processes.get_mut(key) else {
            return false;
        };
        p.recent.push_some(kept, total);
        true
    }

    /// Counters of the newest whole snapshot of every process: what a relay sends each tick
    /// when it sends every QP's counters.
    pub fn counters(&self) -> usize {
        self.processes
            .values()
            .filter(|p| !p.exited)
            .map(|p| p.history.last_counters())
            .sum()
    }

    /// Frames (and the sampled events in them) the processes could not send to this reader
    /// because it read too slowly, summed over the processes.
    pub fn missed(&self) -> (u64, u64) {
        self.processes
            .values()
            .fold((0, 0), |a, p| (a.0 + p.missed.0, a.1 + p.missed.1))
    }

    /// A frame of process `key` arrived at `now_ns` (the reader's clock): what a live view
    /// judges silence by.
    pub fn seen(&mut self, key: &ProcKey, now_ns: u64) {
        if let Some(p) = self.processes.get_mut(key) {
            p.last_seen_ns = now_ns;
        }
    }

    /// Process `pid` of `host` has a socket but does not answer (`Some`), or answers again or is
    /// gone (`None`).
    pub fn note_not_answering(&mut self, host: &str, pid: u32, state: Option<NotAnswering>) {
        let key = (host.to_string(), pid);
        match state {
            Some(s) => {
                self.not_answering.insert(key, s);
            }
            None => {
                self.not_answering.remove(&key);
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
            if let Some(q) = pr.queues.last() {
                m.apply(&key, Frame::Queues(q.clone()));
            }
            // Its NCCL calls as the live tracker left them at the record's end (where a record
            // cut by a hang waited).
            if let Some(t) = crate::nccl::live::Tracker::of_file(pr) {
                m.apply(&key, Frame::Nccl(t.live()));
                m.apply(&key, Frame::NcclWaits(t.waits()));
                m.apply(&key, Frame::NcclCalls(t.calls()));
            }
            let p = m.process_mut(&key);
            p.exited = true;
            p.said_bye = pr.end.is_some();
            if pr.is_cut() {
                p.problem = Some("record cut: the process did not shut down cleanly".into());
            }
            if let Some(end) = pr.reaped {
                m.note_end(Some(&key.host), key.pid, end);
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

    /// Some traced process made an operation that moves bytes (a send, a write, a completed
    /// receive...): `sigmatop run` looks at what the program loaded until one does.
    pub fn any_operation(&self) -> bool {
        self.processes
            .values()
            .any(|p| p.history.last_sums().ops > 0)
    }

    /// Latest time seen in any snapshot.
    pub fn latest_ns(&self) -> u64 {
        self.processes
            .values()
            .filter_map(|p| p.history.last_head().map(|s| s.at_ns))
            .max()
            .unwrap_or(0)
    }

    /// Sum of drop counters over all processes (latest snapshot of each).
    pub fn drops(&self) -> DropCounters {
        let mut d = DropCounters::default();
        for p in self.processes.values() {
            if let Some(s) = p.history.last_head() {
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
