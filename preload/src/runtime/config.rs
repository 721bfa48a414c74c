//! The preload's settings: every `SIGMATOP_*` variable, read once from the environment in the
//! constructor (nowhere else). Bad values fall back to defaults with a one-line warning, printed
//! once, when the process starts tracing.

use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering};
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use sigmatop::event::{Layer, Mode};

static MODE: AtomicU8 = AtomicU8::new(Mode::Simple as u8);
static EVENTS: AtomicU8 = AtomicU8::new(Events::Sampled as u8);
/// Layers used so far (`Layer::bit()`): see `note_used`.
static USED: AtomicU32 = AtomicU32::new(0);
static LAYERS: AtomicU32 = AtomicU32::new(0);
static SAMPLE: AtomicU32 = AtomicU32::new(DEFAULT_SAMPLE);
/// Events a thread skips after each one it keeps: `SIGMATOP_SAMPLE` - 1 when only sampled events
/// are kept, 0 when every one is (see `sample_skip`).
static SAMPLE_SKIP: AtomicU32 = AtomicU32::new(DEFAULT_SAMPLE - 1);
static INTERVAL_MS: AtomicU32 = AtomicU32::new(DEFAULT_INTERVAL_MS);
static PATHS: OnceLock<Paths> = OnceLock::new();
static WARNINGS: Mutex<Vec<String>> = Mutex::new(Vec::new());

static FAULT: AtomicU8 = AtomicU8::new(Fault::None as u8);
static DEBUG: AtomicBool = AtomicBool::new(false);
static NO_TSC: AtomicBool = AtomicBool::new(false);
static GPU: OnceLock<Gpu> = OnceLock::new();

/// How the WQEs behind a GPU doorbell are copied to the host (`SIGMATOP_WQE_COPY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WqeCopy {
    /// One async copy per doorbell (`doorbell`, the default).
    PerDoorbell,
    /// One copy per parse batch (`batch`).
    PerBatch,
}

/// Settings of the GPU doorbell path (doorbell.rs).
#[derive(Clone, Debug)]
pub struct Gpu {
    /// Recover the WQEs behind doorbells (`SIGMATOP_GPU_WQE`, default on; `off`: forward only).
    pub recover_wqes: bool,
    /// WQEBBs per parse batch (`SIGMATOP_WQE_BATCH`).
    pub batch: u32,
    pub copy: WqeCopy,
    /// Pin the poller to this CPU (`SIGMATOP_POLLER_CPU`).
    pub poller_cpu: Option<usize>,
    /// One line per recovered WQE (`SIGMATOP_WQE_LOG`, tests and debugging).
    pub wqe_log: Option<PathBuf>,
    /// A summary line on stderr at exit (`SIGMATOP_GPU_STATS`).
    pub stats: bool,
}

/// Default WQEBBs per parse batch (paper §V-C).
pub const DEFAULT_WQE_BATCH: u32 = 128;

impl Default for Gpu {
    fn default() -> Gpu {
        Gpu {
            recover_wqes: true,
            batch: DEFAULT_WQE_BATCH,
            copy: WqeCopy::PerDoorbell,
            poller_cpu: None,
            wqe_log: None,
            stats: false,
        }
    }
}

/// Test-only fault injection (`SIGMATOP_TEST_FAULT`), to prove every failure leaves the traced
/// program untouched. Nothing here costs anything on the hot path unless `Hook` is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Fault {
    None = 0,
    /// The constructor fails.
    Init = 1,
    /// Every hook's bookkeeping panics.
    Hook = 2,
    /// The collector stops draining rings, so they fill.
    Ring = 3,
    /// The collector thread dies after its first interval.
    Collector = 4,
    /// The live socket cannot be created.
    Socket = 5,
    /// The record's disk fills up after a few chunks.
    Disk = 6,
    /// The GPU doorbell poller applies each registration and QP 300 ms late: the program's
    /// doorbells are in the shadow page before the poller watches it (tests/devx_doorbell.rs).
    PollerLate = 7,
}

pub fn fault() -> Fault {
    match FAULT.load(Ordering::Relaxed) {
        1 => Fault::Init,
        2 => Fault::Hook,
        3 => Fault::Ring,
        4 => Fault::Collector,
        5 => Fault::Socket,
        6 => Fault::Disk,
        7 => Fault::PollerLate,
        _ => Fault::None,
    }
}

#[inline(always)]
pub fn fault_hook() -> bool {
    FAULT.load(Ordering::Relaxed) == Fault::Hook as u8
}

/// The test-only hook fault (`SIGMATOP_TEST_FAULT=hook`): raised inside the recording step, where
/// an event is timestamped (`clock::hook_now`), so aggregate mode's hot path carries no check.
#[cold]
#[inline(never)]
pub fn injected_hook_fault() {
    panic!("injected hook fault (SIGMATOP_TEST_FAULT=hook)");
}

/// Stops tracing in every layer: hooks pass everything through from now on.
pub fn disable_all() {
    LAYERS.store(0, Ordering::Relaxed);
}

pub const DEFAULT_SAMPLE: u32 = 64;
pub const DEFAULT_INTERVAL_MS: u32 = 250;

pub struct Paths {
    pub record: Option<PathBuf>,
    pub socket_dir: PathBuf,
    pub socket_dir_from_env: bool,
    /// `SIGMATOP_FINAL_DIR`: where `sigmatop run` wants the process's final state
    /// (crate::runtime::final_state).
    pub final_dir: Option<PathBuf>,
}

#[inline(always)]
pub fn mode() -> Mode {
    Mode::from_u8(MODE.load(Ordering::Relaxed))
}

/// Which events the hot path keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Events {
    /// Aggregate mode: none (counters only).
    None = 0,
    /// Simple or full mode without a record: one in `SIGMATOP_SAMPLE` per thread, for live
    /// viewers; the others cost no timestamp and no ring slot.
    Sampled = 1,
    /// Simple or full mode with a record (or `SIGMATOP_SAMPLE=1`): every one.
    All = 2,
}

/// Which events the hot path keeps (decided once, in `load`).
#[inline(always)]
pub fn events() -> Events {
    match EVENTS.load(Ordering::Relaxed) {
        0 => Events::None,
        1 => Events::Sampled,
        _ => Events::All,
    }
}

/// True when the hot path keeps any event (simple and full mode): one byte tested, for the
/// recording step's first branch.
#[inline(always)]
pub fn keeps_events() -> bool {
    EVENTS.load(Ordering::Relaxed) != Events::None as u8
}

/// A layer was used: it defined an endpoint or took over an object of the program (the layers
/// of counted operations are added by the collector). Control path only.
pub fn note_used(l: Layer) {
    if USED.load(Ordering::Relaxed) & l.bit() == 0 {
        USED.fetch_or(l.bit(), Ordering::Relaxed);
    }
}

/// The layers noted used so far.
pub fn used() -> u32 {
    USED.load(Ordering::Relaxed)
}

/// True when events (not only counters) are kept.
#[inline(always)]
pub fn events_enabled() -> bool {
    MODE.load(Ordering::Relaxed) >= Mode::Simple as u8
}

#[inline(always)]
pub fn full() -> bool {
    MODE.load(Ordering::Relaxed) == Mode::Full as u8
}

pub fn layers() -> u32 {
    LAYERS.load(Ordering::Relaxed)
}

#[inline]
pub fn layer_enabled(l: Layer) -> bool {
    LAYERS.load(Ordering::Relaxed) & l.bit() != 0
}

/// Turns a layer off at run time (a hook failed): its hooks pass everything through.
pub fn disable_layer(l: Layer) {
    LAYERS.fetch_and(!l.bit(), Ordering::Relaxed);
}

pub fn sample() -> u32 {
    SAMPLE.load(Ordering::Relaxed)
}

/// How many events a thread passes over after each one it keeps, when it keeps events at all:
/// `SIGMATOP_SAMPLE` - 1 without a record, 0 with one (every event kept). The recording step's
/// countdown reloads from it, so that one test serves both cases.
#[inline(always)]
pub fn sample_skip() -> u32 {
    SAMPLE_SKIP.load(Ordering::Relaxed)
}

pub fn interval_ms() -> u32 {
    INTERVAL_MS.load(Ordering::Relaxed)
}

/// `SIGMATOP_DEBUG`: sigmatop's own panics are printed.
pub fn debug() -> bool {
    DEBUG.load(Ordering::Relaxed)
}

/// `SIGMATOP_NO_TSC`: timestamps from CLOCK_MONOTONIC even where the TSC is invariant.
pub fn no_tsc() -> bool {
    NO_TSC.load(Ordering::Relaxed)
}

pub fn gpu() -> &'static Gpu {
    GPU.get_or_init(Gpu::default)
}

pub fn paths() -> &'static Paths {
    PATHS.get_or_init(|| Paths {
        record: None,
        socket_dir: default_socket_dir(),
        socket_dir_from_env: false,
        final_dir: None,
    })
}

/// The warnings' lock, for `fork::prepare`: taken last (`warn` is called with other locks held).
pub fn hold_for_fork(h: &mut crate::runtime::held::Held) {
    h.lock(&WARNINGS);
}

/// Queues a warning; printed once the process starts tracing (so processes that never touch RDMA
/// stay silent).
pub fn warn(msg: String) {
    if let Ok(mut w) = WARNINGS.lock()
        && !w.contains(&msg)
    {
        w.push(msg);
    }
}

/// Prints and clears queued warnings.
pub fn flush_warnings() {
    let msgs = match WARNINGS.lock() {
        Ok(mut w) => std::mem::take(&mut *w),
        Err(_) => return,
    };
    for m in msgs {
        eprintln!("sigmatop: {m}");
    }
}

fn default_socket_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_RUNTIME_DIR").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("sigmatop");
    }
    PathBuf::from(format!("/tmp/sigmatop-{}", crate::runtime::os::uid()))
}

fn env(name: &str) -> Option<String> {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => Some(v),
        Ok(_) => None,
        Err(std::env::VarError::NotPresent) => None,
        Err(std::env::VarError::NotUnicode(_)) => {
            warn(format!("{name} is not valid UTF-8; ignored"));
            None
        }
    }
}

/// Parses SIGMATOP_LAYERS ("ucx,libfabric", "all", "none", "-cuda").
pub fn parse_layers(s: &str) -> Result<u32, String> {
    let all: u32 = Layer::ALL.iter().map(|l| l.bit()).sum();
    let mut mask = 0u32;
    let mut only_removals = true;
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        if part == "all" {
            mask |= all;
            only_removals = false;
        } else if part == "none" {
            only_removals = false;
        } else if let Some(rest) = part.strip_prefix('-') {
            let l = Layer::parse(rest).ok_or_else(|| format!("unknown layer '{rest}'"))?;
            mask &= !l.bit();
        } else {
            let l = Layer::parse(part).ok_or_else(|| format!("unknown layer '{part}'"))?;
            mask |= l.bit();
            only_removals = false;
        }
    }
    if only_removals {
        mask = all;
        for part in s.split(',').map(str::trim) {
            if let Some(l) = part.strip_prefix('-').and_then(Layer::parse) {
                mask &= !l.bit();
            }
        }
    }
    Ok(mask)
}

/// Reads every SIGMATOP_* variable. Called once from the constructor.
pub fn load() {
    let all: u32 = Layer::ALL.iter().map(|l| l.bit()).sum();
    if let Some(m) = env("SIGMATOP_MODE") {
        match Mode::parse(&m) {
            Some(mode) => MODE.store(mode as u8, Ordering::Relaxed),
            None => warn(format!(
                "SIGMATOP_MODE={m} is not one of aggregate, simple, full; using simple"
            )),
        }
    }
    let mut layers = all;
    if let Some(l) = env("SIGMATOP_LAYERS") {
        match parse_layers(&l) {
            Ok(m) => layers = m,
            Err(e) => warn(format!(
                "SIGMATOP_LAYERS={l}: {e} (known: ucx, libfabric, ibverbs, mlx5, cuda); tracing all layers"
            )),
        }
    }
    LAYERS.store(layers, Ordering::Relaxed);
    if let Some(s) = env("SIGMATOP_SAMPLE") {
        match s.trim().parse::<u32>() {
            Ok(n) if n >= 1 => SAMPLE.store(n, Ordering::Relaxed),
            _ => warn(format!(
                "SIGMATOP_SAMPLE={s} is not a positive integer (1 = every event live); using {DEFAULT_SAMPLE}"
            )),
        }
    }
    if let Some(s) = env("SIGMATOP_INTERVAL_MS") {
        match s.trim().parse::<u32>() {
            Ok(n) if (10..=60_000).contains(&n) => INTERVAL_MS.store(n, Ordering::Relaxed),
            _ => warn(format!(
                "SIGMATOP_INTERVAL_MS={s} is not between 10 and 60000; using {DEFAULT_INTERVAL_MS}"
            )),
        }
    }
    if let Some(f) = env("SIGMATOP_TEST_FAULT") {
        let v = match f.trim() {
            "init" => Fault::Init,
            "hook" => Fault::Hook,
            "ring" => Fault::Ring,
            "collector" => Fault::Collector,
            "socket" => Fault::Socket,
            "disk" => Fault::Disk,
            "poller_late" => Fault::PollerLate,
            _ => {
                warn(format!(
                    "SIGMATOP_TEST_FAULT={f} is not one of init, hook, ring, collector, socket, disk, poller_late; ignored"
                ));
                Fault::None
            }
        };
        FAULT.store(v as u8, Ordering::Relaxed);
    }
    let record = env("SIGMATOP_RECORD").map(PathBuf::from);
    let (socket_dir, from_env) = match env("SIGMATOP_SOCKET_DIR") {
        Some(d) => (PathBuf::from(d), true),
        None => (default_socket_dir(), false),
    };
    let events = if mode() == Mode::Aggregate {
        Events::None
    } else if record.is_some() || sample() == 1 {
        Events::All
    } else {
        Events::Sampled
    };
    EVENTS.store(events as u8, Ordering::Relaxed);
    let skip = match events {
        // (At most i32::MAX: the hot path's countdown tests its sign.)
        Events::Sampled => (sample() - 1).min(i32::MAX as u32),
        Events::None | Events::All => 0,
    };
    SAMPLE_SKIP.store(skip, Ordering::Relaxed);
    let _ = PATHS.set(Paths {
        record,
        socket_dir,
        socket_dir_from_env: from_env,
        final_dir: env("SIGMATOP_FINAL_DIR").map(PathBuf::from),
    });
    // Set at all (even empty) is on, as these two always were.
    DEBUG.store(
        std::env::var_os("SIGMATOP_DEBUG").is_some(),
        Ordering::Relaxed,
    );
    NO_TSC.store(
        std::env::var_os("SIGMATOP_NO_TSC").is_some(),
        Ordering::Relaxed,
    );
    let _ = GPU.set(load_gpu());
}

/// The doorbell path's variables; bad values warn and fall back like the others.
fn load_gpu() -> Gpu {
    let mut g = Gpu::default();
    if let Some(v) = env("SIGMATOP_GPU_WQE") {
        match v.trim() {
            "off" | "0" | "no" | "false" => g.recover_wqes = false,
            "on" | "1" | "yes" | "true" => {}
            _ => warn(format!(
                "SIGMATOP_GPU_WQE={v} is not one of on, off; recovering WQEs"
            )),
        }
    }
    if let Some(v) = env("SIGMATOP_WQE_BATCH") {
        match v.trim().parse::<u32>() {
            Ok(n) if n >= 1 => g.batch = n,
            _ => warn(format!(
                "SIGMATOP_WQE_BATCH={v} is not a positive integer; using {DEFAULT_WQE_BATCH}"
            )),
        }
    }
    if let Some(v) = env("SIGMATOP_WQE_COPY") {
        match v.trim() {
            "doorbell" => {}
            "batch" => g.copy = WqeCopy::PerBatch,
            _ => warn(format!(
                "SIGMATOP_WQE_COPY={v} is not one of doorbell, batch; copying per doorbell"
            )),
        }
    }
    if let Some(v) = env("SIGMATOP_POLLER_CPU") {
        match v.trim().parse::<usize>() {
            Ok(n) => g.poller_cpu = Some(n),
            Err(_) => warn(format!(
                "SIGMATOP_POLLER_CPU={v} is not a CPU number; the poller is not pinned"
            )),
        }
    }
    g.wqe_log = env("SIGMATOP_WQE_LOG").map(PathBuf::from);
    g.stats = env("SIGMATOP_GPU_STATS").is_some();
    g
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn layers_parse() {
        assert_eq!(parse_layers("ucx").unwrap(), Layer::Ucx.bit());
        assert_eq!(
            parse_layers("-cuda").unwrap(),
            Layer::ALL.iter().map(|l| l.bit()).sum::<u32>() - Layer::Cuda.bit()
        );
        assert_eq!(parse_layers("none").unwrap(), 0);
        assert!(parse_layers("ucx,bogus").is_err());
    }
}
