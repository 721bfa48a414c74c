//! sigmatop as NCCL's profiler plugin (`ncclProfiler_v5`, NCCL 2.28; also what 2.29 loads when it
//! finds no v6): NCCL loads it with `NCCL_PROFILER_PLUGIN=<path of libsigmatop_preload.so>`
//! (`sigmatop run` sets that), and every collective, point-to-point call, proxy operation and step,
//! and IB net-plugin work request (qpNum, wr_id) becomes one record in the queue of `ring`, written
//! to `<record>/<host>/nccl-<pid>.stn` beside the process's record, and feeds the live tracker
//! whose state the collector sends over the live socket (`live`). `report` and `export` join
//! those to the verbs work requests (src/nccl). Self-contained: nothing else in the preload calls
//! into it but the collector's `live` and the destructor's final flush.
//!
//! It never changes what NCCL does: every callback returns `ncclSuccess`, hands NCCL a handle
//! (an opaque non-null id, never memory NCCL could write), and touches only its own queue. Where
//! NCCL is absent nothing here runs. Older NCCLs (profiler v1-v4) find stubs that say in one line
//! that sigmatop does not read their events, and switch every event off.

mod ring;

use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicU64, Ordering};

use sigmatop::nccl::format::{
    self, ALGOS, FUNCS, PROTOS, Rec, etype, index_of, kind, pack_coll, pack_name,
};

const NCCL_SUCCESS: c_int = 0;

/// The events sigmatop asks for: Coll, P2p, ProxyOp, ProxyStep, NetPlugin.
const MASK: c_int = (1 << 1) | (1 << 2) | (1 << 3) | (1 << 4) | (1 << 7);

/// `ncclProfiler_v5_t`.
#[repr(C)]
pub struct ProfilerV5 {
    name: *const c_char,
    init: unsafe extern "C" fn(
        *mut *mut c_void,
        u64,
        *mut c_int,
        *const c_char,
        c_int,
        c_int,
        c_int,
        *mut c_void,
    ) -> c_int,
    start_event: unsafe extern "C" fn(*mut c_void, *mut *mut c_void, *mut Descr) -> c_int,
    stop_event: unsafe extern "C" fn(*mut c_void) -> c_int,
    record_event_state: unsafe extern "C" fn(*mut c_void, c_int, *mut StateArgs) -> c_int,
    finalize: unsafe extern "C" fn(*mut c_void) -> c_int,
}

// SAFETY: the table is immutable; `name` points to a static C string.
unsafe impl Sync for ProfilerV5 {}

/// The v1-v4 tables share this shape (`init`'s first two arguments are the context and the
/// activation mask in all of them).
#[repr(C)]
pub struct ProfilerOld {
    name: *const c_char,
    init: unsafe extern "C" fn(*mut *mut c_void, *mut c_int) -> c_int,
    start_event: unsafe extern "C" fn(*mut c_void, *mut *mut c_void, *mut c_void) -> c_int,
    stop_event: unsafe extern "C" fn(*mut c_void) -> c_int,
    record_event_state: unsafe extern "C" fn(*mut c_void, c_int, *mut c_void) -> c_int,
    finalize: unsafe extern "C" fn(*mut c_void) -> c_int,
}

// SAFETY: as for ProfilerV5.
unsafe impl Sync for ProfilerOld {}

#[allow(non_upper_case_globals)]
#[unsafe(no_mangle)]
pub static ncclProfiler_v5: ProfilerV5 = ProfilerV5 {
    name: c"sigmatop".as_ptr(),
    init,
    start_event,
    stop_event,
    record_event_state,
    finalize,
};

macro_rules! old_version {
    ($sym:ident, $v:literal) => {
        #[allow(non_upper_case_globals)]
        #[unsafe(no_mangle)]
        pub static $sym: ProfilerOld = ProfilerOld {
            name: c"sigmatop".as_ptr(),
            init: {
                unsafe extern "C" fn f(ctx: *mut *mut c_void, mask: *mut c_int) -> c_int {
                    old_init(ctx, mask, $v)
                }
                f
            },
            start_event: old_start,
            stop_event: old_stop,
            record_event_state: old_state,
            finalize: old_stop,
        };
    };
}
old_version!(ncclProfiler_v4, 4);
old_version!(ncclProfiler_v3, 3);
old_version!(ncclProfiler_v2, 2);
old_version!(ncclProfiler_v1, 1);

fn old_init(ctx: *mut *mut c_void, mask: *mut c_int, v: u32) -> c_int {
    static SAID: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        eprintln!(
            "sigmatop: this NCCL offers profiler interface v{v}; sigmatop reads v5 (NCCL 2.28 and later): collectives are not attributed, verbs tracing goes on"
        );
    }
    // SAFETY: NCCL passes valid out-pointers; checked for null all the same.
    unsafe {
        if !mask.is_null() {
            *mask = 0;
        }
        if !ctx.is_null() {
            *ctx = core::ptr::dangling_mut::<c_void>();
        }
    }
    NCCL_SUCCESS
}
unsafe extern "C" fn old_start(_: *mut c_void, h: *mut *mut c_void, _: *mut c_void) -> c_int {
    if !h.is_null() {
        // SAFETY: NCCL's out-pointer.
        unsafe { *h = core::ptr::null_mut() };
    }
    NCCL_SUCCESS
}
unsafe extern "C" fn old_stop(_: *mut c_void) -> c_int {
    NCCL_SUCCESS
}
unsafe extern "C" fn old_state(_: *mut c_void, _: c_int, _: *mut c_void) -> c_int {
    NCCL_SUCCESS
}

/// `ncclProfilerEventDescr_v5_t`: the common head; the union is read at `u`.
#[repr(C)]
pub struct Descr {
    etype: u64,
    parent: *mut c_void,
    rank: c_int,
    u: DescrUnion,
}

#[repr(C)]
union DescrUnion {
    coll: CollDescr,
    p2p: P2pDescr,
    proxy_op: ProxyOpDescr,
    proxy_step: c_int,
    kernel_ch: KernelChDescr,
    net: NetDescr,
    _size: [u64; 12],
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CollDescr {
    seq: u64,
    func: *const c_char,
    send: *const c_void,
    recv: *mut c_void,
    count: usize,
    root: c_int,
    datatype: *const c_char,
    channels: u8,
    warps: u8,
    algo: *const c_char,
    proto: *const c_char,
    parent_group: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct P2pDescr {
    func: *const c_char,
    buff: *mut c_void,
    datatype: *const c_char,
    count: usize,
    peer: c_int,
    channels: u8,
    parent_group: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct ProxyOpDescr {
    pid: c_int,
    channel: u8,
    peer: c_int,
    steps: c_int,
    chunk: c_int,
    is_send: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct KernelChDescr {
    channel: u8,
    ptimer: u64,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct NetDescr {
    id: i64,
    data: *mut c_void,
}

/// `ncclProfilerNetIbDescr_v1_t`: `type`, then a union of one struct, aligned to 8 by its
/// `uint64_t` (so the fields start at offset 8, not after the byte).
#[repr(C)]
struct NetIbV1 {
    typ: u8,
    qp: NetIbQp,
}

#[repr(C)]
struct NetIbQp {
    device: c_int,
    wr_id: u64,
    opcode: c_int,
    qp_num: c_int,
    length: usize,
}

/// `ncclProfilerNetSockDescr_v1_t`: likewise, the union aligned by its `size_t`.
#[repr(C)]
struct NetSockV1 {
    typ: u8,
    sock: NetSock,
}

#[repr(C)]
struct NetSock {
    fd: c_int,
    op: c_int,
    length: usize,
}

/// `ncclProfilerEventStateArgs_v5_t`: every member starts at 0 and is at most 8 bytes.
#[repr(C)]
pub struct StateArgs {
    w: u64,
}

/// Ids handed to NCCL as handles: `n << 4 | type`, never 0.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// Communicators seen (their context ids).
static NEXT_COMM: AtomicU64 = AtomicU64::new(1);

fn new_id(t: u8) -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed) << 4 | t as u64
}

thread_local! {
    static TID: core::cell::Cell<u32> = const { core::cell::Cell::new(0) };
}

/// The calling thread's id, read from the kernel once per thread.
#[inline]
fn tid() -> u32 {
    TID.with(|t| {
        let v = t.get();
        if v != 0 {
            v
        } else {
            let v = crate::runtime::os::tid();
            t.set(v);
            v
        }
    })
}

fn rec(kind_: u8, t: u8, state: u8) -> Rec {
    Rec::new(crate::runtime::clock::now(), tid(), kind_, t, state)
}

/// A clock sample record (tsc, mono, real), so the file converts its own timestamps.
fn clock_record() {
    let s = crate::runtime::clock::sample();
    let mut r = Rec::new(s.tsc, tid(), kind::CLOCK, 0, 0);
    r.0[5] = s.mono_ns;
    r.0[6] = s.real_ns;
    ring::push(&r);
}

/// The bytes of a C string up to 64, empty for null.
///
/// # Safety
/// `p` is null or a NUL-terminated string (NCCL passes static names).
unsafe fn cstr<'a>(p: *const c_char) -> &'a [u8] {
    if p.is_null() {
        return &[];
    }
    // SAFETY: caller's contract.
    let b = unsafe { core::ffi::CStr::from_ptr(p) }.to_bytes();
    &b[..b.len().min(64)]
}

#[allow(clippy::too_many_arguments)]
unsafe extern "C" fn init(
    ctx: *mut *mut c_void,
    comm_id: u64,
    mask: *mut c_int,
    name: *const c_char,
    nnodes: c_int,
    nranks: c_int,
    rank: c_int,
    _log: *mut c_void,
) -> c_int {
    let r = std::panic::catch_unwind(|| {
        if let Some(line) = ring::start() {
            static SAID: core::sync::atomic::AtomicBool =
                core::sync::atomic::AtomicBool::new(false);
            if !SAID.swap(true, Ordering::Relaxed) {
                eprintln!("{line}");
            }
        }
        let active = ring::active();
        let c = NEXT_COMM.fetch_add(1, Ordering::Relaxed);
        // SAFETY: NCCL's out-pointers (checked for null) and its communicator name (a C string
        // or null).
        unsafe {
            if !ctx.is_null() {
                *ctx = c as *mut c_void;
            }
            if !mask.is_null() {
                // Nothing asked for when the queue could not be made: NCCL then emits no event.
                *mask = if active { MASK } else { 0 };
            }
        }
        if active {
            clock_record();
            let mut r = rec(kind::INIT, 0, 0);
            r.0[4] = c;
            r.0[5] = comm_id;
            r.0[6] = nranks as u64;
            r.0[7] = nnodes as u64;
            r.0[8] = rank as u64;
            r.0[9] = MASK as u64;
            // SAFETY: as above.
            pack_name(unsafe { cstr(name) }, &mut r.0[10..14]);
            ring::push(&r);
        }
    });
    if r.is_err() {
        // SAFETY: as above.
        unsafe {
            if !mask.is_null() {
                *mask = 0;
            }
        }
    }
    NCCL_SUCCESS
}

unsafe extern "C" fn start_event(ctx: *mut c_void, h: *mut *mut c_void, d: *mut Descr) -> c_int {
    if h.is_null() {
        return NCCL_SUCCESS;
    }
    // SAFETY: NCCL's out-pointer.
    unsafe { *h = core::ptr::null_mut() };
    if d.is_null() {
        return NCCL_SUCCESS;
    }
    // SAFETY: NCCL passes a descriptor valid for the call; the union member read is the one
    // its `type` names.
    let d = unsafe { &*d };
    let t = match d.etype {
        x if x == etype::bit(etype::COLL) => etype::COLL,
        x if x == etype::bit(etype::P2P) => etype::P2P,
        x if x == etype::bit(etype::PROXY_OP) => etype::PROXY_OP,
        x if x == etype::bit(etype::PROXY_STEP) => etype::PROXY_STEP,
        x if x == etype::bit(etype::KERNEL_CH) => etype::KERNEL_CH,
        x if x == etype::bit(etype::NET_PLUGIN) => etype::NET_PLUGIN,
        x if x == etype::bit(etype::GROUP) => etype::GROUP,
        _ => {
            ring::UNKNOWN.fetch_add(1, Ordering::Relaxed);
            return NCCL_SUCCESS;
        }
    };
    let id = new_id(t);
    // SAFETY: NCCL's out-pointer; the id is never dereferenced by anyone.
    unsafe { *h = id as *mut c_void };
    let mut r = rec(kind::START, t, 0);
    r.0[2] = id;
    r.0[3] = d.parent as u64;
    r.0[4] = ctx as u64;
    r.0[13] = d.rank as u64;
    // SAFETY: the member of the union `d.etype` names; strings are NCCL's static names.
    unsafe {
        match t {
            etype::COLL => {
                let c = d.u.coll;
                r.0[5] = c.seq;
                r.0[6] = c.count as u64;
                r.0[7] = pack_coll(
                    index_of(FUNCS, cstr(c.func)),
                    format::datatype_index(cstr(c.datatype)),
                    index_of(ALGOS, cstr(c.algo)),
                    index_of(PROTOS, cstr(c.proto)),
                    c.channels,
                    c.warps,
                );
                r.0[8] = c.root as u64;
            }
            etype::P2P => {
                let p = d.u.p2p;
                r.0[6] = p.count as u64;
                r.0[7] = pack_coll(
                    index_of(FUNCS, cstr(p.func)),
                    format::datatype_index(cstr(p.datatype)),
                    255,
                    255,
                    p.channels,
                    0,
                );
                r.0[8] = p.peer as u64;
            }
            etype::PROXY_OP => {
                let o = d.u.proxy_op;
                r.0[5] = o.pid as u64;
                r.0[6] = o.channel as u64;
                r.0[7] = o.peer as u64;
                r.0[8] = o.steps as u64;
                r.0[9] = o.chunk as u64;
                r.0[10] = o.is_send as u64;
            }
            etype::PROXY_STEP => r.0[5] = d.u.proxy_step as u64,
            etype::KERNEL_CH => {
                r.0[5] = d.u.kernel_ch.channel as u64;
                r.0[6] = d.u.kernel_ch.ptimer;
            }
            etype::NET_PLUGIN => {
                let n = d.u.net;
                r.0[5] = n.id as u64;
                let typ = n.id as u64 & format::NET_TYPE_MASK;
                let ver = n.id as u64 & 0xffff;
                if !n.data.is_null() && ver == 1 && typ == format::NET_TYPE_IB {
                    let q = &*(n.data as *const NetIbV1);
                    r.0[6] = q.typ as u64;
                    r.0[7] = q.qp.device as u64;
                    r.0[8] = q.qp.wr_id;
                    r.0[9] = q.qp.opcode as u64;
                    r.0[10] = q.qp.qp_num as u32 as u64;
                    r.0[11] = q.qp.length as u64;
                } else if !n.data.is_null() && ver == 1 && typ == format::NET_TYPE_SOCK {
                    let s = &*(n.data as *const NetSockV1);
                    r.0[6] = s.typ as u64;
                    r.0[7] = s.sock.fd as u64;
                    r.0[8] = s.sock.op as u64;
                    r.0[11] = s.sock.length as u64;
                }
            }
            _ => {}
        }
    }
    ring::push(&r);
    NCCL_SUCCESS
}

unsafe extern "C" fn stop_event(h: *mut c_void) -> c_int {
    if !h.is_null() {
        let id = h as u64;
        let mut r = rec(kind::STOP, (id & 15) as u8, 0);
        r.0[2] = id;
        ring::push(&r);
    }
    NCCL_SUCCESS
}

/// `ncclProfilerProxyStepSendPeerWait_v4`: NCCL records it on every poll of the peer's FIFO
/// (tens of thousands per second of waiting): only its first occurrence per step is kept (what
/// a hang's "waits for the peer's credit" needs).
const SEND_PEER_WAIT: c_int = 20;
/// `ncclProfilerProxyStepSendWait` and `RecvWait`: recorded right after the step's post; the
/// record carries the endpoint that post went to (the QP a hang waits on).
const SEND_WAIT: c_int = format::state::SEND_WAIT as c_int;
const RECV_WAIT: c_int = format::state::RECV_WAIT as c_int;

thread_local! {
    /// Steps whose SendPeerWait this thread recorded, by a few bits of their id: a step found
    /// here is skipped; a collision only records a step's state once more.
    static PEER_WAITED: core::cell::RefCell<[u64; 128]> = const { core::cell::RefCell::new([0; 128]) };
}

/// Whether this SendPeerWait of step `id` is its first (and notes it).
fn first_peer_wait(id: u64) -> bool {
    PEER_WAITED
        .try_with(|s| {
            let mut s = s.borrow_mut();
            let slot = &mut s[((id >> 4) & 127) as usize];
            let first = *slot != id;
            *slot = id;
            first
        })
        .unwrap_or(false)
}

unsafe extern "C" fn record_event_state(h: *mut c_void, state: c_int, a: *mut StateArgs) -> c_int {
    if h.is_null() {
        return NCCL_SUCCESS;
    }
    let id = h as u64;
    if state == SEND_PEER_WAIT && !first_peer_wait(id) {
        return NCCL_SUCCESS;
    }
    let mut r = rec(kind::STATE, (id & 15) as u8, state as u8);
    r.0[2] = id;
    if !a.is_null() {
        // SAFETY: NCCL's state arguments, valid for the call (8 bytes at least).
        r.0[5] = unsafe { (*a).w };
    }
    if matches!(state, SEND_WAIT | RECV_WAIT)
        && let Some(ts) = crate::runtime::thread::current()
    {
        r.0[6] = ts.last_post() as u64;
    }
    ring::push(&r);
    NCCL_SUCCESS
}

unsafe extern "C" fn finalize(ctx: *mut c_void) -> c_int {
    let mut r = rec(kind::FINALIZE, 0, 0);
    r.0[4] = ctx as u64;
    ring::push(&r);
    NCCL_SUCCESS
}

/// The collectives as the live tracker knows them now, and where they wait (none before NCCL's
/// first `init`): the collector sends them each interval (`Frame::Nccl`, `Frame::NcclWaits`).
pub fn live_frames(out: &mut Vec<sigmatop::wire::Frame>) {
    if let Some((live, waits)) = ring::live() {
        out.push(sigmatop::wire::Frame::Nccl(live));
        out.push(sigmatop::wire::Frame::NcclWaits(waits));
    }
}

/// The final flush, from the preload's destructor.
pub fn shutdown() {
    ring::shutdown();
}
