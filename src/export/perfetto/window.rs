//! The bounded reorder window: events wait here, most already encoded, until their flows and
//! phase boundaries are known, and leave in timestamp order with the late packets due before.

use std::cmp::Reverse;
use std::io::Write;

use super::PerfettoSink;
use super::encode::{PLAIN_MAX, write_plain};
use super::fields::{CLOCK_DELTA, CLOCK_REALTIME, P_CLOCK_SNAPSHOT, P_SEQ_ID, SEQ};
use super::item::{Item, plain, tid_of};
use super::mem::Mem;
use super::stage::{CURSOR_ROOM, Cursor, vlen};
use crate::export::proto;

/// Events held back at most this long (merged time) for their flows and phase ends, and at most
/// this many.
pub const WINDOW_NS: u64 = 200_000_000;
pub const WINDOW_EVENTS: usize = 256 << 10;

/// Encoded packets waiting in the window, in chunks of `CHUNK_BYTES`.
pub(super) struct Chunk {
    pub(super) buf: Mem,
    pub(super) used: usize,
}

/// One event in the window: its time, and either the length of its encoded packet (the next
/// bytes of the chunks) or, with `PENDING`, the index of its item in `pending`.
#[derive(Clone, Copy, Default)]
pub(super) struct Entry {
    pub(super) ns: u64,
    pub(super) what: u64,
}

const PENDING: u64 = 1 << 63;
/// An encoded send the matcher had not paired when it was encoded: its packet ends with the
/// flow it would start (id 1 + its sequence number, as `pair` gives). Unless `PAIRED` is set by
/// the time it is written, those last `OPEN_FLOW_BYTES` are cut off and the lengths redone.
pub(super) const OPEN_SEND: u64 = 1 << 62;
pub(super) const PAIRED: u64 = 1 << 61;
/// An encoded packet that starts a flow (counted in the stats when written).
const FLOW: u64 = 1 << 60;
const LEN_MASK: u64 = (1 << 32) - 1;
const OPEN_FLOW_BYTES: usize = 10;
/// Why `release_to`'s pass over the window's front stopped.
enum Stop {
    /// Nothing more is due.
    Done,
    /// The next entry needs `release_one`.
    Slow,
    /// The contiguous part ended.
    End,
}

/// One huge page (`mem`).
const CHUNK_BYTES: usize = 2 << 20;

impl<W: Write> PerfettoSink<W> {
    /// Makes the newest event final: encoded into the window's chunks when nothing but its
    /// own flow can change it any more (a send not yet paired is encoded with that flow, as an
    /// OPEN_SEND), else kept as an item.
    #[inline(always)]
    pub(super) fn finalize_cur(&mut self) {
        if !self.has_cur {
            return;
        }
        self.has_cur = false;
        if self.entries.is_empty() {
            self.base_seq = self.cur_seq;
        }
        let ns = self.cur.m.ns;
        // Operation instants leave in the order they enter (one packet each), so the delta from
        // the one before is known here. The merged stream never goes back in time.
        if !self.delta_clock {
            self.write_delta_clock(ns);
        }
        self.cur.ts = ns.saturating_sub(self.delta_ns);
        self.delta_ns = self.delta_ns.max(ns);
        if self.early && plain(&self.cur) && self.stage.error.is_none() {
            let enc = &self.op_enc[self.cur.m.ev.op as usize];
            // A send the matcher has not paired yet may still get its flow when the receive comes
            // (`matcher::role`: a send that did not fail).
            let open = self.cur.flow_out == 0
                && self.cur.peer.is_some()
                && enc.send
                && self.cur.m.ev.flags & crate::event::flags::ERROR == 0;
            if open {
                self.cur.flow_out = self.cur_seq + 1;
            }
            let tid = tid_of(&self.thread_tid, &self.cur);
            let room = self
                .chunks
                .back()
                .is_some_and(|c| c.buf.len() - c.used >= PLAIN_MAX);
            if !room {
                let c = self.spare_chunks.pop().unwrap_or_else(|| Chunk {
                    buf: Mem::zeroed(CHUNK_BYTES),
                    used: 0,
                });
                self.chunks.push_back(c);
            }
            if let Some(c) = self.chunks.back_mut() {
                let n = write_plain(&self.cur, tid, enc, &mut c.buf[c.used..]);
                c.used += n;
                // Counted in the stats when written (`release`).
                let what = if open {
                    OPEN_SEND
                } else if self.cur.flow_out != 0 {
                    FLOW
                } else {
                    0
                };
                self.entries.push_back(Entry {
                    ns,
                    what: what | n as u64,
                });
                return;
            }
        }
        let idx = self.pending_base + self.pending.len() as u64;
        self.pending.push_back(std::mem::take(&mut self.cur));
        self.entries.push_back(Entry {
            ns,
            what: PENDING | idx,
        });
    }

    /// The ClockSnapshot that starts `CLOCK_DELTA` at `ns` (REALTIME), written before the first
    /// operation instant: Perfetto adds each instant's timestamp to the clock's last value.
    #[cold]
    fn write_delta_clock(&mut self, ns: u64) {
        self.delta_clock = true;
        self.delta_ns = ns;
        self.flush_run();
        let p = &mut self.pkt;
        p.clear();
        proto::uint(p, P_SEQ_ID, SEQ);
        let s = proto::begin(p, P_CLOCK_SNAPSHOT);
        let k = proto::begin(p, 1);
        proto::uint(p, 1, CLOCK_DELTA);
        proto::uint(p, 2, ns);
        // is_incremental
        proto::uint(p, 3, 1);
        proto::end(p, k);
        let k = proto::begin(p, 1);
        proto::uint(p, 1, CLOCK_REALTIME);
        proto::uint(p, 2, ns);
        proto::end(p, k);
        proto::end(p, s);
        self.emit();
    }

    /// The item of event `seq` while it can still change (the newest, or pending).
    pub(super) fn item_at(&mut self, seq: u64) -> Option<&mut Item> {
        if seq == self.cur_seq && self.has_cur {
            return Some(&mut self.cur);
        }
        let e = self.entries.get(seq.checked_sub(self.base_seq)? as usize)?;
        if e.what & PENDING == 0 {
            return None;
        }
        let i = (e.what & !PENDING).checked_sub(self.pending_base)?;
        self.pending.get_mut(i as usize)
    }

    /// Writes the `len`-byte packet at the read position without its last field (an open
    /// send's flow), its packet and TrackEvent lengths made smaller to match.
    fn write_trimmed(&mut self, len: usize) {
        self.flush_run();
        let Some(c) = self.chunks.front() else { return };
        let pkt = &c.buf[self.read_off..self.read_off + len];
        // 0x0A, packet length, then `mid` (0x40, ns, sequence id and flags, 0x5A), then the
        // TrackEvent length and body, as `write_plain` wrote them.
        let mut pos = 1;
        let _ = proto::read_varint(pkt, &mut pos);
        let mid_start = pos;
        pos += 1;
        let _ = proto::read_varint(pkt, &mut pos);
        pos += 5;
        let mid = &pkt[mid_start..pos];
        let te_len = proto::read_varint(pkt, &mut pos).unwrap_or(0) as usize;
        let body = &pkt[pos..(pos + te_len.saturating_sub(OPEN_FLOW_BYTES)).min(pkt.len())];
        let te2 = body.len() as u64;
        let mut hdr = [0u8; CURSOR_ROOM];
        let mut h = Cursor {
            buf: &mut hdr,
            n: 0,
        };
        h.put(&[0x0A]);
        h.varint((mid.len() + vlen(te2) + body.len()) as u64);
        h.put(mid);
        h.varint(te2);
        let n = h.n;
        self.stage.put(&hdr[..n]);
        self.stage.put(body);
        self.stats.packets += 1;
        self.stats.bytes += (n + body.len()) as u64;
    }

    /// Stages the released packets not yet staged (`run` bytes of the front chunk from the
    /// read position). Everything else that writes calls it first, so the file keeps the order
    /// in which packets were released.
    pub(super) fn flush_run(&mut self) {
        if self.run == 0 {
            return;
        }
        if let Some(c) = self.chunks.front() {
            self.stage
                .put(&c.buf[self.read_off..self.read_off + self.run]);
        }
        self.read_off += self.run;
        self.run = 0;
    }

    /// Releases the window's events older than `now - WINDOW_NS` (and beyond `WINDOW_EVENTS`),
    /// with the late packets due before each. Encoded packets released one after the other are
    /// staged in one copy, when something else is written or their chunk ends (`flush_run`).
    pub(super) fn release(&mut self, now: u64) {
        self.release_to(now, WINDOW_EVENTS);
    }

    /// `release`, leaving at most `max_len` events in the window.
    pub(super) fn release_to(&mut self, now: u64, max_len: usize) {
        // The common step (an encoded packet, final, in the front chunk, no late packet due
        // before it) with its counts kept in locals; anything else through `release_one`.
        let mut late_t = self.late_due_at();
        let mut used = self.chunks.front().map_or(0, |c| c.used);
        loop {
            // Over the entries' front contiguous part, as far as the steps stay common.
            let total = self.entries.len();
            let (mut k, mut run, mut bytes, mut flows, mut last) =
                (0usize, self.run, 0u64, 0u64, 0);
            let mut stop = Stop::End;
            for e in self.entries.as_slices().0 {
                if e.ns.saturating_add(WINDOW_NS) >= now && total - k <= max_len {
                    stop = Stop::Done;
                    break;
                }
                if late_t <= e.ns
                    || e.what & PENDING != 0
                    || e.what & (OPEN_SEND | PAIRED) == OPEN_SEND
                    || self.read_off + run >= used
                {
                    stop = Stop::Slow;
                    break;
                }
                let len = (e.what & LEN_MASK) as usize;
                k += 1;
                run += len;
                bytes += len as u64;
                flows += (e.what & (FLOW | PAIRED) != 0) as u64;
                last = e.ns;
            }
            self.entries.drain(..k);
            self.base_seq += k as u64;
            self.run = run;
            self.stats.op_instants += k as u64;
            self.stats.packets += k as u64;
            self.stats.bytes += bytes;
            self.stats.flows += flows;
            self.last_written_ns = self.last_written_ns.max(last);
            match stop {
                Stop::Done => break,
                Stop::Slow => {
                    if let Some(e) = self.entries.pop_front() {
                        self.release_one(e);
                    }
                    late_t = self.late_due_at();
                    used = self.chunks.front().map_or(0, |c| c.used);
                }
                // The slots' end (the ring goes on at its first slot), or no entry left.
                Stop::End => {
                    if self.entries.is_empty() {
                        break;
                    }
                }
            }
        }
    }

    /// The time of the first late packet (u64::MAX when none).
    #[inline(always)]
    fn late_due_at(&self) -> u64 {
        self.late.peek().map_or(u64::MAX, |Reverse((t, _, _))| *t)
    }

    /// Releases entry `e`, just taken from the front, in every case.
    fn release_one(&mut self, e: Entry) {
        self.base_seq += 1;
        if self
            .late
            .peek()
            .is_some_and(|Reverse((t, _, _))| *t <= e.ns)
        {
            self.drain_late(e.ns);
        }
        if e.what & PENDING != 0 {
            self.pending_base += 1;
            if let Some(it) = self.pending.pop_front() {
                self.write_item(it);
            }
            return;
        }
        // The packet is the next `len` bytes; a chunk's end moves on to the next chunk.
        let used = self.chunks.front().map_or(0, |c| c.used);
        if self.read_off + self.run >= used {
            self.flush_run();
            if let Some(c) = self.chunks.pop_front() {
                self.spare_chunks.push(Chunk { used: 0, ..c });
            }
            self.read_off = 0;
        }
        let len = (e.what & LEN_MASK) as usize;
        self.stats.op_instants += 1;
        self.last_written_ns = self.last_written_ns.max(e.ns);
        if e.what & OPEN_SEND != 0 && e.what & PAIRED == 0 {
            // Never paired: written without its flow.
            self.write_trimmed(len);
            self.read_off += len;
            return;
        }
        self.stats.packets += 1;
        self.stats.bytes += len as u64;
        if e.what & (FLOW | PAIRED) != 0 {
            self.stats.flows += 1;
        }
        self.run += len;
    }
}
