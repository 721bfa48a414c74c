//! The encoders of operation instants: the general one (any item, through the protobuf helpers)
//! and the plain one (the common instant, written straight into the output in one pass), which
//! write the same bytes.

use std::io::Write;

use super::PerfettoSink;
use super::fields::*;
use super::item::{ALWAYS, Item, OpEnc, UNLESS_MAX, plain, tid_of};
use super::stage::{CURSOR_MAX, CURSOR_ROOM, Cursor, vlen};
use crate::event::{Dir, Layer, Op};
use crate::export::proto::{self, begin, end, fixed64, string, uint};

/// Room kept free for one plain packet (at most ~370 bytes) at the end of a window chunk or of
/// the staging buffer before it is encoded there: a `Cursor`'s.
pub(super) const PLAIN_MAX: usize = CURSOR_ROOM;

impl<W: Write> PerfettoSink<W> {
    /// Writes `self.pkt` as one `Trace.packet`.
    pub(super) fn emit(&mut self) {
        if self.stage.error.is_some() {
            return;
        }
        self.flush_run();
        // Trace.packet key, then the packet's length.
        let mut hdr = [0u8; CURSOR_ROOM];
        let mut h = Cursor {
            buf: &mut hdr,
            n: 0,
        };
        h.put(&[0x0A]);
        h.varint(self.pkt.len() as u64);
        let n = h.n;
        self.stage.put(&hdr[..n]);
        self.stage.put(&self.pkt);
        self.stats.packets += 1;
        self.stats.bytes += (n + self.pkt.len()) as u64;
    }

    pub(super) fn write_item(&mut self, it: Item) {
        self.drain_late(it.m.ns);
        if plain(&it) {
            self.write_plain_item(&it);
        } else {
            self.write_general_item(&it);
        }
    }

    /// Any operation instant, through the general encoder.
    pub(super) fn write_general_item(&mut self, it: &Item) {
        let ev = &it.m.ev;
        let tid = tid_of(&self.thread_tid, it);
        let p = &mut self.pkt;
        p.clear();
        uint(p, P_TIMESTAMP, it.ts);
        uint(p, P_SEQ_ID, SEQ);
        uint(p, P_SEQ_FLAGS, SEQ_NEEDS);
        let te = begin(p, P_TRACK_EVENT);
        uint(p, TE_TYPE, TYPE_INSTANT);
        uint(p, TE_TRACK, it.track);
        uint(p, TE_CATEGORY_IIDS, CAT_OP);
        uint(p, TE_NAME_IID, op_name_iid(ev.op));
        // The annotations every instant has, as the plain encoder writes them (at most 8 of at
        // most 16 bytes, and the wide writers' 8 bytes of scratch), then the doorbell / WQE ones.
        let mut common = [0u8; CURSOR_ROOM];
        let mut w = Cursor {
            buf: &mut common,
            n: 0,
        };
        annotations(it, tid, &mut w);
        let n = w.n;
        p.extend_from_slice(&common[..n]);
        if let Some(x) = &it.extra {
            if let Some(d) = &x.db {
                uint_annotation(p, AN_QPN, d.qpn as u64);
                uint_annotation(p, AN_PI, d.pi as u64);
                uint_annotation(p, AN_PREV_PI, d.prev_pi as u64);
                uint_annotation(p, AN_END_PI, d.end_pi as u64);
                uint_annotation(p, AN_WQEBBS, d.wqebbs);
                uint_annotation(p, AN_WQES, x.wqes as u64);
                if x.wqes > 0 {
                    uint_annotation(p, AN_WQE_BYTES, x.wqe_bytes);
                    let mut ops = String::new();
                    for (i, (o, n)) in x.ops.iter().enumerate() {
                        if i > 0 {
                            ops.push_str(", ");
                        }
                        let name = Op::from_u8(*o).map_or("?", |o| o.name());
                        ops.push_str(&format!("{name}×{n}"));
                    }
                    let d = begin(p, TE_ANNOT);
                    uint(p, DA_NAME_IID, AN_OPCODES);
                    string(p, DA_STRING, &ops);
                    end(p, d);
                    uint_annotation(p, AN_RADDR, x.first_raddr);
                    uint_annotation(p, AN_RKEY, x.first_rkey as u64);
                }
                if d.pi_mismatch {
                    uint_annotation(p, AN_PI_MISMATCH, 1);
                }
            }
            if let Some((pi, i)) = x.wqe_of {
                uint_annotation(p, AN_DB_PI, pi as u64);
                uint_annotation(p, AN_WQE_INDEX, i as u64);
            }
        }
        for f in it.flow_in.iter().chain(it.flow_more.iter()) {
            if *f != 0 {
                fixed64(p, TE_TERM_FLOW, *f);
            }
        }
        // The flow a send starts comes last (see `Entry::what`'s OPEN_SEND).
        if it.flow_out != 0 {
            fixed64(p, TE_FLOW, it.flow_out);
            self.stats.flows += 1;
        }
        end(p, te);
        self.emit();
        self.stats.op_instants += 1;
        self.last_written_ns = self.last_written_ns.max(it.m.ns);
    }

    /// `write_item` for the common operation instant: straight into the output.
    pub(super) fn write_plain_item(&mut self, it: &Item) {
        if self.stage.error.is_some() {
            return;
        }
        self.flush_run();
        let tid = tid_of(&self.thread_tid, it);
        if self.stage.buf.len() - self.stage.len < PLAIN_MAX {
            self.stage.flush();
        }
        let enc = &self.op_enc[it.m.ev.op as usize];
        let n = write_plain(it, tid, enc, &mut self.stage.buf[self.stage.len..]);
        self.stage.len += n;
        self.count_plain(it, n);
    }

    fn count_plain(&mut self, it: &Item, n: usize) {
        self.stats.packets += 1;
        self.stats.bytes += n as u64;
        self.stats.op_instants += 1;
        if it.flow_out != 0 {
            self.stats.flows += 1;
        }
    }
}

impl Cursor<'_> {
    /// A DebugAnnotation { name_iid, uint_value }.
    #[inline(always)]
    fn uint(&mut self, name: u64, v: u64) {
        self.annotation(name, (DA_UINT << 3) as u64, 1, v);
    }

    /// A DebugAnnotation { name_iid, string_value_iid }.
    #[inline(always)]
    fn string_iid(&mut self, name: u64, v: u64) {
        // The field key (17 << 3) as a two-byte varint.
        const KEY: u64 = (0x80 | ((DA_STRING_IID << 3) & 0x7f) as u64)
            | ((((DA_STRING_IID << 3) >> 7) as u64) << 8);
        self.annotation(name, KEY, 2, v);
    }

    /// A DebugAnnotation { name_iid, <value_key>: v }, the key's `key_len` bytes little endian
    /// in `value_key`; names are below 128, so is its length. Head and key in one store.
    #[inline(always)]
    fn annotation(&mut self, name: u64, value_key: u64, key_len: usize, v: u64) {
        let vl = vlen(v);
        let head = (((TE_ANNOT << 3) | proto::LEN) as u64)
            | (((2 + key_len + vl) as u64) << 8)
            | (((DA_NAME_IID << 3) as u64) << 16)
            | ((name & 0xff) << 24)
            | (value_key << 32);
        self.wide(head, 4 + key_len);
        self.varint_wide_len(v, vl);
    }
}

/// A DebugAnnotation { name_iid, uint_value } of a TrackEvent being written into `p`.
pub(super) fn uint_annotation(p: &mut Vec<u8>, name: u64, v: u64) {
    let d = begin(p, TE_ANNOT);
    uint(p, DA_NAME_IID, name);
    uint(p, DA_UINT, v);
    end(p, d);
}

/// The debug annotations of a plain instant, in the general path's order.
#[inline(always)]
fn annotations(it: &Item, tid: Option<u32>, f: &mut Cursor) {
    let ev = &it.m.ev;
    let op = Op::from_u8(ev.op);
    let dir = op.map(|o| o.dir()).unwrap_or(Dir::None);
    f.uint(if dir == Dir::None { AN_COUNT } else { AN_BYTES }, ev.bytes);
    if let Some(op) = op {
        let addr_name = match op {
            Op::UcxTagSend | Op::UcxTagSendSync | Op::UcxTagRecv | Op::OfiTSend | Op::OfiTRecv => {
                Some(AN_TAG)
            }
            Op::OfiSend | Op::OfiRecv => Some(AN_FI_ADDR).filter(|_| ev.addr != u64::MAX),
            _ if ev.addr != 0 && op.dir() != Dir::None => Some(AN_RADDR),
            _ => None,
        };
        if let Some(n) = addr_name {
            f.uint(n, ev.addr);
        }
        match op.layer() {
            Layer::Libfabric
                if ev.aux != 0xffff && !matches!(op, Op::OfiSend | Op::OfiRecv | Op::OfiCqRead) =>
            {
                f.uint(AN_FI_ADDR, ev.aux as u64)
            }
            Layer::Ucx if matches!(op, Op::UcxAmSend | Op::UcxAmRecvData) => {
                f.uint(AN_AM_ID, ev.aux as u64)
            }
            _ => {}
        }
    }
    tail(it, tid, op.is_some_and(Op::one_sided), f);
}

/// `annotations` through the op's table entry: the same annotations, fewer questions.
#[inline(always)]
fn annotations_fast(it: &Item, tid: Option<u32>, enc: &OpEnc, f: &mut Cursor) {
    let ev = &it.m.ev;
    f.uint(enc.count as u64, ev.bytes);
    if enc.addr_name != 0
        && match enc.addr_when {
            ALWAYS => true,
            UNLESS_MAX => ev.addr != u64::MAX,
            _ => ev.addr != 0,
        }
    {
        f.uint(enc.addr_name as u64, ev.addr);
    }
    if enc.aux_name != 0 && (enc.aux_when == ALWAYS || ev.aux != 0xffff) {
        f.uint(enc.aux_name as u64, ev.aux as u64);
    }
    tail(it, tid, enc.rkey, f);
}

/// The annotations both paths end with: thread, peer, flags, rkey (one-sided operations),
/// target.
#[inline(always)]
fn tail(it: &Item, tid: Option<u32>, rkey: bool, f: &mut Cursor) {
    let ev = &it.m.ev;
    if let Some(tid) = tid {
        f.uint(AN_TID, tid as u64);
    }
    if let Some(peer) = it.peer {
        f.string_iid(AN_PEER, peer as u64 + 1);
    }
    if ev.flags != 0 {
        f.uint(AN_FLAGS, ev.flags as u64);
    }
    if rkey {
        f.uint(AN_RKEY, ev.aux as u64);
    }
    if let Some(t) = it.target {
        f.string_iid(AN_TARGET, t as u64 + 1);
    }
}

/// Writes a plain instant at the front of `dst` (at least `PLAIN_MAX` long) in one pass:
/// both lengths are first given one byte, as they nearly always take, and the body is moved
/// along in the rare case they need more. Returns its length. Same fields, order and bytes as
/// the general path (`tests::plain_items_encode_like_the_general_path`).
#[inline(always)]
pub(super) fn write_plain(it: &Item, tid: Option<u32>, enc: &OpEnc, dst: &mut [u8]) -> usize {
    let mut w = Cursor::at_front(dst);
    // Trace.packet key, length (patched), the timestamp's key.
    w.wide(0x0A | ((P_TIMESTAMP as u64) << 19), 3);
    w.varint_wide(it.ts);
    const MID: u64 = ((P_SEQ_ID << 3) as u64)
        | (SEQ << 8)
        | (((P_SEQ_FLAGS << 3) as u64) << 16)
        | (SEQ_NEEDS << 24)
        | ((((P_TRACK_EVENT << 3) | proto::LEN) as u64) << 32);
    // ... then the TrackEvent length (patched: 0 here).
    w.wide(MID, 6);
    let te_start = w.n;
    const TYPE: u64 =
        ((TE_TYPE << 3) as u64) | (TYPE_INSTANT << 8) | (((TE_TRACK << 3) as u64) << 16);
    w.wide(TYPE, 3);
    w.varint_wide(it.track);
    const CAT: u64 =
        ((TE_CATEGORY_IIDS << 3) as u64) | (CAT_OP << 8) | (((TE_NAME_IID << 3) as u64) << 16);
    w.wide(CAT, 3);
    w.varint_wide(enc.name);
    annotations_fast(it, tid, enc, &mut w);
    // TE_TERM_FLOW (48), fixed64: key 385 = 0x81 0x03; the inline ones, then any more.
    for f in it.flow_in {
        if f != 0 {
            w.wide(0x0381, 2);
            w.wide(f, 8);
        }
    }
    for &f in &it.flow_more {
        if f != 0 {
            w.wide(0x0381, 2);
            w.wide(f, 8);
        }
    }
    if it.flow_out != 0 {
        // TE_FLOW (47), fixed64: key 377 = 0xF9 0x02. Last: an open send's is trimmed away.
        w.wide(0x02F9, 2);
        w.wide(it.flow_out, 8);
    }
    let end = w.n;
    // At most 45 bytes before the annotations, 8 annotations of at most 16 and 19 flows of 10
    // (`plain` allows 16 besides the three inline): 363, and 8 of scratch, well below where the
    // cursor's positions would wrap.
    assert!(end + 8 <= CURSOR_MAX, "a plain instant of {end} bytes");
    let buf = w.buf;
    let te_len = end - te_start;
    // Packet body: everything after its own length byte, with the TrackEvent length's bytes.
    let pkt_len = end - 2 + vlen(te_len as u64) - 1;
    if te_len < 0x80 && pkt_len < 0x80 {
        buf[(te_start - 1) & (CURSOR_MAX - 1)] = te_len as u8;
        buf[1] = pkt_len as u8;
        return end;
    }
    // Longer lengths: move the TrackEvent body, then everything after the packet length.
    let te_extra = vlen(te_len as u64) - 1;
    buf.copy_within(te_start..end, te_start + te_extra);
    let mut c = Cursor {
        buf: &mut *buf,
        n: te_start - 1,
    };
    c.varint(te_len as u64);
    let pkt_extra = vlen(pkt_len as u64) - 1;
    let total_end = end + te_extra;
    buf.copy_within(2..total_end, 2 + pkt_extra);
    let mut c = Cursor { buf, n: 1 };
    c.varint(pkt_len as u64);
    total_end + pkt_extra
}
