//! libsigmatop_preload.so: LD_PRELOADed into an unmodified program, it interposes the RDMA
//! libraries (UCX, libfabric, ...), counts and records every operation on the calling thread
//! without locks or syscalls, and leaves I/O to one collector thread. It never changes what the
//! program's calls return: every entry point catches panics and falls through to the real function.
//!
//! This file is the composition root, the one place that names every layer. The floors below it
//! only look down (docs/PRELOAD.md; tests/floors.rs fails on an import circle):
//! - `runtime/`: what every traced process runs whatever it traces (os, symbol lookup, config,
//!   clock, per-thread rings, registry, live server, final state, fork handlers, collector, the
//!   final flush). It names no layer: what it needs of them, lib.rs hands it in tables.
//! - `interpose/`: the hook idiom (`hook`), the exported `dlsym`/`dlvsym` (`dlsym`), the libc
//!   entry points that end or replace the image (`libc`: `_exit`/`_Exit`, `exec*`).
//! - `layers/`: `ucx`, `ofi` (libfabric), `ibverbs`, `mlx5` (direct verbs), `gpu` (`driver`,
//!   `doorbell`, `cuda`), `nccl` (NCCL's profiler plugin).
//! - `bench` (feature `bench`): entry points for the benchmarks and test probes, through the
//!   runtime's and the layers' API only.
//!
//! What the constructor installs, in this order, and why:
//! 1. the real `dlsym`/`dlvsym` (`dl::init`) and `_exit`/`_Exit` (`exit::init`): everything
//!    after may resolve symbols, and the exit hooks must never call the dynamic linker;
//! 2. every `SIGMATOP_*` variable (`config::load`; with `bench`, its own variables too), the
//!    real `wait*` functions and where a reaped child's end is written (`reap::init`: it reads
//!    the paths config loaded), then the clock's calibration (`clock::init`);
//! 3. the tables the runtime and the dlsym wrappers read: the hook table (`hooks`), the layers'
//!    fork holds and child hooks (`FORK_HOLDS`, `FORK_CHILD`), the before-flush steps
//!    (`BEFORE_FINAL_FLUSH`), the layer frame the collector sends after each snapshot (NCCL's
//!    collectives, `collector::live_frame`). All before the program can have threads and before
//!    the collector installs the fork handlers that read them (a table built lazily in one thread
//!    while another forks would stay half-built in the child);
//! 4. the thread state (`thread::init`), then the collector's fork handlers (`collector::init`:
//!    sigmatop's locks first, so they are free before a child's collector starts).
//!
//! And at the end: `lifecycle::final_flush(End::Fini)` from the destructor, the same sequence
//! the `_exit` wrappers run (`End::Exit`).

#![deny(clippy::undocumented_unsafe_blocks)]

#[cfg(feature = "bench")]
pub mod bench;

pub mod interpose;
pub mod layers;
pub mod runtime;

use interpose::dlsym;
use interpose::libc::exit;
use interpose::libc::reap;
use layers::gpu::{cuda, doorbell};
use layers::{ibverbs, mlx5, nccl, ofi, ucx};
use runtime::{clock, collector, config, dl, fork, lifecycle, thread};

/// Every hook the dlsym wrappers may hand out, layer by layer.
fn hooks() -> Vec<dlsym::Hook> {
    let mut v = Vec::new();
    v.extend(ucx::hooks());
    v.extend(ofi::hooks());
    v.extend(mlx5::hooks());
    v.extend(cuda::hooks());
    v.extend(ibverbs::hooks());
    v
}

/// The layers' locks that the forking thread holds across `fork()`, outer locks first (a lock
/// that is held while another is taken comes before it; the order of before these tables). The
/// runtime's own (registry, then config) come after them in `fork::hold_all`: every layer defines
/// endpoints and queues warnings while it holds its own. tests/reliability/processes.rs guards
/// the order.
const FORK_HOLDS: &[fork::HoldFn] = &[
    doorbell::hold_for_fork,
    mlx5::hold_for_fork,
    ibverbs::hold_for_fork,
    ofi::hold_for_fork,
    cuda::hold_for_fork,
];

/// What a fork child does before its collector may start: the parent's doorbell poller thread
/// does not exist in it.
const FORK_CHILD: &[fork::ChildFn] = &[
    doorbell::forget_poller_after_fork,
    ibverbs::queues_after_fork,
];

/// The layers' steps before the collector's last flush: GPU doorbells parse their pending WQEs
/// first, so the collector's last snapshot has them; NCCL's profiler plugin writes its last
/// records and totals (in the destructor only, as before this table existed).
const BEFORE_FINAL_FLUSH: &[lifecycle::BeforeFlush] = &[
    lifecycle::BeforeFlush {
        run: doorbell::shutdown,
        at_exit: true,
    },
    lifecycle::BeforeFlush {
        run: nccl::shutdown,
        at_exit: false,
    },
];

extern "C" fn sigmatop_init() {
    // This library's own copy of std: its panics are caught and reported in one line of ours,
    // never with std's default message in the program's stderr.
    std::panic::set_hook(Box::new(|info| {
        if config::debug() {
            eprintln!("sigmatop: {info}");
        }
    }));
    let ok = std::panic::catch_unwind(|| {
        // The real dlsym/dlvsym and _exit/_Exit, before anything may call them.
        dl::init();
        exit::init();
        config::load();
        reap::init();
        #[cfg(feature = "bench")]
        bench::load();
        clock::init();
        // Every table filled here, before the program can have threads and before the collector
        // installs the fork handlers that read them: a lazy first build in a dlsym wrapper could
        // be under way in one thread while another forks, and the child's table would then stay
        // "being built" for good (its next dlsym would wait forever).
        dlsym::install(hooks());
        fork::install(FORK_HOLDS, FORK_CHILD);
        lifecycle::install(BEFORE_FINAL_FLUSH);
        collector::live_frame(nccl::live_frames);
        collector::queue_source(ibverbs::queues, ibverbs::queues_tick);
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
    lifecycle::final_flush(lifecycle::End::Fini);
}

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = sigmatop_init;

#[used]
#[unsafe(link_section = ".fini_array")]
static FINI: extern "C" fn() = sigmatop_fini;
