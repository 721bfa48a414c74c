//! A direct reader of the relay frames a large job sends most: `RelayFrame::Proc` carrying a
//! clock sample, a snapshot or sampled events (a job of 2,048 processes × 64 QPs sends 6,144 of
//! them, with 262,144 counters, every 250 ms, at `qp-every` 1), and `RelayFrame::Totals` (one
//! per process every 250 ms at `qp-every` N > 1). It reads postcard's format for these types
//! (varints with postcard's bounds, strings checked as UTF-8, fields in declaration order)
//! without serde's visitors, about three times faster. Every other frame, and any frame it does
//! not take, goes to postcard; a frame it takes decodes to what postcard gives (the tests compare
//! both on random and corrupted frames).

use super::{ProcTotals, RelayFrame};
use crate::agg::ProcKey;
use crate::event::{ClockSample, DropCounters, Event, OpCount, Snapshot};
use crate::wire::Frame;

/// Index of `RelayFrame::Proc`, and of `RelayFrame::Totals` (what a relay at `qp-every` N > 1
/// sends for most processes every tick).
const PROC: u32 = 0;
const TOTALS: u32 = 4;
/// Indexes of `Frame::Clock`, `Frame::Snapshot`, `Frame::Events`.
const CLOCK: u32 = 3;
const SNAPSHOT: u32 = 4;
const EVENTS: u32 = 5;

struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Reader<'_> {
    #[inline]
    fn byte(&mut self) -> Option<u8> {
        let v = *self.b.get(self.pos)?;
        self.pos += 1;
        Some(v)
    }

    /// A varint of at most `max` bytes whose last byte is at most `last` (postcard's bounds).
    #[inline]
    fn varint(&mut self, max: u32, last: u8) -> Option<u64> {
        let first = self.byte()?;
        if first & 0x80 == 0 {
            return Some(u64::from(first));
        }
        let mut out = u64::from(first & 0x7f);
        for i in 1..max {
            let v = self.byte()?;
            out |= u64::from(v & 0x7f) << (7 * i);
            if v & 0x80 == 0 {
                return (i < max - 1 || v <= last).then_some(out);
            }
        }
        None
    }

    #[inline]
    fn u64(&mut self) -> Option<u64> {
        self.varint(10, 0x01)
    }

    #[inline]
    fn u32(&mut self) -> Option<u32> {
        self.varint(5, 0x0f).map(|v| v as u32)
    }

    /// A sequence length (usize, a u64 varint on 64-bit targets).
    fn len(&mut self) -> Option<usize> {
        usize::try_from(self.u64()?).ok()
    }

    fn string(&mut self) -> Option<String> {
        let n = self.len()?;
        let end = self.pos.checked_add(n)?;
        let s = std::str::from_utf8(self.b.get(self.pos..end)?).ok()?;
        self.pos = end;
        Some(s.to_string())
    }

    /// A bool: one byte, 0 or 1.
    fn bool(&mut self) -> Option<bool> {
        match self.byte()? {
            0 => Some(false),
            1 => Some(true),
            _ => None,
        }
    }

    /// An `Option` tag: one byte, 0 (None) or 1 (Some).
    fn some(&mut self) -> Option<bool> {
        self.bool()
    }

    fn f64(&mut self) -> Option<f64> {
        let end = self.pos.checked_add(8)?;
        let b: [u8; 8] = self.b.get(self.pos..end)?.try_into().ok()?;
        self.pos = end;
        Some(f64::from_le_bytes(b))
    }

    fn drops(&mut self) -> Option<DropCounters> {
        Some(DropCounters {
            ring_full: self.u64()?,
            record_lost: self.u64()?,
            live_not_sent: self.u64()?,
            unattributed_ops: self.u64()?,
            coalesced_doorbells: self.u64()?,
            unparsable_wqes: self.u64()?,
            endpoint_overflow: self.u64()?,
            hook_failures: self.u64()?,
        })
    }

    /// Room for `n` items of at least `min` bytes each in what is left (a length is untrusted).
    fn capacity(&self, n: usize, min: usize) -> usize {
        n.min((self.b.len() - self.pos) / min)
    }
}

/// The frame in `body`, when it is one this reader takes.
pub(super) fn decode(body: &[u8]) -> Option<RelayFrame> {
    let mut r = Reader { b: body, pos: 0 };
    let variant = r.u32()?;
    if variant != PROC && variant != TOTALS {
        return None;
    }
    let key = ProcKey {
        host: r.string()?,
        pid: r.u32()?,
        start_ns: r.u64()?,
    };
    if variant == TOTALS {
        return Some(RelayFrame::Totals {
            key,
            totals: Box::new(totals(&mut r)?),
        });
    }
    let frame = match r.u32()? {
        CLOCK => Frame::Clock(ClockSample {
            tsc: r.u64()?,
            mono_ns: r.u64()?,
            real_ns: r.u64()?,
        }),
        SNAPSHOT => Frame::Snapshot(snapshot(&mut r)?),
        EVENTS => {
            let n = r.len()?;
            let mut evs = Vec::with_capacity(r.capacity(n, 10));
            for _ in 0..n {
                evs.push(Event {
                    tsc: r.u64()?,
                    tid: r.u32()?,
                    ep: r.u32()?,
                    op: r.byte()?,
                    flags: r.byte()?,
                    aux: r.u32()?,
                    bytes: r.u64()?,
                    addr: r.u64()?,
                });
            }
            Frame::Events(evs)
        }
        _ => return None,
    };
    Some(RelayFrame::Proc { key, frame })
}

fn totals(r: &mut Reader) -> Option<ProcTotals> {
    Some(ProcTotals {
        at_ns: r.u64()?,
        seq: r.u64()?,
        drops: r.drops()?,
        events: r.u64()?,
        threads: r.u32()?,
        layers_used: r.u32()?,
        sums: [
            r.u64()?,
            r.u64()?,
            r.u64()?,
            r.u64()?,
            r.u64()?,
            r.u64()?,
            r.u64()?,
            r.u64()?,
        ],
        monotone: r.bool()?,
        now: if r.some()? {
            Some((r.u64()?, r.f64()?, r.f64()?, r.f64()?))
        } else {
            None
        },
        clock: if r.some()? {
            Some(ClockSample {
                tsc: r.u64()?,
                mono_ns: r.u64()?,
                real_ns: r.u64()?,
            })
        } else {
            None
        },
        unsent_events: r.u32()?,
    })
}

fn snapshot(r: &mut Reader) -> Option<Snapshot> {
    let at_ns = r.u64()?;
    let seq = r.u64()?;
    let n = r.len()?;
    let mut counts = Vec::with_capacity(r.capacity(n, 8));
    for _ in 0..n {
        counts.push(OpCount {
            ep: r.u32()?,
            op: r.byte()?,
            ops: r.u64()?,
            bytes: r.u64()?,
            errors: r.u64()?,
            refused: r.u64()?,
            posted: r.u64()?,
            posted_bytes: r.u64()?,
        });
    }
    Some(Snapshot {
        at_ns,
        seq,
        counts,
        drops: DropCounters {
            ring_full: r.u64()?,
            record_lost: r.u64()?,
            live_not_sent: r.u64()?,
            unattributed_ops: r.u64()?,
            coalesced_doorbells: r.u64()?,
            unparsable_wqes: r.u64()?,
            endpoint_overflow: r.u64()?,
            hook_failures: r.u64()?,
        },
        events: r.u64()?,
        threads: r.u32()?,
        layers_used: r.u32()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        /// Small values mostly, every varint length sometimes.
        fn val(&mut self) -> u64 {
            let bits = self.next() % 65;
            self.next() & (u64::MAX >> (64 - bits.max(1)))
        }
    }

    fn frame(g: &mut Rng) -> RelayFrame {
        let key = ProcKey {
            host: ["node007", "", "hôte-ü", "n"][(g.next() % 4) as usize].into(),
            pid: g.val() as u32,
            start_ns: g.val(),
        };
        let frame = match g.next() % 5 {
            0 => Frame::Clock(ClockSample {
                tsc: g.val(),
                mono_ns: g.val(),
                real_ns: g.val(),
            }),
            1 | 2 => Frame::Snapshot(Snapshot {
                at_ns: g.val(),
                seq: g.val(),
                counts: (0..g.next() % 9)
                    .map(|_| OpCount {
                        ep: g.val() as u32,
                        op: g.val() as u8,
                        ops: g.val(),
                        bytes: g.val(),
                        errors: g.val(),
                        refused: g.val(),
                        posted: g.val(),
                        posted_bytes: g.val(),
                    })
                    .collect(),
                drops: DropCounters {
                    ring_full: g.val(),
                    hook_failures: g.val(),
                    ..Default::default()
                },
                events: g.val(),
                threads: g.val() as u32,
                layers_used: g.val() as u32,
            }),
            3 => Frame::Events(
                (0..g.next() % 5)
                    .map(|_| Event {
                        tsc: g.val(),
                        tid: g.val() as u32,
                        ep: g.val() as u32,
                        op: g.val() as u8,
                        flags: g.val() as u8,
                        aux: g.val() as u32,
                        bytes: g.val(),
                        addr: g.val(),
                    })
                    .collect(),
            ),
            _ => Frame::Bye { at_ns: g.val() },
        };
        match g.next() % 7 {
            0 => RelayFrame::Heartbeat {
                at_ns: g.val(),
                processes: g.val() as u32,
            },
            1 => RelayFrame::Totals {
                key,
                totals: Box::new(ProcTotals {
                    at_ns: g.val(),
                    seq: g.val(),
                    drops: DropCounters {
                        live_not_sent: g.val(),
                        endpoint_overflow: g.val(),
                        ..Default::default()
                    },
                    events: g.val(),
                    threads: g.val() as u32,
                    layers_used: g.val() as u32,
                    sums: std::array::from_fn(|_| g.val()),
                    monotone: g.next().is_multiple_of(2),
                    now: (!g.next().is_multiple_of(3)).then(|| {
                        (
                            g.val(),
                            g.val() as f64 / 3.0,
                            f64::from_bits(g.next() >> 2),
                            -(g.val() as f64),
                        )
                    }),
                    clock: g.next().is_multiple_of(2).then(|| ClockSample {
                        tsc: g.val(),
                        mono_ns: g.val(),
                        real_ns: g.val(),
                    }),
                    unsent_events: g.val() as u32,
                }),
            },
            _ => RelayFrame::Proc { key, frame },
        }
    }

    /// Whatever this reader takes, postcard decodes to the same frame: on every frame it is
    /// meant for, and on those frames cut short or with bytes changed.
    #[test]
    fn takes_what_postcard_takes_and_reads_the_same() {
        let mut g = Rng(0x2545_f491_4f6c_dd1d);
        let (mut taken, mut corrupt_taken) = (0, 0);
        for _ in 0..20_000 {
            let f = frame(&mut g);
            let bytes = postcard::to_allocvec(&f).expect("encode");
            let fast = decode(&bytes);
            let hot = matches!(
                &f,
                RelayFrame::Proc {
                    frame: Frame::Clock(_) | Frame::Snapshot(_) | Frame::Events(_),
                    ..
                } | RelayFrame::Totals { .. }
            );
            assert_eq!(fast.is_some(), hot, "{f:?}");
            if let Some(x) = fast {
                assert_eq!(x, f);
                taken += 1;
            }
            // Cut, changed, and overlong varints (a byte 0x80 inserted before a final byte).
            let mut bad = bytes.clone();
            match g.next() % 3 {
                0 => bad.truncate((g.next() as usize) % bytes.len()),
                1 => {
                    let i = (g.next() as usize) % bytes.len();
                    bad[i] = g.next() as u8;
                }
                _ => {
                    let i = (g.next() as usize) % bytes.len();
                    if bad[i] < 0x80 {
                        bad[i] |= 0x80;
                        bad.insert(i + 1, 0);
                    }
                }
            }
            if let Some(x) = decode(&bad) {
                let p: RelayFrame = postcard::from_bytes(&bad).expect("postcard takes it too");
                // Compared as bytes: a changed byte may make a rate NaN, which is not equal
                // to itself.
                assert_eq!(
                    postcard::to_allocvec(&x).expect("encode"),
                    postcard::to_allocvec(&p).expect("encode"),
                    "{bad:?}"
                );
                corrupt_taken += 1;
            }
        }
        assert!(
            taken > 9_000 && corrupt_taken > 1_000,
            "{taken} {corrupt_taken}"
        );
    }

    #[test]
    fn varints_keep_postcards_bounds() {
        let rd = |b: &[u8]| Reader { b, pos: 0 }.u32();
        assert_eq!(rd(&[0x7f]), Some(0x7f));
        assert_eq!(
            rd(&[0x80, 0x00]),
            Some(0),
            "overlong but accepted, as postcard does"
        );
        assert_eq!(rd(&[0xff, 0xff, 0xff, 0xff, 0x0f]), Some(u32::MAX));
        assert_eq!(rd(&[0xff, 0xff, 0xff, 0xff, 0x10]), None);
        assert_eq!(rd(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x00]), None);
        let rd = |b: &[u8]| Reader { b, pos: 0 }.u64();
        let mut max = vec![0xff; 9];
        max.push(0x01);
        assert_eq!(rd(&max), Some(u64::MAX));
        max[9] = 0x02;
        assert_eq!(rd(&max), None);
        assert_eq!(rd(&[0x80]), None, "cut short");
    }
}
