//! The aggregate report of a model: cumulative totals per process, endpoint and operation, each
//! endpoint's peer, and the rank and node matrices. `export --json` (docs/JSON.md), `attach
//! --json`, run summaries and tests read it.

use std::collections::BTreeMap;

use serde::Serialize;

use super::matrix::{Groups, Matrix, UNTRACED};
use super::model::{Model, ProcKey, ProcessState};
use super::peers::{EndpointPeer, Peers};
use crate::event::{Dir, DropCounters, EndpointKind, Op, OpCount, UNATTRIBUTED_EP};

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// Totals of traffic in one direction over a period. Received bytes are the bytes that arrived;
/// the receive buffers posted, and the posts the library refused, are apart (written only when
/// there are some, so reports of older records read as they did).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Flow {
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    pub tx_ops: u64,
    pub rx_ops: u64,
    pub other_ops: u64,
    /// Posts the library refused (`-FI_EAGAIN`, an error status, a verbs `bad_wr`): the provider
    /// was busy; not in the operations above.
    #[serde(skip_serializing_if = "is_zero")]
    pub refused: u64,
    /// Operations that failed: error completions (verbs work completions other than flushes,
    /// failed UCX or libfabric receives), failed calls. Counted in the operations above too,
    /// except verbs error completions, whose operation was counted when it was posted.
    #[serde(skip_serializing_if = "is_zero")]
    pub errors: u64,
    /// Receive buffers posted, and their bytes.
    #[serde(skip_serializing_if = "is_zero")]
    pub posted: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub posted_bytes: u64,
}

impl Flow {
    /// Adds one (endpoint, op) counter.
    pub fn add_count(&mut self, c: &OpCount) {
        self.add_op(c.op, c.ops, c.bytes);
        self.refused += c.refused;
        self.errors += c.errors;
        self.posted += c.posted;
        self.posted_bytes += c.posted_bytes;
    }

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
        self.refused += o.refused;
        self.errors += o.errors;
        self.posted += o.posted;
        self.posted_bytes += o.posted_bytes;
    }
    pub fn ops(&self) -> u64 {
        self.tx_ops + self.rx_ops + self.other_ops
    }
}

/// Who sent how much to whom, cumulative: the process matrix of a model.
pub struct Traffic<'m> {
    /// The processes in model order: the matrix's rows and columns.
    pub procs: Vec<(&'m ProcKey, &'m ProcessState)>,
    pub peers: Peers,
    /// (from, to) → bytes; `to` or `from` is `UNTRACED` for peers that are not traced.
    pub cells: BTreeMap<(u32, u32), u64>,
}

impl Model {
    /// The process matrix from each process's latest snapshot: sends and writes count from the
    /// issuer to the endpoint's peer, one-sided reads from the peer to the issuer; a peer that is
    /// not traced is `UNTRACED`; an endpoint with several traced peers (libfabric RDM) cannot say
    /// which got what and is left out.
    pub fn traffic(&self) -> Traffic<'_> {
        let procs: Vec<(&ProcKey, &ProcessState)> = self.processes.iter().collect();
        let peers = Peers::build(
            procs
                .iter()
                .map(|(_, p)| (&p.identity, p.endpoints_with_ports())),
        );
        let mut cells: BTreeMap<(u32, u32), u64> = BTreeMap::new();
        for (pi, (_, p)) in procs.iter().enumerate() {
            let Some(last) = p.last() else { continue };
            for c in &last.counts {
                let Some(toward) = Op::from_u8(c.op).and_then(Op::toward_peer) else {
                    continue;
                };
                let other = match p.endpoints.get(&c.ep) {
                    Some(d) => {
                        let x = peers.of(pi as u32, d, p.av_of(c.ep));
                        if x.several {
                            continue;
                        }
                        x.process.unwrap_or(UNTRACED)
                    }
                    None => UNTRACED,
                };
                let cell = if toward {
                    (pi as u32, other)
                } else {
                    (other, pi as u32)
                };
                *cells.entry(cell).or_default() += c.bytes;
            }
        }
        Traffic {
            procs,
            peers,
            cells,
        }
    }

    /// The aggregate report of the whole model (cumulative totals).
    pub fn report(&self) -> Report {
        let mut r = Report {
            schema: Report::SCHEMA,
            kind: "summary",
            ..Default::default()
        };
        let Traffic {
            procs,
            peers,
            cells,
        } = self.traffic();
        let groups = Groups::new(
            procs
                .iter()
                .map(|(k, p)| (p.identity.rank, k.host.as_str())),
        );
        let hang = super::warnings::hang_ns();
        let queue_times = self.queue_times();
        for (pi, (key, p)) in procs.iter().enumerate() {
            let Some(last) = p.last() else {
                r.processes.push(ProcessReport::empty(key, p));
                continue;
            };
            let mut per_ep: BTreeMap<u32, Vec<&OpCount>> = BTreeMap::new();
            for c in &last.counts {
                per_ep.entry(c.ep).or_default().push(c);
            }
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
                    // At the time the stalled edges are judged, so the two agree; a process
                    // not judged (silent) keeps its last figures and is not called stalled.
                    queue: p.queues.as_ref().and_then(|qs| {
                        let q = qs.queues.iter().find(|q| q.ep == *ep)?;
                        Some(match queue_times.get(key) {
                            Some(&t) => QueueReport::of(&q.at(qs.at_ns, t), t, hang),
                            None => QueueReport {
                                stalled: false,
                                ..QueueReport::of(q, qs.at_ns, hang)
                            },
                        })
                    }),
                };
                if let Some(d) = def {
                    er.peer = PeerRef::of(&procs, &peers.of(pi as u32, d, p.av_of(*ep)));
                }
                for c in ops {
                    er.flow.add_count(c);
                    let name = Op::from_u8(c.op)
                        .map(|o| o.name().to_string())
                        .unwrap_or_else(|| format!("op{}", c.op));
                    let e = er.ops.entry(name).or_default();
                    e.ops += c.ops;
                    e.bytes += c.bytes;
                    e.refused += c.refused;
                    e.errors += c.errors;
                    e.posted += c.posted;
                    e.posted_bytes += c.posted_bytes;
                }
                pr.flow.add(&er.flow);
                pr.endpoints.push(er);
            }
            r.totals.add(&pr.flow);
            r.processes.push(pr);
        }
        r.drops = self.drops();
        let (frames, events) = self.missed();
        r.live_missed = LiveMissed { frames, events };
        let m = groups.fold(cells);
        r.rank_matrix = m.rank;
        r.node_matrix = m.node;
        r.messages = self.messages.clone();
        r.hosts = self.links.clone();
        r.stalls = self.stall_reports(hang);
        r.gpu_stops = self.gpu_stop_reports(hang);
        r.nccl_hung = self.hung_reports(hang);
        r
    }

    /// The longest period of a recording in which no traced process received a byte, and who was
    /// waiting on whom at its end
    /// (`agg::waits::longest_quiet`): what `report` and `export --json` say. None when nothing
    /// moved.
    pub fn quiet_report(&self) -> Option<QuietReport> {
        let q = super::waits::longest_quiet(self)?;
        // Just before its end: a process that was stopped is silent until the snapshot that
        // ends the quiet period.
        let at = super::at::ModelAt::new(
            self,
            &super::at::AtOptions {
                at: Some(q.to_ns.saturating_sub(1)),
                ..Default::default()
            },
        );
        // Waits shorter than the default threshold are still waits when the whole job was
        // quiet that long: judged over the quiet period itself.
        let wait_ns = super::warnings::hang_ns()
            .min((q.to_ns - q.from_ns) / 2)
            .max(1);
        let waits = self.wait_reports(&at, wait_ns);
        // The one the others waited for; else one that had stopped reporting.
        let straggler = waits
            .iter()
            .find(|w| !w.waited_on_by.is_empty() || !w.behind.is_empty())
            .or_else(|| waits.iter().find(|w| w.silent_s.is_some()))
            .map(|w| w.process.clone());
        Some(QuietReport {
            from_ns: q.from_ns,
            to_ns: q.to_ns,
            seconds: secs(q.to_ns - q.from_ns),
            waits,
            straggler,
        })
    }

    fn wait_reports(&self, at: &super::at::ModelAt, wait_ns: u64) -> Vec<WaitReport> {
        let w = super::waits::waits(at, wait_ns);
        let proc_ref = |p: u32| {
            at.procs
                .get(p as usize)
                .map_or_else(ProcessRef::default, |a| ProcessRef {
                    host: a.key.host.clone(),
                    pid: a.key.pid,
                    rank: a.p.identity.rank,
                })
        };
        w.waited_on
            .iter()
            .map(|x| WaitReport {
                process: proc_ref(x.proc),
                silent_s: x.silent_ns.map(secs),
                quiet_s: secs(x.quiet_ns),
                waited_on_by: x
                    .waiters
                    .iter()
                    .map(|y| Waiter {
                        process: proc_ref(y.proc),
                        endpoint: super::waits::endpoint_name(at, y.proc, y.ep),
                        receives_posted: y.outstanding,
                    })
                    .collect(),
                behind: x.behind.iter().map(|&p| proc_ref(p)).collect(),
                text: super::waits::text(at, x),
            })
            .collect()
    }

    /// The hung NCCL calls at the view time: now for a live model, the newest data of a record.
    pub fn hung_reports(&self, threshold_ns: u64) -> Vec<HungReport> {
        if !self.processes.values().any(|p| p.nccl.is_some()) {
            return Vec::new();
        }
        let live = self.processes.values().any(|p| !p.exited);
        let t = if live {
            super::nccl::wall_ns().max(self.latest_ns())
        } else {
            self.latest_ns()
        };
        super::nccl::collectives(self, t, threshold_ns)
            .hung
            .iter()
            .map(|h| HungReport {
                comm: format!("{:016x}", h.comm_id),
                func: h.func.clone(),
                seq: h.seq,
                rank: h.p2p.map(|p| p.rank),
                peer: h.p2p.map(|p| p.peer),
                open_s: h.open_ns as f64 / 1e9,
                waiting_for: h.waiting_for.clone(),
                silent: h.silent.clone(),
                wheres: h
                    .wheres
                    .iter()
                    .map(|w| WhereReport {
                        rank: w.rank,
                        channel: w.channel,
                        send: w.send,
                        peer: w.peer,
                        state: w.state_name(),
                        for_s: w.for_ns as f64 / 1e9,
                        qpn: w.qp.map(|q| q.0),
                        outstanding: w.qp.map(|q| q.1),
                        steps_done: w.steps_done,
                        steps: w.steps,
                        text: w.text(),
                    })
                    .collect(),
                text: super::nccl::hung_text(h),
            })
            .collect()
    }

    /// `report`, live: at wall clock `now_ns` (None: the model's newest data), each process's
    /// state (`running`, `silent` with its `silent_s`, `exited`), the processes whose socket is
    /// there but which do not answer (`not answering`: never dropped), and who waits on whom
    /// (`waits`, `agg::waits`).
    pub fn report_at(&self, now_ns: Option<u64>) -> Report {
        let mut r = self.report();
        let at = super::at::ModelAt::new(
            self,
            &super::at::AtOptions {
                now_ns,
                ..Default::default()
            },
        );
        // `report` lists the processes in model order, as `ModelAt` does without a view time.
        for (pi, pr) in r.processes.iter_mut().enumerate() {
            if let Some(ns) = at.silent_ns(pi as u32) {
                pr.state = "silent";
                pr.silent_s = Some(secs(ns));
            }
        }
        let now = at.live_now.unwrap_or(at.t);
        for ((host, pid), n) in &self.not_answering {
            r.processes.push(ProcessReport {
                host: host.clone(),
                pid: *pid,
                exe: n.exe.clone(),
                state: "not answering",
                silent_s: Some(secs(now.saturating_sub(n.since_ns))),
                problem: Some(format!(
                    "traced (its socket is there) but not answering{}",
                    if n.stopped {
                        ": stopped (SIGSTOP, Ctrl-Z or a debugger)"
                    } else {
                        ""
                    }
                )),
                ..Default::default()
            });
        }
        r.waits = self.wait_reports(&at, super::warnings::hang_ns());
        r
    }

    /// The stalled edges at the newest data (none unless some process reports send work
    /// outstanding).
    /// The view and scope queues are judged in: a live model judges the processes that report,
    /// a record each process as it ended. None when no queue has send work outstanding (nothing
    /// can be stalled, and no view need be built).
    fn queue_view(&self) -> Option<(super::at::ModelAt<'_>, super::stalls::Scope)> {
        let outstanding = self.processes.values().any(|p| {
            p.queues
                .as_ref()
                .is_some_and(|q| q.queues.iter().any(|s| s.sq_outstanding() > 0))
        });
        if !outstanding {
            return None;
        }
        let at = super::at::ModelAt::new(
            self,
            &super::at::AtOptions {
                detail: super::at::Detail::Processes,
                ..Default::default()
            },
        );
        let live = self.processes.values().any(|p| !p.exited);
        let scope = if live {
            super::stalls::Scope::Reporting
        } else {
            super::stalls::Scope::AtTheirEnd
        };
        Some((at, scope))
    }

    /// Per process, the time its queues are judged at (`stalls::judged_at`); absent: not judged.
    fn queue_times(&self) -> BTreeMap<ProcKey, u64> {
        let Some((at, scope)) = self.queue_view() else {
            return BTreeMap::new();
        };
        (0..at.procs.len())
            .filter_map(|i| {
                super::stalls::judged_at(&at, i, scope).map(|t| (at.procs[i].key.clone(), t))
            })
            .collect()
    }

    /// GPUs whose QPs stopped ringing at the newest data, the first to stop first (a live view:
    /// processes that report now; none when no running process has a GPU QP).
    pub fn gpu_stop_reports(&self, threshold_ns: u64) -> Vec<GpuStopReport> {
        let gpu_qps = self.processes.values().any(|p| {
            !p.exited
                && p.endpoints
                    .values()
                    .any(|d| d.gpu.is_some() || d.kind == crate::event::EndpointKind::DevxQp)
        });
        if !gpu_qps {
            return Vec::new();
        }
        let at = super::at::ModelAt::new(
            self,
            &super::at::AtOptions {
                detail: super::at::Detail::Processes,
                ..Default::default()
            },
        );
        let stops = super::gpu_stops::gpu_stops(&at, threshold_ns);
        stops
            .iter()
            .zip(super::gpu_stops::texts(&stops))
            .map(|(s, (text, _))| GpuStopReport {
                host: s.host.clone(),
                pid: s.pid,
                rank: s.rank,
                gpu: s.gpu,
                qpn: s.qpn,
                qps: s.qps,
                quiet_s: s.quiet_ns as f64 / 1e9,
                text,
            })
            .collect()
    }

    pub fn stall_reports(&self, threshold_ns: u64) -> Vec<StallReport> {
        let Some((at, scope)) = self.queue_view() else {
            return Vec::new();
        };
        super::stalls::stalls_in(&at, threshold_ns, scope)
            .into_iter()
            .map(|s| StallReport {
                host: s.host.clone(),
                pid: s.pid,
                rank: s.rank,
                peer: s.peer.text(),
                qpn: s.qpn,
                qps: s.qps,
                outstanding: s.outstanding,
                stalled_s: s.stalled_ns as f64 / 1e9,
                text: s.text(),
            })
            .collect()
    }
}

/// Seconds, to the millisecond.
fn secs(ns: u64) -> f64 {
    (ns / 1_000_000) as f64 / 1e3
}

/// A traced process, by its host, pid and rank.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct ProcessRef {
    pub host: String,
    pub pid: u32,
    pub rank: Option<u32>,
}

/// A process the others wait on, live (`Report::waits`, `agg::waits`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct WaitReport {
    pub process: ProcessRef,
    /// Seconds since its last frame, when it is silent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub silent_s: Option<f64>,
    /// Seconds it has sent nothing (0 when it is silent, or sends to others).
    pub quiet_s: f64,
    /// The endpoints that wait on it directly.
    pub waited_on_by: Vec<Waiter>,
    /// Processes that wait on it through others.
    pub behind: Vec<ProcessRef>,
    /// The warning's text.
    pub text: String,
}

/// The longest quiet period of a recording (`Model::quiet_report`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct QuietReport {
    /// From the last snapshot that saw bytes arrive to the last one before they arrived again
    /// (ns, CLOCK_REALTIME), and its length in seconds.
    pub from_ns: u64,
    pub to_ns: u64,
    pub seconds: f64,
    /// Who waited on whom at its end (silent processes included).
    pub waits: Vec<WaitReport>,
    /// The process the others waited for (the first one waited on), if any.
    pub straggler: Option<ProcessRef>,
}

/// One endpoint that waits (`WaitReport::waited_on_by`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Waiter {
    pub process: ProcessRef,
    /// "QP 0x107", "ucp_worker", "ep#3".
    pub endpoint: String,
    /// Receives posted there and not completed (0: its peer is silent and nothing moves).
    pub receives_posted: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct OpTotals {
    pub ops: u64,
    pub bytes: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub refused: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub errors: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub posted: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub posted_bytes: u64,
}

/// The other side of an endpoint: a traced process (`host`, `pid`, `rank`), or for a verbs /
/// devx QP whose peer is not traced its address (and its host, when a traced process is on
/// that port address), never another process.
#[derive(Clone, Debug, Default, Serialize)]
pub struct PeerRef {
    /// The peer's host: the traced process's, or for an untraced peer the host of a traced
    /// process on its port address (absent when none is known).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The traced peer process (absent: not traced).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    pub rank: Option<u32>,
    /// The peer is a traced process.
    pub traced: bool,
    /// Verbs / devx QPs: the peer's address, `10.0.1.1 qp 0x10c` (IPv4-mapped GID), `lid 3 qp
    /// 0x10c` (InfiniBand without a GRH), `fe80::2c9:300:0:3 qp 0x10c` (another GID), or `qp
    /// 0x10c` where the record has no address.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

impl PeerRef {
    /// The peer of an endpoint resolved by `agg::peers`: None when there is nothing to name (no
    /// traced process and no QP address).
    pub fn of(procs: &[(&ProcKey, &ProcessState)], x: &EndpointPeer) -> Option<PeerRef> {
        let address = x.addr.map(|a| a.text(None));
        if let Some((pk, pps)) = x.process.and_then(|pp| procs.get(pp as usize)) {
            return Some(PeerRef {
                host: Some(pk.host.clone()),
                pid: Some(pk.pid),
                rank: pps.identity.rank,
                traced: true,
                address,
            });
        }
        let a = x.addr?;
        Some(PeerRef {
            host: a
                .host_of
                .and_then(|h| procs.get(h as usize))
                .map(|(k, _)| k.host.clone()),
            pid: None,
            rank: None,
            traced: false,
            address,
        })
    }

    /// How the report tables name it: `node1 pid 4121 r3`; an untraced peer by its address,
    /// `10.0.1.1 qp 0x10c`, or on a known host `node1 qp 0x10c`.
    pub fn label(&self) -> String {
        if let Some(pid) = self.pid {
            return format!(
                "{} pid {pid}{}",
                self.host.as_deref().unwrap_or("?"),
                self.rank.map(|r| format!(" r{r}")).unwrap_or_default()
            );
        }
        let addr = self.address.as_deref().unwrap_or("?");
        match (&self.host, addr.find(" qp ")) {
            (Some(h), Some(i)) => format!("{h}{}", &addr[i..]),
            _ => addr.to_string(),
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct EndpointReport {
    pub id: u32,
    pub layer: String,
    pub kind: String,
    pub label: String,
    pub transport: String,
    pub state: String,
    /// The traced process on the other side, when it is in this model; for a verbs / devx QP
    /// whose peer is not traced, that peer's address.
    pub peer: Option<PeerRef>,
    pub peer_text: String,
    #[serde(flatten)]
    pub flow: Flow,
    /// By operation name: calls and payload bytes.
    pub ops: BTreeMap<String, OpTotals>,
    /// Outstanding work of a verbs QP or SRQ (absent for other endpoints, and for processes
    /// whose preload sends no queues).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueReport>,
}

/// A QP's (or SRQ's) work queues as its process last reported them (`queue::QueueState`): counts
/// cumulative, ages in seconds at `at_ns` (the time the stalled edges are judged at: the view
/// time while the process reports, its end in a record; else its last interval).
#[derive(Clone, Debug, Default, Serialize)]
pub struct QueueReport {
    /// CLOCK_REALTIME ns the ages are at.
    pub at_ns: u64,
    /// live | error | destroyed
    pub health: &'static str,
    pub sq_posted: u64,
    pub sq_completed: u64,
    pub sq_outstanding: u64,
    /// Signaled send work requests whose completion has not come (what the program awaits).
    pub sq_signaled_outstanding: u64,
    /// Seconds the oldest outstanding signaled send work request has waited since it was posted.
    pub sq_oldest_s: f64,
    /// Seconds with send work outstanding and no send completion.
    pub sq_stalled_s: f64,
    pub rq_posted: u64,
    pub rq_completed: u64,
    pub rq_outstanding: u64,
    pub rq_oldest_s: f64,
    /// Seconds since the last completion (null: none yet).
    pub last_completion_s: Option<f64>,
    /// Error completions by status name ("transport retry exceeded": 1, "flushed": 127).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub errors: BTreeMap<String, u64>,
    /// Send completions beyond the work sigmatop saw posted (counted, never guessed into the
    /// counts).
    #[serde(skip_serializing_if = "is_zero")]
    pub unmatched: u64,
    /// Its CQ is polled through ibv_start_poll (not seen): completions unknown, never stalled.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub blind: bool,
    /// Stalled at the hang threshold.
    pub stalled: bool,
}

impl QueueReport {
    pub fn of(q: &crate::queue::QueueState, at_ns: u64, threshold_ns: u64) -> QueueReport {
        use crate::queue::QueueHealth;
        let s = |ns: u64| ns as f64 / 1e9;
        QueueReport {
            at_ns,
            health: match q.health {
                QueueHealth::Live => "live",
                QueueHealth::Error => "error",
                QueueHealth::Destroyed => "destroyed",
            },
            sq_posted: q.sq_posted,
            sq_completed: q.sq_completed,
            sq_outstanding: q.sq_outstanding(),
            sq_signaled_outstanding: q.sq_signaled_outstanding,
            sq_oldest_s: s(q.sq_oldest_ns),
            sq_stalled_s: s(q.sq_stalled_ns),
            rq_posted: q.rq_posted,
            rq_completed: q.rq_completed,
            rq_outstanding: q.rq_outstanding(),
            rq_oldest_s: s(q.rq_oldest_ns),
            last_completion_s: q.last_completion_ns.map(s),
            errors: q
                .errors
                .iter()
                .map(|(st, n)| (crate::queue::status_name(*st).to_string(), *n))
                .collect(),
            unmatched: q.unmatched,
            blind: q.blind,
            stalled: q.stalled(threshold_ns),
        }
    }
}

/// A GPU whose QPs stopped ringing, as the JSON reports it (`agg::gpu_stops::GpuStop`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct GpuStopReport {
    pub host: String,
    pub pid: u32,
    pub rank: Option<u32>,
    pub gpu: Option<u32>,
    /// The QP named (the one that rang last).
    pub qpn: Option<u32>,
    /// Its QPs that stopped (every one that rang).
    pub qps: u32,
    /// Seconds since the last doorbell (at least).
    pub quiet_s: f64,
    /// The warning's text (the first to stop said so when the order is known).
    pub text: String,
}

/// A stalled edge as the JSON reports it (`agg::stalls::Stall`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct StallReport {
    pub host: String,
    pub pid: u32,
    pub rank: Option<u32>,
    /// The peer: "node2 r1 pid 4712", or its address when it is not traced.
    pub peer: String,
    pub qpn: Option<u32>,
    /// Stalled QPs of this edge (the one named included).
    pub qps: u32,
    pub outstanding: u64,
    pub stalled_s: f64,
    /// The warning's text.
    pub text: String,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ProcessReport {
    pub host: String,
    pub pid: u32,
    pub rank: Option<u32>,
    /// A process a rank forked (with or without an exec): that rank; `rank` is then null.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub child_of_rank: Option<u32>,
    /// The signal that killed it, when known (the program `sigmatop run` started, or a child its
    /// traced parent reaped, such as an MPI rank under `mpirun`); `problem`
    /// then says which ("killed by SIGSEGV (signal 11)").
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_signal: Option<i32>,
    /// Its non-zero exit status, when known (the program `sigmatop run` started, or a child
    /// its traced parent reaped, such as an MPI rank under `mpirun`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    pub exe: String,
    /// "running"; "silent" (live: it has not exited and no frame came for a while: stopped or
    /// hung; `silent_s` says how long); "not answering" (live: its socket is there, and it never
    /// said hello); "exited".
    pub state: &'static str,
    /// Seconds since its last frame (or since its socket first did not answer), when silent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub silent_s: Option<f64>,
    pub mode: String,
    /// The layers the process used (defined an endpoint or counted an operation in).
    pub layers: String,
    /// The layers that were enabled (written when they differ from those used).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub layers_enabled: String,
    pub clean_exit: bool,
    pub problem: Option<String>,
    pub events: u64,
    pub drops: DropCounters,
    /// Live only: frames the process could not send to this reader because it read too slowly
    /// (`Frame::Missed`), and the sampled events in them. Written when not zero.
    #[serde(skip_serializing_if = "LiveMissed::is_zero")]
    pub live_missed: LiveMissed,
    #[serde(flatten)]
    pub flow: Flow,
    pub endpoints: Vec<EndpointReport>,
}

/// What a live reader was not sent because it read too slowly: frames, and the sampled events
/// in them. Totals are never lost this way (snapshots are cumulative): resolution and sampled
/// events are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LiveMissed {
    pub frames: u64,
    pub events: u64,
}

impl LiveMissed {
    pub fn is_zero(&self) -> bool {
        self.frames == 0 && self.events == 0
    }
}

impl ProcessReport {
    fn empty(key: &ProcKey, p: &ProcessState) -> ProcessReport {
        ProcessReport {
            host: key.host.clone(),
            pid: key.pid,
            rank: p.identity.rank,
            child_of_rank: p.child_of_rank,
            exit_signal: p.exit_signal,
            exit_code: p.exit_code,
            exe: p.identity.exe.clone(),
            state: if p.exited { "exited" } else { "running" },
            silent_s: None,
            mode: p.identity.mode().name().to_string(),
            layers: crate::event::layer_names(p.layers_used()),
            layers_enabled: if p.layers_used() == p.identity.layers {
                String::new()
            } else {
                crate::event::layer_names(p.identity.layers)
            },
            clean_exit: p.said_bye,
            problem: p.problem.clone(),
            live_missed: LiveMissed {
                frames: p.missed.0,
                events: p.missed.1,
            },
            ..Default::default()
        }
    }
}

/// What `export --json` writes; schema in docs/JSON.md.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub schema: u32,
    /// Which document this is, both being schema 1: "summary" (`run --json`, `attach --json`:
    /// these fields alone) or "export" (`export --json`: these and the correlator's).
    pub kind: &'static str,
    pub totals: Flow,
    pub drops: DropCounters,
    /// Live only: summed `ProcessReport::live_missed`. Written when not zero.
    #[serde(skip_serializing_if = "LiveMissed::is_zero")]
    pub live_missed: LiveMissed,
    pub processes: Vec<ProcessReport>,
    pub rank_matrix: Matrix,
    pub node_matrix: Matrix,
    pub messages: Vec<String>,
    /// `attach HOST...`: every remote host with the state of its link (absent otherwise).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<super::model::HostLink>,
    /// Live: silent processes and the processes the others wait on (`agg::waits`), with who
    /// waits on them (absent when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waits: Vec<WaitReport>,
    /// Stalled edges at the newest data: QPs with send work outstanding and no completion past
    /// the hang threshold (absent when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stalls: Vec<StallReport>,
    /// GPUs whose QPs rang no doorbell past the hang threshold while their process reports
    /// (`agg::gpu_stops`), the first to stop first (absent when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub gpu_stops: Vec<GpuStopReport>,
    /// NCCL calls open past the hang threshold (`agg::nccl`): who they wait for, or, when every
    /// rank is in one and reports, where each rank waits (absent when none).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub nccl_hung: Vec<HungReport>,
}

/// A hung NCCL call as the JSON reports it (`agg::nccl::Hung`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct HungReport {
    /// NCCL's communicator id, hex.
    pub comm: String,
    pub func: String,
    /// A collective's sequence number; a point-to-point call's number in its lane.
    pub seq: u64,
    /// A point-to-point call: its rank and peer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer: Option<u32>,
    pub open_s: f64,
    /// Ranks that have not started it, or went silent.
    pub waiting_for: Vec<u32>,
    pub silent: Vec<u32>,
    /// Where it waits, closest to the cause first (every rank in it and reporting).
    pub wheres: Vec<WhereReport>,
    /// The warning's text.
    pub text: String,
}

/// One proxy operation of a hung call (`agg::nccl::WaitView`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct WhereReport {
    pub rank: u32,
    pub channel: u8,
    pub send: bool,
    pub peer: u32,
    /// network, send done, GPU produce, GPU consume, peer credit, data, idle.
    pub state: &'static str,
    pub for_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qpn: Option<u32>,
    /// Send WRs outstanding on that QP.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outstanding: Option<u64>,
    pub steps_done: u32,
    pub steps: u32,
    pub text: String,
}

impl Report {
    pub const SCHEMA: u32 = 1;
}
