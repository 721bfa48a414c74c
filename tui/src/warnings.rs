//! Live warnings computed from a view model, in the manner of tokio-console's lints: egress and
//! ingress skew, idle QPs that hold posted work, doorbell storms and lost events. Pure functions,
//! no state.

use crate::model::ViewModel;
use crate::units as fmt;

/// Thresholds for the warnings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WarningConfig {
    /// A node or rank whose egress (or ingress) is at least this many times the mean is called out.
    pub skew_ratio: f64,
    /// Doorbells per second (per GPU or QP) at or above which a doorbell storm is reported.
    pub doorbell_storm_per_s: f64,
}

impl Default for WarningConfig {
    fn default() -> Self {
        WarningConfig {
            skew_ratio: 1.5,
            doorbell_storm_per_s: 500_000.0,
        }
    }
}

/// What a warning is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum WarningKind {
    /// Events were lost: ring overflow or lost socket frames.
    Drops,
    /// A node's egress is far above the mean.
    NodeSkew,
    /// A node's ingress is far above the mean (a hot receiver: incast, an unbalanced reduction).
    NodeIngressSkew,
    /// A rank's egress is far above the mean.
    RankSkew,
    /// A rank's ingress is far above the mean.
    RankIngressSkew,
    /// A QP or endpoint has posted work but moves nothing.
    IdleWithPosted,
    /// A GPU or QP rings doorbells faster than the threshold.
    DoorbellStorm,
}

/// One warning line.
#[derive(Clone, Debug, PartialEq)]
pub struct Warning {
    pub kind: WarningKind,
    /// Short, self-contained text: "node2 egress 2.13× mean".
    pub message: String,
}

/// The ratio max/mean of `values`, with the index of the max; None when fewer than two values or no
/// traffic at all.
pub fn skew(values: &[f64]) -> Option<(usize, f64)> {
    if values.len() < 2 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    if !mean.is_finite() || mean <= 0.0 {
        return None;
    }
    let (idx, max) = values
        .iter()
        .copied()
        .enumerate()
        .fold(
            (0, f64::MIN),
            |acc, (i, v)| if v > acc.1 { (i, v) } else { acc },
        );
    Some((idx, max / mean))
}

/// Each value divided by the mean of all (None when fewer than two values or no traffic).
pub fn ratios_to_mean(values: &[f64]) -> Option<Vec<f64>> {
    if values.len() < 2 {
        return None;
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    if !mean.is_finite() || mean <= 0.0 {
        return None;
    }
    Some(values.iter().map(|v| v / mean).collect())
}

/// All warnings for this view model, most important first.
pub fn compute(vm: &ViewModel, cfg: &WarningConfig) -> Vec<Warning> {
    let mut out = Vec::new();

    let st = &vm.status;
    if st.dropped_events > 0 {
        let procs = vm.processes.iter().filter(|p| p.drops > 0).count();
        let msg = if procs > 0 {
            format!(
                "{} events dropped (ring full, {} proc{})",
                fmt::count(st.dropped_events),
                procs,
                if procs == 1 { "" } else { "s" }
            )
        } else {
            format!(
                "{} events dropped (ring full)",
                fmt::count(st.dropped_events)
            )
        };
        out.push(Warning {
            kind: WarningKind::Drops,
            message: msg,
        });
    }
    if st.frames_lost > 0 {
        out.push(Warning {
            kind: WarningKind::Drops,
            message: format!("{} socket frames lost", fmt::count(st.frames_lost)),
        });
    }

    // Skew of nodes and ranks, egress then ingress: a node (or rank) that sends, or receives,
    // at least `skew_ratio` times the mean of its peers.
    let mut skewed = |kind: WarningKind, dir: &str, names: Vec<String>, values: Vec<f64>| {
        if let Some(r) = ratios_to_mean(&values) {
            for (name, ratio) in names.iter().zip(r) {
                if ratio >= cfg.skew_ratio {
                    out.push(Warning {
                        kind,
                        message: format!("{name} {dir} {ratio:.2}× mean"),
                    });
                }
            }
        }
    };
    let node_names = || vm.nodes.iter().map(|n| n.host.clone()).collect::<Vec<_>>();
    let rank_names = || {
        vm.ranks
            .iter()
            .map(|r| format!("rank {}", r.rank))
            .collect::<Vec<_>>()
    };
    skewed(
        WarningKind::NodeSkew,
        "egress",
        node_names(),
        vm.nodes.iter().map(|n| n.egress_bps).collect(),
    );
    skewed(
        WarningKind::NodeIngressSkew,
        "ingress",
        node_names(),
        vm.nodes.iter().map(|n| n.ingress_bps).collect(),
    );
    skewed(
        WarningKind::RankSkew,
        "egress",
        rank_names(),
        vm.ranks.iter().map(|r| r.egress_bps).collect(),
    );
    skewed(
        WarningKind::RankIngressSkew,
        "ingress",
        rank_names(),
        vm.ranks.iter().map(|r| r.ingress_bps).collect(),
    );

    for e in &vm.endpoints {
        let posted = e.posted.unwrap_or(0);
        if posted > 0 && !e.unattributed && e.tx_bps == 0.0 && e.rx_bps == 0.0 && e.ops_per_s == 0.0
        {
            let what = if e.local_id.starts_with("0x") {
                "QP"
            } else {
                "ep"
            };
            out.push(Warning {
                kind: WarningKind::IdleWithPosted,
                message: format!(
                    "{what} {} ({}) idle with {} posted WQEs",
                    e.local_id,
                    e.host,
                    fmt::count(posted)
                ),
            });
        }
    }

    for g in &vm.gpus {
        if g.doorbells_per_s >= cfg.doorbell_storm_per_s {
            out.push(Warning {
                kind: WarningKind::DoorbellStorm,
                message: format!(
                    "{} {} GPU{} doorbell storm {}/s",
                    g.host,
                    g.process_label(),
                    g.gpu,
                    fmt::si(g.doorbells_per_s)
                ),
            });
        }
    }
    for e in &vm.endpoints {
        if let Some(db) = e.doorbells_per_s
            && db >= cfg.doorbell_storm_per_s
        {
            out.push(Warning {
                kind: WarningKind::DoorbellStorm,
                message: format!(
                    "QP {} ({}) doorbell storm {}/s",
                    e.local_id,
                    e.host,
                    fmt::si(db)
                ),
            });
        }
    }
    out.sort_by_key(|w| w.kind);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EndpointRow, GpuRow, NodeRow, ProcessRow, RankRow};

    fn nodes(egress: &[f64]) -> ViewModel {
        ViewModel {
            nodes: egress
                .iter()
                .enumerate()
                .map(|(i, e)| NodeRow {
                    host: format!("node{i}"),
                    egress_bps: *e,
                    ..NodeRow::default()
                })
                .collect(),
            ..ViewModel::default()
        }
    }

    #[test]
    fn empty_model_has_no_warnings() {
        assert!(compute(&ViewModel::default(), &WarningConfig::default()).is_empty());
    }

    #[test]
    fn node_skew_at_threshold() {
        // mean = 10, node2 = 20 → 2.00×
        let w = compute(&nodes(&[5.0, 5.0, 20.0]), &WarningConfig::default());
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].kind, WarningKind::NodeSkew);
        assert_eq!(w[0].message, "node2 egress 2.00× mean");
        // 1.49× is not reported, 1.5× is
        let w = compute(&nodes(&[2.0, 2.0, 2.0, 3.0]), &WarningConfig::default());
        assert!(w.is_empty(), "3 / 2.25 = 1.33×: {w:?}");
    }

    #[test]
    fn skew_boundary() {
        // mean = 2, max = 3 → exactly 1.5×
        let w = compute(&nodes(&[1.0, 2.0, 3.0]), &WarningConfig::default());
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].message, "node2 egress 1.50× mean");
        // mean = 2.05, max 3 → 1.46×
        let w = compute(&nodes(&[1.1, 2.0, 3.0]), &WarningConfig::default());
        assert!(w.is_empty(), "{w:?}");
    }

    #[test]
    fn no_skew_with_one_node_or_no_traffic() {
        assert!(compute(&nodes(&[7.0]), &WarningConfig::default()).is_empty());
        assert!(compute(&nodes(&[0.0, 0.0]), &WarningConfig::default()).is_empty());
        assert_eq!(skew(&[1.0, 3.0]), Some((1, 1.5)));
        assert_eq!(skew(&[0.0, 0.0]), None);
    }

    #[test]
    fn rank_skew() {
        let vm = ViewModel {
            ranks: (0..4)
                .map(|r| RankRow {
                    rank: r,
                    egress_bps: if r == 3 { 10.0 } else { 1.0 },
                    ..RankRow::default()
                })
                .collect(),
            ..ViewModel::default()
        };
        let w = compute(&vm, &WarningConfig::default());
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].message, "rank 3 egress 3.08× mean");
    }

    #[test]
    fn ingress_skew_per_rank_and_node() {
        // The demo's shape: one rank receives from all three others (3× what each of them gets).
        let vm = ViewModel {
            ranks: (0..4)
                .map(|r| RankRow {
                    rank: r,
                    egress_bps: if r == 2 { 1.0 } else { 1.67 },
                    ingress_bps: if r == 2 { 3.0 } else { 1.0 },
                    ..RankRow::default()
                })
                .collect(),
            nodes: vec![
                NodeRow {
                    host: "node0".into(),
                    egress_bps: 5.0,
                    ingress_bps: 1.0,
                    ..NodeRow::default()
                },
                NodeRow {
                    host: "node1".into(),
                    egress_bps: 5.0,
                    ingress_bps: 9.0,
                    ..NodeRow::default()
                },
            ],
            ..ViewModel::default()
        };
        let w = compute(&vm, &WarningConfig::default());
        let msgs: Vec<&str> = w.iter().map(|w| w.message.as_str()).collect();
        // mean ingress of the ranks = 1.5 → rank 2 at 2.00×; nodes: mean 5 → node1 at 1.80×.
        assert_eq!(
            msgs,
            vec!["node1 ingress 1.80× mean", "rank 2 ingress 2.00× mean"]
        );
        assert_eq!(w[0].kind, WarningKind::NodeIngressSkew);
        assert_eq!(w[1].kind, WarningKind::RankIngressSkew);
        // Just under the threshold: nothing (mean 1.0375, max 1.5 → 1.45×).
        let mut calm = vm.clone();
        calm.nodes.clear();
        for r in &mut calm.ranks {
            r.ingress_bps = if r.rank == 2 { 1.5 } else { 0.85 };
        }
        assert!(compute(&calm, &WarningConfig::default()).is_empty());
        // Exactly at the threshold: reported (mean 2, max 3).
        for (r, v) in calm.ranks.iter_mut().zip([1.0, 2.0, 3.0, 2.0]) {
            r.ingress_bps = v;
        }
        let w = compute(&calm, &WarningConfig::default());
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!(w[0].message, "rank 2 ingress 1.50× mean");
    }

    #[test]
    fn idle_qp_with_posted_work() {
        let idle = EndpointRow {
            host: "node2".into(),
            local_id: "0x2a41".into(),
            posted: Some(128),
            ..EndpointRow::default()
        };
        let busy = EndpointRow {
            tx_bps: 1.0,
            ..idle.clone()
        };
        let nothing_posted = EndpointRow {
            posted: Some(0),
            ..idle.clone()
        };
        let vm = ViewModel {
            endpoints: vec![idle, busy, nothing_posted],
            ..ViewModel::default()
        };
        let w = compute(&vm, &WarningConfig::default());
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].kind, WarningKind::IdleWithPosted);
        assert_eq!(w[0].message, "QP 0x2a41 (node2) idle with 128 posted WQEs");
    }

    #[test]
    fn doorbell_storm_threshold_is_configurable() {
        let vm = ViewModel {
            gpus: vec![GpuRow {
                host: "node0".into(),
                rank: Some(3),
                gpu: 1,
                doorbells_per_s: 41_200.0,
                ..GpuRow::default()
            }],
            ..ViewModel::default()
        };
        assert!(compute(&vm, &WarningConfig::default()).is_empty());
        let cfg = WarningConfig {
            doorbell_storm_per_s: 40_000.0,
            ..WarningConfig::default()
        };
        let w = compute(&vm, &cfg);
        assert_eq!(w.len(), 1);
        assert_eq!(w[0].message, "node0 r3 GPU1 doorbell storm 41.2k/s");
    }

    #[test]
    fn drops_come_first() {
        let mut vm = nodes(&[1.0, 1.0, 9.0]);
        vm.status.dropped_events = 1204;
        vm.status.frames_lost = 2;
        vm.processes = vec![ProcessRow {
            drops: 1204,
            ..ProcessRow::default()
        }];
        let w = compute(&vm, &WarningConfig::default());
        assert_eq!(w.len(), 3);
        assert_eq!(w[0].message, "1,204 events dropped (ring full, 1 proc)");
        assert_eq!(w[1].message, "2 socket frames lost");
        assert_eq!(w[2].kind, WarningKind::NodeSkew);
    }
}
