//! libsigmatop_preload.so: LD_PRELOADed into an unmodified program, it interposes the RDMA
//! libraries (UCX, libfabric, ...), counts and records every operation on the calling thread
//! without locks or syscalls, and leaves I/O to one collector thread. It never changes what the
//! program's calls return: every entry point catches panics and falls through to the real function.

/// Resolves the real function in the `RealFn` `$slot` as the function-pointer type `$ty`, or
/// returns from the calling hook (with `$fail`, or `()`) when no loaded library defines it: a
/// hook never calls a null pointer.
macro_rules! real {
    ($slot:ident, $ty:ty) => {{
        let p = $slot.get();
        if p.is_null() {
            return;
        }
        // SAFETY: `p` is the loaded library's definition of the symbol named in `$slot`, whose C
        // signature (from that library's public header) is `$ty`.
        unsafe { core::mem::transmute::<*mut core::ffi::c_void, $ty>(p) }
    }};
    ($slot:ident, $ty:ty, $fail:expr) => {{
        let p = $slot.get();
        if p.is_null() {
            return $fail;
        }
        // SAFETY: as above.
        unsafe { core::mem::transmute::<*mut core::ffi::c_void, $ty>(p) }
    }};
}

pub mod bench;
pub mod clock;
pub mod collector;
pub mod config;
pub mod cuda;
pub mod dl;
pub mod doorbell;
pub mod ibverbs;
pub mod mlx5;
pub mod ofi;
pub mod process;
pub mod registry;
pub mod server;
pub mod thread;
pub mod ucx;

use core::sync::atomic::{AtomicU64, Ordering};

use sigmatop::event::Layer;

/// Hook bodies that panicked or failed (the call itself went through).
pub static HOOK_FAILURES: AtomicU64 = AtomicU64::new(0);

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

/// The test-only hook fault (`SIGMATOP_TEST_FAULT=hook`): called from inside hook bookkeeping
/// (`ThreadState::record`, events path only, so aggregate mode's hot path carries no check).
#[cold]
#[inline(never)]
pub fn injected_hook_fault() {
    panic!("injected hook fault (SIGMATOP_TEST_FAULT=hook)");
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

/// True while the calling thread is inside a sigmatop hook (its calls are not traced).
pub fn in_sigmatop() -> bool {
    thread::inside()
}

/// Enters a hook of `layer`: the thread state when the call is to be traced, None when it must
/// pass straight through (layer off, nested call, exiting thread).
#[inline(always)]
pub fn trace_enter(layer: Layer) -> Option<&'static thread::ThreadState> {
    if !config::layer_enabled(layer) {
        return None;
    }
    thread::enter()
}

/// Every hook the dlsym wrappers may hand out.
pub fn hooks_table() -> &'static [dl::Hook] {
    static FLAT: std::sync::OnceLock<Vec<dl::Hook>> = std::sync::OnceLock::new();
    FLAT.get_or_init(|| {
        let mut v = Vec::new();
        v.extend(ucx::hooks());
        v.extend(ofi::hooks());
        v.extend(mlx5::hooks());
        v.extend(cuda::hooks());
        v.extend(ibverbs::hooks());
        v
    })
}

extern "C" fn sigmatop_init() {
    // This library's own copy of std: its panics are caught and reported in one line of ours,
    // never with std's default message in the program's stderr.
    std::panic::set_hook(Box::new(|info| {
        if std::env::var_os("SIGMATOP_DEBUG").is_some() {
            eprintln!("sigmatop: {info}");
        }
    }));
    let ok = std::panic::catch_unwind(|| {
        dl::init();
        clock::init();
        config::load();
        if config::fault() == config::Fault::Init {
            panic!("injected init fault (SIGMATOP_TEST_FAULT=init)");
        }
        thread::init();
        collector::init();
    });
    if ok.is_err() {
        config::disable_all();
        eprintln!("sigmatop: initialisation failed; nothing is traced, the program runs untraced");
    }
}

extern "C" fn sigmatop_fini() {
    // GPU doorbells: parse pending WQEs first, so the collector's last snapshot has them.
    let _ = std::panic::catch_unwind(doorbell::shutdown);
    let _ = std::panic::catch_unwind(collector::shutdown);
}

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = sigmatop_init;

#[used]
#[unsafe(link_section = ".fini_array")]
static FINI: extern "C" fn() = sigmatop_fini;
