//! Live warnings as the dashboard shows them: the core computes them from the model (sigmatop's
//! `agg::warnings`) and hands them over in the view model; this module holds their display data,
//! the thresholds the views highlight with, and the ratio helpers of the skew columns.

use serde::{Deserialize, Serialize};

/// Thresholds for the warnings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WarningConfig {
    /// A node or rank whose egress (or ingress) is at least this many times the mean is called out.
    pub skew_ratio: f64,
    /// Doorbells per second (per GPU or QP) at or above which a doorbell storm is reported.
    pub doorbell_storm_per_s: f64,
    /// A NCCL collective open longer than this (seconds) on some rank is reported as hung.
    pub collective_hang_s: f64,
}

impl Default for WarningConfig {
    fn default() -> Self {
        WarningConfig {
            skew_ratio: 1.5,
            doorbell_storm_per_s: 500_000.0,
            collective_hang_s: 2.0,
        }
    }
}

/// What a warning is about.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum WarningKind {
    /// Events were lost: ring overflow or lost socket frames.
    #[default]
    Drops,
    /// A NCCL collective some ranks started has not completed after the threshold; the message
    /// names the ranks it waits for.
    HungCollective,
    /// A process stopped reporting (silent), with who waits on it.
    Silent,
    /// Processes wait on a far end that sends them nothing; the message names it.
    WaitedOn,
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
    /// An endpoint's operations failed (error completions, failed calls).
    FailedOperations,
    /// A QP has send work outstanding and no completion past the threshold; the message names
    /// the process, its peer, the QP and the work.
    StalledEdge,
}

impl WarningKind {
    /// A warning that says where a job is stuck: shown first, with the room it needs.
    pub fn urgent(self) -> bool {
        matches!(
            self,
            WarningKind::StalledEdge
                | WarningKind::HungCollective
                | WarningKind::Silent
                | WarningKind::WaitedOn
        )
    }
}

/// One warning line.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Warning {
    pub kind: WarningKind,
    /// Short, self-contained text: "node2 egress 2.13× mean".
    pub message: String,
    /// A shorter form for the status line of a narrow terminal (empty: `message` serves).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub short: String,
}

/// Skew is judged among at least this many nodes or ranks (the core's `SKEW_MIN_MEMBERS`): with
/// two, max/mean only says which way the traffic went (a one-way benchmark's sender reads 2.00×).
pub const SKEW_MIN_MEMBERS: usize = 3;

/// The ratio max/mean of `values`, with the index of the max; None when fewer than
/// `SKEW_MIN_MEMBERS` values or no traffic at all.
pub fn skew(values: &[f64]) -> Option<(usize, f64)> {
    if values.len() < SKEW_MIN_MEMBERS {
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

/// Each value divided by the mean of all (None when fewer than `SKEW_MIN_MEMBERS` values or no
/// traffic).
pub fn ratios_to_mean(values: &[f64]) -> Option<Vec<f64>> {
    if values.len() < SKEW_MIN_MEMBERS {
        return None;
    }
    let mean = values.iter().sum::<f64>() / values.len() as f64;
    if !mean.is_finite() || mean <= 0.0 {
        return None;
    }
    Some(values.iter().map(|v| v / mean).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skew_and_ratios() {
        assert_eq!(skew(&[1.0, 3.0, 2.0]), Some((1, 1.5)));
        assert_eq!(skew(&[0.0, 0.0, 0.0]), None);
        assert_eq!(skew(&[7.0]), None);
        // Two parties: one-way traffic is 2.00× by design, not skew.
        assert_eq!(skew(&[1.0, 0.0]), None);
        assert_eq!(ratios_to_mean(&[1.0, 3.0, 2.0]), Some(vec![0.5, 1.5, 1.0]));
        assert_eq!(ratios_to_mean(&[2.0, 0.0]), None);
    }
}
