//! Entry points for the hot-path microbenchmark (benches/hotpath.c): the exact body every hook
//! runs around a real call, driven through the shared library as a traced program would.

use core::ffi::c_void;

use sigmatop::event::{Layer, Op};

type FakeFn = unsafe extern "C" fn(*mut c_void, usize) -> isize;

/// Runs the hook pattern around `real(arg, bytes)`: layer check, one thread-local access with the
/// re-entrancy guard, the real call, counting (and in simple/full mode one event), leave.
///
/// # Safety
/// `real` must be a valid function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigmatop_bench_hook(
    real: FakeFn,
    arg: *mut c_void,
    bytes: usize,
) -> isize {
    let Some(ts) = crate::trace_enter(Layer::Ucx) else {
        // SAFETY: caller's contract.
        return unsafe { real(arg, bytes) };
    };
    // SAFETY: caller's contract.
    let r = unsafe { real(arg, bytes) };
    crate::guarded((), || {
        let id = crate::registry::lookup(arg as usize);
        ts.record(id, Op::UcxTagSend, bytes as u64, 0, 0, 0)
    });
    ts.leave();
    r
}

/// Defines an endpoint for `handle` and starts the collector, as ucp_ep_create would.
#[unsafe(no_mangle)]
pub extern "C" fn sigmatop_bench_setup(handle: *mut c_void) {
    let id = crate::registry::define(
        Layer::Ucx,
        sigmatop::event::EndpointKind::UcpEp,
        "bench".into(),
        String::new(),
        Default::default(),
    );
    crate::registry::bind(handle as usize, id);
    crate::collector::ensure_started();
}

/// Events of the calling thread not yet drained by the collector.
#[unsafe(no_mangle)]
pub extern "C" fn sigmatop_bench_pending() -> u64 {
    crate::thread::current().map(|t| t.pending()).unwrap_or(0)
}
