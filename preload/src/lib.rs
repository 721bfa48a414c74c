//! libsigmatop_preload.so: LD_PRELOADed into an unmodified program, it interposes the RDMA
//! libraries (UCX, libfabric, ...), counts and records every operation on the calling thread
//! without locks or syscalls, and leaves I/O to one collector thread. It never changes what the
//! program's calls return: every entry point catches panics and falls through to the real function.
//!
//! Modules, one line each:
//! - `hook`: the one hook idiom (`around`, `after`): guard, real call, recording step.
//! - `thread`: per-thread counters and event ring; `ThreadState::record` is the recording step.
//! - `registry`: endpoints the process created and the handle → endpoint-id map.
//! - `ptrmap`: the lock-free pointer map behind the registry and the per-object states.
//! - `config`: every `SIGMATOP_*` variable, read once in the constructor.
//! - `clock`: hot-path timestamps (TSC) and their calibration samples.
//! - `dl`: symbol resolution, the exported `dlsym`/`dlvsym`, real-function slots (`RealFn`).
//! - `os`: the raw OS calls the preload makes for itself.
//! - `ucx`: the UCX layer (exported `ucp_*` entry points).
//! - `ofi`: the libfabric layer (`fi_fabric` and the per-object ops tables below it).
//! - `ibverbs`: the libibverbs layer (exported verbs and each context's ops table).
//! - `mlx5`: mlx5 direct verbs (devx) control path, feeding the doorbell join.
//! - `cuda`: CUDA driver hooks (`cuGetProcAddress` and the doorbell hijack's entry points).
//! - `nccl`: NCCL's profiler plugin (`ncclProfiler_v5`): collectives, proxy steps, IB work requests.
//! - `cuda_driver`: the real CUDA driver entry points sigmatop calls itself.
//! - `doorbell`: GPU doorbell shadow pages, the forwarding poller, WQE recovery.
//! - `collector`: the collector thread: drains rings, snapshots, records, serves the socket.
//! - `server`: the live Unix socket of the process.
//! - `final_state`: the final state a process leaves for the `sigmatop run` that started it.
//! - `process`: `exec*` hooks that end the record cleanly before the image is replaced.
//! - `exit`: `_exit`/`_Exit` hooks that run the final flush no destructor will run.
//! - `fork`: every lock of sigmatop's held by the forking thread across `fork()`.
//! - `bench` (feature `bench`): entry points for the benchmarks and test probes.

#![deny(clippy::undocumented_unsafe_blocks)]

#[cfg(feature = "bench")]
pub mod bench;

pub mod clock;
pub mod collector;
pub mod config;
pub mod cuda;
pub mod cuda_driver;
pub mod dl;
pub mod doorbell;
pub mod exit;
pub mod final_state;
pub mod fork;
pub mod hook;
pub mod ibverbs;
pub mod mlx5;
pub mod nccl;
pub mod ofi;
pub mod os;
pub mod process;
pub mod ptrmap;
pub mod reap;
pub mod registry;
pub mod server;
pub mod thread;
pub mod ucx;

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
        if config::debug() {
            eprintln!("sigmatop: {info}");
        }
    }));
    let ok = std::panic::catch_unwind(|| {
        dl::init();
        exit::init();
        config::load();
        reap::init();
        #[cfg(feature = "bench")]
        bench::load();
        clock::init();
        // Built here, before the program can have threads: a lazy first build in a dlsym
        // wrapper could be under way in one thread while another forks, and the child's table
        // would then stay "being built" for good (its next dlsym would wait forever).
        hooks_table();
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
    // A vfork child that calls exit() shares its parent's memory: the collector and poller it
    // would stop are the parent's.
    if collector::memory_of_another_process() {
        return;
    }
    // GPU doorbells: parse pending WQEs first, so the collector's last snapshot has them.
    let _ = std::panic::catch_unwind(doorbell::shutdown);
    let _ = std::panic::catch_unwind(nccl::shutdown);
    let _ = std::panic::catch_unwind(collector::shutdown);
    let _ = std::panic::catch_unwind(final_state::write_loaded_objects_if_untraced);
}

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = sigmatop_init;

#[used]
#[unsafe(link_section = ".fini_array")]
static FINI: extern "C" fn() = sigmatop_fini;
