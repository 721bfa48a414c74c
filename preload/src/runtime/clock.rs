//! Timestamps for the hot path: the TSC where it is invariant (one instruction, no syscall),
//! CLOCK_MONOTONIC otherwise; calibration samples pair it with CLOCK_MONOTONIC and CLOCK_REALTIME.

use core::sync::atomic::{AtomicBool, Ordering};
use sigmatop::event::ClockSample;

static USE_TSC: AtomicBool = AtomicBool::new(false);
/// The TSC is used and no hook fault is injected: [`hook_now`] is one `rdtsc`.
static HOOK_TSC: AtomicBool = AtomicBool::new(false);

/// Decides once whether the TSC can be used (x86_64 with invariant TSC). After `config::load`.
pub fn init() {
    #[cfg(target_arch = "x86_64")]
    {
        let max_ext = core::arch::x86_64::__cpuid(0x8000_0000).eax;
        if max_ext >= 0x8000_0007 {
            let edx = core::arch::x86_64::__cpuid(0x8000_0007).edx;
            USE_TSC.store(edx & (1 << 8) != 0, Ordering::Relaxed);
        }
    }
    if crate::runtime::config::no_tsc() {
        USE_TSC.store(false, Ordering::Relaxed);
    }
    HOOK_TSC.store(
        USE_TSC.load(Ordering::Relaxed) && !crate::runtime::config::fault_hook(),
        Ordering::Relaxed,
    );
}

/// True when hot-path timestamps are TSC reads (false: CLOCK_MONOTONIC).
pub fn uses_tsc() -> bool {
    USE_TSC.load(Ordering::Relaxed)
}

#[inline]
pub fn mono_ns() -> u64 {
    crate::runtime::os::mono_ns()
}

pub fn real_ns() -> u64 {
    crate::runtime::os::real_ns()
}

/// The hot-path timestamp.
#[inline(always)]
pub fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if USE_TSC.load(Ordering::Relaxed) {
            // SAFETY: rdtsc has no preconditions.
            return unsafe { core::arch::x86_64::_rdtsc() };
        }
    }
    mono_ns_out_of_line()
}

/// The timestamp of an event a hook records: [`now`], and the place where the test-only hook
/// fault (`SIGMATOP_TEST_FAULT=hook`) is raised, out of line, so that the event path tests one
/// flag for both.
#[inline(always)]
pub fn hook_now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if HOOK_TSC.load(Ordering::Relaxed) {
            // SAFETY: rdtsc has no preconditions.
            return unsafe { core::arch::x86_64::_rdtsc() };
        }
    }
    hook_now_slow()
}

#[inline(never)]
fn hook_now_slow() -> u64 {
    if crate::runtime::config::fault_hook() {
        crate::runtime::config::injected_hook_fault();
    }
    now()
}

/// CLOCK_MONOTONIC for [`now`] where the TSC is not used: a call of its own, so that its
/// `timespec` does not give every hook that inlines `now` a stack frame.
#[inline(never)]
fn mono_ns_out_of_line() -> u64 {
    mono_ns()
}

/// Start of a call that can block (`Op::blocks`): a timestamp when events are recorded, 0
/// otherwise (aggregate mode reads no clock for it).
#[inline(always)]
pub fn blocking_start() -> u64 {
    if crate::runtime::config::events_enabled() {
        now()
    } else {
        0
    }
}

/// How long a call that started at `t0` (from `blocking_start`) blocked, in clock ticks: at
/// least 1, so that 0 keeps meaning "did not block"; 0 when no start was taken.
#[inline(always)]
pub fn blocked_since(t0: u64) -> u64 {
    if t0 == 0 {
        0
    } else {
        now().saturating_sub(t0).max(1)
    }
}

/// One calibration sample; the TSC is read between two monotonic reads and paired with their
/// midpoint, which bounds the pairing error by half the read window.
pub fn sample() -> ClockSample {
    let m0 = mono_ns();
    let t = now();
    let r = real_ns();
    let m1 = mono_ns();
    ClockSample {
        tsc: t,
        mono_ns: m0 + (m1 - m0) / 2,
        real_ns: r,
    }
}
