//! The end of this image's tracing, written once: [`final_flush`] runs the layers' before-flush
//! steps (installed by the composition root, lib.rs: the GPU doorbells parse their pending WQEs
//! first, so that the collector's last snapshot has them), then the collector's last flush, then
//! the list of loaded objects of a process that traced nothing. The library destructor
//! (`End::Fini`) and the `_exit`/`_Exit` wrappers (`End::Exit`, crate::interpose::libc::exit) call it, as
//! lttng-ust's fork and exit wrappers call its runtime's entry points.
//!
//! May use: the collector, the final state and the modules below them; never a layer.

use std::sync::OnceLock;

/// How the image ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The library destructor (`exit`, a return from `main`).
    Fini,
    /// `_exit` / `_Exit`, where no destructor runs; possibly from a signal handler.
    Exit,
}

/// One layer's step before the collector's last flush.
pub struct BeforeFlush {
    pub run: fn(),
    /// Also at `_exit` (else only in the destructor).
    pub at_exit: bool,
}

static BEFORE_FLUSH: OnceLock<&'static [BeforeFlush]> = OnceLock::new();

/// Installs the layers' before-flush steps, in the order they run. Constructor only; a second
/// call changes nothing.
pub fn install(steps: &'static [BeforeFlush]) {
    let _ = BEFORE_FLUSH.set(steps);
}

/// The final flush, when the sigmatop state in memory is this process's own (a vfork child that
/// exits shares its parent's memory: the collector and poller it would stop are the parent's) and,
/// at `_exit`, the caller is not the collector thread itself (a signal handler that interrupted
/// it must not wait for it). Each step is caught on its own: a failing one never stops the next,
/// nor the program's exit.
pub fn final_flush(end: End) {
    if crate::runtime::collector::memory_of_another_process() {
        return;
    }
    if end == End::Exit && crate::runtime::collector::on_collector_thread() {
        return;
    }
    for step in BEFORE_FLUSH.get().copied().unwrap_or(&[]) {
        if end == End::Fini || step.at_exit {
            let _ = std::panic::catch_unwind(step.run);
        }
    }
    let _ = std::panic::catch_unwind(|| match end {
        End::Fini => crate::runtime::collector::shutdown(),
        // Also cancels a fork child's collector that has not begun (nothing traced).
        End::Exit => crate::runtime::collector::before_exit(),
    });
    let _ = std::panic::catch_unwind(|| {
        if crate::runtime::collector::never_started() {
            crate::runtime::final_state::write_loaded_objects();
        }
    });
}
