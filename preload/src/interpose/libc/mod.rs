//! The libc entry points sigmatop exports so that the end or the replacement of the image runs
//! the runtime's flush: `_exit`/`_Exit` (`exit`: `lifecycle::final_flush`), `exec*` (`exec`: the
//! collector's end before exec and its restart after a failed one).
//!
//! May use: the runtime. Never a layer.

pub mod exec;
pub mod exit;
