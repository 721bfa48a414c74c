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
//! **Shared registers.** Several QPs bound to one UAR (`qpc.uar_page`) ring one register, and a
//! NIC rings only the QP a doorbell names: when a second QP's doorbell hides the first's between
//! two reads, the first QP's doorbell record (written before its doorbell) still says how far it
//! posted. On every doorbell of such a register the poller looks at the other QPs' records: one
//! in host memory it reads itself, before forwarding, and forwards first a doorbell of its own
//! (GPU convention) for a QP whose record is past its last doorbell; one in GPU memory the
//! copier thread reads (a read of GPU memory is a sync, and has no place between two doorbells),
//! and the poller forwards that doorbell when the answer comes back. Each is recorded and
//! recovered like any other (`shared_register` in the stats line).
//!
//! **Teardown.** Freeing a UAR, ending a registration or destroying a QP waits until the poller
//! has applied it, and a destroyed QP's send queue until the copier has finished with it (its
//! copies synced): no time limit, since the memory is freed right after; a wait over a second says
//! so on stderr.
//!
//! **WQE recovery** (copier.rs, issue 41). For each doorbell that posts new WQEBBs the poller,
//! after forwarding, hands the range to the copier thread ("sigmatop-wqe") over a bounded
//! lock-free queue: no copy, no sync with the GPU, no parse and no syscall between two doorbells;
//! a full queue is a range dropped and counted (`dropped_wqebbs`), never waited for. The copier
//! copies the union of each QP's new ranges at once (an async device-to-host copy on its own
//! non-blocking CUDA stream into a pinned mirror of the SQ; a memcpy for a host-resident SQ),
//! then parses, once `SIGMATOP_WQE_BATCH` (default 128, never more than the SQ has slots) WQEBBs
//! are pending or the QP has been idle for 50 µs, with [`sigmatop::decode::wqe::walk_new_wqes`];
//! each WQE becomes a GPU op event stamped with its doorbell's timestamp, on the QP's endpoint
//! (whose `gpu` is the SQ's device). A slot the program reused before the copy read it is found
//! by the WQE's own index and counted (`overwritten_slots`), never reported as the doorbell's
//! WQE; every WQEBB not recovered is also in `unparsable_wqes`, the drop counter the dashboard
//! shows.
//!
//! Environment (read in config.rs, `config::Gpu`): `SIGMATOP_GPU_WQE=off` (forward only),
//! `SIGMATOP_WQE_BATCH=n`, `SIGMATOP_WQE_COPY=doorbell|batch` (for GPU memory: copy as soon as
//! the copier takes a doorbell's range, the default, ranges taken together in one copy of their
//! union; or one copy per batch), `SIGMATOP_POLLER_CPU=n` (pin the poller; the copier is not
//! pinned), `SIGMATOP_WQE_LOG=file` (one line per recovered WQE, for tests and debugging),
//! `SIGMATOP_GPU_STATS=1` (a summary line on stderr at exit: with `overwritten_slots`,
//! `torn_slots` and `dropped_wqebbs`, what recovery lost and why). There is no switch back to the
//! copy on the poller thread (docs/DESIGN.md "GPU doorbells").
//!
//! Files: this one holds the control-path state the hooks change (UARs, hijacked registrations,
//! QPs); [`poller`] watches and forwards, [`copier`] copies and parses WQEs, [`stats`] counts.
//! The CUDA calls go to [`crate::layers::gpu::driver`]; nothing here calls back into the hooks.

mod copier;
mod poller;
pub mod stats;

use core::ffi::{c_uint, c_void};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sigmatop::decode::devx::DevxUar;
use sigmatop::decode::wqe::QpType;

use crate::layers::gpu::driver::{
    self as cuda_driver, CUDA_SUCCESS, Ctx, CuResult, Driver, HostRegisterFn,
};
pub use stats::stats_line;
use stats::{HIJACK_FAILED, HIJACKS};

/// QPNs hashed by one multiply (the poller looks one up per doorbell; SipHash, the default, costs
/// several times more). QPNs are numbers the NIC hands out, not input anyone can choose to
/// collide.
#[derive(Default, Clone, Copy)]
pub(super) struct QpnHasher(u64);

impl core::hash::Hasher for QpnHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(*b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = (self.0 ^ u64::from(n)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// A map keyed by QPN.
pub(super) type QpnMap<V> =
    std::collections::HashMap<u32, V, core::hash::BuildHasherDefault<QpnHasher>>;

/// Bytes of a registered range watched from its start (a UAR's DB/BF registers).
const MAX_WATCH_BYTES: u64 = 1024;

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
    /// `qpc.uar_page`: QPs with the same page share one doorbell register.
    pub uar_page: u32,
    /// Address of the QP's doorbell record (`[1]` = send counter, big-endian), 0 if unknown,
    /// and the GPU whose memory holds it (None: host memory).
    pub dbr: u64,
    pub dbr_gpu: Option<u32>,
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
/// The doorbell state's lock, for `fork::prepare`: first of all (it is held across CUDA driver
/// calls and while a warning is queued).
pub fn hold_for_fork(h: &mut crate::runtime::held::Held) {
    h.lock(&STATE);
}

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
    crate::runtime::os::page_size()
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

/// Waits until the poller applied generation `g`, or stopped running. Not bounded: the
/// callers are about to unmap a UAR or free a send queue the poller may be inside (a doorbell
/// forward, a WQE copy still reading the queue), and returning early let that copy read freed
/// memory, a SIGSEGV no unwind catches. The poller applies a change at the top of every loop,
/// after any copy it is in has been synced; a sync that takes longer than a second gets one
/// line on stderr (the program then waits as long as its CUDA copy does).
fn wait_ack(g: u64) {
    let start = Instant::now();
    let mut said = false;
    while ACK.load(Ordering::Acquire) < g && POLLER_RUNNING.load(Ordering::Acquire) {
        if !said && start.elapsed() > Duration::from_secs(1) {
            said = true;
            eprintln!(
                "sigmatop: waiting for the doorbell poller to finish a WQE copy before a UAR or send queue is freed ({} ms so far)",
                start.elapsed().as_millis()
            );
        }
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
    p: *mut c_void,
    size: usize,
    flags: c_uint,
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
                crate::runtime::config::warn(
                    "cannot set up a doorbell shadow page; GPU doorbells of this UAR are not traced".into(),
                );
                return None;
            }
        }
    }
    if s.ctx.is_none() {
        s.ctx = cuda_driver::driver().and_then(Driver::current_ctx);
    }
    s.regs.push(Registration { p, size, page });
    HIJACKS.fetch_add(1, Ordering::Relaxed);
    bump();
    drop(s);
    ensure_poller();
    // The real driver refuses a second registration of an already registered page.
    Some(if already {
        cuda_driver::CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
    } else {
        CUDA_SUCCESS
    })
}

fn make_shadow(page: u64, flags: c_uint, real: HostRegisterFn) -> Option<Shadow> {
    let drv = cuda_driver::driver()?;
    let ps = page_size() as usize;
    let host = crate::runtime::os::map_zeroed(ps, true)? as *mut c_void;
    let f = (flags & !cuda_driver::CU_MEMHOSTREGISTER_IOMEMORY)
        | cuda_driver::CU_MEMHOSTREGISTER_PORTABLE
        | cuda_driver::CU_MEMHOSTREGISTER_DEVICEMAP;
    // SAFETY: the real cuMemHostRegister on our own fresh page.
    let r = unsafe { real(host, ps, f) };
    let mut dptr = 0u64;
    // SAFETY: the real cuMemHostGetDevicePointer_v2 on the page just registered.
    let ok =
        r == CUDA_SUCCESS && unsafe { (drv.host_get_dptr)(&mut dptr, host, 0) } == CUDA_SUCCESS;
    if !ok {
        // SAFETY: our own mapping of this size, never handed out.
        unsafe { crate::runtime::os::unmap(host as *mut u8, ps) };
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

/// A devx QP is being destroyed: its pending WQEs are parsed first (the copier's copies of its
/// send queue are finished before this returns).
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
    wait_copier(g);
}

/// Waits until the copier has done everything the poller handed it up to generation `g` (its
/// copies of a destroyed QP's queue synced), or stopped running. Not bounded, for the reason
/// `wait_ack` gives.
fn wait_copier(g: u64) {
    let start = Instant::now();
    let mut said = false;
    while copier::COPY_ACK.load(Ordering::Acquire) < g
        && copier::COPIER_RUNNING.load(Ordering::Acquire)
        && POLLER_RUNNING.load(Ordering::Acquire)
    {
        if !said && start.elapsed() > Duration::from_secs(1) {
            said = true;
            eprintln!(
                "sigmatop: waiting for a WQE copy to finish before a send queue is freed ({} ms so far)",
                start.elapsed().as_millis()
            );
        }
        std::thread::yield_now();
    }
}

/// In a fork child: the parent's poller thread is not in this process. Without this the child
/// believed it ran, and waited for it at exit (500 ms for every forked worker of a GPU process
/// that exits, a PyTorch DataLoader's say) and at every UAR or registration change (200 ms). A
/// child that sets up doorbells of its own starts its own poller.
pub fn forget_poller_after_fork() {
    POLLER_RUNNING.store(false, Ordering::Release);
    POLLER_STARTED.store(false, Ordering::Release);
    STOP.store(false, Ordering::Release);
    copier::COPIER_RUNNING.store(false, Ordering::Release);
    copier::COPY_ACK.store(0, Ordering::Release);
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
            let r = std::panic::catch_unwind(|| poller::Poller::new().run());
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
