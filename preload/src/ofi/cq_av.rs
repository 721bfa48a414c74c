//! libfabric completion queues (wrapped in full mode: `read` / `readfrom` counted when they return
//! completions or a real error; an empty poll, `-FI_EAGAIN`, is not an event, or a busy-polling
//! program would fill the ring with nothing) and address vectors (`insert` / `insertsvc`: which
//! peer address each `fi_addr` names, announced to every endpoint bound to the AV).

use core::ffi::{c_char, c_int, c_void};
use core::mem::offset_of;
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use sigmatop::event::{EndpointKind, Layer, Op, Peer};

use super::abi::{
    Ctx, FI_ADDR_UNSPEC, FI_EAGAIN, FI_ENOSYS, FiOps, FiOpsAv, FiOpsCq, Fid, FidAv, FidCq, OpsTable,
};
use super::addr::{ADDR_MAX, AV_BOOKS, AddrInfo, addr_hash, announce, av_book};
use super::table::{Wrapped, copy_table, free_box, try_box, wrap_slot, zeroed_wrapped};
use crate::hook::{self, Guard};
use crate::thread::{Detail, Outcome};

#[repr(C)]
struct CqState {
    fid_ops: Wrapped<FiOps>,
    ops: Wrapped<FiOpsCq>,
}

#[repr(C)]
struct AvState {
    fid_ops: Wrapped<FiOps>,
    ops: Wrapped<FiOpsAv>,
    info: AddrInfo,
    /// fi_addr of the next insert when the program passes no fi_addr array (FI_AV_TABLE).
    next_index: AtomicU64,
}

static NEXT_CQ: AtomicU32 = AtomicU32::new(0);

/// # Safety
/// `cq` is NULL or a live fid_cq.
pub(super) unsafe fn wrap_cq(cq: *mut FidCq, dom: &AddrInfo) {
    if cq.is_null() {
        return;
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
    }) else {
        return;
    };
    // SAFETY: p is ours until installed; cq is live.
    unsafe {
        let st = &mut *p;
        if !copy_table(&mut st.fid_ops, (*cq).fid.ops, id) || st.fid_ops.table.close.is_none() {
            // Without a close hook the copy could not be freed; leave the cq untraced.
            free_box(p);
            return;
        }
        st.fid_ops.table.close = Some(cq_close);
        if copy_table(&mut st.ops, (*cq).ops, id) {
            wrap_slot(&mut st.ops.table.read, cq_read);
            wrap_slot(&mut st.ops.table.readfrom, cq_readfrom);
            (*cq).ops = &mut st.ops.table;
        }
        (*cq).fid.ops = &mut st.fid_ops.table;
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

/// The body of the cq wrappers: the provider's read as the outermost sigmatop hook; counted on
/// the cq when it returned completions (bytes = how many) or failed other than with -FI_EAGAIN.
#[inline(always)]
fn cq_op(w: &Wrapped<FiOpsCq>, call_real: impl FnOnce() -> isize) -> isize {
    hook::around(Guard::Outermost(Layer::Libfabric), call_real, |ts, r| {
        if r > 0 {
            ts.record(w.id, Op::OfiCqRead, r as u64, Outcome::Ok, || {
                Some(Detail::NONE)
            });
        } else if r < 0 && r != -FI_EAGAIN {
            ts.record(w.id, Op::OfiCqRead, 0, Outcome::Failed, || {
                Some(Detail::NONE)
            });
        }
    })
}

unsafe extern "C" fn cq_read(cq: *mut FidCq, buf: *mut c_void, count: usize) -> isize {
    // SAFETY: installed only in the copy cq->ops points at.
    let (w, provider) = unsafe { Wrapped::of((*cq).ops) };
    let Some(f) = provider.read else {
        return -(FI_ENOSYS as isize);
    };
    // SAFETY: the provider's function with the program's arguments.
    cq_op(w, || unsafe { f(cq, buf, count) })
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
    // SAFETY: the provider's function with the program's arguments.
    cq_op(w, || unsafe { f(cq, buf, count, src) })
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
