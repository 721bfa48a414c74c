//! The JSON aggregate of `sigmatop export --json` (schema: docs/JSON.md) and the figures
//! `sigmatop report` prints: the snapshot `Report` of `agg`, with its matrices resolved by the
//! correlator, plus per-rank and per-node summaries, top talkers, egress skew, phase spread,
//! clock alignment, send/receive pairing and what was skipped.

use std::collections::BTreeMap;

use serde::Serialize;

use super::perfetto::PerfettoStats;
use crate::agg::matrix::{Groups, UNTRACED, UNTRACED_LABEL};
use crate::agg::{Matrix, Report};
use crate::correlate::doorbell::DoorbellStats;
use crate::correlate::matcher::MatchStats;
use crate::correlate::mr::{MAX_MRS_LISTED, MrListed, OneSidedStats};
use crate::correlate::{Analysis, Correlation, Phase};
use crate::event::Op;

/// Egress skew at or above this ratio (max / mean) is flagged.
pub const SKEW_FLAG: f64 = 1.5;

#[derive(Clone, Debug, Default, Serialize)]
pub struct RankSummary {
    pub rank: u32,
    pub host: String,
    pub pid: u32,
    pub exe: String,
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    pub tx_ops: u64,
    pub rx_ops: u64,
    /// Bytes this rank sent (row sum of the rank matrix: to other ranks and to untraced peers;
    /// one-sided reads count at the rank read from).
    pub egress_bytes: u64,
    /// Bytes sent to it (column sum of the rank matrix).
    pub ingress_bytes: u64,
    pub events: u64,
    pub phases: usize,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct NodeSummary {
    pub host: String,
    pub processes: usize,
    pub ranks: Vec<u32>,
    pub tx_bytes: u64,
    pub rx_bytes: u64,
    pub tx_ops: u64,
    pub rx_ops: u64,
    /// Bytes this node's processes sent, wherever to (row sum of the node matrix: its own
    /// node's processes, the other nodes', untraced peers): the same figure as the matrix's
    /// egress column and `skew.nodes.egress_bytes` (issue 39, item 1: one name, one quantity).
    pub egress_bytes: u64,
    /// Bytes sent to this node's processes (column sum of the node matrix).
    pub ingress_bytes: u64,
    /// Of `egress_bytes`, what left the node (to other nodes and to untraced peers).
    pub off_node_egress_bytes: u64,
    /// Of `ingress_bytes`, what came from other nodes (and untraced peers).
    pub off_node_ingress_bytes: u64,
    /// Bytes between processes of this node (in both `egress_bytes` and `ingress_bytes`).
    pub local_bytes: u64,
    pub events: u64,
    /// Largest clock error of this node's processes, ns (null: unknown).
    pub clock_err_ns: Option<u64>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Skew {
    pub labels: Vec<String>,
    pub egress_bytes: Vec<u64>,
    pub max_label: String,
    pub max_bytes: u64,
    pub mean_bytes: f64,
    /// max / mean (0 when nothing moved).
    pub ratio: f64,
    /// ratio ≥ 1.5 among 3 or more members (with two, max/mean says which way the traffic went).
    pub flagged: bool,
    /// The same of the ingress (column sums).
    pub ingress_bytes: Vec<u64>,
    pub ingress_max_label: String,
    pub ingress_ratio: f64,
    pub ingress_flagged: bool,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct SkewReport {
    pub nodes: Skew,
    pub ranks: Skew,
    pub processes: Skew,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Talker {
    pub from: String,
    pub to: String,
    pub bytes: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct PhaseSpread {
    pub index: usize,
    /// Earliest and latest start of this phase over the processes, CLOCK_REALTIME ns.
    pub first_start_ns: u64,
    pub last_start_ns: u64,
    /// last - first start: the barrier spread.
    pub start_spread_ns: u64,
    pub end_spread_ns: u64,
    pub last_process: String,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct PhaseReport {
    /// Quiet time that separates two phases of a process.
    pub gap_ns: u64,
    /// Phases found per process ("exe pid@host" → count).
    pub per_process: BTreeMap<String, usize>,
    /// True when every process with events has the same number of phases (then phase k of
    /// every process is taken to be the same program phase; otherwise phases are matched to the
    /// nearest start of the process with the fewest phases).
    pub aligned: bool,
    pub phases: Vec<PhaseSpread>,
    pub max_start_spread_ns: u64,
    pub median_start_spread_ns: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ProcessClock {
    pub host: String,
    pub pid: u32,
    pub samples: usize,
    /// Estimated error of a converted timestamp (null: unknown).
    pub err_ns: Option<u64>,
    pub pair_ns: u64,
    pub drift_ns: u64,
    /// Largest disagreement measured against another process of the same host (shared TSC).
    pub same_host_ns: u64,
    pub note: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct ClockReport {
    /// The clock all timestamps are converted to.
    pub timebase: String,
    pub processes: Vec<ProcessClock>,
    /// Worst error between two processes of the same host (sum of their errors).
    pub within_host_bound_ns: Option<u64>,
    /// Worst error between processes of different hosts, excluding the hosts' own
    /// CLOCK_REALTIME synchronisation (PTP/NTP), which a record cannot measure.
    pub cross_host_bound_ns: Option<u64>,
    /// Receives that completed inside their call yet appear before their send.
    pub causality_violations: u64,
    pub note: String,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Skipped {
    pub file: String,
    pub offset: u64,
    pub what: String,
}

/// Everything `export --json` writes.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Export {
    #[serde(flatten)]
    pub report: Report,
    /// How the rank / node / process matrices were built.
    pub matrices_source: String,
    /// Bytes sent, written or read on endpoints with several traced peers (libfabric RDM
    /// endpoints of processes whose events are not all on disk): in no matrix cell.
    pub matrix_left_out_bytes: u64,
    /// How many endpoints those bytes are on.
    pub matrix_left_out_endpoints: usize,
    pub process_matrix: Matrix,
    /// GPU × GPU bytes: per process and CUDA device ordinal ("r3:gpu0"), with the host memory
    /// of a process whose QP talks to a GPU as "r3:cpu" (correlate/gpu.rs).
    pub gpu_matrix: Matrix,
    /// Bytes of GPU endpoints whose peer QP is not among the traced ones.
    pub gpu_unresolved_bytes: u64,
    pub ranks: Vec<RankSummary>,
    pub nodes: Vec<NodeSummary>,
    pub top_talkers: Vec<Talker>,
    pub skew: SkewReport,
    pub phases: PhaseReport,
    pub clocks: ClockReport,
    pub flows: MatchStats,
    /// Doorbell → WQE association (GPU-initiated and devx QPs).
    pub doorbells: DoorbellStats,
    /// One-sided operations attributed to their target process through memory regions
    /// (per endpoint "target", and the table of regions).
    pub one_sided: OneSidedStats,
    pub events: u64,
    pub first_ns: u64,
    pub last_ns: u64,
    /// Record files (or parts of them) that could not be read.
    pub skipped: Vec<Skipped>,
    pub perfetto: Option<PerfettoStats>,
    /// NCCL collectives joined to their verbs work requests (docs/NCCL.md): present when a
    /// process recorded NCCL profiler events.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nccl: Option<crate::nccl::model::NcclReport>,
    /// The longest period in which no traced process moved a byte, and who was waiting on
    /// whom at its end (`agg::waits`): present when something moved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quiet: Option<crate::agg::QuietReport>,
}

fn opt(v: u64) -> Option<u64> {
    (v != u64::MAX).then_some(v)
}

/// (index of the max, max, mean, max / mean) of `v`.
fn max_mean(v: &[u64]) -> (usize, u64, f64, f64) {
    let n = v.len();
    let total: u64 = v.iter().sum();
    let (mi, mx) = v
        .iter()
        .enumerate()
        .max_by_key(|(i, v)| (**v, std::cmp::Reverse(*i)))
        .map(|(i, v)| (i, *v))
        .unwrap_or((0, 0));
    let mean = if n == 0 { 0.0 } else { total as f64 / n as f64 };
    let ratio = if mean > 0.0 { mx as f64 / mean } else { 0.0 };
    (mi, mx, mean, ratio)
}

fn skew(labels: Vec<String>, egress: Vec<u64>, ingress: Vec<u64>) -> Skew {
    let members = labels.len() >= crate::agg::warnings::SKEW_MIN_MEMBERS;
    let (mi, mx, mean, ratio) = max_mean(&egress);
    let (ii, _, _, iratio) = max_mean(&ingress);
    Skew {
        max_label: labels.get(mi).cloned().unwrap_or_default(),
        ingress_max_label: labels.get(ii).cloned().unwrap_or_default(),
        labels,
        egress_bytes: egress,
        max_bytes: mx,
        mean_bytes: mean,
        ratio,
        flagged: members && ratio >= SKEW_FLAG,
        ingress_bytes: ingress,
        ingress_ratio: iratio,
        ingress_flagged: members && iratio >= SKEW_FLAG,
    }
}

/// Builds the export from the snapshot report, the correlation and one pass's analysis.
pub fn build(c: &Correlation, a: &Analysis, mut report: Report) -> Export {
    report.kind = "export";
    let procs = &c.rec.processes;
    let np = procs.len();
    // Process matrix: from events where every event is on disk, else from the snapshots. Row and
    // column `np` are the untraced peers (dropped below when nothing moved through them).
    let side = |p: u32| {
        if p == UNTRACED {
            Some(np)
        } else {
            ((p as usize) < np).then_some(p as usize)
        }
    };
    let mut pm = vec![vec![0u64; np + 1]; np + 1];
    let mut from_events = 0;
    let mut from_snapshots = 0;
    // Bytes of endpoints with several traced peers, which no cell can hold, and those endpoints.
    let mut left_out_bytes = 0u64;
    let mut left_out_eps = std::collections::BTreeSet::new();
    for (i, p) in procs.iter().enumerate() {
        let produced = p.last_snapshot().map_or(0, |s| s.events);
        let on_disk = a.proc_events.get(i).copied().unwrap_or(0);
        if on_disk > 0 && on_disk >= produced {
            from_events += 1;
            for (&(s, d), &b) in &a.tx_matrix {
                if s as usize == i
                    && let Some(d) = side(d)
                {
                    pm[i][d] += b;
                }
            }
            for (&(issuer, t), &b) in &a.read_matrix {
                if issuer as usize == i
                    && let Some(t) = side(t)
                {
                    pm[t][i] += b;
                }
            }
        } else if let Some(s) = p.last_snapshot() {
            from_snapshots += 1;
            for cnt in &s.counts {
                // Sends and writes go to the peer; one-sided reads come from it.
                let Some(toward_peer) = Op::from_u8(cnt.op).and_then(Op::toward_peer) else {
                    continue;
                };
                // An endpoint that talks to several processes cannot say which got what.
                let d = match c.topo.ep(i as u32, cnt.ep) {
                    Some(e) => match e.single_peer() {
                        Some(d) => side(d),
                        None if e.several_peers() => {
                            if cnt.bytes > 0 {
                                left_out_bytes += cnt.bytes;
                                left_out_eps.insert((i, cnt.ep));
                            }
                            None
                        }
                        None => Some(np),
                    },
                    None => Some(np),
                };
                if let Some(d) = d {
                    if toward_peer {
                        pm[i][d] += cnt.bytes;
                    } else {
                        pm[d][i] += cnt.bytes;
                    }
                }
            }
        }
    }
    let untraced = pm[np].iter().any(|b| *b > 0) || pm.iter().any(|r| r[np] > 0);
    if !untraced {
        pm.pop();
        for r in &mut pm {
            r.pop();
        }
    }
    let mut matrices_source = format!(
        "{from_events} process(es) from events (per-operation peers), {from_snapshots} from snapshots (per-endpoint peers)"
    );
    if !left_out_eps.is_empty() {
        use std::fmt::Write as _;
        let _ = write!(
            matrices_source,
            "; {left_out_bytes} B on {} endpoint(s) with several peers left out (their counters \
             do not say which peer; a record in simple mode has each operation's peer)",
            left_out_eps.len()
        );
    }
    let mut plabels: Vec<String> = (0..np).map(|i| c.proc_label(i as u32)).collect();
    if untraced {
        plabels.push(UNTRACED_LABEL.into());
    }

    // Ranks.
    let mut rank_list: Vec<(u32, usize)> = procs
        .iter()
        .enumerate()
        .filter_map(|(i, p)| p.identity.rank.map(|r| (r, i)))
        .collect();
    rank_list.sort();
    rank_list.dedup_by_key(|x| x.0);
    // The rank and node matrices: the process matrix folded by the rows every front end uses.
    let groups = Groups::new(
        procs
            .iter()
            .map(|p| (p.identity.rank, p.identity.host.as_str())),
    );
    let n = pm.len();
    let id = |k: usize| if k == np { UNTRACED } else { k as u32 };
    let folded = groups.fold((0..n).flat_map(|i| {
        let row = &pm[i];
        (0..n).map(move |j| ((id(i), id(j)), row[j]))
    }));
    let rm = folded.rank.bytes.clone();
    let hm = folded.node.bytes.clone();
    let nh = hm.len();
    report.rank_matrix = folded.rank;
    report.node_matrix = folded.node;
    let flow_of = |host: &str, pid: u32| {
        report
            .processes
            .iter()
            .find(|p| p.host == host && p.pid == pid)
            .map(|p| p.flow)
            .unwrap_or_default()
    };
    let ranks: Vec<RankSummary> = rank_list
        .iter()
        .enumerate()
        .map(|(k, &(r, i))| {
            let id = &procs[i].identity;
            let f = flow_of(&id.host, id.pid);
            RankSummary {
                rank: r,
                host: id.host.clone(),
                pid: id.pid,
                exe: id.exe.clone(),
                tx_bytes: f.tx_bytes,
                rx_bytes: f.rx_bytes,
                tx_ops: f.tx_ops,
                rx_ops: f.rx_ops,
                egress_bytes: rm[k].iter().sum(),
                ingress_bytes: rm.iter().map(|row| row[k]).sum(),
                events: a.proc_events.get(i).copied().unwrap_or(0),
                phases: a.proc_phases.get(i).map_or(0, |v| v.len()),
            }
        })
        .collect();
    let nodes: Vec<NodeSummary> = c
        .hosts
        .iter()
        .enumerate()
        .map(|(h, host)| {
            let mut n = NodeSummary {
                host: host.clone(),
                ..Default::default()
            };
            let mut err = 0u64;
            for (i, p) in procs.iter().enumerate() {
                if c.host_of[i] as usize != h {
                    continue;
                }
                n.processes += 1;
                // A rank's fork child is not a second rank of that number.
                if let Some(r) = p.identity.rank
                    && p.child_of_rank.is_none()
                {
                    n.ranks.push(r);
                }
                let f = flow_of(&p.identity.host, p.identity.pid);
                n.tx_bytes += f.tx_bytes;
                n.rx_bytes += f.rx_bytes;
                n.tx_ops += f.tx_ops;
                n.rx_ops += f.rx_ops;
                n.events += a.proc_events.get(i).copied().unwrap_or(0);
                err = err.max(c.clocks[i].err_ns);
            }
            n.ranks.sort_unstable();
            n.ranks.dedup();
            n.egress_bytes = (0..nh).map(|j| hm[h][j]).sum();
            n.ingress_bytes = (0..nh).map(|j| hm[j][h]).sum();
            n.local_bytes = hm[h][h];
            n.off_node_egress_bytes = n.egress_bytes - n.local_bytes;
            n.off_node_ingress_bytes = n.ingress_bytes - n.local_bytes;
            n.clock_err_ns = opt(err);
            n
        })
        .collect();

    // Top talkers: process pairs by bytes.
    let mut talkers: Vec<Talker> = Vec::new();
    for (i, row) in pm.iter().enumerate() {
        for (j, &b) in row.iter().enumerate() {
            if b > 0 {
                talkers.push(Talker {
                    from: plabels[i].clone(),
                    to: plabels[j].clone(),
                    bytes: b,
                });
            }
        }
    }
    talkers.sort_by(|x, y| y.bytes.cmp(&x.bytes).then_with(|| x.from.cmp(&y.from)));
    talkers.truncate(10);

    let skew_r = SkewReport {
        nodes: skew(
            c.hosts.clone(),
            nodes.iter().map(|n| n.egress_bytes).collect(),
            nodes.iter().map(|n| n.ingress_bytes).collect(),
        ),
        ranks: skew(
            ranks.iter().map(|r| format!("r{}", r.rank)).collect(),
            ranks.iter().map(|r| r.egress_bytes).collect(),
            ranks.iter().map(|r| r.ingress_bytes).collect(),
        ),
        processes: skew(
            plabels[..np].to_vec(),
            pm[..np].iter().map(|r| r.iter().sum()).collect(),
            (0..np).map(|j| pm.iter().map(|r| r[j]).sum()).collect(),
        ),
    };

    let gpu = crate::correlate::gpu::gpu_traffic(c);

    Export {
        matrices_source,
        matrix_left_out_bytes: left_out_bytes,
        matrix_left_out_endpoints: left_out_eps.len(),
        process_matrix: Matrix {
            labels: plabels.clone(),
            bytes: pm,
        },
        gpu_matrix: gpu.matrix,
        gpu_unresolved_bytes: gpu.unresolved_bytes,
        ranks,
        nodes,
        top_talkers: talkers,
        skew: skew_r,
        phases: phases(a, &plabels[..np]),
        clocks: clocks(c, a),
        flows: a.matching,
        doorbells: doorbells(c, a),
        one_sided: one_sided(c, a),
        events: a.events,
        first_ns: a.first_ns,
        last_ns: a.last_ns,
        skipped: skipped(c, a),
        perfetto: None,
        nccl: None,
        quiet: None,
        report,
    }
}

fn doorbells(c: &Correlation, a: &Analysis) -> DoorbellStats {
    let mut d = a.doorbells.clone();
    for q in &mut d.qps {
        q.process_label = c.proc_label(q.process);
        q.endpoint = ep_label(c, q.process, q.ep);
    }
    d
}

fn ep_label(c: &Correlation, proc: u32, ep: u32) -> String {
    c.topo
        .ep(proc, ep)
        .and_then(|e| e.def.as_ref())
        .map(|d| d.label.clone())
        .unwrap_or_else(|| format!("ep#{ep}"))
}

fn one_sided(c: &Correlation, a: &Analysis) -> OneSidedStats {
    let mut s = a.one_sided.clone();
    for e in &mut s.endpoints {
        e.process_label = c.proc_label(e.process);
        e.endpoint = ep_label(c, e.process, e.ep);
        e.peer = c
            .topo
            .ep(e.process, e.ep)
            .and_then(|t| t.single_peer())
            .map(|p| c.proc_label(p));
        e.targets = e
            .by_proc
            .iter()
            .map(|(&p, &b)| (c.proc_label(p), b))
            .collect();
        e.target = match e.targets.len() {
            1 => e.targets.keys().next().cloned(),
            _ => None,
        };
    }
    let mut mrs: Vec<&crate::correlate::mr::MrEntry> = a.mrs.entries.iter().collect();
    mrs.sort_by(|x, y| y.bytes.cmp(&x.bytes).then(x.process.cmp(&y.process)));
    s.mrs = mrs
        .into_iter()
        .take(MAX_MRS_LISTED)
        .map(|m| MrListed {
            process_label: c.proc_label(m.process),
            mr: m.clone(),
        })
        .collect();
    s
}

fn skipped(c: &Correlation, a: &Analysis) -> Vec<Skipped> {
    c.rec
        .problems
        .iter()
        .chain(a.problems.iter())
        .map(|p| Skipped {
            file: p.file.display().to_string(),
            offset: p.offset,
            what: p.what.clone(),
        })
        .collect()
}

fn phases(a: &Analysis, labels: &[String]) -> PhaseReport {
    let mut r = PhaseReport {
        gap_ns: a.phase_gap_ns,
        ..Default::default()
    };
    let active: Vec<(usize, &Vec<Phase>)> = a
        .proc_phases
        .iter()
        .enumerate()
        .filter(|(_, v)| !v.is_empty())
        .collect();
    for (i, v) in &active {
        r.per_process.insert(
            labels[*i].clone(),
            v.len() + a.proc_phases_dropped[*i] as usize,
        );
    }
    if active.len() < 2 {
        r.aligned = !active.is_empty();
        return r;
    }
    // Equal counts: phase k of every process is the same program phase. Otherwise the process
    // with the fewest phases is the reference and each other process contributes its phase
    // whose start is nearest to the reference phase's start.
    let n = active.iter().map(|(_, v)| v.len()).min().unwrap_or(0);
    r.aligned = active.iter().all(|(_, v)| v.len() == n);
    let reference = active
        .iter()
        .min_by_key(|(i, v)| (v.len(), *i))
        .map(|(_, v)| *v);
    let Some(reference) = reference else {
        return r;
    };
    for (k, rp) in reference.iter().enumerate().take(n) {
        let mut lo = (u64::MAX, 0usize);
        let mut hi = (0u64, 0usize);
        let (mut elo, mut ehi) = (u64::MAX, 0u64);
        for (i, v) in &active {
            let ph = if r.aligned {
                v[k]
            } else {
                let j = v.partition_point(|p| p.begin_ns < rp.begin_ns);
                let cands = [j.checked_sub(1), Some(j)];
                let best = cands
                    .iter()
                    .flatten()
                    .filter_map(|&j| v.get(j))
                    .min_by_key(|p| p.begin_ns.abs_diff(rp.begin_ns));
                match best {
                    Some(p) => *p,
                    None => continue,
                }
            };
            lo = lo.min((ph.begin_ns, *i));
            if ph.begin_ns >= hi.0 {
                hi = (ph.begin_ns, *i);
            }
            elo = elo.min(ph.end_ns);
            ehi = ehi.max(ph.end_ns);
        }
        r.phases.push(PhaseSpread {
            index: k,
            first_start_ns: lo.0,
            last_start_ns: hi.0,
            start_spread_ns: hi.0.saturating_sub(lo.0),
            end_spread_ns: ehi.saturating_sub(elo),
            last_process: labels[hi.1].clone(),
        });
    }
    let mut spreads: Vec<u64> = r.phases.iter().map(|p| p.start_spread_ns).collect();
    spreads.sort_unstable();
    r.max_start_spread_ns = spreads.last().copied().unwrap_or(0);
    r.median_start_spread_ns = spreads.get(spreads.len() / 2).copied().unwrap_or(0);
    r
}

fn clocks(c: &Correlation, a: &Analysis) -> ClockReport {
    let procs = &c.rec.processes;
    let mut within = 0u64;
    let mut cross = 0u64;
    let mut any_within = false;
    let mut any_cross = false;
    for i in 0..procs.len() {
        for j in i + 1..procs.len() {
            let b = c.pair_bound_ns(i as u32, j as u32);
            if c.host_of[i] == c.host_of[j] {
                within = within.max(b);
                any_within = true;
            } else {
                cross = cross.max(b);
                any_cross = true;
            }
        }
    }
    ClockReport {
        timebase: "CLOCK_REALTIME".into(),
        processes: procs
            .iter()
            .zip(&c.clocks)
            .map(|(p, k)| ProcessClock {
                host: p.identity.host.clone(),
                pid: p.identity.pid,
                samples: k.samples().len(),
                err_ns: opt(k.err_ns),
                pair_ns: k.pair_ns,
                drift_ns: k.drift_ns,
                same_host_ns: k.same_host_ns,
                note: k.note.clone(),
            })
            .collect(),
        within_host_bound_ns: if any_within { opt(within) } else { None },
        cross_host_bound_ns: if any_cross { opt(cross) } else { None },
        causality_violations: a.causality_violations,
        note: "per process: pairing (half the spread of REALTIME-MONOTONIC over its samples, at least 1 µs) + drift (largest misprediction of a sample from the previous segment's TSC rate), raised to the largest disagreement measured with another process of the same host (shared TSC); across hosts add the hosts' own CLOCK_REALTIME synchronisation (PTP/NTP)".into(),
    }
}
