//! The one hook idiom. Every interposed function, in every layer, is a thin `extern "C"`
//! trampoline: it finds the real function (a [`crate::runtime::dl::RealFn`] slot, or the provider's table
//! the object was wrapped from) and hands two closures to one ordinary function here:
//!
//! - [`around`] for calls that are traced: `call_real` makes the real call with the program's
//!   arguments, and `record`, which sees those arguments and what the real call returned, counts
//!   it (ending in [`ThreadState::record`], the one recording step) or does the layer's
//!   bookkeeping. `around` does the rest: the layer switch, the re-entrancy guard ([`Guard`]),
//!   catching panics.
//! - [`after`] for control-path bookkeeping that needs no thread state (verbs objects, libfabric
//!   objects sigmatop wrapped, CUDA lookups): the real call, then the bookkeeping, errno kept.
//!
//! The real call is never made inside `catch_unwind`'s closure, so a panic in sigmatop's code can
//! neither skip nor repeat the program's call. A few hooks must act *before* the real call, and
//! use [`enter`] / [`guarded`] directly: UCX's endpoint closes and mlx5's destroy / free calls
//! (the object is gone once the call returns), libfabric's close and enable wrappers (the
//! provider must see its own tables), and the three CUDA calls the doorbell hijack answers itself.
//!
//! What a call did reaches the recording step as an [`crate::runtime::thread::Outcome`] (accepted,
//! completed at once, refused, failed, a receive posted), read by each layer from the real call's
//! result, and its event-only fields as a [`crate::runtime::thread::Detail`] read lazily: whether an event
//! is timestamped and kept (all with a record, one in `SIGMATOP_SAMPLE` without) and refusals
//! counted apart from operations are decided in `ThreadState::record` alone. A receive's
//! completion reaches `ThreadState::arrived` from the layer's completion hook (a UCX callback, a
//! libfabric CQ read, a verbs poll), in every mode: received bytes are the bytes that arrived.

use core::sync::atomic::Ordering;

use sigmatop::event::Layer;

use crate::runtime::config;
use crate::runtime::thread::{self, ThreadState};

/// Hook bodies that panicked or failed (the call itself went through), in the drop counters.
pub use crate::runtime::drops::HOOK_FAILURES;

/// How a hook's bookkeeping relates to sigmatop's per-thread re-entrancy guard.
#[derive(Clone, Copy)]
pub enum Guard {
    /// Traced when the layer is on and no other sigmatop hook runs on this thread; the real call
    /// runs inside the guard, so whatever the library calls from it passes through untraced (a
    /// legacy UCX `_nb` call reaching `_nbx`, a libfabric utility provider opening its core
    /// provider): each program call is counted once.
    Outermost(Layer),
    /// As `Outermost`, but the real call runs before the guard is taken: it may block and run the
    /// program's callbacks, whose own calls must be traced (UCX's blocking flushes and progress),
    /// or it is a control call whose bookkeeping only needs the guard afterwards.
    AfterCall(Layer),
    /// No guard and no layer check: counted even inside another layer's hook, as the verbs data
    /// path under UCX or libfabric is the same traffic seen one layer down. For wrappers that
    /// are installed into a library's tables only while their layer is on.
    Nested,
}

/// The one hook body for traced calls: see the module doc. `record` runs only when the call is
/// traced, after the real call, with the thread's state and the real call's result.
#[inline(always)]
pub fn around<R: Copy>(
    guard: Guard,
    call_real: impl FnOnce() -> R,
    record: impl FnOnce(&'static ThreadState, R),
) -> R {
    match guard {
        Guard::Outermost(layer) => {
            let Some(ts) = enter(layer) else {
                return call_real();
            };
            let r = call_real();
            guarded((), || record(ts, r));
            ts.leave();
            r
        }
        Guard::AfterCall(layer) => {
            let r = call_real();
            if let Some(ts) = enter(layer) {
                guarded((), || record(ts, r));
                ts.leave();
            }
            r
        }
        Guard::Nested => {
            let r = call_real();
            // The thread state is read after the call: nothing needs to live across it.
            if let Some(ts) = thread::current() {
                guarded((), || record(ts, r));
            }
            r
        }
    }
}

/// As [`around`] for a hook that hands the real call different arguments when the call is traced
/// (a UCX receive gets sigmatop's completion callback): `call_real(true)` when it is, with the
/// guard held, `call_real(false)` when it passes through. `Outermost` only: the arguments are
/// chosen before the call, and only the outermost hook of a thread may choose them.
#[inline(always)]
pub fn around_traced<R: Copy>(
    layer: Layer,
    call_real: impl FnOnce(bool) -> R,
    record: impl FnOnce(&'static ThreadState, R),
) -> R {
    let Some(ts) = enter(layer) else {
        return call_real(false);
    };
    let r = call_real(true);
    guarded((), || record(ts, r));
    ts.leave();
    r
}

/// The control-path form of [`around`]: the real call, then `note` with its result when `layer`
/// is on (None: always, for wrappers of objects sigmatop already took on), errno preserved and
/// panics caught. No re-entrancy guard: bookkeeping of one layer must see what another layer's
/// calls create (UCX opening verbs QPs).
#[inline(always)]
pub fn after<R: Copy>(
    layer: Option<Layer>,
    call_real: impl FnOnce() -> R,
    note: impl FnOnce(R),
) -> R {
    let r = call_real();
    if layer.is_none_or(config::layer_enabled) {
        crate::runtime::os::keep_errno(|| guarded((), || note(r)));
    }
    r
}

/// Starts the collector on a library's first control-path call, unless the layer is off or
/// sigmatop itself is calling. Errno is kept.
pub fn start_collector(layer: Layer) {
    if config::layer_enabled(layer) && !inside() {
        crate::runtime::os::keep_errno(|| guarded((), crate::runtime::collector::ensure_started));
    }
}

/// Enters a hook of `layer`: the thread state when the call is to be traced, None when it must
/// pass straight through (layer off, nested call, exiting thread).
#[inline(always)]
pub fn enter(layer: Layer) -> Option<&'static ThreadState> {
    if !config::layer_enabled(layer) {
        return None;
    }
    thread::enter()
}

/// True while the calling thread is inside a sigmatop hook (its calls are not traced).
pub fn inside() -> bool {
    thread::inside()
}

/// Runs sigmatop's bookkeeping `f`, returning `fallback` if it panics. The real function is
/// never called inside `f`, so a panic can neither skip nor repeat the program's call.
#[inline(always)]
pub fn guarded<R>(fallback: R, f: impl FnOnce() -> R) -> R {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(_) => {
            on_hook_panic();
            fallback
        }
    }
}

/// A hook's bookkeeping failed: the program's call already went through; sigmatop stops tracing
/// (every hook passes through from now on) and says so once.
#[cold]
fn on_hook_panic() {
    config::disable_all();
    if HOOK_FAILURES.fetch_add(1, Ordering::Relaxed) == 0 {
        eprintln!(
            "sigmatop: internal error in a hook; tracing stopped, the program continues untraced"
        );
    }
}

/// Counts `n` calls or objects a layer could not trace (they went through untraced).
#[cold]
pub fn failed(n: u64) {
    HOOK_FAILURES.fetch_add(n, Ordering::Relaxed);
}

/// Puts sigmatop's wrapper `ours` into a slot of a function table it patches (a libfabric table
/// copy, a QP's `wr_*` pointers) where the provider has a function; a NULL slot stays NULL.
#[inline]
pub fn wrap_slot<F>(slot: &mut Option<F>, ours: F) {
    if slot.is_some() {
        *slot = Some(ours);
    }
}
