//! What `serve`'s two encoders (`openmetrics`, the process and QP series; `openmetrics_nccl`,
//! the NCCL series) share: the options, label lists and the samples of one or more processes.
//! Below both, so that neither imports the other's internals.

use std::collections::BTreeMap;

/// What to expose.
#[derive(Clone, Copy, Debug, Default)]
pub struct MetricsOptions {
    /// Also one series per QP (`sigmatop_qp_*`): many series on a large job.
    pub qp_metrics: bool,
    /// A series per process (`pid`, NCCL's `comm`): every job makes new series.
    pub per_process: bool,
}

pub type Labels = Vec<(String, String)>;

/// The samples of one or more processes, by family and labels.
#[derive(Clone, Debug, Default)]
pub struct Series {
    pub(super) counters: BTreeMap<(&'static str, Labels), u64>,
    pub(super) fcounters: BTreeMap<(&'static str, Labels), f64>,
    pub(super) gauges: BTreeMap<(&'static str, Labels), i64>,
    pub(super) fgauges: BTreeMap<(&'static str, Labels), f64>,
}

impl Series {
    pub(crate) fn count(&mut self, family: &'static str, l: Labels, v: u64) {
        *self.counters.entry((family, l)).or_default() += v;
    }
    pub(crate) fn fcount(&mut self, family: &'static str, l: Labels, v: f64) {
        *self.fcounters.entry((family, l)).or_default() += v;
    }
    pub(crate) fn gauge(&mut self, family: &'static str, l: Labels, v: i64) {
        *self.gauges.entry((family, l)).or_default() += v;
    }
    pub(crate) fn fgauge(&mut self, family: &'static str, l: Labels, v: f64) {
        *self.fgauges.entry((family, l)).or_default() += v;
    }
    /// Adds `other`'s samples.
    pub(super) fn add(&mut self, other: &Series) {
        for (k, v) in &other.counters {
            *self.counters.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &other.fcounters {
            *self.fcounters.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &other.gauges {
            *self.gauges.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &other.fgauges {
            *self.fgauges.entry(k.clone()).or_default() += v;
        }
    }
}
