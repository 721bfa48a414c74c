//! Exports of correlated recordings: Perfetto traces and JSON aggregates.
pub mod json;
pub mod perfetto;
pub mod proto;
