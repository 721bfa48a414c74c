//! libfabric completion queues and address vectors.
//!
//! Completion queues: every receive completion a program reads counts its receive, with the
//! length the entry reports (`len` of `fi_cq_msg_entry` and the larger formats), on the endpoint
//! whose receives complete there (the one endpoint bound to the queue with `FI_RECV`; the queue's
//! own endpoint when several are). A queue of `FI_CQ_FORMAT_CONTEXT` entries (what fi_pingpong
//! and the fabtests open) carries no length: sigmatop opens it as `FI_CQ_FORMAT_MSG` instead and
//! hands the program the `op_context` of each entry in its own format, so the program reads
//! exactly what it would have (if the provider refuses that format, the queue is opened as asked
//! and its receives stay counted as posted). Error completions of receives (`readerr`) count as
//! failed receives. `read` / `readfrom` / `sread` / `sreadfrom` / `readerr` are wrapped in every
//! mode; full mode also counts each read that returned completions (`OfiCqRead`, bytes = how
//! many) or a real error: an empty poll (`-FI_EAGAIN`) is not an event, or a busy-polling program
//! would fill the ring with nothing.
//!
//! Address vectors (`insert` / `insertsvc`): which peer address each `fi_addr` names, announced
//! to every endpoint bound to the AV.

use core::ffi::{c_char, c_int, c_void};
use core::mem::{MaybeUninit, offset_of};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use sigmatop::event::{EndpointKind, Layer, Op, Peer};

use super::abi::{
    Ctx, FI_ADDR_UNSPEC, FI_CQ_FORMAT_CONTEXT, FI_CQ_FORMAT_MSG, FI_EAGAIN, FI_ECANCELED,
    FI_ENOSYS, FI_RECV, FI_TAGGED, FiCqErrHead, FiCqMsgEntry, FiOps, FiOpsAv, FiOpsCq, Fid, FidAv,
    FidCq, OpsTable, cq_entry_size,
};
use super::addr::{ADDR_MAX, AV_BOOKS, AddrInfo, addr_hash, announce, av_book};
use super::table::{Wrapped, copy_table, free_box, try_box, wrap_slot, zeroed_wrapped};
use crate::hook::{self, Guard};
use crate::thread::{Detail, Outcome, ThreadState};

#[repr(C)]
struct CqState {
    fid_ops: Wrapped<FiOps>,
    ops: Wrapped<FiOpsCq>,
    /// The entry format the program reads, and the one the provider writes (`MSG` where sigmatop
    /// opened a `CONTEXT` queue as `MSG`).
    app_format: u32,
    prov_format: u32,
    /// The endpoint whose receives complete here: 0 none bound yet, `SEVERAL` more than one.
    recv_ep: AtomicU32,
}

const SEVERAL: u32 = u32::MAX;
/// Entries read per call from a queue sigmatop reformats (the program gets at most that many).
const CQ_BATCH: usize = 64;

#[repr(C)]
struct AvState {
    fid_ops: Wrapped<FiOps>,
    ops: Wrapped<FiOpsAv>,
    info: AddrInfo,
    /// fi_addr of the next insert when the program passes no fi_addr array (FI_AV_TABLE).
    next_index: AtomicU64,
}

static NEXT_CQ: AtomicU32 = AtomicU32::new(0);

/// The format a queue the program asked for in `format` is opened with: `MSG` for a `CONTEXT`
/// queue (the entries then carry lengths), else what it asked for.
pub(super) fn provider_format(format: u32) -> u32 {
    if format == FI_CQ_FORMAT_CONTEXT {
        FI_CQ_FORMAT_MSG
    } else {
        format
    }
}

/// Takes over a completion queue: false when its tables could not be copied (it is then left
/// as it was, and must not be one whose format sigmatop changed).
///
/// # Safety
/// `cq` is NULL or a live fid_cq whose provider writes `prov_format` entries; the program reads
/// `app_format` ones.
pub(super) unsafe fn wrap_cq(
    cq: *mut FidCq,
    dom: &AddrInfo,
    app_format: u32,
    prov_format: u32,
) -> bool {
    if cq.is_null() {
        return false;
    }
    let n = NEXT_CQ.fetch_add(1, Ordering::Relaxed);
    let id = crate::registry::define(
        Layer::Libfabric,
        EndpointKind::FiCq,
        format!("cq#{n}"),
        dom.prov.clone(),
        Peer::default(),
    );
    let Some(p) = try_box(CqState {
        fid_ops: zeroed_wrapped(),
        ops: zeroed_wrapped(),
        app_format,
        prov_format,
        recv_ep: AtomicU32::new(0),
    }) else {
        return false;
    };
    // SAFETY: p is ours until installed; cq is live.
    unsafe {
        let st = &mut *p;
        let fid_ok = copy_table(&mut st.fid_ops, (*cq).fid.ops, id);
        let ops_ok =
            fid_ok && st.fid_ops.table.close.is_some() && copy_table(&mut st.ops, (*cq).ops, id);
        if !ops_ok {
            // Without a close hook the copy could not be freed. A queue sigmatop reformats must
            // be read through its wrappers: without them the program would read entries of the
            // wrong size, so its tables are copied or nothing is done (the open is then undone
            // by the caller, which closes it and opens it as asked).
            free_box(p);
            return false;
        }
        st.fid_ops.table.close = Some(cq_close);
        wrap_slot(&mut st.ops.table.read, cq_read);
        wrap_slot(&mut st.ops.table.readfrom, cq_readfrom);
        wrap_slot(&mut st.ops.table.sread, cq_sread);
        wrap_slot(&mut st.ops.table.sreadfrom, cq_sreadfrom);
        wrap_slot(&mut st.ops.table.readerr, cq_readerr);
        (*cq).ops = &mut st.ops.table;
        (*cq).fid.ops = &mut st.fid_ops.table;
    }
    true
}

/// True when sigmatop wrapped `cq`.
///
/// # Safety
/// `cq` is a live fid_cq.
pub(super) unsafe fn is_wrapped(cq: *mut FidCq) -> bool {
    // SAFETY: a live cq's fid ops table (NULL or a provider's or our copy).
    unsafe {
        let ops = (*cq).fid.ops;
        let ours = cq_close as unsafe extern "C" fn(*mut Fid) -> c_int as usize;
        !ops.is_null() && (*ops).close.map(|f| f as usize) == Some(ours)
    }
}

/// An endpoint `ep` was bound to the completion queue `cq` with `flags`: its receives complete
/// there when the flags say `FI_RECV`.
///
/// # Safety
/// `cq` is a live fid of class `FI_CLASS_CQ`.
pub(super) unsafe fn note_bind(cq: *mut Fid, ep: u32, flags: u64) {
    // SAFETY: the caller's contract.
    if flags & FI_RECV == 0 || !unsafe { is_wrapped(cq as *mut FidCq) } {
        return;
    }
    // SAFETY: a wrapped cq's fid ops is the first field of its CqState.
    let st = unsafe { &*((*cq).ops as *const CqState) };
    if let Err(other) = st
        .recv_ep
        .compare_exchange(0, ep, Ordering::AcqRel, Ordering::Acquire)
        && other != ep
    {
        st.recv_ep.store(SEVERAL, Ordering::Release);
    }
}

/// The CqState of a wrapped queue from its ops copy.
fn cq_state(w: &Wrapped<FiOpsCq>) -> &CqState {
    // SAFETY: every Wrapped<FiOpsCq> sigmatop installs is the `ops` field of a CqState.
    unsafe {
        &*((w as *const Wrapped<FiOpsCq> as *const u8).sub(offset_of!(CqState, ops))
            as *const CqState)
    }
}

/// The close of an object whose fid and ops tables sigmatop copied (a cq or an av): the provider
/// closes (and may free) what the object points at, so it gets its own tables back for the call;
/// on success `closed` runs and the state is freed, on failure the copies go back.
///
/// # Safety
/// `fid` is the object (fid at offset 0) whose fid ops are `fid_ops` and whose ops pointer is
/// `*ops`; `state` came from `try_box` and holds both copies.
unsafe fn close_wrapped<T: OpsTable, S>(
    fid: *mut Fid,
    ops: *mut *mut T,
    state: *mut S,
    fid_ops: *mut Wrapped<FiOps>,
    copy: *mut Wrapped<T>,
    closed: impl FnOnce(),
) -> c_int {
    // SAFETY: the caller's contract: the state and its copies are live until freed below.
    unsafe {
        let Some(f) = (*(*fid_ops).orig).close else {
            return -FI_ENOSYS;
        };
        if core::ptr::eq(*ops, &(*copy).table) {
            *ops = (*copy).orig as *mut T;
        }
        (*fid).ops = (*fid_ops).orig as *mut FiOps;
        let r = f(fid);
        if r == 0 {
            hook::guarded((), closed);
            // The object is closed: nothing of the provider points at the state any more.
            free_box(state);
        } else {
            if !(*copy).orig.is_null() && core::ptr::eq(*ops, (*copy).orig) {
                *ops = &mut (*copy).table;
            }
            (*fid).ops = &mut (*fid_ops).table;
        }
        r
    }
}

unsafe extern "C" fn cq_close(fid: *mut Fid) -> c_int {
    // SAFETY: installed only in CqState::fid_ops (its first field), which fid->ops points at.
    let st = unsafe { (*fid).ops as *mut CqState };
    let cq = fid as *mut FidCq;
    // SAFETY: the cq (fid at offset 0) and its state, which holds both copies.
    unsafe {
        let (fid_ops, copy) = (&raw mut (*st).fid_ops, &raw mut (*st).ops);
        close_wrapped(fid, &raw mut (*cq).ops, st, fid_ops, copy, || {})
    }
}

/// Counts the receive completions among `entries` (`stride` bytes apart, the msg prefix first).
///
/// # Safety
/// `entries` holds `n` entries of `stride` bytes the provider just wrote.
unsafe fn count_entries(
    ts: &ThreadState,
    st: &CqState,
    entries: *const u8,
    n: usize,
    stride: usize,
) {
    let ep = match st.recv_ep.load(Ordering::Acquire) {
        0 | SEVERAL => st.ops.id,
        e => e,
    };
    for i in 0..n {
        // SAFETY: the caller's contract; every format with a length starts with the msg entry.
        let e = unsafe { (entries.add(i * stride) as *const FiCqMsgEntry).read_unaligned() };
        if e.flags & FI_RECV != 0 {
            let op = if e.flags & FI_TAGGED != 0 {
                Op::OfiTRecv
            } else {
                Op::OfiRecv
            };
            ts.arrived(ep, op, e.len as u64, true);
        }
    }
}

/// The body of the cq read wrappers: the provider's read (`read(buf, count)`), into a buffer of
/// msg entries when the queue was reformatted (then each entry's `op_context` is handed to the
/// program in its own format, traced or not). Receive completions are counted; in full mode so
/// is the read itself, when it returned completions (bytes = how many) or failed other than with
/// -FI_EAGAIN.
///
/// A read of this queue made while sigmatop's read of the same queue runs on this thread is the
/// provider's own (util's `sread` reads through the queue's `readfrom`, i.e. through this
/// wrapper): it gets the provider's format, untouched and uncounted. Any other read made inside
/// a hook (a program's signal handler or callback that reads a queue while the thread is in
/// another libfabric call, or a read on a thread without a state) is the program's: a
/// reformatted queue is converted for it as always (the provider's 24-byte entries never go
/// into a buffer of 8-byte ones), uncounted. The thread-local mark is set whatever the layer
/// switch says, since a reformatted queue must be converted exactly once.
#[inline(always)]
fn cq_op(
    w: &Wrapped<FiOpsCq>,
    buf: *mut c_void,
    count: usize,
    read: impl FnOnce(*mut c_void, usize) -> isize,
) -> isize {
    let st = cq_state(w);
    let me = st as *const CqState as usize;
    let outer = READING.get();
    if outer == me {
        return read(buf, count);
    }
    let Some(ts) = (!crate::thread::inside())
        .then(crate::thread::enter)
        .flatten()
    else {
        // Inside another hook, or a thread without a state (exiting): convert, uncounted.
        READING.set(me);
        let r = read_as_program(st, buf, count, read, &mut MaybeUninit::uninit());
        READING.set(outer);
        return r;
    };
    let mut tmp = MaybeUninit::uninit();
    READING.set(me);
    let r = read_as_program(st, buf, count, read, &mut tmp);
    READING.set(outer);
    if crate::config::layer_enabled(Layer::Libfabric) {
        hook::guarded((), || {
            if r > 0 {
                let (entries, stride, n) = if st.prov_format != st.app_format {
                    let n = (r as usize).min(CQ_BATCH);
                    (tmp.as_ptr() as *const u8, cq_entry_size(st.prov_format), n)
                } else {
                    (buf as *const u8, cq_entry_size(st.app_format), r as usize)
                };
                if stride >= cq_entry_size(FI_CQ_FORMAT_MSG) {
                    // SAFETY: the provider wrote n entries of this format there.
                    unsafe { count_entries(ts, st, entries, n, stride) };
                }
            }
            if !crate::config::full() {
                return;
            }
            if r > 0 {
                ts.record(w.id, Op::OfiCqRead, r as u64, Outcome::Ok, || {
                    Some(Detail::NONE)
                });
            } else if r < 0 && r != -FI_EAGAIN {
                ts.record(w.id, Op::OfiCqRead, 0, Outcome::Failed, || {
                    Some(Detail::NONE)
                });
            }
        });
    }
    ts.leave();
    r
}

thread_local! {
    /// The queue (its `CqState`) a wrapped read is reading on this thread, 0 when none: a read
    /// of the same queue inside it is the provider's own. No destructor, so it is there while a
    /// thread exits too.
    static READING: core::cell::Cell<usize> = const { core::cell::Cell::new(0) };
}

/// Reads completions in the program's format: straight into its buffer, or, for a reformatted
/// queue, as msg entries into `tmp`, then each `op_context` into the program's buffer.
#[inline(always)]
fn read_as_program(
    st: &CqState,
    buf: *mut c_void,
    count: usize,
    read: impl FnOnce(*mut c_void, usize) -> isize,
    tmp: &mut MaybeUninit<[FiCqMsgEntry; CQ_BATCH]>,
) -> isize {
    if st.prov_format == st.app_format {
        return read(buf, count);
    }
    let tmp = tmp.as_mut_ptr() as *mut FiCqMsgEntry;
    let r = read(tmp as *mut c_void, count.min(CQ_BATCH));
    if r > 0 {
        let out = buf as *mut *mut c_void;
        for i in 0..(r as usize).min(CQ_BATCH) {
            // SAFETY: the provider wrote r msg entries into tmp; the program's buffer holds
            // `count` >= r context entries (one pointer each).
            unsafe { out.add(i).write((*tmp.add(i)).op_context) };
        }
    }
    r
}

unsafe extern "C" fn cq_read(cq: *mut FidCq, buf: *mut c_void, count: usize) -> isize {
    // SAFETY: installed only in the copy cq->ops points at.
    let (w, provider) = unsafe { Wrapped::of((*cq).ops) };
    let Some(f) = provider.read else {
        return -(FI_ENOSYS as isize);
    };
    // SAFETY: the provider's function with the program's arguments (or sigmatop's buffer).
    cq_op(w, buf, count, |b, n| unsafe { f(cq, b, n) })
}

unsafe extern "C" fn cq_readfrom(
    cq: *mut FidCq,
    buf: *mut c_void,
    count: usize,
    src: *mut u64,
) -> isize {
    // SAFETY: installed only in the copy cq->ops points at.
    let (w, provider) = unsafe { Wrapped::of((*cq).ops) };
    let Some(f) = provider.readfrom else {
        return -(FI_ENOSYS as isize);
    };
    // SAFETY: as cq_read; `src` has room for `count` >= n addresses.
    cq_op(w, buf, count, |b, n| unsafe { f(cq, b, n, src) })
}

unsafe extern "C" fn cq_sread(
    cq: *mut FidCq,
    buf: *mut c_void,
    count: usize,
    cond: *const c_void,
    timeout: c_int,
) -> isize {
    // SAFETY: installed only in the copy cq->ops points at.
    let (w, provider) = unsafe { Wrapped::of((*cq).ops) };
    let Some(f) = provider.sread else {
        return -(FI_ENOSYS as isize);
    };
    // SAFETY: as cq_read.
    cq_op(w, buf, count, |b, n| unsafe { f(cq, b, n, cond, timeout) })
}

unsafe extern "C" fn cq_sreadfrom(
    cq: *mut FidCq,
    buf: *mut c_void,
    count: usize,
    src: *mut u64,
    cond: *const c_void,
    timeout: c_int,
) -> isize {
    // SAFETY: installed only in the copy cq->ops points at.
    let (w, provider) = unsafe { Wrapped::of((*cq).ops) };
    let Some(f) = provider.sreadfrom else {
        return -(FI_ENOSYS as isize);
    };
    // SAFETY: as cq_readfrom.
    cq_op(w, buf, count, |b, n| unsafe {
        f(cq, b, n, src, cond, timeout)
    })
}

/// `readerr`: an error completion of a receive (truncated, ...) is a failed receive; a cancelled
/// one is not counted.
unsafe extern "C" fn cq_readerr(cq: *mut FidCq, err: *mut FiCqErrHead, fl: u64) -> isize {
    // SAFETY: installed only in the copy cq->ops points at.
    let (w, provider) = unsafe { Wrapped::of((*cq).ops) };
    let Some(f) = provider.readerr else {
        return -(FI_ENOSYS as isize);
    };
    hook::around(
        Guard::Outermost(Layer::Libfabric),
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(cq, err, fl) },
        |ts, r| {
            if r <= 0 || err.is_null() {
                return;
            }
            // SAFETY: the provider wrote one error entry.
            let (flags, error) = unsafe { ((*err).flags, (*err).err) };
            // A cancelled receive (`fi_cancel`) neither arrived nor failed: its buffer was
            // counted as posted, and that is all.
            if flags & FI_RECV != 0 && error != FI_ECANCELED {
                let st = cq_state(w);
                let ep = match st.recv_ep.load(Ordering::Acquire) {
                    0 | SEVERAL => w.id,
                    e => e,
                };
                let op = if flags & FI_TAGGED != 0 {
                    Op::OfiTRecv
                } else {
                    Op::OfiRecv
                };
                ts.arrived(ep, op, 0, false);
            }
        },
    )
}

/// # Safety
/// `av` is NULL or a live fid_av.
pub(super) unsafe fn wrap_av(av: *mut FidAv, dom: &AddrInfo) {
    if av.is_null() {
        return;
    }
    let Some(p) = try_box(AvState {
        fid_ops: zeroed_wrapped(),
        ops: zeroed_wrapped(),
        info: dom.clone(),
        next_index: AtomicU64::new(0),
    }) else {
        return;
    };
    // SAFETY: p is ours until installed; av is live.
    unsafe {
        let st = &mut *p;
        if !copy_table(&mut st.fid_ops, (*av).fid.ops, 0) || st.fid_ops.table.close.is_none() {
            free_box(p);
            return;
        }
        st.fid_ops.table.close = Some(av_close);
        if !copy_table(&mut st.ops, (*av).ops, 0) {
            free_box(p);
            return;
        }
        wrap_slot(&mut st.ops.table.insert, av_insert);
        wrap_slot(&mut st.ops.table.insertsvc, av_insertsvc);
        (*av).ops = &mut st.ops.table;
        (*av).fid.ops = &mut st.fid_ops.table;
    }
}

/// The AvState of a wrapped AV from its ops pointer.
///
/// # Safety
/// `av->ops` is our copy.
unsafe fn av_state<'a>(av: *mut FidAv) -> &'a AvState {
    // SAFETY: ops is a field of AvState at a fixed offset.
    unsafe { &*(((*av).ops as *mut u8).sub(offset_of!(AvState, ops)) as *const AvState) }
}

unsafe extern "C" fn av_close(fid: *mut Fid) -> c_int {
    // SAFETY: installed only in AvState::fid_ops (its first field).
    let st = unsafe { (*fid).ops as *mut AvState };
    let av = fid as *mut FidAv;
    let forget = || {
        if let Ok(mut books) = AV_BOOKS.lock() {
            books.retain(|b| b.av != fid as usize);
        }
    };
    // SAFETY: the av (fid at offset 0) and its state, which holds both copies.
    unsafe {
        let (fid_ops, copy) = (&raw mut (*st).fid_ops, &raw mut (*st).ops);
        close_wrapped(fid, &raw mut (*av).ops, st, fid_ops, copy, forget)
    }
}

/// Records the addresses behind `fi_addrs` (read back with the provider's lookup) and announces
/// them to every endpoint bound to the AV.
///
/// # Safety
/// `av` is a live wrapped AV.
unsafe fn note_inserted(av: *mut FidAv, fi_addrs: &[u64]) {
    // SAFETY: av is wrapped (caller).
    let st = unsafe { av_state(av) };
    // SAFETY: orig is the provider's av table.
    let Some(lookup) = (unsafe { (*st.ops.orig).lookup }) else {
        return;
    };
    let mut found = Vec::new();
    for &a in fi_addrs {
        if a == FI_ADDR_UNSPEC {
            continue;
        }
        let mut buf = [0u8; ADDR_MAX];
        let mut len = ADDR_MAX;
        // SAFETY: provider lookup into a buffer of `len` bytes.
        let r = unsafe { lookup(av, a, buf.as_mut_ptr() as *mut c_void, &mut len) };
        if r == 0 && len > 0 {
            found.push((a, addr_hash(st.info.addr_format, &buf[..len.min(ADDR_MAX)])));
        }
    }
    let eps = av_book(av as usize, |b| {
        b.addrs.extend_from_slice(&found);
        b.eps.clone()
    })
    .unwrap_or_default();
    for e in eps {
        for &(a, h) in &found {
            announce(e, a, h);
        }
    }
}

/// The body of the insert wrappers: the provider's insert as the outermost sigmatop hook; when it
/// inserted something, `fi_addrs` (from the next index of the AV) names what it inserted.
#[inline(always)]
fn insert(
    av: *mut FidAv,
    call_real: impl FnOnce() -> c_int,
    fi_addrs: impl FnOnce(&AvState) -> Vec<u64>,
) -> c_int {
    hook::around(Guard::Outermost(Layer::Libfabric), call_real, |_, r| {
        if r > 0 {
            // SAFETY: the av is wrapped (its ops is our copy), live during its insert call.
            let st = unsafe { av_state(av) };
            // SAFETY: as above.
            unsafe { note_inserted(av, &fi_addrs(st)) };
        }
    })
}

unsafe extern "C" fn av_insert(
    av: *mut FidAv,
    addr: *const c_void,
    count: usize,
    fi_addr: *mut u64,
    fl: u64,
    ctx: Ctx,
) -> c_int {
    // SAFETY: installed only in AvState::ops, which av->ops points at.
    let st = unsafe { av_state(av) };
    // SAFETY: the provider's table the copy was made from.
    let Some(f) = (unsafe { (*st.ops.orig).insert }) else {
        return -FI_ENOSYS;
    };
    insert(
        av,
        // SAFETY: the program's arguments, unchanged.
        || unsafe { f(av, addr, count, fi_addr, fl, ctx) },
        |st| {
            let first = st.next_index.fetch_add(count as u64, Ordering::Relaxed);
            if fi_addr.is_null() {
                (first..first + count as u64).collect()
            } else {
                // SAFETY: the program's array of `count` entries, filled by the provider
                // (FI_ADDR_NOTAVAIL where an insert failed).
                unsafe { core::slice::from_raw_parts(fi_addr, count) }.to_vec()
            }
        },
    )
}

unsafe extern "C" fn av_insertsvc(
    av: *mut FidAv,
    node: *const c_char,
    service: *const c_char,
    fi_addr: *mut u64,
    fl: u64,
    ctx: Ctx,
) -> c_int {
    // SAFETY: installed only in AvState::ops, which av->ops points at.
    let st = unsafe { av_state(av) };
    // SAFETY: the provider's table the copy was made from.
    let Some(f) = (unsafe { (*st.ops.orig).insertsvc }) else {
        return -FI_ENOSYS;
    };
    insert(
        av,
        // SAFETY: the program's arguments, unchanged.
        || unsafe { f(av, node, service, fi_addr, fl, ctx) },
        |st| {
            let first = st.next_index.fetch_add(1, Ordering::Relaxed);
            vec![if fi_addr.is_null() {
                first
            } else {
                // SAFETY: the program's one entry, filled by the provider.
                unsafe { *fi_addr }
            }]
        },
    )
}
