//! Exports: Perfetto traces and JSON aggregates of correlated recordings, and the live model as
//! OpenMetrics counters.
pub mod json;
pub mod openmetrics;
pub mod openmetrics_nccl;
pub mod perfetto;
pub mod proto;
pub mod series;
