//! The bytes of one record of the snapshot history (see the parent's doc): a keyframe holds
//! every counter and its last change; a delta record the modes and changes against the record
//! before; both start with the snapshot's own fields (`Head`).

use super::*;

/// The fields of a snapshot besides its counters (in every record).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Head {
    pub(super) drops: DropCounters,
    pub(super) events: u64,
    pub(super) threads: u32,
    pub(super) layers_used: u32,
}

impl Head {
    pub(super) fn of(s: &Snapshot) -> Head {
        Head {
            drops: s.drops,
            events: s.events,
            threads: s.threads,
            layers_used: s.layers_used,
        }
    }

    pub(super) fn put(&self, out: &mut Vec<u8>) {
        let d = &self.drops;
        for v in [
            self.events,
            u64::from(self.threads),
            u64::from(self.layers_used),
            d.ring_full,
            d.record_lost,
            d.live_not_sent,
            d.unattributed_ops,
            d.coalesced_doorbells,
            d.unparsable_wqes,
            d.endpoint_overflow,
            d.hook_failures,
        ] {
            put_varint(out, v);
        }
    }

    pub(super) fn get(rec: &[u8], pos: &mut usize) -> Option<Head> {
        let mut v = [0u64; 11];
        for x in &mut v {
            *x = get_varint(rec, pos).ok()?;
        }
        Some(Head {
            events: v[0],
            threads: v[1] as u32,
            layers_used: v[2] as u32,
            drops: DropCounters {
                ring_full: v[3],
                record_lost: v[4],
                live_not_sent: v[5],
                unattributed_ops: v[6],
                coalesced_doorbells: v[7],
                unparsable_wqes: v[8],
                endpoint_overflow: v[9],
                hook_failures: v[10],
            },
        })
    }
}

/// A decoded position: the counters and their last changes.
pub(super) struct State {
    pub(super) counts: Vec<OpCount>,
    pub(super) dels: Vec<Vals>,
}

pub(super) fn mode(d: u64, prev: u64) -> u8 {
    if d == 0 {
        0
    } else if d == prev {
        1
    } else if (d as i64) >= 0 {
        2
    } else {
        3
    }
}

pub(super) fn put_change(out: &mut Vec<u8>, m: u8, d: u64) {
    match m {
        2 => put_varint(out, d),
        3 => put_varint(out, d.wrapping_neg()),
        _ => {}
    }
}

pub(super) fn get_change(rec: &[u8], pos: &mut usize, m: u8, prev: u64) -> Option<u64> {
    Some(match m {
        0 => 0,
        1 => prev,
        2 => get_varint(rec, pos).ok()?,
        _ => get_varint(rec, pos).ok()?.wrapping_neg(),
    })
}

/// A keyframe: the head, then every counter's (ep, op), values and last changes.
pub(super) fn encode_key(head: &Head, counts: &[OpCount], dels: &[Vals]) -> Box<[u8]> {
    let mut out = Vec::with_capacity(16 + counts.len() * 24);
    out.push(KEY);
    head.put(&mut out);
    put_varint(&mut out, counts.len() as u64);
    for (c, d) in counts.iter().zip(dels) {
        put_varint(&mut out, u64::from(c.ep));
        out.push(c.op);
        for v in vals(c) {
            put_varint(&mut out, v);
        }
        for v in d {
            put_varint(&mut out, *v);
        }
    }
    out.into_boxed_slice()
}

/// Bits of a delta record's mode byte: ops mode (0-1), bytes mode (2-3), a second byte follows
/// with the modes of errors, refused, posted and posted bytes (4), a run follows (5).
pub(super) const REST: u8 = 0x10;
pub(super) const RUN: u8 = 0x20;

/// Writes the counters of a delta record: per counter its modes (one byte, a second when
/// errors, refusals or posted receives changed) and the changes they do not imply. Counters in
/// a row that need no change written and have the same modes (idle ones, or ones that grew as
/// much as last time) are one mode byte with `RUN` and a varint: how many more follow.
pub(super) struct DeltaWriter {
    /// The pending run: its mode byte and length.
    pub(super) run: (u8, u64),
}

impl DeltaWriter {
    /// Counter change `d`, against the change before it `prev`; `rare`: errors, refusals or
    /// posted receives may have changed (else their changes are zero, and so were the last).
    #[inline]
    pub(super) fn count(&mut self, out: &mut Vec<u8>, d: &Vals, prev: &Vals, rare: bool) {
        if !rare {
            let (m0, m1) = (mode(d[0], prev[0]), mode(d[1], prev[1]));
            let b0 = m0 | m1 << 2;
            if m0 < 2 && m1 < 2 {
                if self.run.1 > 0 && self.run.0 == b0 {
                    self.run.1 += 1;
                    return;
                }
                self.finish(out);
                self.run = (b0, 1);
                return;
            }
            self.finish(out);
            out.push(b0);
            put_change(out, m0, d[0]);
            put_change(out, m1, d[1]);
            return;
        }
        let m: [u8; 6] = std::array::from_fn(|f| mode(d[f], prev[f]));
        let rest = m[2] | m[3] << 2 | m[4] << 4 | m[5] << 6;
        let b0 = m[0] | m[1] << 2;
        if rest == 0 && m[0] < 2 && m[1] < 2 {
            if self.run.1 > 0 && self.run.0 == b0 {
                self.run.1 += 1;
                return;
            }
            self.finish(out);
            self.run = (b0, 1);
            return;
        }
        self.finish(out);
        out.push(b0 | if rest != 0 { REST } else { 0 });
        if rest != 0 {
            out.push(rest);
        }
        for f in 0..6 {
            put_change(out, m[f], d[f]);
        }
    }

    /// Writes the pending run.
    pub(super) fn finish(&mut self, out: &mut Vec<u8>) {
        match self.run.1 {
            0 => {}
            1 => out.push(self.run.0),
            n => {
                out.push(self.run.0 | RUN);
                put_varint(out, n - 1);
            }
        }
        self.run.1 = 0;
    }
}

pub(super) fn decode_key(rec: &[u8]) -> Option<(State, Head)> {
    let mut pos = 1;
    let head = Head::get(rec, &mut pos)?;
    let n = get_varint(rec, &mut pos).ok()? as usize;
    // Each counter takes at least 14 bytes: a count beyond that is not ours.
    if n > rec.len() / 14 {
        return None;
    }
    let mut st = State {
        counts: Vec::with_capacity(n),
        dels: Vec::with_capacity(n),
    };
    for _ in 0..n {
        let ep = get_varint(rec, &mut pos).ok()? as u32;
        let op = *rec.get(pos)?;
        pos += 1;
        let mut v = [0u64; 6];
        for x in &mut v {
            *x = get_varint(rec, &mut pos).ok()?;
        }
        let mut d = [0u64; 6];
        for x in &mut d {
            *x = get_varint(rec, &mut pos).ok()?;
        }
        st.counts.push(with_vals(ep, op, &v));
        st.dels.push(d);
    }
    Some((st, head))
}

pub(super) fn apply_delta(rec: &[u8], st: &mut State) -> Option<Head> {
    let mut pos = 1;
    let head = Head::get(rec, &mut pos)?;
    let n = get_varint(rec, &mut pos).ok()? as usize;
    if n != st.counts.len() {
        return None;
    }
    // Counters left in the current run, and its mode byte.
    let mut run = (0u8, 0u64);
    for (c, dl) in st.counts.iter_mut().zip(st.dels.iter_mut()) {
        let b0 = if run.1 > 0 {
            run.1 -= 1;
            run.0
        } else {
            let b = *rec.get(pos)?;
            pos += 1;
            if b & RUN != 0 {
                run = (b & !RUN, get_varint(rec, &mut pos).ok()?);
            }
            b & !RUN
        };
        let rest = if b0 & REST != 0 {
            let b = *rec.get(pos)?;
            pos += 1;
            b
        } else {
            0
        };
        let m = [
            b0 & 3,
            (b0 >> 2) & 3,
            rest & 3,
            (rest >> 2) & 3,
            (rest >> 4) & 3,
            rest >> 6,
        ];
        let mut v = vals(c);
        for f in 0..6 {
            let d = get_change(rec, &mut pos, m[f], dl[f])?;
            v[f] = v[f].wrapping_add(d);
            dl[f] = d;
        }
        *c = with_vals(c.ep, c.op, &v);
    }
    Some(head)
}
