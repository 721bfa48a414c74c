//! Per-thread state on the hot path: counters per endpoint and op (all modes) and a single-producer
//! single-consumer event ring (simple/full). One thread-local access per intercepted call, no lock,
//! no syscall; memory comes from mmap once per thread (the ring, and the counters of the first 256
//! endpoints) and once per 16 further endpoints it touches.
//!
//! Which events are kept (`config::events`): with a record, every one; without one, the only
//! reader is a live viewer that gets one event in `SIGMATOP_SAMPLE`, so a per-thread countdown
//! picks that one on the hot path and the others cost neither a timestamp nor a ring slot (their
//! fields are never even read: `Detail` is lazy).

use core::ptr::null_mut;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use crossbeam_utils::CachePadded;
use sigmatop::event::{OP_SLOTS, Op, RawEvent, UNATTRIBUTED_EP, flags};

/// Events a ring holds (2 MiB of virtual memory; pages are touched only as they fill).
pub const RING_CAP: usize = 1 << 16;
const RING_MASK: u64 = (RING_CAP - 1) as u64;
/// Endpoints per counter chunk, and chunks per thread: endpoint ids up to 16383 are counted.
pub const EPS_PER_CHUNK: usize = 16;
pub const N_CHUNKS: usize = 1024;
pub const MAX_EPS: u32 = (EPS_PER_CHUNK * N_CHUNKS) as u32;
/// Chunks mapped with the thread's state, in one mapping: the counters of endpoints below
/// `NEAR_EPS` are found without reading a chunk pointer or testing it (issue 15: the aggregate
/// hook's last dependent load). 768 KiB of address space per thread (the ring takes 2 MiB); pages
/// are touched only as endpoints are used, as in any chunk.
const NEAR_CHUNKS: usize = 16;
const NEAR_EPS: u32 = (NEAR_CHUNKS * EPS_PER_CHUNK) as u32;

/// Counters of one (endpoint, op) on one thread (`OpCount` says what each means). Single writer
/// (the thread), read by the collector.
#[repr(C)]
pub struct Slot {
    pub ops: AtomicU64,
    pub bytes: AtomicU64,
    pub errors: AtomicU64,
    pub refused: AtomicU64,
    pub posted: AtomicU64,
    pub posted_bytes: AtomicU64,
}

impl Slot {
    /// True when some counter is non-zero.
    pub fn is_used(&self) -> bool {
        self.ops.load(Ordering::Relaxed) != 0
            || self.errors.load(Ordering::Relaxed) != 0
            || self.refused.load(Ordering::Relaxed) != 0
            || self.posted.load(Ordering::Relaxed) != 0
    }
}

/// Adds `n` to a counter that only this thread writes: a plain load and store.
#[inline(always)]
fn bump(c: &AtomicU64, n: u64) {
    c.store(c.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

#[repr(C)]
pub struct Chunk {
    pub slots: [[Slot; OP_SLOTS]; EPS_PER_CHUNK],
}

/// How the library answered a call, as its layer reads the result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The call succeeded: an operation accepted (it completes later), a poll, a wait.
    Ok,
    /// The operation completed before the call returned (UCX's `NULL` request / `UCS_OK`).
    Immediate,
    /// The library refused the operation: an error status, `-FI_EAGAIN`, a verbs `bad_wr`. Not
    /// an operation: counted in `refused` only.
    Refused,
    /// The call failed, or completions it returned carry errors.
    Failed,
    /// A receive buffer the library took (`bytes` = its size): counted as posted; the receive
    /// itself is counted when it completes, with the bytes that arrived
    /// ([`ThreadState::arrived`]).
    Posted,
}

impl Outcome {
    /// The event flags that say it.
    #[inline(always)]
    pub fn flags(self) -> u8 {
        match self {
            Outcome::Ok | Outcome::Posted => 0,
            Outcome::Immediate => flags::IMMEDIATE,
            Outcome::Refused | Outcome::Failed => flags::ERROR,
        }
    }
}

/// The fields of an operation's event that counters do not need: read from the call only when
/// the event is kept.
#[derive(Clone, Copy, Debug, Default)]
pub struct Detail {
    /// Remote address, tag, peer address or blocked time (`Op` says which).
    pub addr: u64,
    /// `flags::INLINE`, `flags::SIGNALED` (the outcome's flag is added).
    pub flags: u8,
    pub aux: u32,
}

impl Detail {
    pub const NONE: Detail = Detail {
        addr: 0,
        flags: 0,
        aux: 0,
    };

    /// An event carrying `addr` and `aux` only.
    #[inline(always)]
    pub fn at(addr: u64, aux: u32) -> Detail {
        Detail {
            addr,
            flags: 0,
            aux,
        }
    }
}

/// One event as it sits in a ring: `RawEvent` in 32 bytes. The endpoint id (22 bits), op code (6
/// bits, `OP_SLOTS`) and flags (4 bits) share one word, so that the 32-bit `aux` (a GPU WQE's
/// full rkey) fits without growing the slot past 32 bytes. An endpoint id of 2^22 or more is
/// recorded as unattributed (its counters already are: `MAX_EPS`).
#[derive(Clone, Copy)]
#[repr(C)]
struct RingSlot {
    tsc: u64,
    bytes: u64,
    addr: u64,
    ep_op_flags: u32,
    aux: u32,
}

const _: () = assert!(core::mem::size_of::<RingSlot>() == 32);
const EP_BITS: u32 = 22;
const OP_BITS: u32 = 6;
const _: () = assert!(OP_SLOTS == 1 << OP_BITS);

impl RingSlot {
    #[inline(always)]
    fn pack(e: &RawEvent) -> RingSlot {
        let ep = if e.ep < 1 << EP_BITS {
            e.ep
        } else {
            UNATTRIBUTED_EP
        };
        RingSlot {
            tsc: e.tsc,
            bytes: e.bytes,
            addr: e.addr,
            ep_op_flags: ep
                | ((e.op as u32 & (OP_SLOTS as u32 - 1)) << EP_BITS)
                | ((e.flags as u32 & 0xf) << (EP_BITS + OP_BITS)),
            aux: e.aux,
        }
    }

    #[inline(always)]
    fn unpack(&self) -> RawEvent {
        let w = self.ep_op_flags;
        RawEvent {
            tsc: self.tsc,
            bytes: self.bytes,
            addr: self.addr,
            ep: w & ((1 << EP_BITS) - 1),
            op: ((w >> EP_BITS) & (OP_SLOTS as u32 - 1)) as u8,
            flags: (w >> (EP_BITS + OP_BITS)) as u8,
            aux: self.aux,
        }
    }
}

/// The timestamp of one intercepted call whose operations are recorded one by one (a chain of
/// work requests): read once, when the first event that needs it is kept. Every operation of the
/// call carries the same time, the moment the call was recorded.
#[derive(Default)]
pub struct CallStamp(core::cell::Cell<u64>);

impl CallStamp {
    #[inline(always)]
    fn get(&self) -> u64 {
        if self.0.get() == 0 {
            self.0.set(crate::runtime::clock::hook_now());
        }
        self.0.get()
    }
}

/// One thread's state. `repr(C)` and in this order on purpose: what every hooked call touches
/// (the guard, the sampling countdown, the near counters' address) and what only the producer
/// writes (the ring's address and its cached limit) share the first cache line; `head` and `tail`,
/// which the collector reads or writes, have a line each. (Left to the compiler, the order put
/// the near counters' address in a line of its own and cost the verbs post_send wrapper 1.5 ns a
/// call on the development VM and on the H200 host alike: BENCHMARKS.md, "Hot path".)
#[repr(C)]
pub struct ThreadState {
    pub tid: u32,
    /// Nesting depth of sigmatop hooks on this thread: a hook entered while another runs (a
    /// legacy `_nb` call reaching `_nbx`, sigmatop's own calls) passes through untraced.
    depth: AtomicU32,
    /// Events until the next one kept for live viewers, when only sampled events are kept
    /// (0: the next one is). Beside `depth`, which every call touches already.
    sample_countdown: AtomicU32,
    /// The endpoint of the last work request this thread posted (verbs post calls), for a layer
    /// that joins its own events to the posts of the same thread (NCCL's proxy steps). In the
    /// 4 bytes of padding before `near`: no cache line more per post.
    last_post: AtomicU32,
    /// The `NEAR_CHUNKS` chunks mapped at registration, contiguous (`chunks` points into it too).
    near: *mut Chunk,
    ring: *mut RingSlot,
    /// Producer side: `tail` + `RING_CAP` as last read, refreshed only when `head` reaches it (the
    /// ring looks full). Zero at first, so the first push reads `tail`.
    head_limit: AtomicU64,
    head: CachePadded<AtomicU64>,
    tail: CachePadded<AtomicU64>,
    pub chunks: [AtomicPtr<Chunk>; N_CHUNKS],
    pub ring_full: AtomicU64,
    pub endpoint_overflow: AtomicU64,
    pub exited: AtomicBool,
    /// Set by the collector once it retired this thread (counters folded, ring drained).
    pub retired: AtomicBool,
    pub next: AtomicPtr<ThreadState>,
    pub name: [u8; 16],
}

// SAFETY: the ring pointer is written only by the owning thread (below head) and read only by the
// collector (between tail and head), synchronised by the head/tail atomics.
unsafe impl Sync for ThreadState {}
// SAFETY: as above; the raw pointers are mappings owned by the state, valid on any thread.
unsafe impl Send for ThreadState {}

/// Head of the list of every thread that ever traced something. Threads push at the head with CAS;
/// only the collector unlinks.
pub static THREADS: AtomicPtr<ThreadState> = AtomicPtr::new(null_mut());

/// The state of a thread that must trace nothing (it is exiting, or its registration failed):
/// never registered, never written, with `depth` 1 for good, so that [`enter`]'s one depth check
/// also turns such a thread away (no separate comparison on the hot path).
static DEAD_STATE: ThreadState = ThreadState {
    tid: 0,
    depth: AtomicU32::new(1),
    sample_countdown: AtomicU32::new(0),
    last_post: AtomicU32::new(0),
    head: CachePadded::new(AtomicU64::new(0)),
    head_limit: AtomicU64::new(0),
    tail: CachePadded::new(AtomicU64::new(0)),
    ring: null_mut(),
    near: null_mut(),
    chunks: [const { AtomicPtr::new(null_mut()) }; N_CHUNKS],
    ring_full: AtomicU64::new(0),
    endpoint_overflow: AtomicU64::new(0),
    exited: AtomicBool::new(false),
    retired: AtomicBool::new(false),
    next: AtomicPtr::new(null_mut()),
    name: [0; 16],
};

#[inline(always)]
fn dead() -> *mut ThreadState {
    core::ptr::addr_of!(DEAD_STATE) as *mut ThreadState
}

// The calling thread's state pointer lives in one 8-byte slot of static TLS, read with the
// initial-exec model (`mov %fs:off`): the preload is loaded at start-up, so its TLS block is static,
// and this avoids the `__tls_get_addr` call that Rust's default model for a shared library costs on
// every hook (reference/hardware-and-hooks.md §9).
#[cfg(target_arch = "x86_64")]
core::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".p2align 3",
    ".globl sigmatop_tls_current",
    ".hidden sigmatop_tls_current",
    ".type sigmatop_tls_current, @object",
    ".size sigmatop_tls_current, 8",
    "sigmatop_tls_current:",
    ".zero 8",
    ".popsection",
);

#[cfg(target_arch = "x86_64")]
mod tls {
    use super::ThreadState;

    #[inline(always)]
    pub fn get() -> *mut ThreadState {
        let v: *mut ThreadState;
        // SAFETY: reads this thread's own static-TLS slot through its GOT offset.
        unsafe {
            core::arch::asm!(
                "mov {t}, qword ptr [rip + sigmatop_tls_current@GOTTPOFF]",
                "mov {v}, qword ptr fs:[{t}]",
                t = out(reg) _,
                v = out(reg) v,
                options(nostack, readonly, preserves_flags),
            );
        }
        v
    }

    #[inline(always)]
    pub fn set(p: *mut ThreadState) {
        // SAFETY: writes this thread's own static-TLS slot.
        unsafe {
            core::arch::asm!(
                "mov {t}, qword ptr [rip + sigmatop_tls_current@GOTTPOFF]",
                "mov qword ptr fs:[{t}], {v}",
                t = out(reg) _,
                v = in(reg) p,
                options(nostack, preserves_flags),
            );
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod tls {
    use super::ThreadState;
    thread_local! {
        static CURRENT: core::cell::Cell<*mut ThreadState> =
            const { core::cell::Cell::new(core::ptr::null_mut()) };
    }
    #[inline(always)]
    pub fn get() -> *mut ThreadState {
        CURRENT.try_with(|c| c.get()).unwrap_or(super::dead())
    }
    #[inline(always)]
    pub fn set(p: *mut ThreadState) {
        let _ = CURRENT.try_with(|c| c.set(p));
    }
}

static EXIT_KEY: AtomicU32 = AtomicU32::new(u32::MAX);

fn mmap_zeroed(len: usize) -> *mut u8 {
    crate::runtime::os::map_zeroed(len, false).unwrap_or(null_mut())
}

unsafe extern "C" fn on_thread_exit(p: *mut core::ffi::c_void) {
    let ts = p as *mut ThreadState;
    if !ts.is_null() && ts != dead() {
        // SAFETY: the pointer was stored by register() and stays valid until retired.
        unsafe { (*ts).exited.store(true, Ordering::Release) };
    }
    // Hooks reached from later destructors on this thread pass through untraced.
    tls::set(dead());
}

/// Creates the key whose destructor tells the collector a thread ended. Constructor only.
pub fn init() {
    if let Some(key) = crate::runtime::os::thread_exit_key(on_thread_exit) {
        EXIT_KEY.store(key, Ordering::Relaxed);
    }
}

#[cold]
fn register() -> *mut ThreadState {
    let size = core::mem::size_of::<ThreadState>();
    let mem = mmap_zeroed(size) as *mut ThreadState;
    let ring = mmap_zeroed(RING_CAP * core::mem::size_of::<RingSlot>()) as *mut RingSlot;
    let near = mmap_zeroed(NEAR_CHUNKS * core::mem::size_of::<Chunk>()) as *mut Chunk;
    if mem.is_null() || ring.is_null() || near.is_null() {
        return dead();
    }
    let tid = crate::runtime::os::tid();
    let name = crate::runtime::os::thread_name();
    // SAFETY: mem is a fresh zeroed mapping of the right size; all-zero is a valid ThreadState
    // except for the fields set here.
    unsafe {
        let ts = &mut *mem;
        core::ptr::addr_of_mut!(ts.tid).write(tid);
        core::ptr::addr_of_mut!(ts.ring).write(ring);
        core::ptr::addr_of_mut!(ts.near).write(near);
        core::ptr::addr_of_mut!(ts.name).write(name);
        for ci in 0..NEAR_CHUNKS {
            ts.chunks[ci].store(near.add(ci), Ordering::Relaxed);
        }
    }
    let mut head = THREADS.load(Ordering::Acquire);
    loop {
        // SAFETY: mem is ours until published.
        unsafe { (*mem).next.store(head, Ordering::Relaxed) };
        match THREADS.compare_exchange_weak(head, mem, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => break,
            Err(h) => head = h,
        }
    }
    let key = EXIT_KEY.load(Ordering::Relaxed);
    if key != u32::MAX {
        crate::runtime::os::set_thread_exit_value(key, mem as usize);
    }
    mem
}

/// The calling thread's state, registering it on first use. None on a thread that is exiting or
/// whose registration failed.
#[inline(always)]
pub fn current() -> Option<&'static ThreadState> {
    let mut p = tls::get();
    if p.is_null() {
        p = register();
        tls::set(p);
    }
    if p == dead() {
        return None;
    }
    // SAFETY: registered ThreadStates are never unmapped.
    Some(unsafe { &*p })
}

/// Entered hook: the thread's state, or None when this call must pass through untraced (nested in
/// another hook, or the thread is dead: its state's `depth` is 1 for good).
#[inline(always)]
pub fn enter() -> Option<&'static ThreadState> {
    let mut p = tls::get();
    if p.is_null() {
        p = register();
        tls::set(p);
    }
    // SAFETY: registered ThreadStates are never unmapped, and `dead()` is a static.
    let ts = unsafe { &*p };
    if ts.depth.load(Ordering::Relaxed) != 0 {
        return None;
    }
    ts.depth.store(1, Ordering::Relaxed);
    Some(ts)
}

/// True while the calling thread runs inside a sigmatop hook.
pub fn inside() -> bool {
    let p = tls::get();
    // SAFETY: see current().
    !p.is_null() && p != dead() && unsafe { (*p).depth.load(Ordering::Relaxed) } != 0
}

impl ThreadState {
    /// A work request was posted on endpoint `ep` by this thread.
    #[inline(always)]
    pub fn note_post(&self, ep: u32) {
        self.last_post.store(ep, Ordering::Relaxed);
    }

    /// The endpoint of the last work request this thread posted (0: none).
    pub fn last_post(&self) -> u32 {
        self.last_post.load(Ordering::Relaxed)
    }

    #[inline(always)]
    pub fn leave(&self) {
        self.depth.store(0, Ordering::Relaxed);
    }

    #[inline(always)]
    fn slot(&self, ep: u32, op: u8) -> Option<&Slot> {
        if ep < NEAR_EPS {
            // A chunk is `[[Slot; OP_SLOTS]; EPS_PER_CHUNK]` without padding, so endpoint `ep`'s
            // slots are the `ep`-th run of OP_SLOTS from the start of the near chunks. (Counted
            // in bytes: `ep * 3072` is one `lea` and one shift, where the index `ep * 64 + op`
            // scaled by 48 took three.)
            const EP_BYTES: usize = OP_SLOTS * core::mem::size_of::<Slot>();
            let at = ep as usize * EP_BYTES
                + (op as usize & (OP_SLOTS - 1)) * core::mem::size_of::<Slot>();
            // SAFETY: `near` maps NEAR_CHUNKS contiguous chunks on every registered thread, and
            // `at` lies inside them (ep < NEAR_EPS, op masked); the dead state, whose `near` is
            // null, is never counted on (`enter` and `current` turn it away).
            return Some(unsafe { &*((self.near as *const u8).add(at) as *const Slot) });
        }
        self.far_slot(ep, op)
    }

    /// The slot of an endpoint past the near chunks: its chunk is mapped on first use. (Inlined:
    /// out of line, its call made every hook save one more register.)
    #[inline(always)]
    fn far_slot(&self, ep: u32, op: u8) -> Option<&Slot> {
        let mut ep = ep;
        if ep >= MAX_EPS {
            self.endpoint_overflow.store(
                self.endpoint_overflow.load(Ordering::Relaxed) + 1,
                Ordering::Relaxed,
            );
            ep = UNATTRIBUTED_EP;
        }
        let ci = ep as usize / EPS_PER_CHUNK;
        let mut chunk = self.chunks[ci].load(Ordering::Acquire);
        if chunk.is_null() {
            chunk = self.new_chunk(ci);
            if chunk.is_null() {
                return None;
            }
        }
        // SAFETY: chunk is a live mapping; indices are in range (op < OP_SLOTS by schema).
        Some(unsafe { &(*chunk).slots[ep as usize % EPS_PER_CHUNK][op as usize & (OP_SLOTS - 1)] })
    }

    #[cold]
    fn new_chunk(&self, ci: usize) -> *mut Chunk {
        let c = mmap_zeroed(core::mem::size_of::<Chunk>()) as *mut Chunk;
        if !c.is_null() {
            self.chunks[ci].store(c, Ordering::Release);
        }
        c
    }

    /// Counts one call as its outcome says: an operation (with its bytes; a failure also as an
    /// error), a refusal, or a posted receive buffer. Plain load+store: this thread is the only
    /// writer.
    #[inline(always)]
    pub fn count(&self, ep: u32, op: Op, bytes: u64, outcome: Outcome) {
        if let Some(s) = self.slot(ep, op as u8) {
            match outcome {
                Outcome::Refused => bump(&s.refused, 1),
                Outcome::Posted => {
                    bump(&s.posted, 1);
                    bump(&s.posted_bytes, bytes);
                }
                Outcome::Ok | Outcome::Immediate | Outcome::Failed => {
                    bump(&s.ops, 1);
                    bump(&s.bytes, bytes);
                    if outcome == Outcome::Failed {
                        bump(&s.errors, 1);
                    }
                }
            }
        }
    }

    /// A receive completed (a completion callback, a CQ entry, a work completion): one
    /// operation with the bytes that arrived, or a failed one (`ok` false: cancelled, flushed,
    /// truncated) with none. Counters only, in every mode: its post was the event.
    #[inline(always)]
    pub fn arrived(&self, ep: u32, op: Op, bytes: u64, ok: bool) {
        let outcome = if ok { Outcome::Ok } else { Outcome::Failed };
        self.count(ep, op, if ok { bytes } else { 0 }, outcome);
    }

    /// A work completion that reported an error for an operation counted when it was posted
    /// (a verbs send, write, read or atomic, or a receive): one more error on (`ep`, `op`), not
    /// one more operation.
    #[inline(always)]
    pub fn failed(&self, ep: u32, op: Op) {
        if let Some(s) = self.slot(ep, op as u8) {
            bump(&s.errors, 1);
        }
    }

    /// Whether this event is kept: with a record every one, without one the one in
    /// `SIGMATOP_SAMPLE` kept for live viewers. A countdown on this thread, reloaded with
    /// `config::sample_skip()` (0 with a record, so that it stays 0 and every event is due).
    #[inline(always)]
    fn sample_due(&self) -> bool {
        // Decrement first, then test the sign: one decrement of memory and a branch on its flag,
        // where testing for zero before decrementing took a load, a test and a store. The skip
        // is at most i32::MAX, so the countdown goes negative only from 0.
        let c = self
            .sample_countdown
            .load(Ordering::Relaxed)
            .wrapping_sub(1);
        self.sample_countdown.store(c, Ordering::Relaxed);
        if (c as i32) >= 0 {
            return false;
        }
        self.sample_countdown
            .store(crate::runtime::config::sample_skip(), Ordering::Relaxed);
        true
    }

    /// Appends an event to the ring; counts it as lost when the ring is full.
    #[inline(always)]
    pub fn push(&self, ev: RawEvent) {
        let h = self.head.load(Ordering::Relaxed);
        if h >= self.head_limit.load(Ordering::Relaxed) {
            let t = self.tail.load(Ordering::Acquire);
            self.head_limit
                .store(t + RING_CAP as u64, Ordering::Relaxed);
            if h.wrapping_sub(t) >= RING_CAP as u64 {
                self.ring_full.store(
                    self.ring_full.load(Ordering::Relaxed) + 1,
                    Ordering::Relaxed,
                );
                return;
            }
        }
        // SAFETY: slot h is outside [tail, head) so the collector does not read it.
        unsafe {
            self.ring
                .add((h & RING_MASK) as usize)
                .write(RingSlot::pack(&ev))
        };
        self.head.store(h + 1, Ordering::Release);
    }

    /// The recording step every hook ends in: counts one operation and, when events are kept,
    /// records it with the event fields `detail` reads from the call (only then; `None`: counted,
    /// but no event). Changes to what is counted or kept per operation belong here.
    #[inline(always)]
    pub fn record(
        &self,
        ep: u32,
        op: Op,
        bytes: u64,
        outcome: Outcome,
        detail: impl FnOnce() -> Option<Detail>,
    ) {
        self.keep(
            ep,
            op,
            bytes,
            outcome,
            detail,
            crate::runtime::clock::hook_now,
        )
    }

    /// As [`ThreadState::record`] for one of several operations a single call made (the work
    /// requests of one verbs post): they share the call's one clock read, taken by the first of
    /// them that keeps an event, instead of one read each.
    #[inline(always)]
    pub fn record_in_call(
        &self,
        stamp: &CallStamp,
        ep: u32,
        op: Op,
        bytes: u64,
        outcome: Outcome,
        detail: impl FnOnce() -> Option<Detail>,
    ) {
        self.keep(ep, op, bytes, outcome, detail, || stamp.get())
    }

    /// As [`ThreadState::record`] for an operation that happened at `tsc`, not now (a GPU
    /// doorbell and the WQEs recovered behind it, recorded by the poller thread).
    #[inline(always)]
    pub fn record_at(
        &self,
        tsc: u64,
        ep: u32,
        op: Op,
        bytes: u64,
        outcome: Outcome,
        detail: Detail,
    ) {
        self.keep(ep, op, bytes, outcome, || Some(detail), || tsc)
    }

    #[inline(always)]
    fn keep(
        &self,
        ep: u32,
        op: Op,
        bytes: u64,
        outcome: Outcome,
        detail: impl FnOnce() -> Option<Detail>,
        timestamp: impl FnOnce() -> u64,
    ) {
        if !crate::runtime::config::keeps_events() {
            // Aggregate mode: counters only. (Its own call, so that the compiler lays this path
            // out apart from the event path; and one byte tested, not the three-way `events()`.)
            self.count(ep, op, bytes, outcome);
            return;
        }
        self.count(ep, op, bytes, outcome);
        if !self.sample_due() {
            // Neither recorded nor sampled: no timestamp, no ring slot.
            return;
        }
        if let Some(d) = detail() {
            self.push(RawEvent {
                tsc: timestamp(),
                bytes,
                addr: d.addr,
                ep,
                op: op as u8,
                flags: outcome.flags() | d.flags,
                aux: d.aux,
            });
        }
    }

    /// Events pushed and not yet drained.
    pub fn pending(&self) -> u64 {
        self.head
            .load(Ordering::Relaxed)
            .wrapping_sub(self.tail.load(Ordering::Acquire))
    }

    /// Collector side: moves every available event into `out`. Returns how many.
    pub fn drain(&self, out: &mut Vec<RawEvent>) -> usize {
        let t = self.tail.load(Ordering::Relaxed);
        let h = self.head.load(Ordering::Acquire);
        let n = h.wrapping_sub(t) as usize;
        out.reserve(n);
        for i in 0..n as u64 {
            // SAFETY: [t, h) were published by the producer's release store of head.
            out.push(unsafe { self.ring.add(((t + i) & RING_MASK) as usize).read() }.unpack());
        }
        self.tail.store(h, Ordering::Release);
        n
    }

    pub fn name(&self) -> String {
        let end = self
            .name
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(self.name.len());
        String::from_utf8_lossy(&self.name[..end]).into_owned()
    }

    /// Calls `f(ep, op, slot)` for every non-zero counter of this thread.
    pub fn for_each_counter(&self, mut f: impl FnMut(u32, u8, &Slot)) {
        for (ci, c) in self.chunks.iter().enumerate() {
            let p = c.load(Ordering::Acquire);
            if p.is_null() {
                continue;
            }
            // SAFETY: chunk mappings live as long as the ThreadState.
            let chunk = unsafe { &*p };
            for (ei, ops) in chunk.slots.iter().enumerate() {
                for (op, s) in ops.iter().enumerate() {
                    if s.is_used() {
                        f((ci * EPS_PER_CHUNK + ei) as u32, op as u8, s);
                    }
                }
            }
        }
    }

    /// Frees the ring and counter memory of a retired thread. Collector only, after the thread
    /// exited and its ring was drained; the ThreadState itself stays mapped (it is small) so a
    /// stale pointer can never fault.
    pub fn release_memory(&self) {
        if self.ring.is_null() {
            return;
        }
        // SAFETY: the owning thread has exited (its exit destructor set `exited` and marked its
        // thread-local dead), so nothing writes these mappings any more; each came from
        // `mmap_zeroed` with this size.
        unsafe {
            crate::runtime::os::unmap(
                self.ring as *mut u8,
                RING_CAP * core::mem::size_of::<RingSlot>(),
            );
            for c in &self.chunks[NEAR_CHUNKS..] {
                let p = c.swap(null_mut(), Ordering::AcqRel);
                if !p.is_null() {
                    crate::runtime::os::unmap(p as *mut u8, core::mem::size_of::<Chunk>());
                }
            }
            // The near chunks are one mapping, `near`, unmapped once: the first chunk's pointer
            // says whether it still is mapped.
            for c in &self.chunks[1..NEAR_CHUNKS] {
                c.store(null_mut(), Ordering::Release);
            }
            if !self.chunks[0].swap(null_mut(), Ordering::AcqRel).is_null() {
                crate::runtime::os::unmap(
                    self.near as *mut u8,
                    NEAR_CHUNKS * core::mem::size_of::<Chunk>(),
                );
            }
        }
        // The ring pointer is left dangling on purpose only after head==tail; make drains no-ops.
        self.head
            .store(self.tail.load(Ordering::Relaxed), Ordering::Relaxed);
    }
}

/// In the child of a fork only the forking thread exists: forget every parent thread (their rings
/// hold the parent's events, already accounted for there) and let this thread register afresh.
pub fn reset_after_fork() {
    THREADS.store(null_mut(), Ordering::Release);
    tls::set(null_mut());
}

/// True when some thread has traced anything (since start, or since the last fork).
pub fn any_registered() -> bool {
    !THREADS.load(Ordering::Acquire).is_null()
}

/// Iterates over all registered threads.
pub fn for_each_thread(mut f: impl FnMut(&'static ThreadState)) {
    let mut p = THREADS.load(Ordering::Acquire);
    while !p.is_null() {
        // SAFETY: list nodes are never unmapped.
        let ts = unsafe { &*p };
        f(ts);
        p = ts.next.load(Ordering::Acquire);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ring_slot_keeps_every_field_of_an_event_in_32_bytes() {
        let e = RawEvent {
            tsc: u64::MAX - 1,
            bytes: 1 << 40,
            addr: 0xdead_beef_0000_1000,
            ep: (1 << EP_BITS) - 1,
            op: Op::GpuAtomic as u8,
            flags: flags::ERROR | flags::SIGNALED | flags::INLINE | flags::IMMEDIATE,
            aux: 0xfedc_ba98,
        };
        assert_eq!(RingSlot::pack(&e).unpack(), e);
        let small = RawEvent {
            ep: 7,
            op: Op::UcxPut as u8,
            ..Default::default()
        };
        assert_eq!(RingSlot::pack(&small).unpack(), small);
        // An endpoint id past 22 bits is recorded as unattributed, the rest unchanged.
        let far = RawEvent {
            ep: 1 << EP_BITS,
            ..e
        };
        assert_eq!(
            RingSlot::pack(&far).unpack(),
            RawEvent {
                ep: UNATTRIBUTED_EP,
                ..e
            }
        );
    }

    #[test]
    fn without_a_record_one_event_in_sigmatop_sample_is_due_the_first_included() {
        // The countdown reloads with `SIGMATOP_SAMPLE` - 1 (its default here: no environment is
        // read in these tests).
        let n = crate::runtime::config::sample_skip() as usize + 1;
        assert_eq!(n, crate::runtime::config::DEFAULT_SAMPLE as usize);
        let due = std::thread::spawn(move || {
            let ts = current().expect("a registered thread");
            (0..3 * n).filter(|_| ts.sample_due()).count()
        })
        .join()
        .expect("the sampling thread");
        assert_eq!(due, 3);
        let first = std::thread::spawn(|| current().expect("registered").sample_due())
            .join()
            .expect("the sampling thread");
        assert!(first, "a thread's first event is kept");
    }

    #[test]
    fn near_far_and_overflowing_endpoints_count_where_they_belong() {
        // Endpoints below NEAR_EPS live in the mapping made at registration, the others in
        // chunks mapped on first use; past MAX_EPS they are counted as unattributed.
        let eps = [
            1,
            NEAR_EPS - 1,
            NEAR_EPS,
            NEAR_EPS + EPS_PER_CHUNK as u32,
            MAX_EPS - 1,
        ];
        let ts = std::thread::spawn(move || {
            let ts = current().expect("a registered thread");
            for (i, &ep) in eps.iter().enumerate() {
                for _ in 0..=i {
                    ts.count(ep, Op::UcxTagSend, 100, Outcome::Ok);
                }
                ts.count(ep, Op::UcxTagRecv, 7, Outcome::Posted);
            }
            ts.count(MAX_EPS + 5, Op::UcxPut, 64, Outcome::Ok);
            ts
        })
        .join()
        .expect("the counting thread");
        let mut seen = std::collections::BTreeMap::new();
        ts.for_each_counter(|ep, op, s| {
            seen.insert(
                (ep, op),
                (
                    s.ops.load(Ordering::Relaxed),
                    s.bytes.load(Ordering::Relaxed),
                    s.posted.load(Ordering::Relaxed),
                    s.posted_bytes.load(Ordering::Relaxed),
                ),
            );
        });
        let mut want = std::collections::BTreeMap::new();
        for (i, &ep) in eps.iter().enumerate() {
            let n = i as u64 + 1;
            want.insert((ep, Op::UcxTagSend as u8), (n, 100 * n, 0, 0));
            want.insert((ep, Op::UcxTagRecv as u8), (0, 0, 1, 7));
        }
        want.insert((UNATTRIBUTED_EP, Op::UcxPut as u8), (1, 64, 0, 0));
        assert_eq!(seen, want);
        assert_eq!(ts.endpoint_overflow.load(Ordering::Relaxed), 1);
        // The thread has ended: its memory goes, and no counter is left to read.
        ts.release_memory();
        let mut left = 0;
        ts.for_each_counter(|_, _, _| left += 1);
        assert_eq!(left, 0);
    }
}
