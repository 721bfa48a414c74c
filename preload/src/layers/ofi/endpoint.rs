//! libfabric endpoints: each gets one `EpState` holding copies of its fid, cm and data tables
//! (msg, rma, tagged; their wrappers are in data.rs), its endpoint id and its address format. The
//! provider sees its own tables again whenever it closes or enables the endpoint.

use core::ffi::{c_int, c_void};
use core::mem::offset_of;
use core::sync::atomic::{AtomicU32, Ordering};

use sigmatop::event::{EndpointKind, Layer, Peer};

use super::abi::{
    FI_CLASS_AV, FI_CLASS_CQ, FI_ENABLE, FI_ENOSYS, FI_EP_MSG, FiInfo, FiOps, FiOpsCm, FiOpsMsg,
    FiOpsRma, FiOpsTagged, Fid, FidEp,
};
use super::addr::{
    ADDR_MAX, AV_BOOKS, AddrInfo, addr_info, announce, av_book, getname, note_own_addr, peer_of,
    read_addr,
};
use super::data;
use super::table::{Wrapped, copy_table, free_box, try_box, wrap_slot, zeroed_wrapped};
use crate::interpose::hook;

#[repr(C)]
pub(super) struct EpState {
    fid_ops: Wrapped<FiOps>,
    cm: Wrapped<FiOpsCm>,
    msg: Wrapped<FiOpsMsg>,
    rma: Wrapped<FiOpsRma>,
    tagged: Wrapped<FiOpsTagged>,
    id: u32,
    info: AddrInfo,
}

static NEXT_EP: AtomicU32 = AtomicU32::new(0);

/// # Safety
/// `ep` is NULL or a live fid_ep; `info` NULL or valid.
pub(super) unsafe fn wrap_ep(ep: *mut FidEp, info: *const FiInfo, dom: &AddrInfo) {
    if ep.is_null() {
        return;
    }
    // SAFETY: info is NULL or valid (caller).
    let ai = unsafe { addr_info(info, Some(dom)) };
    let mut peer = Peer::default();
    // SAFETY: info NULL or valid; its ep_attr and dest_addr NULL or valid.
    unsafe {
        if !info.is_null() {
            let i = &*info;
            let is_msg = !i.ep_attr.is_null() && (*i.ep_attr).ep_type == FI_EP_MSG;
            if is_msg && let Some(b) = read_addr(ai.addr_format, i.dest_addr, i.dest_addrlen) {
                peer = peer_of(ai.addr_format, &b);
            }
        }
    }
    let n = NEXT_EP.fetch_add(1, Ordering::Relaxed);
    let id = crate::runtime::registry::define(
        Layer::Libfabric,
        EndpointKind::FiEp,
        format!("ep#{n}"),
        ai.prov.clone(),
        peer,
    );
    let Some(p) = try_box(EpState {
        fid_ops: zeroed_wrapped(),
        cm: zeroed_wrapped(),
        msg: zeroed_wrapped(),
        rma: zeroed_wrapped(),
        tagged: zeroed_wrapped(),
        id,
        info: ai,
    }) else {
        return;
    };
    // SAFETY: p is ours until installed; ep is live.
    unsafe {
        let st = &mut *p;
        if copy_table(&mut st.fid_ops, (*ep).fid.ops, id) {
            let t = &mut st.fid_ops.table;
            wrap_slot(&mut t.close, ep_close);
            wrap_slot(&mut t.bind, ep_bind);
            wrap_slot(&mut t.control, ep_control);
        }
        if copy_table(&mut st.cm, (*ep).cm, id) {
            let t = &mut st.cm.table;
            wrap_slot(&mut t.getname, cm_getname);
            wrap_slot(&mut t.connect, cm_connect);
            wrap_slot(&mut t.accept, cm_accept);
        }
        install_data_tables(ep, st);
        if !st.fid_ops.orig.is_null() {
            (*ep).fid.ops = &mut st.fid_ops.table;
        } else {
            // Without a close hook the copy can never be freed: it is kept (a few hundred bytes).
        }
        if !st.cm.orig.is_null() {
            (*ep).cm = &mut st.cm.table;
        }
    }
    // SAFETY: ep is live and now wrapped; p is its state.
    unsafe { note_own_name(ep, &*p) };
}

/// Points ep->msg / rma / tagged at the state's copies (again, after a provider swapped tables).
///
/// # Safety
/// `ep` is live and `st` is its state.
unsafe fn install_data_tables(ep: *mut FidEp, st: &mut EpState) {
    let id = st.id;
    // SAFETY: ep is live; each table pointer is NULL, the provider's, or already our copy.
    unsafe {
        if !core::ptr::eq((*ep).msg, &st.msg.table) && copy_table(&mut st.msg, (*ep).msg, id) {
            data::wrap_msg(&mut st.msg.table);
            (*ep).msg = &mut st.msg.table;
        }
        if !core::ptr::eq((*ep).rma, &st.rma.table) && copy_table(&mut st.rma, (*ep).rma, id) {
            data::wrap_rma(&mut st.rma.table);
            (*ep).rma = &mut st.rma.table;
        }
        if !core::ptr::eq((*ep).tagged, &st.tagged.table)
            && copy_table(&mut st.tagged, (*ep).tagged, id)
        {
            data::wrap_tagged(&mut st.tagged.table);
            (*ep).tagged = &mut st.tagged.table;
        }
    }
}

/// The state of a wrapped endpoint, from its fid (whose ops point at `EpState::fid_ops`).
///
/// # Safety
/// `fid` is an endpoint wrapped by `wrap_ep` (only its own wrappers call this).
unsafe fn ep_state(fid: *mut Fid) -> *mut EpState {
    // SAFETY: fid_ops is the first field of the repr(C) EpState.
    unsafe { (*fid).ops as *mut EpState }
}

/// The state of an endpoint from its cm table (`ep->cm` points at `EpState::cm`).
///
/// # Safety
/// `ep`'s cm is our copy.
unsafe fn ep_state_from_cm(ep: *mut FidEp) -> *mut EpState {
    // SAFETY: cm is a field of EpState at a fixed offset.
    unsafe { ((*ep).cm as *mut u8).sub(offset_of!(EpState, cm)) as *mut EpState }
}

/// Asks the provider for the endpoint's own address and adds its hash to the identity.
///
/// # Safety
/// `ep` is live and `st` is its state.
unsafe fn note_own_name(ep: *mut FidEp, st: &EpState) {
    let getname = if st.cm.orig.is_null() {
        // SAFETY: ep is live; its cm is NULL or the provider's table (not ours: orig is NULL).
        unsafe {
            let cm = (*ep).cm;
            if cm.is_null() { None } else { (*cm).getname }
        }
    } else {
        // SAFETY: orig is the provider's cm table.
        unsafe { (*st.cm.orig).getname }
    };
    let Some(g) = getname else { return };
    let mut buf = [0u8; ADDR_MAX];
    let mut len = ADDR_MAX;
    // SAFETY: provider getname with a buffer of `len` bytes.
    let r = unsafe { g(&mut (*ep).fid, buf.as_mut_ptr() as *mut c_void, &mut len) };
    if r == 0 && len > 0 {
        note_own_addr(st.info.addr_format, &buf[..len.min(ADDR_MAX)]);
    }
}

/// Points every table pointer of `ep` that is one of `st`'s copies back at the provider's own
/// table (the data tables only, or all of them with `all`). A provider's close and enable paths
/// see their own pointers: verbs allocates each endpoint's `msg` table and `free`s
/// `ep->msg` when the endpoint closes (libfabric 1.17 `vrb_close_free_ep`), and writes through
/// `ep->msg` when it enables an XRC endpoint with a shared receive context.
///
/// # Safety
/// `ep` is live and `st` is its state.
unsafe fn restore_provider_tables(ep: *mut FidEp, st: *mut EpState, all: bool) {
    // SAFETY: ep and st are live (caller); each orig is the provider's table it replaced.
    unsafe {
        let st = &mut *st;
        if core::ptr::eq((*ep).msg, &st.msg.table) {
            (*ep).msg = st.msg.orig as *mut FiOpsMsg;
        }
        if core::ptr::eq((*ep).rma, &st.rma.table) {
            (*ep).rma = st.rma.orig as *mut FiOpsRma;
        }
        if core::ptr::eq((*ep).tagged, &st.tagged.table) {
            (*ep).tagged = st.tagged.orig as *mut FiOpsTagged;
        }
        if all {
            if core::ptr::eq((*ep).cm, &st.cm.table) {
                (*ep).cm = st.cm.orig as *mut FiOpsCm;
            }
            if core::ptr::eq((*ep).fid.ops, &st.fid_ops.table) {
                (*ep).fid.ops = st.fid_ops.orig as *mut FiOps;
            }
        }
    }
}

/// Undoes `restore_provider_tables(ep, st, true)` after a provider call that failed (the endpoint
/// stays open and traced). The data tables are copied afresh from what the provider has now.
///
/// # Safety
/// `ep` is live and `st` is its state.
unsafe fn reinstall_tables(ep: *mut FidEp, st: *mut EpState) {
    // SAFETY: ep and st are live (caller).
    unsafe {
        let st = &mut *st;
        if !st.cm.orig.is_null() && core::ptr::eq((*ep).cm, st.cm.orig) {
            (*ep).cm = &mut st.cm.table;
        }
        if core::ptr::eq((*ep).fid.ops, st.fid_ops.orig) {
            (*ep).fid.ops = &mut st.fid_ops.table;
        }
        install_data_tables(ep, st);
    }
}

unsafe extern "C" fn ep_close(fid: *mut Fid) -> c_int {
    // SAFETY: installed only in the fid_ops copy of an EpState.
    let st = unsafe { ep_state(fid) };
    // SAFETY: st is live until freed below.
    let Some(f) = (unsafe { (*(*st).fid_ops.orig).close }) else {
        return -FI_ENOSYS;
    };
    let ep = fid as *mut FidEp;
    // The provider closes (and may free) what the endpoint points at: give it its own tables.
    // SAFETY: the endpoint (fid at offset 0) and st are live.
    unsafe { restore_provider_tables(ep, st, true) };
    // SAFETY: the program's argument, unchanged.
    let r = unsafe { f(fid) };
    if r == 0 {
        hook::guarded((), || {
            // SAFETY: the endpoint is closed: nothing of the provider points at st any more.
            let id = unsafe { (*st).id };
            crate::runtime::registry::update(id, "closed", None);
            if let Ok(mut books) = AV_BOOKS.lock() {
                for b in books.iter_mut() {
                    b.eps.retain(|&e| e != id);
                }
            }
        });
        // SAFETY: as above; the program may not use a closed endpoint. Freed outside `guarded`
        // so that a panic there can never leave it half-done (free_box does not panic).
        unsafe { free_box(st) };
    } else {
        // SAFETY: the close failed: the endpoint is still live.
        unsafe { reinstall_tables(ep, st) };
    }
    r
}

unsafe extern "C" fn ep_bind(fid: *mut Fid, bfid: *mut Fid, flags: u64) -> c_int {
    // SAFETY: installed only in the fid_ops copy of an EpState, live while the endpoint is.
    let st = unsafe { &*ep_state(fid) };
    // SAFETY: the provider's table the copy was made from.
    let Some(f) = (unsafe { (*st.fid_ops.orig).bind }) else {
        return -FI_ENOSYS;
    };
    hook::after(
        None,
        // SAFETY: the program's arguments, unchanged.
        || unsafe { f(fid, bfid, flags) },
        |r| {
            // SAFETY: bfid is a live fid the provider accepted.
            if r == 0 && !bfid.is_null() && unsafe { (*bfid).fclass } == FI_CLASS_CQ {
                // SAFETY: a live completion queue.
                unsafe { super::cq_av::note_bind(bfid, st.id, flags) };
            }
            // SAFETY: as above.
            if r == 0 && !bfid.is_null() && unsafe { (*bfid).fclass } == FI_CLASS_AV {
                let id = st.id;
                let addrs = av_book(bfid as usize, |b| {
                    if !b.eps.contains(&id) {
                        b.eps.push(id);
                    }
                    b.addrs.clone()
                })
                .unwrap_or_default();
                for (a, h) in addrs {
                    announce(id, a, h);
                }
            }
        },
    )
}

unsafe extern "C" fn ep_control(fid: *mut Fid, command: c_int, arg: *mut c_void) -> c_int {
    // SAFETY: installed only in the fid_ops copy of an EpState.
    let st = unsafe { ep_state(fid) };
    // SAFETY: st is live while the endpoint is.
    let Some(f) = (unsafe { (*(*st).fid_ops.orig).control }) else {
        return -FI_ENOSYS;
    };
    let ep = fid as *mut FidEp;
    if command == FI_ENABLE {
        // A provider may pick or rewrite its data tables when it enables the endpoint (verbs
        // writes through ep->msg for XRC): let it see its own, then copy what it left.
        // SAFETY: the endpoint (fid at offset 0) and st are live.
        unsafe { restore_provider_tables(ep, st, false) };
    }
    // SAFETY: the program's arguments, unchanged.
    let r = unsafe { f(fid, command, arg) };
    if command == FI_ENABLE {
        // SAFETY: the endpoint is live (enabled or not); the copies come from its tables now.
        unsafe { install_data_tables(ep, &mut *st) };
        if r == 0 {
            // SAFETY: as above.
            hook::guarded((), || unsafe { note_own_name(ep, &*st) });
        }
    }
    r
}

unsafe extern "C" fn cm_getname(fid: *mut Fid, addr: *mut c_void, addrlen: *mut usize) -> c_int {
    // SAFETY: installed only in the cm copy of an EpState (ep->cm points at it), live while the
    // endpoint is.
    let st = unsafe { &*ep_state_from_cm(fid as *mut FidEp) };
    // SAFETY: the provider's table the copy was made from.
    let Some(f) = (unsafe { (*st.cm.orig).getname }) else {
        return -FI_ENOSYS;
    };
    // SAFETY: the program's arguments for the provider's getname of this endpoint.
    unsafe { getname(f, fid, addr, addrlen, st.info.addr_format) }
}

unsafe extern "C" fn cm_connect(
    ep: *mut FidEp,
    addr: *const c_void,
    param: *const c_void,
    paramlen: usize,
) -> c_int {
    // SAFETY: installed only in the cm copy of an EpState.
    let st = unsafe { ep_state_from_cm(ep) };
    // SAFETY: st is live.
    let Some(f) = (unsafe { (*(*st).cm.orig).connect }) else {
        return -FI_ENOSYS;
    };
    hook::after(
        None,
        // SAFETY: the program's arguments, unchanged.
        || unsafe { f(ep, addr, param, paramlen) },
        |r| {
            if r != 0 {
                return;
            }
            // SAFETY: addr is the peer address of the endpoint's format; st and ep are live.
            unsafe {
                let fmt = (*st).info.addr_format;
                if let Some(b) = read_addr(fmt, addr, (*st).info.addrlen) {
                    crate::runtime::registry::update((*st).id, "connect", Some(peer_of(fmt, &b)));
                }
                note_own_name(ep, &*st);
            }
        },
    )
}

unsafe extern "C" fn cm_accept(ep: *mut FidEp, param: *const c_void, paramlen: usize) -> c_int {
    // SAFETY: installed only in the cm copy of an EpState.
    let st = unsafe { ep_state_from_cm(ep) };
    // SAFETY: st is live.
    let Some(f) = (unsafe { (*(*st).cm.orig).accept }) else {
        return -FI_ENOSYS;
    };
    hook::after(
        None,
        // SAFETY: the program's arguments, unchanged.
        || unsafe { f(ep, param, paramlen) },
        |r| {
            if r == 0 {
                // SAFETY: ep and its state are live.
                unsafe { note_own_name(ep, &*st) }
            }
        },
    )
}
