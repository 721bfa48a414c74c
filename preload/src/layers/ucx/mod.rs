//! UCX layer: interposes the exported UCP entry points of libucp (UCX 1.13 API).
//!
//! Data path ([`nbx`], [`legacy`]): every `ucp_*_nbx` operation plus the legacy `_nb` / `_nbr` / `_nbi`
//! forms and the blocking flushes is counted once, on the endpoint (`ucp_ep_h`) or worker
//! (`ucp_worker_h`) it names. The legacy forms call the `_nbx` ones through libucp's PLT, i.e.
//! through our hooks; the per-thread guard (`Guard::Outermost`) makes the inner call pass through
//! untraced, so each application call is counted exactly once.
//!
//! Bytes per call:
//! - contiguous datatypes: count × element size (`param->datatype` when
//!   `UCP_OP_ATTR_FIELD_DATATYPE` is set, else `ucp_dt_make_contig(1)`; the legacy forms pass the
//!   datatype explicitly);
//! - `UCP_DATATYPE_IOV`: the sum of the iov lengths (walking at most `IOV_WALK_MAX` entries);
//! - generic (and strided) datatypes: `count`, the only size the call states;
//! - receives ([`recv`]): the posted buffer's size is counted as *posted*; the receive is counted
//!   when it completes, with the length UCX reports (receive info, completion callbacks, the AM
//!   handler's length);
//! - `ucp_am_send_*` counts the payload only (not the user header); atomics count the operand
//!   size;
//! - a call that returns an error status is a refusal (counted apart, not as an operation).
//! - `ucp_worker_progress` (full mode only) counts one op per call, bytes = its return value (the
//!   number of completions); an event is kept only for calls that made progress, so idle polling
//!   cannot flood the ring and push data events out.
//!
//! Peer identity ([`control`]): UCX 1.13 packs a worker address as `[header u8 | worker uuid u64 |
//! ...]` (src/ucp/wireup/address.c, "Packed address layout"); the uuid is random per worker and
//! is the same in every address of that worker whatever transports follow. Both sides hash those
//! 8 uuid bytes with FNV-1a: `ucp_worker_get_address` / `ucp_worker_query` add it to this
//! process's own addresses, `ucp_ep_create(REMOTE_ADDRESS)` puts it in the endpoint's
//! `Peer::addr_hash`. `ucp_ep_create` gets the peer's blob without its length, so hashing a prefix
//! of fixed size is also the only safe choice (any valid address has at least these 9 bytes).

/// An array of the instances `f::<I>` of a const-generic trampoline, one per listed `I`, as `t`:
/// the callbacks sigmatop hands UCX in place of a program's (receive completions, endpoint
/// errors), each of which finds its own slot by its `I`.
macro_rules! trampolines {
    ($f:ident as $t:ty; $($i:literal)*) => { [$($f::<$i> as $t,)*] };
}

mod abi;
mod control;
mod ep_error;
mod legacy;
mod nbx;
mod recv;

pub use recv::ARRIVALS_UNSEEN;

use core::ffi::CStr;

use sigmatop::event::{Layer, Op};

use crate::interpose::hook::{self, Guard};
use crate::runtime::thread::{Detail, Outcome};
use abi::{Ptr, UcsResult};

const SONAMES: &[&CStr] = &[c"libucp.so.0", c"libucp.so"];

/// The body of every UCX operation hook: the real call, traced as the outermost sigmatop hook,
/// counted on the endpoint or worker `handle` with the bytes `bytes` reads from the arguments
/// (and, for a stream receive, the result) and the outcome the result says.
#[inline(always)]
fn op<R: UcsResult>(
    handle: Ptr,
    op: Op,
    detail: Detail,
    call_real: impl FnOnce() -> R,
    bytes: impl FnOnce(R) -> u64,
) -> R {
    hook::around(Guard::Outermost(Layer::Ucx), call_real, |ts, r| {
        let ep = crate::runtime::registry::lookup_compact(handle as usize);
        ts.record(ep, op, bytes(r), r.outcome(), || Some(detail))
    })
}

/// The body of a hook whose real call runs the progress engine (blocking flushes, progress): the
/// real call outside the guard, since callbacks run inside it may issue the program's own traced
/// operations; recorded after it. `keep` says whether an event is kept (counted either way).
#[inline(always)]
fn after_progress<R: Copy>(
    handle: Ptr,
    op: Op,
    call_real: impl FnOnce() -> R,
    seen: impl FnOnce(R) -> (u64, Outcome, Option<Detail>),
) -> R {
    hook::around(Guard::AfterCall(Layer::Ucx), call_real, |ts, r| {
        let ep = crate::runtime::registry::lookup_compact(handle as usize);
        let (bytes, outcome, detail) = seen(r);
        ts.record(ep, op, bytes, outcome, || detail)
    })
}

/// Every UCX hook, for the dlsym wrappers.
pub fn hooks() -> Vec<crate::interpose::dlsym::Hook> {
    let mut v = nbx::hooks();
    v.extend(legacy::hooks());
    v.extend(recv::hooks());
    v.extend(control::hooks());
    v
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_hook_is_listed_once() {
        let hs = super::hooks();
        assert_eq!(hs.len(), 43);
        let mut names: Vec<_> = hs.iter().map(|h| h.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), hs.len());
    }
}
