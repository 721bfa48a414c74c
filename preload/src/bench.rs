//! Entry points for the benchmarks (benches/hotpath.c, benches/verbs_hotpath.c) and the test
//! probes that drive the preload's runtime directly (tests/programs, tests/guest/verbs_fake.c).
//! Built only with the `bench` feature: the shipped library exports none of them.

use core::ffi::c_void;

use sigmatop::event::{EndpointKind, Layer, Op, Peer};

use crate::hook::{self, Guard};
use crate::thread::{Detail, Outcome};

type FakeFn = unsafe extern "C" fn(*mut c_void, usize) -> isize;

/// The hook idiom every data-path hook uses, around `real(arg, bytes)`: layer check, one
/// thread-local access with the re-entrancy guard, the real call, counting (and in simple/full
/// mode one event), leave. Counted as a UCX tag send on the endpoint of `arg`.
///
/// # Safety
/// `real` must be a valid function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigmatop_bench_hook(
    real: FakeFn,
    arg: *mut c_void,
    bytes: usize,
) -> isize {
    hook::around(
        Guard::Outermost(Layer::Ucx),
        // SAFETY: the caller's contract.
        || unsafe { real(arg, bytes) },
        |ts, _| {
            let ep = crate::registry::lookup(arg as usize);
            ts.record(ep, Op::UcxTagSend, bytes as u64, Outcome::Ok, || {
                Some(Detail::NONE)
            })
        },
    )
}

/// Defines an endpoint for `handle` and starts the collector, as ucp_ep_create would.
#[unsafe(no_mangle)]
pub extern "C" fn sigmatop_bench_setup(handle: *mut c_void) {
    let id = crate::registry::define(
        Layer::Ucx,
        EndpointKind::UcpEp,
        "bench".into(),
        String::new(),
        Default::default(),
    );
    crate::registry::bind(handle as usize, id);
    crate::collector::ensure_started();
}

/// Which clock the hot path timestamps events with: 1 the TSC (`rdtsc`), 0 CLOCK_MONOTONIC. The
/// benchmarks time that same clock in the same run, to state what the timestamp itself costs.
#[unsafe(no_mangle)]
pub extern "C" fn sigmatop_bench_clock_is_tsc() -> u32 {
    crate::clock::uses_tsc() as u32
}

/// Events of the calling thread not yet drained by the collector.
#[unsafe(no_mangle)]
pub extern "C" fn sigmatop_bench_pending() -> u64 {
    crate::thread::current().map(|t| t.pending()).unwrap_or(0)
}

/// Patches a fake context and defines an endpoint for `qp` and `cq`, as ibv_open_device and
/// ibv_create_qp / ibv_create_cq would.
///
/// # Safety
/// `ctx` is a writable `struct ibv_context` (abi_compat NULL), `qp` and `cq` objects whose first
/// field is `ctx`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sigmatop_bench_verbs_setup(
    ctx: *mut c_void,
    qp: *mut c_void,
    cq: *mut c_void,
) {
    // SAFETY: the caller's contract.
    unsafe { crate::ibverbs::patch_context(ctx) };
    hook::guarded((), || {
        let id = crate::registry::define(
            Layer::Ibverbs,
            EndpointKind::VerbsQp,
            "qp bench".into(),
            "RC".into(),
            Peer::default(),
        );
        crate::registry::bind(qp as usize, id);
        crate::ibverbs::define_cq(cq);
    });
    crate::collector::ensure_started();
}
