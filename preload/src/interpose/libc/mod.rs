//! The libc entry points sigmatop exports so that the end or the replacement of the image runs
//! the runtime's flush: `_exit`/`_Exit` (`exit`: `lifecycle::final_flush`), `exec*` (`exec`: the
//! collector's end before exec and its restart after a failed one), and `wait*` (`reap`: a child
//! that died of a signal or exited non-zero is written down for its parent's view, since it
//! cannot report its own death).
//!
//! May use: the runtime. Never a layer.

pub mod exec;
pub mod exit;
pub mod reap;
