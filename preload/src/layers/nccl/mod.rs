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

mod chain;
mod counts;
mod ring;

use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicU64, Ordering};

use sigmatop::nccl::format::{
    self, ALGOS, FUNCS, PROTOS, Rec, etype, index_of, kind, pack_coll, pack_name,
};

const NCCL_SUCCESS: c_int = 0;

/// The profiler interface sigmatop's events are read through (`ncclProfiler_v5`).
const INTERFACE_VERSION: u64 = 5;

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
#[derive(Clone, Copy)]
pub struct Descr {
    etype: u64,
    parent: *mut c_void,
    rank: c_int,
    u: DescrUnion,
}

#[repr(C)]
#[derive(Clone, Copy)]
union DescrUnion {
    group_api: GroupApiDescr,
    coll_api: CollApiDescr,
    p2p_api: P2pApiDescr,
    kernel_launch: *mut c_void,
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
struct GroupApiDescr {
    graph_captured: bool,
    depth: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CollApiDescr {
    func: *const c_char,
    count: usize,
    datatype: *const c_char,
    root: c_int,
    stream: *mut c_void,
    graph_captured: bool,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct P2pApiDescr {
    func: *const c_char,
    count: usize,
    datatype: *const c_char,
    stream: *mut c_void,
    graph_captured: bool,
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

/// An API event's function and datatype, packed as a collective's are (no algorithm, protocol,
/// channels or warps: the API call has none yet).
fn pack_api(func: &[u8], datatype: &[u8]) -> u64 {
    pack_coll(
        index_of(FUNCS, func),
        format::datatype_index(datatype),
        255,
        255,
        0,
        0,
    )
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

/// The events this process's mode asks NCCL for (docs/NCCL.md, "Modes"): aggregate the host
/// calls only (counted, never recorded); simple the calls as the user made them (the API
/// events), their proxy operations and steps, IB QP events and the kernels' GPU times; full
/// also the proxy thread's control events and the kernel launches.
fn mode_mask() -> c_int {
    let b = |t: u8| 1 << t;
    let calls = b(etype::COLL) | b(etype::P2P);
    let simple = calls
        | b(etype::PROXY_OP)
        | b(etype::PROXY_STEP)
        | b(etype::KERNEL_CH)
        | b(etype::NET_PLUGIN)
        | b(etype::GROUP_API)
        | b(etype::COLL_API)
        | b(etype::P2P_API);
    match crate::runtime::config::mode() {
        sigmatop::event::Mode::Aggregate => calls,
        sigmatop::event::Mode::Simple => simple,
        sigmatop::event::Mode::Full => simple | b(etype::PROXY_CTRL) | b(etype::KERNEL_LAUNCH),
    }
}

/// What sigmatop asked NCCL for (set at the first `init`; 0 before, or when nothing can be
/// kept).
static OUR_MASK: core::sync::atomic::AtomicI32 = core::sync::atomic::AtomicI32::new(0);
/// Aggregate mode: host calls are counted, not recorded.
static COUNT_ONLY: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

#[inline]
fn ours(t: u8) -> bool {
    t < 15 && OUR_MASK.load(Ordering::Relaxed) & (1 << t) != 0
}

/// sigmatop's id of a communicator from NCCL's context (0 for none).
///
/// # Safety
/// `ctx` is null or a context `init` made.
#[inline]
unsafe fn ctx_of<'a>(ctx: *mut c_void) -> Option<&'a chain::Ctx> {
    // SAFETY: contexts are leaked `chain::Ctx` boxes that live as long as the process.
    (!ctx.is_null()).then(|| unsafe { &*(ctx as *const chain::Ctx) })
}

/// The type index of an event-type bit NCCL passes (15: one this plugin does not know).
#[inline]
fn type_index(bits: u64) -> u8 {
    if bits.is_power_of_two() && bits.trailing_zeros() <= etype::KERNEL_LAUNCH as u32 {
        bits.trailing_zeros() as u8
    } else {
        etype::OTHER
    }
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
    log: *mut c_void,
) -> c_int {
    let r = std::panic::catch_unwind(|| {
        if let Some(line) = ring::start() {
            static SAID: core::sync::atomic::AtomicBool =
                core::sync::atomic::AtomicBool::new(false);
            if !SAID.swap(true, Ordering::Relaxed) {
                eprintln!("{line}");
            }
        }
        if let Some(line) = chain::load() {
            eprintln!("{line}");
        }
        let active = ring::active();
        let ours = if active { mode_mask() } else { 0 };
        OUR_MASK.store(ours, Ordering::Relaxed);
        COUNT_ONLY.store(
            crate::runtime::config::mode() == sigmatop::event::Mode::Aggregate,
            Ordering::Relaxed,
        );
        let c = NEXT_COMM.fetch_add(1, Ordering::Relaxed);
        counts::init(c, comm_id, rank as u64);
        let (inner_ctx, inner_mask) = match chain::inner() {
            // SAFETY: NCCL's own arguments, passed on.
            Some(t) => unsafe { chain::init(t, comm_id, name, nnodes, nranks, rank, log) },
            None => (core::ptr::null_mut(), 0),
        };
        let boxed = Box::into_raw(Box::new(chain::Ctx {
            c,
            inner: inner_ctx,
            inner_mask,
        }));
        // SAFETY: NCCL's out-pointers (checked for null) and its communicator name (a C string
        // or null).
        unsafe {
            if !ctx.is_null() {
                *ctx = boxed as *mut c_void;
            }
            if !mask.is_null() {
                // Nothing of ours asked for when the queue could not be made.
                *mask = ours | inner_mask;
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
            r.0[9] = ours as u64;
            // SAFETY: as above.
            pack_name(unsafe { cstr(name) }, &mut r.0[10..14]);
            // The interface NCCL's events come through: v5, the newest sigmatop reads (an NCCL
            // that offers v6 looks for it first and, not finding it, drives this one).
            r.0[14] = INTERFACE_VERSION;
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

/// The descriptor the chained plugin gets: NCCL's, with the parent handles translated to its own.
fn for_inner(d: &Descr, t: u8) -> Descr {
    let mut x = *d;
    x.parent = chain::get(d.parent as u64);
    // SAFETY: the member of the union `t` names (both carry a v4 parent group handle).
    unsafe {
        match t {
            etype::COLL => x.u.coll.parent_group = chain::get(d.u.coll.parent_group as u64),
            etype::P2P => x.u.p2p.parent_group = chain::get(d.u.p2p.parent_group as u64),
            _ => {}
        }
    }
    x
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
    // SAFETY: NCCL passes a descriptor valid for the call.
    let d = unsafe { &*d };
    let t = type_index(d.etype);
    // SAFETY: the context `init` made.
    let cx = unsafe { ctx_of(ctx) };
    let c = cx.map_or(0, |x| x.c);
    let mut result = NCCL_SUCCESS;
    let mut inner_h = core::ptr::null_mut();
    let chained = match (chain::inner(), cx) {
        (Some(it), Some(x)) if !x.inner.is_null() && (x.inner_mask as u64) & d.etype != 0 => {
            let mut dd = for_inner(d, t);
            // SAFETY: the chained plugin's startEvent with its context and a copy of NCCL's
            // descriptor whose parents are its own handles.
            result = unsafe { (it.start_event)(x.inner, &mut inner_h, &mut dd) };
            true
        }
        _ => false,
    };
    let mine = ours(t);
    if !mine && !chained {
        if t == etype::OTHER {
            ring::UNKNOWN.fetch_add(1, Ordering::Relaxed);
        }
        return result;
    }
    // Aggregate mode: a host call is counted and nothing is recorded.
    let count_only = mine && COUNT_ONLY.load(Ordering::Relaxed);
    if count_only {
        // SAFETY: the member of the union `t` names; strings are NCCL's static names.
        unsafe {
            let (func, count, dt) = match t {
                etype::COLL => (d.u.coll.func, d.u.coll.count, d.u.coll.datatype),
                _ => (d.u.p2p.func, d.u.p2p.count, d.u.p2p.datatype),
            };
            let esize = format::DATATYPES
                .get(format::datatype_index(cstr(dt)) as usize)
                .map_or(1, |x| x.1);
            counts::add(c, index_of(FUNCS, cstr(func)), count as u64 * esize);
        }
    }
    if !chained && (count_only || !mine) {
        return result;
    }
    let id = new_id(t);
    // SAFETY: NCCL's out-pointer; the id is never dereferenced by anyone.
    unsafe { *h = id as *mut c_void };
    if chained {
        chain::put(id, inner_h);
    }
    if !mine || count_only {
        return result;
    }
    let mut r = rec(kind::START, t, 0);
    r.0[2] = id;
    r.0[3] = d.parent as u64;
    r.0[4] = c;
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
            etype::GROUP_API => {
                let g = d.u.group_api;
                r.0[5] = g.depth as u64;
                r.0[6] = g.graph_captured as u64;
            }
            etype::COLL_API => {
                let a = d.u.coll_api;
                r.0[6] = a.count as u64;
                r.0[7] = pack_api(cstr(a.func), cstr(a.datatype));
                r.0[8] = a.root as u64;
                r.0[9] = a.stream as u64;
                r.0[10] = a.graph_captured as u64;
            }
            etype::P2P_API => {
                let a = d.u.p2p_api;
                r.0[6] = a.count as u64;
                r.0[7] = pack_api(cstr(a.func), cstr(a.datatype));
                r.0[9] = a.stream as u64;
                r.0[10] = a.graph_captured as u64;
            }
            etype::KERNEL_LAUNCH => r.0[5] = d.u.kernel_launch as u64,
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
    result
}

unsafe extern "C" fn stop_event(h: *mut c_void) -> c_int {
    if h.is_null() {
        return NCCL_SUCCESS;
    }
    let id = h as u64;
    let t = (id & 15) as u8;
    let mut result = NCCL_SUCCESS;
    if let Some(it) = chain::inner() {
        let ih = chain::take(id);
        if !ih.is_null() {
            // SAFETY: the chained plugin's own handle of this event.
            result = unsafe { (it.stop_event)(ih) };
        }
    }
    if ours(t) && !COUNT_ONLY.load(Ordering::Relaxed) {
        let mut r = rec(kind::STOP, t, 0);
        r.0[2] = id;
        ring::push(&r);
    }
    result
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
    let t = (id & 15) as u8;
    let mut result = NCCL_SUCCESS;
    if let Some(it) = chain::inner() {
        let ih = chain::get(id);
        if !ih.is_null() {
            // SAFETY: the chained plugin's own handle, NCCL's state and arguments.
            result = unsafe { (it.record_event_state)(ih, state, a) };
        }
    }
    if !ours(t) || COUNT_ONLY.load(Ordering::Relaxed) {
        return result;
    }
    if state == SEND_PEER_WAIT && !first_peer_wait(id) {
        return result;
    }
    let mut r = rec(kind::STATE, t, state as u8);
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
    result
}

unsafe extern "C" fn finalize(ctx: *mut c_void) -> c_int {
    // SAFETY: the context `init` made.
    let cx = unsafe { ctx_of(ctx) };
    let mut result = NCCL_SUCCESS;
    if let (Some(it), Some(x)) = (chain::inner(), cx)
        && !x.inner.is_null()
    {
        // SAFETY: the chained plugin's finalize of its own context.
        result = unsafe { (it.finalize)(x.inner) };
    }
    let mut r = rec(kind::FINALIZE, 0, 0);
    r.0[4] = cx.map_or(0, |x| x.c);
    ring::push(&r);
    result
}

/// The collectives as the live tracker knows them now, and where they wait (none before NCCL's
/// first `init`): the collector sends them each interval (`Frame::Nccl`, `Frame::NcclWaits`).
pub fn live_frames(out: &mut Vec<sigmatop::wire::Frame>) {
    if let Some((live, waits, calls)) = ring::live() {
        out.push(sigmatop::wire::Frame::Nccl(live));
        out.push(sigmatop::wire::Frame::NcclWaits(waits));
        out.push(sigmatop::wire::Frame::NcclCalls(calls));
    }
}

/// The final flush, from the preload's destructor.
pub fn shutdown() {
    ring::shutdown();
}
