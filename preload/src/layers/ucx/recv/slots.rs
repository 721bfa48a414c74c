//! sigmatop's completion callbacks for UCX receives: a slot per (program callback, endpoint,
//! op), a compile-time trampoline per slot that counts the arrival and calls the program's
//! callback, and the copy of the program's parameters that carries sigmatop's callback.

use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use sigmatop::event::{Layer, Op};

use super::super::abi::{
    OP_ATTR_FIELD_CALLBACK, OP_ATTR_FIELD_RECV_INFO, Ptr, RequestParam, Status, TagRecvInfo,
    UCS_ERR_CANCELED, UCS_OK,
};
use crate::interpose::hook;

/// A tag receive's completion callback (`ucp_tag_recv_nbx_callback_t`).
pub(super) type TagRecvCb = unsafe extern "C" fn(Ptr, Status, *const TagRecvInfo, Ptr);
/// A stream receive's completion callback (`ucp_stream_recv_nbx_callback_t`).
pub(super) type LenRecvCb = unsafe extern "C" fn(Ptr, Status, usize, Ptr);

/// Receives whose completion sigmatop could not see (every callback slot taken, no parameters):
/// counted as posted only.
pub static ARRIVALS_UNSEEN: AtomicU64 = AtomicU64::new(0);

/// Callback slots per kind (tag; stream): distinct (program callback, endpoint, op) triples.
const SLOTS: usize = 128;

/// What one of sigmatop's completion callbacks stands for.
struct CbSlot {
    /// The program's callback (0: none; sigmatop's only counts).
    cb: AtomicUsize,
    ep: AtomicU32,
    op: AtomicU8,
    ready: AtomicBool,
}

/// The slots of one callback kind; slots are taken for good, never freed.
struct CbTable {
    slots: [CbSlot; SLOTS],
    taken: AtomicUsize,
}

impl CbTable {
    const fn new() -> CbTable {
        CbTable {
            slots: [const {
                CbSlot {
                    cb: AtomicUsize::new(0),
                    ep: AtomicU32::new(0),
                    op: AtomicU8::new(0),
                    ready: AtomicBool::new(false),
                }
            }; SLOTS],
            taken: AtomicUsize::new(0),
        }
    }

    /// The slot of (`cb`, `ep`, `op`), taking a free one on first sight; None when all are taken.
    /// Lock-free: two threads that race for the same triple may each take a slot, and both
    /// count the same way.
    #[inline]
    fn slot(&self, cb: usize, ep: u32, op: Op) -> Option<usize> {
        let n = self.taken.load(Ordering::Acquire).min(SLOTS);
        for (i, s) in self.slots[..n].iter().enumerate() {
            if s.ready.load(Ordering::Acquire)
                && s.cb.load(Ordering::Relaxed) == cb
                && s.ep.load(Ordering::Relaxed) == ep
                && s.op.load(Ordering::Relaxed) == op as u8
            {
                return Some(i);
            }
        }
        self.take(cb, ep, op)
    }

    #[cold]
    fn take(&self, cb: usize, ep: u32, op: Op) -> Option<usize> {
        if self.taken.load(Ordering::Relaxed) >= SLOTS {
            return None;
        }
        let i = self.taken.fetch_add(1, Ordering::AcqRel);
        let s = self.slots.get(i)?;
        s.cb.store(cb, Ordering::Relaxed);
        s.ep.store(ep, Ordering::Relaxed);
        s.op.store(op as u8, Ordering::Relaxed);
        s.ready.store(true, Ordering::Release);
        Some(i)
    }
}

static TAG: CbTable = CbTable::new();
static LEN: CbTable = CbTable::new();

/// sigmatop's tag-receive callbacks, one per slot of `TAG`.
static TAG_CBS: [TagRecvCb; SLOTS] = trampolines!(tag_done as TagRecvCb;
    0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33
    34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63 64
    65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95
    96 97 98 99 100 101 102 103 104 105 106 107 108 109 110 111 112 113 114 115 116 117 118 119
    120 121 122 123 124 125 126 127
);
/// sigmatop's length callbacks (stream receives), one per slot of `LEN`.
static LEN_CBS: [LenRecvCb; SLOTS] = trampolines!(len_done as LenRecvCb;
    0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31 32 33
    34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59 60 61 62 63 64
    65 66 67 68 69 70 71 72 73 74 75 76 77 78 79 80 81 82 83 84 85 86 87 88 89 90 91 92 93 94 95
    96 97 98 99 100 101 102 103 104 105 106 107 108 109 110 111 112 113 114 115 116 117 118 119
    120 121 122 123 124 125 126 127
);

/// Counts a receive that completed with `status`: its bytes on `UCS_OK`, a failed receive
/// otherwise, nothing when it was cancelled (`ucp_request_cancel`: no message arrived and
/// nothing failed; its buffer was counted as posted). Counted whatever hook runs on this thread
/// (the callback may run inside one).
#[inline(always)]
fn count_arrival(s: &CbSlot, status: Status, len: u64) {
    if !crate::runtime::config::layer_enabled(Layer::Ucx) || status == UCS_ERR_CANCELED {
        return;
    }
    hook::guarded((), || {
        if let Some(ts) = crate::runtime::thread::current() {
            let op = Op::from_u8(s.op.load(Ordering::Relaxed)).unwrap_or(Op::UcxTagRecv);
            ts.arrived(s.ep.load(Ordering::Relaxed), op, len, status == UCS_OK);
        }
    });
}

/// sigmatop's tag-receive callback of slot `I`: counts, then calls the program's.
unsafe extern "C" fn tag_done<const I: usize>(
    req: Ptr,
    status: Status,
    info: *const TagRecvInfo,
    user_data: Ptr,
) {
    // SAFETY: UCX's arguments, forwarded.
    unsafe { tag_complete(&TAG.slots[I], req, status, info, user_data) }
}

/// # Safety
/// UCX's callback arguments: `info` NULL or valid.
#[inline(never)]
unsafe fn tag_complete(s: &CbSlot, req: Ptr, status: Status, info: *const TagRecvInfo, ud: Ptr) {
    let len = if info.is_null() {
        0
    } else {
        // SAFETY: UCX passes the receive's info (valid during the call).
        unsafe { (*info).length }
    };
    count_arrival(s, status, len as u64);
    let cb = s.cb.load(Ordering::Relaxed);
    if cb != 0 {
        // SAFETY: the program's callback of this kind, with UCX's arguments (a legacy
        // three-argument callback ignores `ud`, as it does when UCX calls it itself).
        unsafe { core::mem::transmute::<usize, TagRecvCb>(cb)(req, status, info, ud) }
    }
}

/// sigmatop's stream-receive callback of slot `I`.
unsafe extern "C" fn len_done<const I: usize>(req: Ptr, status: Status, len: usize, ud: Ptr) {
    let s = &LEN.slots[I];
    count_arrival(s, status, len as u64);
    let cb = s.cb.load(Ordering::Relaxed);
    if cb != 0 {
        // SAFETY: the program's callback of this kind, with UCX's arguments.
        unsafe { core::mem::transmute::<usize, LenRecvCb>(cb)(req, status, len, ud) }
    }
}

/// The callback of a tag receive on `ep` whose program callback is `cb` (0: none).
pub(super) fn tag_cb(cb: usize, ep: u32, op: Op) -> Option<TagRecvCb> {
    let i = TAG.slot(cb, ep, op);
    i.map(|i| TAG_CBS[i])
}

/// The callback of a stream receive on `ep` whose program callback is `cb` (0: none).
pub(super) fn len_cb(cb: usize, ep: u32, op: Op) -> Option<LenRecvCb> {
    LEN.slot(cb, ep, op).map(|i| LEN_CBS[i])
}

#[cold]
pub(super) fn unseen() {
    ARRIVALS_UNSEEN.fetch_add(1, Ordering::Relaxed);
}

/// Writes into `out` a copy of the program's parameters with sigmatop's completion callback
/// (and, for a tag receive without one, sigmatop's receive info); false when the completion
/// cannot be seen (no parameters, or no callback slot left), `out` then unused. The copy is
/// written where the caller keeps it, not returned: returning 72 bytes by value cost two more
/// copies of them on every receive.
///
/// # Safety
/// `param` is NULL or the program's valid `ucp_request_param_t`; `info` is writable.
#[inline(always)]
pub(super) unsafe fn with_callback(
    param: *const RequestParam,
    cb: impl FnOnce(usize) -> Option<Ptr>,
    info: Option<*mut TagRecvInfo>,
    out: &mut MaybeUninit<RequestParam>,
) -> bool {
    if param.is_null() {
        return false;
    }
    let q = out.as_mut_ptr();
    // SAFETY: the program's parameters (non-NULL, valid per the caller); `q` is writable.
    unsafe {
        let mask = (*param).op_attr_mask;
        let theirs = if mask & OP_ATTR_FIELD_CALLBACK != 0 {
            (*param).cb as usize
        } else {
            0
        };
        let Some(ours) = cb(theirs) else {
            return false;
        };
        // A byte copy of the program's 72 bytes (fields it did not set are never read as
        // values); then only fields sigmatop sets or the mask names are touched.
        core::ptr::copy_nonoverlapping(param, q, 1);
        core::ptr::addr_of_mut!((*q).cb).write(ours);
        let mut m = mask | OP_ATTR_FIELD_CALLBACK;
        if let Some(info) = info
            && mask & OP_ATTR_FIELD_RECV_INFO == 0
        {
            core::ptr::addr_of_mut!((*q).recv_info).write(info as Ptr);
            m |= OP_ATTR_FIELD_RECV_INFO;
        }
        core::ptr::addr_of_mut!((*q).op_attr_mask).write(m);
    }
    true
}

/// The receive info an immediate completion of `param` (or of sigmatop's copy) was written to.
///
/// # Safety
/// As `with_callback`.
pub(super) unsafe fn info_of(
    param: *const RequestParam,
    ours: *mut TagRecvInfo,
) -> *const TagRecvInfo {
    // SAFETY: the mask and, when it names it, the program's recv_info pointer.
    unsafe {
        if !param.is_null() && (*param).op_attr_mask & OP_ATTR_FIELD_RECV_INFO != 0 {
            (*param).recv_info as *const TagRecvInfo
        } else {
            ours
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_per_callback_endpoint_and_op_until_none_is_left() {
        let t = CbTable::new();
        assert_eq!(t.slot(0x1000, 1, Op::UcxTagRecv), Some(0));
        assert_eq!(t.slot(0x1000, 1, Op::UcxTagRecv), Some(0));
        assert_eq!(t.slot(0x1000, 2, Op::UcxTagRecv), Some(1));
        assert_eq!(t.slot(0, 1, Op::UcxTagRecv), Some(2));
        assert_eq!(t.slot(0x1000, 1, Op::UcxStreamRecv), Some(3));
        for i in 4..SLOTS {
            assert_eq!(t.slot(0x2000, i as u32, Op::UcxTagRecv), Some(i));
        }
        assert_eq!(t.slot(0x3000, 1, Op::UcxTagRecv), None);
        assert_eq!(t.slot(0x1000, 2, Op::UcxTagRecv), Some(1));
    }

    #[test]
    fn each_trampoline_stands_for_its_slot() {
        let mut seen = std::collections::HashSet::new();
        for f in TAG_CBS
            .iter()
            .map(|f| *f as usize)
            .chain(LEN_CBS.iter().map(|f| *f as usize))
        {
            assert!(seen.insert(f), "two slots share a trampoline");
        }
    }
}
