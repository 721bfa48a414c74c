//! WQE recovery: for each doorbell that posts new WQEBBs, an async device-to-host copy of
//! exactly those WQEBBs (wrap-aware) into a pinned mirror of the SQ, or a memcpy for a
//! host-resident SQ; batched parsing with [`walk_new_wqes`] once the batch is full or the QP is
//! idle; each WQE becomes a GPU op event stamped with its doorbell's timestamp.

use core::sync::atomic::Ordering;
use std::io::Write;

use sigmatop::decode::WQEBB_BYTES;
use sigmatop::decode::doorbell::WqeRange;
use sigmatop::decode::wqe::{WalkError, Wqe, walk_new_wqes};
use sigmatop::event::flags;

use super::poller::{Pending, Poller, QpRt, op_of};
use super::stats::{COPIES, COPY_FAILED, OVERWRITTEN, SYNCS, UNPARSABLE, WQES};
use crate::config::WqeCopy;
use crate::thread::Detail;

/// A QP idle this long has its pending WQEs parsed.
const IDLE_FLUSH_NS: u64 = 50_000;

impl Poller {
    pub(super) fn recover(&mut self, q: &mut QpRt, range: WqeRange, tsc: u64) {
        if q.pending_wqebbs + range.wqebbs > q.info.sq_cnt {
            self.flush(q);
        }
        let copied = if q.info.gpu.is_none() || self.cfg.copy == WqeCopy::PerDoorbell {
            self.copy_range(q, &range)
        } else {
            false
        };
        q.pending.push(Pending { range, tsc, copied });
        q.pending_wqebbs += range.wqebbs;
        q.last_db_ns = crate::clock::mono_ns();
        if q.pending_wqebbs >= q.threshold {
            self.flush(q);
        }
    }

    /// Copies the WQEBBs of `range` into the mirror (async for device memory). False if not.
    fn copy_range(&mut self, q: &QpRt, range: &WqeRange) -> bool {
        let cnt = q.info.sq_cnt;
        let first = u32::from(range.start) & (cnt - 1);
        let n1 = range.wqebbs.min(cnt - first);
        let parts = [(first, n1), (0, range.wqebbs - n1)];
        for (slot, n) in parts {
            if n == 0 {
                continue;
            }
            let off = slot as usize * WQEBB_BYTES;
            let len = n as usize * WQEBB_BYTES;
            // SAFETY: off+len <= sq_cnt*64, the mirror's size.
            let dst = unsafe { q.mirror.add(off) };
            let src = q.info.sq_addr + off as u64;
            if q.info.gpu.is_some() {
                if self.stream.is_none()
                    && let Some(d) = self.drv
                {
                    self.stream = d.stream();
                }
                let (Some(d), Some(s)) = (self.drv, self.stream) else {
                    COPY_FAILED.fetch_add(1, Ordering::Relaxed);
                    return false;
                };
                // SAFETY: dst is our pinned mirror, alive for the process; src is the SQ range.
                if !unsafe { d.dtoh_async(dst, src, len, s) } {
                    COPY_FAILED.fetch_add(1, Ordering::Relaxed);
                    return false;
                }
                COPIES.fetch_add(1, Ordering::Relaxed);
            } else {
                // SAFETY: a host-resident SQ registered with the NIC: readable for its size.
                unsafe { core::ptr::copy_nonoverlapping(src as *const u8, dst, len) };
            }
        }
        true
    }

    pub(super) fn idle_flush(&mut self) {
        if !self.qps.values().any(|q| !q.pending.is_empty()) {
            return;
        }
        let now = crate::clock::mono_ns();
        let due: Vec<u32> = self
            .qps
            .values()
            .filter(|q| !q.pending.is_empty() && now.saturating_sub(q.last_db_ns) > IDLE_FLUSH_NS)
            .map(|q| q.info.qpn)
            .collect();
        for qpn in due {
            if let Some(mut q) = self.qps.remove(&qpn) {
                self.flush(&mut q);
                self.qps.insert(qpn, q);
            }
        }
    }

    pub(super) fn flush_all(&mut self) {
        let keys: Vec<u32> = self.qps.keys().copied().collect();
        for k in keys {
            if let Some(mut q) = self.qps.remove(&k) {
                self.flush(&mut q);
                self.qps.insert(k, q);
            }
        }
        if let Some(l) = self.log.as_mut() {
            let _ = l.flush();
        }
    }

    /// Syncs the copies of `q`'s pending ranges and parses them.
    pub(super) fn flush(&mut self, q: &mut QpRt) {
        if q.pending.is_empty() {
            return;
        }
        let mut pending = std::mem::take(&mut q.pending);
        let mut ok = true;
        for p in pending.iter_mut() {
            if !p.copied {
                p.copied = self.copy_range(q, &p.range);
            }
        }
        if q.info.gpu.is_some() {
            SYNCS.fetch_add(1, Ordering::Relaxed);
            ok = match (self.drv, self.stream) {
                (Some(d), Some(s)) => d.sync(s),
                _ => false,
            };
        }
        let ring_len = q.info.sq_cnt as usize * WQEBB_BYTES;
        // SAFETY: the mirror is sq_cnt*64 bytes, mapped for the process's life; the copies into
        // it completed (stream synced) or were plain memcpys.
        let ring = unsafe { core::slice::from_raw_parts(q.mirror as *const u8, ring_len) };
        for p in &pending {
            if !ok || !p.copied {
                COPY_FAILED.fetch_add(1, Ordering::Relaxed);
                UNPARSABLE.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            let out = walk_new_wqes(ring, q.info.sq_cnt, &p.range, q.info.qp_type);
            if out.unparsable > 0 {
                UNPARSABLE.fetch_add(u64::from(out.unparsable), Ordering::Relaxed);
            }
            if let Some(e) = out.error {
                UNPARSABLE.fetch_add(1, Ordering::Relaxed);
                // A slot holding a later WQE than the range expects was reused before the copy
                // read it: it and the rest of the range are lost, and said so (never parsed as
                // if they were the doorbell's WQEs).
                if matches!(e, WalkError::IndexMismatch { .. }) {
                    OVERWRITTEN.fetch_add(
                        u64::from(p.range.wqebbs.saturating_sub(out.walked)),
                        Ordering::Relaxed,
                    );
                }
            }
            for w in &out.wqes {
                self.emit_wqe(q, w, p.tsc);
            }
        }
        q.pending_wqebbs = 0;
        pending.clear();
        q.pending = pending;
    }

    fn emit_wqe(&mut self, q: &QpRt, w: &Wqe, tsc: u64) {
        WQES.fetch_add(1, Ordering::Relaxed);
        let op = op_of(w.opcode);
        let (raddr, rkey) = w.raddr.map_or((0, 0), |r| (r.raddr, r.rkey));
        let mut fl = 0;
        if w.ctrl.signaled() {
            fl |= flags::SIGNALED;
        }
        if w.inline_bytes.is_some() {
            fl |= flags::INLINE;
        }
        let bytes = w.bytes();
        let detail = Detail {
            addr: raddr,
            flags: fl,
            aux: rkey,
        };
        self.emit(tsc, q.info.ep, op, bytes, detail);
        if let Some(l) = self.log.as_mut() {
            let _ = writeln!(
                l,
                "wqe qpn={:#x} idx={} opcode={:#x} opmod={:#x} bytes={} raddr={:#x} rkey={:#x} signaled={}",
                q.info.qpn,
                w.ctrl.wqe_index,
                w.ctrl.opcode,
                w.ctrl.opmod,
                bytes,
                raddr,
                rkey,
                u8::from(w.ctrl.signaled())
            );
        }
    }
}
