//! What is kept of one recorded operation until it is written: its track, peer, flows and, for
//! doorbells and WQEs, their details.

use crate::correlate::doorbell::DoorbellInfo;
use crate::correlate::merge::Merged;

/// One operation instant as it will be written.
#[derive(Default)]
pub(super) struct Item {
    pub(super) m: Merged,
    /// The timestamp as written: ns since the operation instant before it (`CLOCK_DELTA`),
    /// set when it enters the window.
    pub(super) ts: u64,
    pub(super) track: u64,
    pub(super) peer: Option<u32>,
    /// The process owning the memory region a one-sided operation targets.
    pub(super) target: Option<u32>,
    pub(super) flow_out: u64,
    /// Flows ending here: the first two inline, more (rare) in `flow_more`.
    pub(super) flow_in: [u64; 2],
    pub(super) flow_more: Vec<u64>,
    /// Doorbell / WQE / one-sided details (rare enough to box).
    pub(super) extra: Option<Box<Extra>>,
}

/// What a doorbell or a WQE instant carries besides the common annotations.
#[derive(Default)]
pub(super) struct Extra {
    pub(super) db: Option<DoorbellInfo>,
    pub(super) wqes: u32,
    pub(super) wqe_bytes: u64,
    /// WQEs per opcode (`Op` as u8, count), in order of first appearance.
    pub(super) ops: Vec<(u8, u32)>,
    pub(super) first_raddr: u64,
    pub(super) first_rkey: u32,
    /// This WQE's doorbell index and position.
    pub(super) wqe_of: Option<(u16, u32)>,
}

impl Item {
    pub(super) fn end_flow(&mut self, f: u64) {
        match self.flow_in.iter_mut().find(|x| **x == 0) {
            Some(slot) => *slot = f,
            None => self.flow_more.push(f),
        }
    }
}

/// Instants the plain encoder takes: no doorbell / WQE details, and a bounded number of flows.
pub(super) fn plain(it: &Item) -> bool {
    it.extra.is_none() && it.flow_more.len() <= 16
}

/// The tid an instant is annotated with (None: its process has a single thread file).
#[inline(always)]
pub(super) fn tid_of(thread_tid: &[Option<u32>], it: &Item) -> Option<u32> {
    thread_tid
        .get(it.m.thread as usize)
        .copied()
        .unwrap_or(Some(it.m.ev.tid))
}

/// What the plain encoder needs of an op code, looked up once per event (a table over every
/// byte value, built from `Op`'s own answers: `tests::plain_items_encode_like_the_general_path`
/// holds it to the general encoder, which asks `Op` directly).
#[derive(Clone, Copy, Default)]
pub(super) struct OpEnc {
    /// Its event name's interned id.
    pub(super) name: u64,
    /// `AN_BYTES`, or `AN_COUNT` for an op that moves no payload.
    pub(super) count: u8,
    /// The annotation `addr` is written as (0: none), and when: `ALWAYS`, `UNLESS_MAX`
    /// (u64::MAX) or `UNLESS_ZERO`.
    pub(super) addr_name: u8,
    pub(super) addr_when: u8,
    /// The annotation `aux` is written as (0: none), and when: `ALWAYS` or `UNLESS_FFFF`.
    pub(super) aux_name: u8,
    pub(super) aux_when: u8,
    /// One-sided: `aux` is also written as the rkey.
    pub(super) rkey: bool,
    /// A two-sided send (unless it failed): the matcher may pair it later.
    pub(super) send: bool,
}

pub(super) const ALWAYS: u8 = 0;
pub(super) const UNLESS_MAX: u8 = 1;
pub(super) const UNLESS_ZERO: u8 = 2;
pub(super) const UNLESS_FFFF: u8 = 1;

/// The table of `OpEnc` over every byte value.
pub(super) fn op_enc_table() -> Box<[OpEnc; 256]> {
    use super::fields::*;
    use crate::event::{Dir, Layer, Op};
    let mut t = Box::new([OpEnc::default(); 256]);
    for (v, e) in t.iter_mut().enumerate() {
        let v = v as u8;
        e.name = op_name_iid(v);
        e.count = AN_COUNT as u8;
        let Some(op) = Op::from_u8(v) else { continue };
        if op.dir() != Dir::None {
            e.count = AN_BYTES as u8;
        }
        (e.addr_name, e.addr_when) = match op {
            Op::UcxTagSend | Op::UcxTagSendSync | Op::UcxTagRecv | Op::OfiTSend | Op::OfiTRecv => {
                (AN_TAG as u8, ALWAYS)
            }
            Op::OfiSend | Op::OfiRecv => (AN_FI_ADDR as u8, UNLESS_MAX),
            _ if op.dir() != Dir::None => (AN_RADDR as u8, UNLESS_ZERO),
            _ => (0, ALWAYS),
        };
        (e.aux_name, e.aux_when) = match op.layer() {
            Layer::Libfabric if !matches!(op, Op::OfiSend | Op::OfiRecv | Op::OfiCqRead) => {
                (AN_FI_ADDR as u8, UNLESS_FFFF)
            }
            Layer::Ucx if matches!(op, Op::UcxAmSend | Op::UcxAmRecvData) => {
                (AN_AM_ID as u8, ALWAYS)
            }
            _ => (0, ALWAYS),
        };
        e.rkey = op.one_sided();
        let ev = crate::event::Event {
            op: v,
            ..Default::default()
        };
        e.send = crate::correlate::matcher::role(&ev).is_some_and(|r| r.0);
    }
    t
}
