//! Entry points for the benchmarks (benches/hotpath.c, benches/verbs_hotpath.c) and the test
//! probes that drive the preload's runtime directly (tests/programs, tests/guest/verbs_fake.c).
//! Built only with the `bench` feature: the shipped library exports none of them, and has no
//! `SIGMATOP_BENCH_*` variable either.

use core::ffi::c_void;

use sigmatop::event::{EndpointKind, Layer, Op, Peer};

use crate::interpose::hook::{self, Guard};
use crate::runtime::thread::{Detail, Outcome};

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
            let ep = crate::runtime::registry::lookup(arg as usize);
            ts.record(ep, Op::UcxTagSend, bytes as u64, Outcome::Ok, || {
                Some(Detail::NONE)
            })
        },
    )
}

/// Defines an endpoint for `handle` and starts the collector, as ucp_ep_create would.
#[unsafe(no_mangle)]
pub extern "C" fn sigmatop_bench_setup(handle: *mut c_void) {
    let id = crate::runtime::registry::define(
        Layer::Ucx,
        EndpointKind::UcpEp,
        "bench".into(),
        String::new(),
        Default::default(),
    );
    crate::runtime::registry::bind(handle as usize, id);
    crate::runtime::collector::ensure_started();
}

/// Which clock the hot path timestamps events with: 1 the TSC (`rdtsc`), 0 CLOCK_MONOTONIC. The
/// benchmarks time that same clock in the same run, to state what the timestamp itself costs.
#[unsafe(no_mangle)]
pub extern "C" fn sigmatop_bench_clock_is_tsc() -> u32 {
    crate::runtime::clock::uses_tsc() as u32
}

/// Events of the calling thread not yet drained by the collector.
#[unsafe(no_mangle)]
pub extern "C" fn sigmatop_bench_pending() -> u64 {
    crate::runtime::thread::current()
        .map(|t| t.pending())
        .unwrap_or(0)
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
    unsafe { crate::layers::ibverbs::patch_context(ctx) };
    hook::guarded((), || {
        let id = crate::runtime::registry::define(
            Layer::Ibverbs,
            EndpointKind::VerbsQp,
            "qp bench".into(),
            "RC".into(),
            Peer::default(),
        );
        crate::runtime::registry::bind(qp as usize, id);
        // QP number 1, as benches/verbs_hotpath.c sets it and its completions name it.
        crate::layers::ibverbs::bench_qp(ctx, 1, id);
        crate::layers::ibverbs::define_cq(cq);
    });
    crate::runtime::collector::ensure_started();
}

/// Takes every lock that `fork::prepare` takes across a fork (waiting for each as long as it takes
/// when `blocking` is non-zero), holds them for `spin` busy-loop iterations and releases them;
/// returns how many it took. The threads of tests/programs/fork_locks.c hammer every lock with
/// it, and each child calls it blocking: a child that inherited a lock held by another thread
/// hangs here.
#[unsafe(no_mangle)]
pub extern "C" fn sigmatop_bench_hold_locks(spin: u32, blocking: u32) -> u32 {
    let held = crate::runtime::fork::hold_all(blocking != 0);
    for _ in 0..spin {
        core::hint::spin_loop();
    }
    held.len() as u32
}

/// Events of the calling thread lost so far because its ring was full.
#[unsafe(no_mangle)]
pub extern "C" fn sigmatop_bench_ring_full() -> u64 {
    crate::runtime::thread::current()
        .map(|t| t.ring_full.load(core::sync::atomic::Ordering::Relaxed))
        .unwrap_or(0)
}

/// `SIGMATOP_BENCH_RECORD_BPS`: a disk slower than the events, for benches/record_cost.py. The
/// collector's record writes are held to this many bytes per second on average: after each
/// chunk the collector sleeps until its bytes written so far fit the rate, as a `write` blocks on
/// a disk whose page cache is full. (0 or unset: not throttled.)
static RECORD_BPS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
static RECORD_START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// Reads `SIGMATOP_BENCH_RECORD_BPS` (constructor, with the other variables); a bad value warns.
pub fn load() {
    let bps = match std::env::var("SIGMATOP_BENCH_RECORD_BPS") {
        Ok(v) if !v.trim().is_empty() => v.trim().parse::<u64>().unwrap_or_else(|_| {
            crate::runtime::config::warn(format!(
                "SIGMATOP_BENCH_RECORD_BPS={v} is not a number of bytes per second; not throttled"
            ));
            0
        }),
        _ => 0,
    };
    let _ = RECORD_BPS.set(bps);
    if bps != 0 {
        crate::runtime::collector::after_each_chunk(throttle_record);
    }
}

/// Called by the collector after each chunk it wrote (`collector::after_each_chunk`): sleeps
/// while `bytes_written` is ahead of the throttled rate.
fn throttle_record(bytes_written: u64) {
    let bps = RECORD_BPS.get().copied().unwrap_or(0);
    if bps == 0 {
        return;
    }
    let start = *RECORD_START.get_or_init(std::time::Instant::now);
    let due = std::time::Duration::from_secs_f64(bytes_written as f64 / bps as f64);
    let elapsed = start.elapsed();
    if due > elapsed {
        std::thread::sleep(due - elapsed);
    }
}
