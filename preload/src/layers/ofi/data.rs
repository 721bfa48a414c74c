//! The libfabric data path: the wrappers sigmatop puts into each endpoint's copies of the msg,
//! rma and tagged tables. Each is a trampoline into [`op`].
//!
//! Event fields: `bytes` = payload (`len`, or the sum of the iov lengths, `count` entries);
//! `addr` = remote RMA address (rma), tag (tagged), the destination / source `fi_addr` (msg);
//! `aux` = the `fi_addr` the call names, saturated at 0xffff (0xffff also for FI_ADDR_UNSPEC).

use core::ffi::c_void;

use sigmatop::event::{Layer, Op, flags};

use super::abi::{
    Buf, Ctx, Desc, Descs, Ep, FI_ENOSYS, FI_INJECT, FiMsg, FiMsgRma, FiMsgTagged, FiOpsMsg,
    FiOpsRma, FiOpsTagged, IoVec, Iov,
};
use super::table::{Wrapped, wrap_slot};
use crate::interpose::hook::{self, Guard};
use crate::runtime::thread::{Detail, Outcome};

const ENOSYS: isize = -(FI_ENOSYS as isize);
const INL: u8 = flags::INLINE;

/// The body of every data-path wrapper: the provider's call as the outermost sigmatop hook,
/// recorded on the endpoint whose table copy `w` is. `seen` reads the payload bytes and the
/// event's fields from the program's arguments. A call the provider refused (a negative result:
/// `-FI_EAGAIN`...) is a refusal, not an operation; a receive the provider took is a posted
/// buffer (its completion, read from the completion queue, is the receive: cq_av.rs).
#[inline(always)]
fn op<T>(
    w: &Wrapped<T>,
    which: Op,
    call_real: impl FnOnce() -> isize,
    seen: impl FnOnce() -> (u64, Detail),
) -> isize {
    hook::around(Guard::Outermost(Layer::Libfabric), call_real, |ts, r| {
        let (bytes, detail) = seen();
        if r < 0 {
            ts.record(w.id, which, 0, Outcome::Refused, || Some(detail))
        } else if which.is_receive() {
            ts.record(w.id, which, bytes, Outcome::Posted, || Some(detail))
        } else {
            ts.record(w.id, which, bytes, Outcome::Ok, || Some(detail))
        }
    })
}

/// The event fields of a call: `addr`, the `fi_addr` it names (in aux), flags.
#[inline(always)]
fn to(addr: u64, fi_addr: u64, flags: u8) -> Detail {
    Detail {
        addr,
        flags,
        aux: if fi_addr >= 0xffff {
            0xffff
        } else {
            fi_addr as u32
        },
    }
}

#[inline(always)]
fn inj(f: u64) -> u8 {
    if f & FI_INJECT != 0 { INL } else { 0 }
}

/// Sum of `count` iov lengths.
///
/// # Safety
/// `iov` is NULL or points at `count` iovecs (the program passed it to the provider).
#[inline(always)]
unsafe fn iov_bytes(iov: *const IoVec, count: usize) -> u64 {
    if iov.is_null() {
        return 0;
    }
    let mut n = 0u64;
    for i in 0..count {
        // SAFETY: i < count (caller).
        n = n.wrapping_add(unsafe { (*iov.add(i)).len } as u64);
    }
    n
}

/// First remote address of an RMA message.
///
/// # Safety
/// `m` is a valid fi_msg_rma.
unsafe fn rma_addr(m: &FiMsgRma) -> u64 {
    if m.rma_iov.is_null() || m.rma_iov_count == 0 {
        0
    } else {
        // SAFETY: at least one rma_iov (count checked).
        unsafe { (*m.rma_iov).addr }
    }
}

/// Puts the msg wrappers into an endpoint's copy of its msg table.
pub(super) fn wrap_msg(t: &mut FiOpsMsg) {
    wrap_slot(&mut t.recv, msg_recv);
    wrap_slot(&mut t.recvv, msg_recvv);
    wrap_slot(&mut t.recvmsg, msg_recvmsg);
    wrap_slot(&mut t.send, msg_send);
    wrap_slot(&mut t.sendv, msg_sendv);
    wrap_slot(&mut t.sendmsg, msg_sendmsg);
    wrap_slot(&mut t.inject, msg_inject);
    wrap_slot(&mut t.senddata, msg_senddata);
    wrap_slot(&mut t.injectdata, msg_injectdata);
}

/// Puts the rma wrappers into an endpoint's copy of its rma table.
pub(super) fn wrap_rma(t: &mut FiOpsRma) {
    wrap_slot(&mut t.read, rma_read);
    wrap_slot(&mut t.readv, rma_readv);
    wrap_slot(&mut t.readmsg, rma_readmsg);
    wrap_slot(&mut t.write, rma_write);
    wrap_slot(&mut t.writev, rma_writev);
    wrap_slot(&mut t.writemsg, rma_writemsg);
    wrap_slot(&mut t.inject, rma_inject);
    wrap_slot(&mut t.writedata, rma_writedata);
    wrap_slot(&mut t.injectdata, rma_injectdata);
}

/// Puts the tagged wrappers into an endpoint's copy of its tagged table.
pub(super) fn wrap_tagged(t: &mut FiOpsTagged) {
    wrap_slot(&mut t.recv, tag_recv);
    wrap_slot(&mut t.recvv, tag_recvv);
    wrap_slot(&mut t.recvmsg, tag_recvmsg);
    wrap_slot(&mut t.send, tag_send);
    wrap_slot(&mut t.sendv, tag_sendv);
    wrap_slot(&mut t.sendmsg, tag_sendmsg);
    wrap_slot(&mut t.inject, tag_inject);
    wrap_slot(&mut t.senddata, tag_senddata);
    wrap_slot(&mut t.injectdata, tag_injectdata);
}

unsafe extern "C" fn msg_recv(
    ep: Ep,
    buf: *mut c_void,
    len: usize,
    desc: Desc,
    src: u64,
    ctx: Ctx,
) -> isize {
    // SAFETY: installed only in the copy `ep->msg` points at (`wrap_msg`).
    let (w, provider) = unsafe { Wrapped::of((*ep).msg) };
    let Some(f) = provider.recv else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiRecv,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, buf, len, desc, src, ctx) },
        || (len as u64, to(src, src, 0)),
    )
}

unsafe extern "C" fn msg_recvv(
    ep: Ep,
    iov: Iov,
    desc: Descs,
    count: usize,
    src: u64,
    ctx: Ctx,
) -> isize {
    // SAFETY: installed only in the copy `ep->msg` points at (`wrap_msg`).
    let (w, provider) = unsafe { Wrapped::of((*ep).msg) };
    let Some(f) = provider.recvv else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiRecv,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, iov, desc, count, src, ctx) },
        || {
            // SAFETY: the program's iovs, which the provider just read.
            unsafe { (iov_bytes(iov, count), to(src, src, 0)) }
        },
    )
}

unsafe extern "C" fn msg_recvmsg(ep: Ep, msg: *const FiMsg, fl: u64) -> isize {
    // SAFETY: installed only in the copy `ep->msg` points at (`wrap_msg`).
    let (w, provider) = unsafe { Wrapped::of((*ep).msg) };
    let Some(f) = provider.recvmsg else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiRecv,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, msg, fl) },
        || {
            // SAFETY: the program's message, which the provider just read.
            let m = unsafe { &*msg };
            // SAFETY: its iovs (and rma iovs), which the provider just read.
            unsafe { (iov_bytes(m.msg_iov, m.iov_count), to(m.addr, m.addr, 0)) }
        },
    )
}

unsafe extern "C" fn msg_send(
    ep: Ep,
    buf: Buf,
    len: usize,
    desc: Desc,
    dest: u64,
    ctx: Ctx,
) -> isize {
    // SAFETY: installed only in the copy `ep->msg` points at (`wrap_msg`).
    let (w, provider) = unsafe { Wrapped::of((*ep).msg) };
    let Some(f) = provider.send else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiSend,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, buf, len, desc, dest, ctx) },
        || (len as u64, to(dest, dest, 0)),
    )
}

unsafe extern "C" fn msg_sendv(
    ep: Ep,
    iov: Iov,
    desc: Descs,
    count: usize,
    dest: u64,
    ctx: Ctx,
) -> isize {
    // SAFETY: installed only in the copy `ep->msg` points at (`wrap_msg`).
    let (w, provider) = unsafe { Wrapped::of((*ep).msg) };
    let Some(f) = provider.sendv else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiSend,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, iov, desc, count, dest, ctx) },
        || {
            // SAFETY: the program's iovs, which the provider just read.
            unsafe { (iov_bytes(iov, count), to(dest, dest, 0)) }
        },
    )
}

unsafe extern "C" fn msg_sendmsg(ep: Ep, msg: *const FiMsg, fl: u64) -> isize {
    // SAFETY: installed only in the copy `ep->msg` points at (`wrap_msg`).
    let (w, provider) = unsafe { Wrapped::of((*ep).msg) };
    let Some(f) = provider.sendmsg else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiSend,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, msg, fl) },
        || {
            // SAFETY: the program's message, which the provider just read.
            let m = unsafe { &*msg };
            // SAFETY: its iovs (and rma iovs), which the provider just read.
            unsafe {
                (
                    iov_bytes(m.msg_iov, m.iov_count),
                    to(m.addr, m.addr, inj(fl)),
                )
            }
        },
    )
}

unsafe extern "C" fn msg_inject(ep: Ep, buf: Buf, len: usize, dest: u64) -> isize {
    // SAFETY: installed only in the copy `ep->msg` points at (`wrap_msg`).
    let (w, provider) = unsafe { Wrapped::of((*ep).msg) };
    let Some(f) = provider.inject else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiSend,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, buf, len, dest) },
        || (len as u64, to(dest, dest, INL)),
    )
}

unsafe extern "C" fn msg_senddata(
    ep: Ep,
    buf: Buf,
    len: usize,
    desc: Desc,
    data: u64,
    dest: u64,
    ctx: Ctx,
) -> isize {
    // SAFETY: installed only in the copy `ep->msg` points at (`wrap_msg`).
    let (w, provider) = unsafe { Wrapped::of((*ep).msg) };
    let Some(f) = provider.senddata else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiSend,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, buf, len, desc, data, dest, ctx) },
        || (len as u64, to(dest, dest, 0)),
    )
}

unsafe extern "C" fn msg_injectdata(ep: Ep, buf: Buf, len: usize, data: u64, dest: u64) -> isize {
    // SAFETY: installed only in the copy `ep->msg` points at (`wrap_msg`).
    let (w, provider) = unsafe { Wrapped::of((*ep).msg) };
    let Some(f) = provider.injectdata else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiSend,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, buf, len, data, dest) },
        || (len as u64, to(dest, dest, INL)),
    )
}

unsafe extern "C" fn rma_read(
    ep: Ep,
    buf: *mut c_void,
    len: usize,
    desc: Desc,
    src: u64,
    raddr: u64,
    key: u64,
    ctx: Ctx,
) -> isize {
    // SAFETY: installed only in the copy `ep->rma` points at (`wrap_rma`).
    let (w, provider) = unsafe { Wrapped::of((*ep).rma) };
    let Some(f) = provider.read else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiRead,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, buf, len, desc, src, raddr, key, ctx) },
        || (len as u64, to(raddr, src, 0)),
    )
}

unsafe extern "C" fn rma_readv(
    ep: Ep,
    iov: Iov,
    desc: Descs,
    count: usize,
    src: u64,
    raddr: u64,
    key: u64,
    ctx: Ctx,
) -> isize {
    // SAFETY: installed only in the copy `ep->rma` points at (`wrap_rma`).
    let (w, provider) = unsafe { Wrapped::of((*ep).rma) };
    let Some(f) = provider.readv else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiRead,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, iov, desc, count, src, raddr, key, ctx) },
        || {
            // SAFETY: the program's iovs, which the provider just read.
            unsafe { (iov_bytes(iov, count), to(raddr, src, 0)) }
        },
    )
}

unsafe extern "C" fn rma_readmsg(ep: Ep, msg: *const FiMsgRma, fl: u64) -> isize {
    // SAFETY: installed only in the copy `ep->rma` points at (`wrap_rma`).
    let (w, provider) = unsafe { Wrapped::of((*ep).rma) };
    let Some(f) = provider.readmsg else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiRead,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, msg, fl) },
        || {
            // SAFETY: the program's message, which the provider just read.
            let m = unsafe { &*msg };
            // SAFETY: its iovs (and rma iovs), which the provider just read.
            unsafe {
                (
                    iov_bytes(m.msg_iov, m.iov_count),
                    to(rma_addr(m), m.addr, inj(fl)),
                )
            }
        },
    )
}

unsafe extern "C" fn rma_write(
    ep: Ep,
    buf: Buf,
    len: usize,
    desc: Desc,
    dest: u64,
    raddr: u64,
    key: u64,
    ctx: Ctx,
) -> isize {
    // SAFETY: installed only in the copy `ep->rma` points at (`wrap_rma`).
    let (w, provider) = unsafe { Wrapped::of((*ep).rma) };
    let Some(f) = provider.write else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiWrite,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, buf, len, desc, dest, raddr, key, ctx) },
        || (len as u64, to(raddr, dest, 0)),
    )
}

unsafe extern "C" fn rma_writev(
    ep: Ep,
    iov: Iov,
    desc: Descs,
    count: usize,
    dest: u64,
    raddr: u64,
    key: u64,
    ctx: Ctx,
) -> isize {
    // SAFETY: installed only in the copy `ep->rma` points at (`wrap_rma`).
    let (w, provider) = unsafe { Wrapped::of((*ep).rma) };
    let Some(f) = provider.writev else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiWrite,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, iov, desc, count, dest, raddr, key, ctx) },
        || {
            // SAFETY: the program's iovs, which the provider just read.
            unsafe { (iov_bytes(iov, count), to(raddr, dest, 0)) }
        },
    )
}

unsafe extern "C" fn rma_writemsg(ep: Ep, msg: *const FiMsgRma, fl: u64) -> isize {
    // SAFETY: installed only in the copy `ep->rma` points at (`wrap_rma`).
    let (w, provider) = unsafe { Wrapped::of((*ep).rma) };
    let Some(f) = provider.writemsg else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiWrite,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, msg, fl) },
        || {
            // SAFETY: the program's message, which the provider just read.
            let m = unsafe { &*msg };
            // SAFETY: its iovs (and rma iovs), which the provider just read.
            unsafe {
                (
                    iov_bytes(m.msg_iov, m.iov_count),
                    to(rma_addr(m), m.addr, inj(fl)),
                )
            }
        },
    )
}

unsafe extern "C" fn rma_inject(
    ep: Ep,
    buf: Buf,
    len: usize,
    dest: u64,
    raddr: u64,
    key: u64,
) -> isize {
    // SAFETY: installed only in the copy `ep->rma` points at (`wrap_rma`).
    let (w, provider) = unsafe { Wrapped::of((*ep).rma) };
    let Some(f) = provider.inject else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiWrite,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, buf, len, dest, raddr, key) },
        || (len as u64, to(raddr, dest, INL)),
    )
}

unsafe extern "C" fn rma_writedata(
    ep: Ep,
    buf: Buf,
    len: usize,
    desc: Desc,
    data: u64,
    dest: u64,
    raddr: u64,
    key: u64,
    ctx: Ctx,
) -> isize {
    // SAFETY: installed only in the copy `ep->rma` points at (`wrap_rma`).
    let (w, provider) = unsafe { Wrapped::of((*ep).rma) };
    let Some(f) = provider.writedata else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiWrite,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, buf, len, desc, data, dest, raddr, key, ctx) },
        || (len as u64, to(raddr, dest, 0)),
    )
}

unsafe extern "C" fn rma_injectdata(
    ep: Ep,
    buf: Buf,
    len: usize,
    data: u64,
    dest: u64,
    raddr: u64,
    key: u64,
) -> isize {
    // SAFETY: installed only in the copy `ep->rma` points at (`wrap_rma`).
    let (w, provider) = unsafe { Wrapped::of((*ep).rma) };
    let Some(f) = provider.injectdata else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiWrite,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, buf, len, data, dest, raddr, key) },
        || (len as u64, to(raddr, dest, INL)),
    )
}

unsafe extern "C" fn tag_recv(
    ep: Ep,
    buf: *mut c_void,
    len: usize,
    desc: Desc,
    src: u64,
    tag: u64,
    ignore: u64,
    ctx: Ctx,
) -> isize {
    // SAFETY: installed only in the copy `ep->tagged` points at (`wrap_tagged`).
    let (w, provider) = unsafe { Wrapped::of((*ep).tagged) };
    let Some(f) = provider.recv else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiTRecv,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, buf, len, desc, src, tag, ignore, ctx) },
        || (len as u64, to(tag, src, 0)),
    )
}

unsafe extern "C" fn tag_recvv(
    ep: Ep,
    iov: Iov,
    desc: Descs,
    count: usize,
    src: u64,
    tag: u64,
    ignore: u64,
    ctx: Ctx,
) -> isize {
    // SAFETY: installed only in the copy `ep->tagged` points at (`wrap_tagged`).
    let (w, provider) = unsafe { Wrapped::of((*ep).tagged) };
    let Some(f) = provider.recvv else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiTRecv,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, iov, desc, count, src, tag, ignore, ctx) },
        || {
            // SAFETY: the program's iovs, which the provider just read.
            unsafe { (iov_bytes(iov, count), to(tag, src, 0)) }
        },
    )
}

unsafe extern "C" fn tag_recvmsg(ep: Ep, msg: *const FiMsgTagged, fl: u64) -> isize {
    // SAFETY: installed only in the copy `ep->tagged` points at (`wrap_tagged`).
    let (w, provider) = unsafe { Wrapped::of((*ep).tagged) };
    let Some(f) = provider.recvmsg else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiTRecv,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, msg, fl) },
        || {
            // SAFETY: the program's message, which the provider just read.
            let m = unsafe { &*msg };
            // SAFETY: its iovs (and rma iovs), which the provider just read.
            unsafe { (iov_bytes(m.msg_iov, m.iov_count), to(m.tag, m.addr, 0)) }
        },
    )
}

unsafe extern "C" fn tag_send(
    ep: Ep,
    buf: Buf,
    len: usize,
    desc: Desc,
    dest: u64,
    tag: u64,
    ctx: Ctx,
) -> isize {
    // SAFETY: installed only in the copy `ep->tagged` points at (`wrap_tagged`).
    let (w, provider) = unsafe { Wrapped::of((*ep).tagged) };
    let Some(f) = provider.send else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiTSend,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, buf, len, desc, dest, tag, ctx) },
        || (len as u64, to(tag, dest, 0)),
    )
}

unsafe extern "C" fn tag_sendv(
    ep: Ep,
    iov: Iov,
    desc: Descs,
    count: usize,
    dest: u64,
    tag: u64,
    ctx: Ctx,
) -> isize {
    // SAFETY: installed only in the copy `ep->tagged` points at (`wrap_tagged`).
    let (w, provider) = unsafe { Wrapped::of((*ep).tagged) };
    let Some(f) = provider.sendv else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiTSend,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, iov, desc, count, dest, tag, ctx) },
        || {
            // SAFETY: the program's iovs, which the provider just read.
            unsafe { (iov_bytes(iov, count), to(tag, dest, 0)) }
        },
    )
}

unsafe extern "C" fn tag_sendmsg(ep: Ep, msg: *const FiMsgTagged, fl: u64) -> isize {
    // SAFETY: installed only in the copy `ep->tagged` points at (`wrap_tagged`).
    let (w, provider) = unsafe { Wrapped::of((*ep).tagged) };
    let Some(f) = provider.sendmsg else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiTSend,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, msg, fl) },
        || {
            // SAFETY: the program's message, which the provider just read.
            let m = unsafe { &*msg };
            // SAFETY: its iovs (and rma iovs), which the provider just read.
            unsafe {
                (
                    iov_bytes(m.msg_iov, m.iov_count),
                    to(m.tag, m.addr, inj(fl)),
                )
            }
        },
    )
}

unsafe extern "C" fn tag_inject(ep: Ep, buf: Buf, len: usize, dest: u64, tag: u64) -> isize {
    // SAFETY: installed only in the copy `ep->tagged` points at (`wrap_tagged`).
    let (w, provider) = unsafe { Wrapped::of((*ep).tagged) };
    let Some(f) = provider.inject else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiTSend,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, buf, len, dest, tag) },
        || (len as u64, to(tag, dest, INL)),
    )
}

unsafe extern "C" fn tag_senddata(
    ep: Ep,
    buf: Buf,
    len: usize,
    desc: Desc,
    data: u64,
    dest: u64,
    tag: u64,
    ctx: Ctx,
) -> isize {
    // SAFETY: installed only in the copy `ep->tagged` points at (`wrap_tagged`).
    let (w, provider) = unsafe { Wrapped::of((*ep).tagged) };
    let Some(f) = provider.senddata else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiTSend,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, buf, len, desc, data, dest, tag, ctx) },
        || (len as u64, to(tag, dest, 0)),
    )
}

unsafe extern "C" fn tag_injectdata(
    ep: Ep,
    buf: Buf,
    len: usize,
    data: u64,
    dest: u64,
    tag: u64,
) -> isize {
    // SAFETY: installed only in the copy `ep->tagged` points at (`wrap_tagged`).
    let (w, provider) = unsafe { Wrapped::of((*ep).tagged) };
    let Some(f) = provider.injectdata else {
        return ENOSYS;
    };
    op(
        w,
        Op::OfiTSend,
        // SAFETY: the provider's function with the program's arguments.
        || unsafe { f(ep, buf, len, data, dest, tag) },
        || (len as u64, to(tag, dest, INL)),
    )
}
