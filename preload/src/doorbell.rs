//! GPU doorbell hijack, forwarding and WQE recovery (paper §V, reference §2, §3, §6, §8).
//!
//! **Hijack.** mlx5.rs reports every devx UAR the program allocates. When the program registers a
//! host range that lies in one of those UAR pages with the CUDA driver (`cuMemHostRegister`, any
//! flags: a real UAR comes with IoMemory, an emulated one in ordinary RAM cannot), sigmatop
//! registers instead a pinned *shadow* page (one per system page, WITHOUT IoMemory: ordinary RAM
//! refuses it, §8) and `cuMemHostGetDevicePointer` on any address of the UAR page returns the
//! shadow's device pointer at the same offset. If anything fails, the original call goes through
//! unchanged: the program is never worse off than without sigmatop.
//!
//! **Poller.** One thread ("sigmatop-db") spins (with `pause`; this CPU family is not assumed to
//! have umwait/mwaitx, and spinning never blocks the program) over the watched 64-byte blocks of
//! every shadow page. A change of one 8-byte word is forwarded at once to the same offset of the
//! real UAR page (`sfence` after: UAR mappings are write-combining); a change of several words of
//! one block is a BlueFlame write, re-read until stable and forwarded whole (64 bytes, then
//! `sfence`). Then the word is decoded ([`sigmatop::decode::doorbell`]) and joined by QPN to the
//! devx QP that mlx5.rs saw created.
//!
//! **Coalescing.** Back-to-back stores that land between two reads of the poller merge into one
//! observation. Nothing is lost: the producer index covers every WQE in between, and the WQE walk
//! recovers them all. What the poller can see of it is counted in `coalesced_doorbells`: a GPU
//! index behind the last one (an earlier ring overtaken by a later one between two reads) and a
//! BlueFlame block that kept changing while it was read.
//!
//! **WQE recovery.** For each doorbell that posts new WQEBBs, the poller enqueues (after
//! forwarding) an async device-to-host copy of exactly those WQEBBs, wrap-aware, on its own
//! non-blocking CUDA stream into a pinned mirror of the SQ (same slot offsets). Parsing is batched:
//! once `SIGMATOP_WQE_BATCH` (default 128, never more than the SQ has slots) WQEBBs are pending,
//! or the QP has been idle for 50 µs, the stream is synced and the pending ranges are walked with
//! [`sigmatop::decode::wqe::walk_new_wqes`]; each WQE becomes a GPU op event stamped with its
//! doorbell's timestamp, on the QP's endpoint (whose `gpu` is the SQ's device). Host-resident SQs
//! are copied with a plain memcpy at doorbell time. Ctrl-index mismatches and unparsable WQEs are
//! counted in `unparsable_wqes`.
//!
//! Environment: `SIGMATOP_GPU_WQE=off` (forward only), `SIGMATOP_WQE_BATCH=n`,
//! `SIGMATOP_WQE_COPY=doorbell|batch` (copy per doorbell, the default, or one copy per batch),
//! `SIGMATOP_POLLER_CPU=n` (pin the poller), `SIGMATOP_WQE_LOG=file` (one line per recovered
//! WQE, for tests and debugging), `SIGMATOP_GPU_STATS=1` (a summary line on stderr at exit).

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::collections::HashMap;
use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sigmatop::decode::devx::DevxUar;
use sigmatop::decode::doorbell::{DoorbellKind, DoorbellStep, DoorbellWord, SqTracker, WqeRange};
use sigmatop::decode::wqe::{Opcode, QpType, Wqe, walk_new_wqes};
use sigmatop::decode::{WQEBB_BYTES, valid_sq_cnt};
use sigmatop::event::{Op, RawEvent, UNATTRIBUTED_EP, flags};

use crate::cuda::{self, CUDA_SUCCESS, Ctx, CuResult, Driver, HostRegisterFn, Stream};
use crate::thread::ThreadState;

/// Default WQEBBs per parse batch (paper §V-C).
pub const DEFAULT_BATCH: u32 = 128;
/// Bytes of a registered range watched from its start (a UAR's DB/BF registers).
const MAX_WATCH_BYTES: u64 = 1024;
/// A QP idle this long has its pending WQEs parsed.
const IDLE_FLUSH_NS: u64 = 50_000;

// ---------------------------------------------------------------------------------------------
// Counters (read by the collector's snapshot and by tests through the stats line).

static COALESCED: AtomicU64 = AtomicU64::new(0);
static UNPARSABLE: AtomicU64 = AtomicU64::new(0);
static DOORBELLS: AtomicU64 = AtomicU64::new(0);
static BLUEFLAME: AtomicU64 = AtomicU64::new(0);
static OTHER_STORES: AtomicU64 = AtomicU64::new(0);
static DUPLICATES: AtomicU64 = AtomicU64::new(0);
static OVERRUNS: AtomicU64 = AtomicU64::new(0);
static UNKNOWN_QP: AtomicU64 = AtomicU64::new(0);
static WQES: AtomicU64 = AtomicU64::new(0);
static COPIES: AtomicU64 = AtomicU64::new(0);
static SYNCS: AtomicU64 = AtomicU64::new(0);
static COPY_FAILED: AtomicU64 = AtomicU64::new(0);
static HIJACKS: AtomicU64 = AtomicU64::new(0);
static HIJACK_FAILED: AtomicU64 = AtomicU64::new(0);

/// (coalesced doorbells, unparsable WQEs) for the collector's DropCounters.
pub fn drops() -> (u64, u64) {
    (
        COALESCED.load(Ordering::Relaxed),
        UNPARSABLE.load(Ordering::Relaxed),
    )
}

/// One line of every counter (SIGMATOP_GPU_STATS, tests).
pub fn stats_line() -> String {
    let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
    format!(
        "sigmatop-gpu: hijacks={} hijack_failed={} doorbells={} blueflame={} other_stores={} duplicates={} coalesced={} overruns={} unknown_qp={} wqes={} unparsable={} copies={} syncs={} copy_failed={} wrapped_lookups={} unknown_variants={}",
        l(&HIJACKS),
        l(&HIJACK_FAILED),
        l(&DOORBELLS),
        l(&BLUEFLAME),
        l(&OTHER_STORES),
        l(&DUPLICATES),
        l(&COALESCED),
        l(&OVERRUNS),
        l(&UNKNOWN_QP),
        l(&WQES),
        l(&UNPARSABLE),
        l(&COPIES),
        l(&SYNCS),
        l(&COPY_FAILED),
        l(&cuda::WRAPPED_LOOKUPS),
        l(&cuda::UNKNOWN_VARIANTS),
    )
}

// ---------------------------------------------------------------------------------------------
// Shared control-path state (app threads write under the lock; the poller re-reads on GEN).

/// A devx QP as mlx5.rs decoded it from CREATE_QP.
#[derive(Clone, Debug)]
pub struct QpInfo {
    pub qpn: u32,
    pub ep: u32,
    /// Address of the SQ's first WQEBB (device pointer or host VA).
    pub sq_addr: u64,
    pub sq_cnt: u32,
    pub qp_type: QpType,
    /// The GPU whose memory holds the SQ (None: host memory).
    pub gpu: Option<u32>,
}

struct Uar {
    handle: u64,
    uar: DevxUar,
}

struct Shadow {
    /// Real UAR page (system-page aligned).
    real_page: u64,
    /// The pinned shadow page.
    host: u64,
    /// Its device pointer.
    dptr: u64,
}

struct Registration {
    p: u64,
    size: u64,
    page: u64,
}

#[derive(Default)]
struct State {
    uars: Vec<Uar>,
    shadows: Vec<Shadow>,
    regs: Vec<Registration>,
    qps: Vec<QpInfo>,
    ctx: Option<Ctx>,
}

static STATE: Mutex<State> = Mutex::new(State {
    uars: Vec::new(),
    shadows: Vec::new(),
    regs: Vec::new(),
    qps: Vec::new(),
    ctx: None,
});
/// Bumped on every change the poller must see; the poller stores what it has applied in ACK.
static GEN: AtomicU64 = AtomicU64::new(0);
static ACK: AtomicU64 = AtomicU64::new(0);
static POLLER_STARTED: AtomicBool = AtomicBool::new(false);
static POLLER_RUNNING: AtomicBool = AtomicBool::new(false);
static STOP: AtomicBool = AtomicBool::new(false);

/// Cheap filter for the CUDA hooks: the span of all known UAR pages.
static UAR_COUNT: AtomicUsize = AtomicUsize::new(0);
static UAR_LO: AtomicU64 = AtomicU64::new(u64::MAX);
static UAR_HI: AtomicU64 = AtomicU64::new(0);

fn page_size() -> u64 {
    static PS: AtomicU64 = AtomicU64::new(0);
    let p = PS.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let v = if v > 0 { v as u64 } else { 4096 };
    PS.store(v, Ordering::Relaxed);
    v
}

fn page_of(a: u64) -> u64 {
    a & !(page_size() - 1)
}

/// Whether `[p, p+len)` may touch a devx UAR page (lock-free; false when there are none).
#[inline]
pub fn maybe_uar(p: u64, len: u64) -> bool {
    UAR_COUNT.load(Ordering::Relaxed) != 0
        && p < UAR_HI.load(Ordering::Relaxed)
        && p.saturating_add(len.max(1)) > UAR_LO.load(Ordering::Relaxed)
}

fn bump() -> u64 {
    GEN.fetch_add(1, Ordering::AcqRel) + 1
}

/// Waits (bounded) until the poller applied generation `g`.
fn wait_ack(g: u64) {
    if !POLLER_RUNNING.load(Ordering::Acquire) {
        return;
    }
    let deadline = Instant::now() + Duration::from_millis(200);
    while ACK.load(Ordering::Acquire) < g && Instant::now() < deadline {
        std::thread::yield_now();
    }
}

/// A devx UAR was allocated (mlx5.rs).
pub fn add_uar(handle: u64, uar: DevxUar) {
    let Ok(mut s) = STATE.lock() else { return };
    s.uars.retain(|u| u.handle != handle);
    for a in [uar.reg_addr, uar.base_addr] {
        if a != 0 {
            let pg = page_of(a);
            UAR_LO.fetch_min(pg, Ordering::Relaxed);
            UAR_HI.fetch_max(pg + page_size(), Ordering::Relaxed);
        }
    }
    s.uars.push(Uar { handle, uar });
    UAR_COUNT.store(s.uars.len(), Ordering::Relaxed);
}

/// A devx UAR is about to be freed: stop watching and forwarding to it.
pub fn remove_uar(handle: u64) {
    let g = {
        let Ok(mut s) = STATE.lock() else { return };
        let Some(i) = s.uars.iter().position(|u| u.handle == handle) else {
            return;
        };
        let u = s.uars.remove(i);
        let pg = page_of(u.uar.reg_addr);
        // The real page may be unmapped after this: no forwarding to it any more.
        let other = s.uars.iter().any(|o| page_of(o.uar.reg_addr) == pg);
        if !other {
            s.regs.retain(|r| r.page != pg);
        }
        bump()
    };
    wait_ack(g);
}

/// The UAR whose page holds `p`, if any.
fn uar_page_of(s: &State, p: u64) -> Option<u64> {
    let pg = page_of(p);
    s.uars
        .iter()
        .find(|u| {
            page_of(u.uar.reg_addr) == pg
                || (u.uar.base_addr != 0 && page_of(u.uar.base_addr) == pg)
        })
        .map(|_| pg)
}

/// `cuMemHostRegister` on a range: Some(result) when sigmatop handled it (hijack), None to let
/// the real call through.
pub fn on_host_register(
    p: *mut libc::c_void,
    size: usize,
    flags: libc::c_uint,
    real: HostRegisterFn,
) -> Option<CuResult> {
    let (p, size) = (p as u64, size as u64);
    let ps = page_size();
    let mut s = STATE.lock().ok()?;
    let page = uar_page_of(&s, p)?;
    if size == 0 || p + size > page + ps {
        return None;
    }
    let already = s.regs.iter().any(|r| r.page == page);
    if !s.shadows.iter().any(|sh| sh.real_page == page) {
        match make_shadow(page, flags, real) {
            Some(sh) => s.shadows.push(sh),
            None => {
                HIJACK_FAILED.fetch_add(1, Ordering::Relaxed);
                crate::config::warn(
                    "cannot set up a doorbell shadow page; GPU doorbells of this UAR are not traced".into(),
                );
                return None;
            }
        }
    }
    if s.ctx.is_none() {
        s.ctx = cuda::driver().and_then(Driver::current_ctx);
    }
    s.regs.push(Registration { p, size, page });
    HIJACKS.fetch_add(1, Ordering::Relaxed);
    bump();
    drop(s);
    ensure_poller();
    crate::collector::ensure_started();
    // The real driver refuses a second registration of an already registered page.
    Some(if already {
        cuda::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
    } else {
        CUDA_SUCCESS
    })
}

fn make_shadow(page: u64, flags: libc::c_uint, real: HostRegisterFn) -> Option<Shadow> {
    let drv = cuda::driver()?;
    let ps = page_size() as usize;
    // SAFETY: anonymous private mapping, checked for MAP_FAILED.
    let host = unsafe {
        libc::mmap(
            core::ptr::null_mut(),
            ps,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
            -1,
            0,
        )
    };
    if host == libc::MAP_FAILED {
        return None;
    }
    let f = (flags & !cuda::CU_MEMHOSTREGISTER_IOMEMORY)
        | cuda::CU_MEMHOSTREGISTER_PORTABLE
        | cuda::CU_MEMHOSTREGISTER_DEVICEMAP;
    // SAFETY: the real cuMemHostRegister on our own fresh page.
    let r = unsafe { real(host, ps, f) };
    let mut dptr = 0u64;
    // SAFETY: the real cuMemHostGetDevicePointer_v2 on the page just registered.
    let ok =
        r == CUDA_SUCCESS && unsafe { (drv.host_get_dptr)(&mut dptr, host, 0) } == CUDA_SUCCESS;
    if !ok {
        // SAFETY: our own mapping, never handed out.
        unsafe { libc::munmap(host, ps) };
        return None;
    }
    Some(Shadow {
        real_page: page,
        host: host as u64,
        dptr,
    })
}

/// `cuMemHostGetDevicePointer` on a hijacked UAR page: the shadow's device pointer, same offset.
pub fn shadow_device_pointer(p: u64) -> Option<u64> {
    let s = STATE.lock().ok()?;
    let page = page_of(p);
    if !s.regs.iter().any(|r| r.page == page) {
        return None;
    }
    let sh = s.shadows.iter().find(|sh| sh.real_page == page)?;
    Some(sh.dptr + (p - page))
}

/// `cuMemHostUnregister(p)`: true when `p` was a hijacked registration (now ended).
pub fn on_host_unregister(p: u64) -> bool {
    let g = {
        let Ok(mut s) = STATE.lock() else {
            return false;
        };
        let Some(i) = s.regs.iter().position(|r| r.p == p) else {
            return false;
        };
        s.regs.remove(i);
        bump()
    };
    wait_ack(g);
    true
}

/// A devx QP was created (mlx5.rs).
pub fn add_qp(q: QpInfo) {
    if let Ok(mut s) = STATE.lock() {
        s.qps.retain(|o| o.qpn != q.qpn);
        s.qps.push(q);
        bump();
    }
}

/// A devx QP is being destroyed: its pending WQEs are parsed first (bounded wait).
pub fn remove_qp(qpn: u32) {
    let g = {
        let Ok(mut s) = STATE.lock() else { return };
        let before = s.qps.len();
        s.qps.retain(|o| o.qpn != qpn);
        if s.qps.len() == before {
            return;
        }
        bump()
    };
    wait_ack(g);
}

/// Parses everything pending and stops the poller (process exit; bounded).
pub fn shutdown() {
    if !POLLER_RUNNING.load(Ordering::Acquire) {
        return;
    }
    STOP.store(true, Ordering::Release);
    let deadline = Instant::now() + Duration::from_millis(500);
    while POLLER_RUNNING.load(Ordering::Acquire) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn ensure_poller() {
    if POLLER_STARTED.swap(true, Ordering::AcqRel) {
        return;
    }
    POLLER_RUNNING.store(true, Ordering::Release);
    let r = std::thread::Builder::new()
        .name("sigmatop-db".into())
        .stack_size(1 << 20)
        .spawn(|| {
            let r = std::panic::catch_unwind(|| Poller::new().run());
            if r.is_err() {
                eprintln!(
                    "sigmatop: doorbell poller failed; GPU doorbells of this process are no longer forwarded"
                );
            }
            POLLER_RUNNING.store(false, Ordering::Release);
        });
    if r.is_err() {
        POLLER_RUNNING.store(false, Ordering::Release);
        eprintln!("sigmatop: cannot start the doorbell poller thread");
    }
}

// ---------------------------------------------------------------------------------------------
// The poller.

#[derive(Clone, Copy, PartialEq, Eq)]
enum CopyMode {
    PerDoorbell,
    PerBatch,
}

struct Cfg {
    recover: bool,
    batch: u32,
    copy: CopyMode,
    cpu: Option<usize>,
    log: Option<std::path::PathBuf>,
    stats: bool,
}

impl Cfg {
    fn load() -> Cfg {
        let var = |n: &str| std::env::var(n).ok().filter(|v| !v.trim().is_empty());
        let recover = !matches!(
            var("SIGMATOP_GPU_WQE").as_deref().map(str::trim),
            Some("off" | "0" | "no" | "false")
        );
        let batch = var("SIGMATOP_WQE_BATCH")
            .and_then(|v| v.trim().parse::<u32>().ok())
            .filter(|&b| b >= 1)
            .unwrap_or(DEFAULT_BATCH);
        let copy = match var("SIGMATOP_WQE_COPY").as_deref().map(str::trim) {
            Some("batch") => CopyMode::PerBatch,
            _ => CopyMode::PerDoorbell,
        };
        Cfg {
            recover,
            batch,
            copy,
            cpu: var("SIGMATOP_POLLER_CPU").and_then(|v| v.trim().parse().ok()),
            log: var("SIGMATOP_WQE_LOG").map(std::path::PathBuf::from),
            stats: var("SIGMATOP_GPU_STATS").is_some(),
        }
    }
}

/// One watched 64-byte block of a shadow page.
struct Block {
    shadow: *const u64,
    real: *mut u64,
    /// Watched words (bit i = word i).
    mask: u8,
    last: [u64; 8],
}

struct Pending {
    range: WqeRange,
    tsc: u64,
    copied: bool,
}

struct QpRt {
    info: QpInfo,
    tracker: SqTracker,
    /// Pinned host mirror of the SQ (sq_cnt WQEBBs, same slot offsets).
    mirror: *mut u8,
    pending: Vec<Pending>,
    pending_wqebbs: u32,
    threshold: u32,
    last_db_ns: u64,
    /// This QP is still defined (false: being destroyed; flushed, then dropped).
    live: bool,
}

struct Poller {
    cfg: Cfg,
    seen_gen: u64,
    blocks: Vec<Block>,
    qps: HashMap<u32, QpRt>,
    ts: Option<&'static ThreadState>,
    drv: Option<&'static Driver>,
    stream: Option<Stream>,
    ctx_set: bool,
    log: Option<std::io::BufWriter<std::fs::File>>,
}

#[inline(always)]
fn sfence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: sfence has no preconditions.
    unsafe {
        core::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    core::sync::atomic::fence(Ordering::SeqCst);
}

fn op_of(opcode: Opcode) -> Op {
    match opcode {
        Opcode::RdmaWrite | Opcode::RdmaWriteImm => Op::GpuWrite,
        Opcode::RdmaRead => Op::GpuRead,
        o if o.is_atomic() => Op::GpuAtomic,
        Opcode::Send | Opcode::SendImm | Opcode::SendInval => Op::GpuSend,
        _ => Op::GpuOther,
    }
}

impl Poller {
    fn new() -> Poller {
        let cfg = Cfg::load();
        let log = cfg.log.as_ref().and_then(|p| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .ok()
                .map(std::io::BufWriter::new)
        });
        Poller {
            cfg,
            seen_gen: 0,
            blocks: Vec::new(),
            qps: HashMap::new(),
            ts: None,
            drv: None,
            stream: None,
            ctx_set: false,
            log,
        }
    }

    fn run(mut self) {
        if let Some(cpu) = self.cfg.cpu {
            // SAFETY: a zeroed cpu_set_t with one bit set, for this thread.
            unsafe {
                let mut set: libc::cpu_set_t = core::mem::zeroed();
                libc::CPU_SET(cpu, &mut set);
                libc::sched_setaffinity(0, core::mem::size_of::<libc::cpu_set_t>(), &set);
            }
        }
        self.ts = crate::thread::current();
        let mut idle: u32 = 0;
        loop {
            let g = GEN.load(Ordering::Acquire);
            if g != self.seen_gen {
                self.apply(g);
            }
            if STOP.load(Ordering::Acquire) {
                self.flush_all();
                break;
            }
            if self.blocks.is_empty() {
                if self.qps.values().any(|q| !q.pending.is_empty()) {
                    self.flush_all();
                }
                std::thread::sleep(Duration::from_micros(500));
                continue;
            }
            let mut any = false;
            for i in 0..self.blocks.len() {
                let b = &self.blocks[i];
                let mut changed = 0u8;
                for w in 0..8 {
                    if b.mask & (1 << w) != 0 {
                        // SAFETY: the shadow page is mapped for the life of the process.
                        let v = unsafe { core::ptr::read_volatile(b.shadow.add(w)) };
                        if v != b.last[w] {
                            changed |= 1 << w;
                        }
                    }
                }
                if changed != 0 {
                    any = true;
                    self.on_change(i, changed);
                }
            }
            if any {
                idle = 0;
            } else {
                core::hint::spin_loop();
                idle = idle.wrapping_add(1);
                if idle & 0x3ff == 0 {
                    self.idle_flush();
                }
            }
        }
        if let Some(l) = self.log.as_mut() {
            let _ = l.flush();
        }
        if self.cfg.stats {
            eprintln!("{}", stats_line());
        }
    }

    /// Applies control-path changes: rebuild the watched blocks, add/drop QPs.
    fn apply(&mut self, g: u64) {
        let (blocks, qps, ctx) = {
            let Ok(s) = STATE.lock() else { return };
            let mut blocks: Vec<Block> = Vec::new();
            let ps = page_size();
            for sh in &s.shadows {
                let regs: Vec<&Registration> =
                    s.regs.iter().filter(|r| r.page == sh.real_page).collect();
                if regs.is_empty() {
                    continue;
                }
                let words = (ps / 8) as usize;
                let mut watched = vec![false; words];
                let mut mark = |from: u64, len: u64| {
                    let a = from.saturating_sub(sh.real_page) / 8;
                    let end = (from + len)
                        .min(sh.real_page + ps)
                        .saturating_sub(sh.real_page);
                    let b = end.div_ceil(8);
                    for w in a..b {
                        if let Some(x) = watched.get_mut(w as usize) {
                            *x = true;
                        }
                    }
                };
                for r in &regs {
                    mark(r.p, r.size.min(MAX_WATCH_BYTES));
                }
                for u in &s.uars {
                    if page_of(u.uar.reg_addr) == sh.real_page {
                        mark(u.uar.reg_addr, 8);
                    }
                }
                for blk in 0..words / 8 {
                    let mut mask = 0u8;
                    for w in 0..8 {
                        if watched[blk * 8 + w] {
                            mask |= 1 << w;
                        }
                    }
                    if mask == 0 {
                        continue;
                    }
                    let shadow = (sh.host + blk as u64 * 64) as *const u64;
                    let real = (sh.real_page + blk as u64 * 64) as *mut u64;
                    // Keep what was last seen of a block that stays watched.
                    let last = self
                        .blocks
                        .iter()
                        .find(|b| b.shadow == shadow)
                        .map(|b| b.last)
                        .unwrap_or_else(|| {
                            let mut l = [0u64; 8];
                            for (w, x) in l.iter_mut().enumerate() {
                                // SAFETY: our shadow page; read what is there now.
                                *x = unsafe { core::ptr::read_volatile(shadow.add(w)) };
                            }
                            l
                        });
                    blocks.push(Block {
                        shadow,
                        real,
                        mask,
                        last,
                    });
                }
            }
            (blocks, s.qps.clone(), s.ctx)
        };
        self.blocks = blocks;
        if self.drv.is_none() {
            self.drv = cuda::driver();
        }
        if !self.ctx_set
            && let (Some(d), Some(c)) = (self.drv, ctx)
        {
            self.ctx_set = d.set_ctx(c);
        }
        // QPs gone: parse what is pending, then drop them.
        let gone: Vec<u32> = self
            .qps
            .keys()
            .filter(|k| !qps.iter().any(|q| q.qpn == **k))
            .copied()
            .collect();
        for qpn in gone {
            if let Some(mut q) = self.qps.remove(&qpn) {
                q.live = false;
                self.flush(&mut q);
                self.free_qp(q);
            }
        }
        for q in qps {
            if !self.qps.contains_key(&q.qpn)
                && let Some(rt) = self.new_qp(q)
            {
                self.qps.insert(rt.info.qpn, rt);
            }
        }
        self.seen_gen = g;
        ACK.store(g, Ordering::Release);
    }

    fn new_qp(&mut self, info: QpInfo) -> Option<QpRt> {
        if !valid_sq_cnt(info.sq_cnt) {
            return None;
        }
        let tracker = SqTracker::new(info.sq_cnt).ok()?;
        let len = info.sq_cnt as usize * WQEBB_BYTES;
        let mut mirror = core::ptr::null_mut();
        if self.cfg.recover {
            // SAFETY: anonymous private mapping, checked.
            let m = unsafe {
                libc::mmap(
                    core::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                    -1,
                    0,
                )
            };
            if m != libc::MAP_FAILED {
                mirror = m as *mut u8;
                if info.gpu.is_some()
                    && let Some(d) = self.drv
                {
                    // Pinned, so the copies are truly asynchronous (best effort).
                    // SAFETY: the real cuMemHostRegister on our own mapping.
                    let _ = unsafe { (d.host_register)(m, len, 0) };
                }
            }
        }
        let threshold = self.cfg.batch.min(info.sq_cnt).max(1);
        Some(QpRt {
            info,
            tracker,
            mirror,
            pending: Vec::new(),
            pending_wqebbs: 0,
            threshold,
            last_db_ns: 0,
            live: true,
        })
    }

    fn free_qp(&mut self, q: QpRt) {
        // The mirror stays mapped: a copy that failed to sync may still land in it later.
        let _ = q;
    }

    #[cold]
    fn on_change(&mut self, i: usize, changed: u8) {
        let tsc = crate::clock::now();
        let b = &mut self.blocks[i];
        if changed.count_ones() > 1 {
            // A BlueFlame write: read the whole block until it is stable, forward it whole.
            let mut vals = [0u64; 8];
            let mut stable = false;
            for _ in 0..64 {
                let mut again = [0u64; 8];
                for (w, x) in again.iter_mut().enumerate() {
                    // SAFETY: our shadow page.
                    *x = unsafe { core::ptr::read_volatile(b.shadow.add(w)) };
                }
                if again == vals {
                    stable = true;
                    break;
                }
                vals = again;
            }
            if !stable {
                COALESCED.fetch_add(1, Ordering::Relaxed);
            }
            for (w, v) in vals.iter().enumerate() {
                // SAFETY: the real UAR page is mapped while it is watched (free_uar waits for
                // the poller to drop it first).
                unsafe { core::ptr::write_volatile(b.real.add(w), *v) };
            }
            sfence();
            b.last = vals;
            BLUEFLAME.fetch_add(1, Ordering::Relaxed);
            self.doorbell(vals[0], tsc, true);
            return;
        }
        let w = changed.trailing_zeros() as usize;
        // SAFETY: as above.
        let v = unsafe { core::ptr::read_volatile(b.shadow.add(w)) };
        // SAFETY: as above.
        unsafe { core::ptr::write_volatile(b.real.add(w), v) };
        sfence();
        b.last[w] = v;
        if w == 0 {
            self.doorbell(v, tsc, false);
        } else {
            OTHER_STORES.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn emit(&self, tsc: u64, ep: u32, op: Op, bytes: u64, addr: u64, fl: u8, aux: u16) {
        if let Some(ts) = self.ts {
            ts.count(ep, op, bytes, false);
            if crate::config::events_enabled() {
                ts.push(RawEvent {
                    tsc,
                    bytes,
                    addr,
                    ep,
                    op: op as u8,
                    flags: fl,
                    aux,
                });
            }
        }
    }

    fn doorbell(&mut self, v: u64, tsc: u64, bf: bool) {
        DOORBELLS.fetch_add(1, Ordering::Relaxed);
        let word = DoorbellWord::from_mem_u64(v);
        let raw = u64::from_be_bytes(v.to_ne_bytes());
        let fl = if bf { flags::INLINE } else { 0 };
        let Some(mut q) = self.qps.remove(&word.qpn) else {
            UNKNOWN_QP.fetch_add(1, Ordering::Relaxed);
            self.emit(tsc, UNATTRIBUTED_EP, Op::GpuDoorbell, 0, raw, fl, word.idx);
            return;
        };
        // A GPU index behind the last one: an earlier ring overtaken by a later one.
        if word.kind() == DoorbellKind::Gpu {
            let last = q.tracker.last_pi();
            let back = u32::from(last.wrapping_sub(word.idx));
            if back != 0 && back < q.info.sq_cnt {
                COALESCED.fetch_add(1, Ordering::Relaxed);
                self.emit(tsc, q.info.ep, Op::GpuDoorbell, 0, raw, fl, word.idx);
                self.qps.insert(word.qpn, q);
                return;
            }
        }
        let step = q.tracker.on_doorbell(&word);
        let new = match step {
            DoorbellStep::New(r) => r.wqebbs as u64,
            _ => 0,
        };
        self.emit(tsc, q.info.ep, Op::GpuDoorbell, new, raw, fl, word.idx);
        match step {
            DoorbellStep::New(range) => {
                if self.cfg.recover && !q.mirror.is_null() {
                    self.recover(&mut q, range, tsc);
                }
            }
            DoorbellStep::Duplicate { .. } => {
                DUPLICATES.fetch_add(1, Ordering::Relaxed);
            }
            DoorbellStep::Overrun { wqebbs, .. } => {
                OVERRUNS.fetch_add(1, Ordering::Relaxed);
                // Those WQEs are not recovered: count them as unparsable (at least one).
                UNPARSABLE.fetch_add(
                    u64::from(wqebbs.min(q.info.sq_cnt)).max(1),
                    Ordering::Relaxed,
                );
                // Whatever is pending may be stale now; parse it while it may still be intact.
                self.flush(&mut q);
            }
            DoorbellStep::Malformed { .. } => {
                UNPARSABLE.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.qps.insert(word.qpn, q);
    }

    fn recover(&mut self, q: &mut QpRt, range: WqeRange, tsc: u64) {
        if q.pending_wqebbs + range.wqebbs > q.info.sq_cnt {
            self.flush(q);
        }
        let copied = if q.info.gpu.is_none() || self.cfg.copy == CopyMode::PerDoorbell {
            self.copy_range(q, &range)
        } else {
            false
        };
        q.pending.push(Pending { range, tsc, copied });
        q.pending_wqebbs += range.wqebbs;
        q.last_db_ns = crate::clock::mono_ns();
        if q.pending_wqebbs >= q.threshold {
            self.flush(q);
        }
    }

    /// Copies the WQEBBs of `range` into the mirror (async for device memory). False if not.
    fn copy_range(&mut self, q: &QpRt, range: &WqeRange) -> bool {
        let cnt = q.info.sq_cnt;
        let first = u32::from(range.start) & (cnt - 1);
        let n1 = range.wqebbs.min(cnt - first);
        let parts = [(first, n1), (0, range.wqebbs - n1)];
        for (slot, n) in parts {
            if n == 0 {
                continue;
            }
            let off = slot as usize * WQEBB_BYTES;
            let len = n as usize * WQEBB_BYTES;
            // SAFETY: off+len <= sq_cnt*64, the mirror's size.
            let dst = unsafe { q.mirror.add(off) };
            let src = q.info.sq_addr + off as u64;
            if q.info.gpu.is_some() {
                if self.stream.is_none()
                    && let Some(d) = self.drv
                {
                    self.stream = d.stream();
                }
                let (Some(d), Some(s)) = (self.drv, self.stream) else {
                    COPY_FAILED.fetch_add(1, Ordering::Relaxed);
                    return false;
                };
                // SAFETY: dst is our pinned mirror, alive for the process; src is the SQ range.
                if !unsafe { d.dtoh_async(dst, src, len, s) } {
                    COPY_FAILED.fetch_add(1, Ordering::Relaxed);
                    return false;
                }
                COPIES.fetch_add(1, Ordering::Relaxed);
            } else {
                // SAFETY: a host-resident SQ registered with the NIC: readable for its size.
                unsafe { core::ptr::copy_nonoverlapping(src as *const u8, dst, len) };
            }
        }
        true
    }

    fn idle_flush(&mut self) {
        if !self.qps.values().any(|q| !q.pending.is_empty()) {
            return;
        }
        let now = crate::clock::mono_ns();
        let due: Vec<u32> = self
            .qps
            .values()
            .filter(|q| !q.pending.is_empty() && now.saturating_sub(q.last_db_ns) > IDLE_FLUSH_NS)
            .map(|q| q.info.qpn)
            .collect();
        for qpn in due {
            if let Some(mut q) = self.qps.remove(&qpn) {
                self.flush(&mut q);
                self.qps.insert(qpn, q);
            }
        }
    }

    fn flush_all(&mut self) {
        let keys: Vec<u32> = self.qps.keys().copied().collect();
        for k in keys {
            if let Some(mut q) = self.qps.remove(&k) {
                self.flush(&mut q);
                self.qps.insert(k, q);
            }
        }
        if let Some(l) = self.log.as_mut() {
            let _ = l.flush();
        }
    }

    /// Syncs the copies of `q`'s pending ranges and parses them.
    fn flush(&mut self, q: &mut QpRt) {
        if q.pending.is_empty() {
            return;
        }
        let mut pending = std::mem::take(&mut q.pending);
        let mut ok = true;
        for p in pending.iter_mut() {
            if !p.copied {
                p.copied = self.copy_range(q, &p.range);
            }
        }
        if q.info.gpu.is_some() {
            SYNCS.fetch_add(1, Ordering::Relaxed);
            ok = match (self.drv, self.stream) {
                (Some(d), Some(s)) => d.sync(s),
                _ => false,
            };
        }
        let ring_len = q.info.sq_cnt as usize * WQEBB_BYTES;
        // SAFETY: the mirror is sq_cnt*64 bytes, mapped for the process's life; the copies into
        // it completed (stream synced) or were plain memcpys.
        let ring = unsafe { core::slice::from_raw_parts(q.mirror as *const u8, ring_len) };
        for p in &pending {
            if !ok || !p.copied {
                COPY_FAILED.fetch_add(1, Ordering::Relaxed);
                UNPARSABLE.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let out = walk_new_wqes(ring, q.info.sq_cnt, &p.range, q.info.qp_type);
            if out.unparsable > 0 {
                UNPARSABLE.fetch_add(u64::from(out.unparsable), Ordering::Relaxed);
            }
            if out.error.is_some() {
                UNPARSABLE.fetch_add(1, Ordering::Relaxed);
            }
            for w in &out.wqes {
                self.emit_wqe(q, w, p.tsc);
            }
        }
        q.pending_wqebbs = 0;
        pending.clear();
        q.pending = pending;
    }

    fn emit_wqe(&mut self, q: &QpRt, w: &Wqe, tsc: u64) {
        WQES.fetch_add(1, Ordering::Relaxed);
        let op = op_of(w.opcode);
        let (raddr, rkey) = w.raddr.map_or((0, 0), |r| (r.raddr, r.rkey));
        let mut fl = 0;
        if w.ctrl.signaled() {
            fl |= flags::SIGNALED;
        }
        if w.inline_bytes.is_some() {
            fl |= flags::INLINE;
        }
        let bytes = w.bytes();
        self.emit(tsc, q.info.ep, op, bytes, raddr, fl, rkey as u16);
        if let Some(l) = self.log.as_mut() {
            let _ = writeln!(
                l,
                "wqe qpn={:#x} idx={} opcode={:#x} opmod={:#x} bytes={} raddr={:#x} rkey={:#x} signaled={}",
                q.info.qpn,
                w.ctrl.wqe_index,
                w.ctrl.opcode,
                w.ctrl.opmod,
                bytes,
                raddr,
                rkey,
                u8::from(w.ctrl.signaled())
            );
        }
    }
}
