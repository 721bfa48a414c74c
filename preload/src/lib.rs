//! In-process tracer.
