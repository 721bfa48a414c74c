//! Sends matched to receives for two-sided operations, in the merged time order.
//!
//! A channel is (destination process, kind, tag): UCX tagged messages match the same tag in order
//! (tag matching is FIFO per tag), UCX streams and libfabric messages match in order per
//! destination, libfabric tagged messages per tag. Within a channel a send pairs with the oldest
//! waiting receive whose source is that sender or unknown, and a receive with the oldest waiting
//! send from its source (any source when unknown). Receives are usually posted before the
//! message arrives; the flow then ends at the receiving thread's first event at or after the
//! send, the earliest point at which that thread can have seen the message.
//!
//! Verbs SEND / SEND_IMM / RDMA_WRITE_IMM consume the oldest receive posted on the peer QP (RC
//! and UC deliver in order): the channel is (peer process, verbs, peer QP endpoint), the receive's
//! the QP it was posted on. A send whose peer QP was not traced is unresolved; receives posted
//! on an SRQ are not paired (which QP shares which SRQ is not recorded).

use std::collections::VecDeque;

use super::FxMap;

use crate::event::{Event, Op, flags};

/// Most unmatched operations kept per channel; older ones are dropped (counted).
pub const MAX_WAITING: usize = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    UcxTag,
    UcxStream,
    OfiMsg,
    OfiTagged,
    /// Verbs two-sided messages; the tag is the receiving QP's endpoint id.
    Verbs,
}

/// The two-sided role of an operation.
pub fn role(ev: &Event) -> Option<(bool, Kind, u64)> {
    if ev.flags & flags::ERROR != 0 {
        return None;
    }
    Some(match Op::from_u8(ev.op)? {
        Op::UcxTagSend | Op::UcxTagSendSync => (true, Kind::UcxTag, ev.addr),
        Op::UcxTagRecv => (false, Kind::UcxTag, ev.addr),
        Op::UcxStreamSend => (true, Kind::UcxStream, 0),
        Op::UcxStreamRecv => (false, Kind::UcxStream, 0),
        Op::OfiSend => (true, Kind::OfiMsg, 0),
        Op::OfiRecv => (false, Kind::OfiMsg, 0),
        Op::OfiTSend => (true, Kind::OfiTagged, ev.addr),
        Op::OfiTRecv => (false, Kind::OfiTagged, ev.addr),
        // The tag of a verbs send is its peer QP's endpoint, which only the caller knows.
        Op::VerbsSend | Op::VerbsSendImm | Op::VerbsWriteImm => (true, Kind::Verbs, 0),
        Op::VerbsRecv => (false, Kind::Verbs, ev.ep as u64),
        _ => return None,
    })
}

/// `role` of every op code, looked up once per event: 0 for none, else `ROLE_SEND` when it
/// sends, `ROLE_KNOWN`, and its `Kind` (+1) in the low bits. The tag is read as `role` reads it.
const ROLE_KNOWN: u8 = 0x80;
const ROLE_SEND: u8 = 0x40;
const ROLES: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut v = 0;
    while v < 256 {
        let op = v as u8;
        t[v] = if op == Op::UcxTagSend as u8 || op == Op::UcxTagSendSync as u8 {
            ROLE_KNOWN | ROLE_SEND | (Kind::UcxTag as u8 + 1)
        } else if op == Op::UcxTagRecv as u8 {
            ROLE_KNOWN | (Kind::UcxTag as u8 + 1)
        } else if op == Op::UcxStreamSend as u8 {
            ROLE_KNOWN | ROLE_SEND | (Kind::UcxStream as u8 + 1)
        } else if op == Op::UcxStreamRecv as u8 {
            ROLE_KNOWN | (Kind::UcxStream as u8 + 1)
        } else if op == Op::OfiSend as u8 {
            ROLE_KNOWN | ROLE_SEND | (Kind::OfiMsg as u8 + 1)
        } else if op == Op::OfiRecv as u8 {
            ROLE_KNOWN | (Kind::OfiMsg as u8 + 1)
        } else if op == Op::OfiTSend as u8 {
            ROLE_KNOWN | ROLE_SEND | (Kind::OfiTagged as u8 + 1)
        } else if op == Op::OfiTRecv as u8 {
            ROLE_KNOWN | (Kind::OfiTagged as u8 + 1)
        } else if op == Op::VerbsSend as u8
            || op == Op::VerbsSendImm as u8
            || op == Op::VerbsWriteImm as u8
        {
            ROLE_KNOWN | ROLE_SEND | (Kind::Verbs as u8 + 1)
        } else if op == Op::VerbsRecv as u8 {
            ROLE_KNOWN | (Kind::Verbs as u8 + 1)
        } else {
            0
        };
        v += 1;
    }
    t
};

/// Whether the op code has a two-sided role at all (`role` is None for every other).
#[inline(always)]
pub fn has_role(op: u8) -> bool {
    ROLES[op as usize] != 0
}

/// `role` through the table (`ROLES`).
#[inline(always)]
fn role_fast(ev: &Event) -> Option<(bool, Kind, u64)> {
    let r = ROLES[ev.op as usize];
    if r == 0 || ev.flags & flags::ERROR != 0 {
        return None;
    }
    let kind = match r & 0x0f {
        1 => Kind::UcxTag,
        2 => Kind::UcxStream,
        3 => Kind::OfiMsg,
        4 => Kind::OfiTagged,
        _ => Kind::Verbs,
    };
    let send = r & ROLE_SEND != 0;
    let tag = match kind {
        Kind::UcxTag | Kind::OfiTagged => ev.addr,
        Kind::Verbs if !send => ev.ep as u64,
        _ => 0,
    };
    Some((send, kind, tag))
}

#[derive(Clone, Copy, Debug)]
struct Waiting {
    seq: u64,
    /// Sender process (for sends), or the known source of a receive.
    src: Option<u32>,
    proc: u32,
    thread: u32,
    ns: u64,
    flags: u8,
}

#[derive(Default)]
struct Channel {
    sends: VecDeque<Waiting>,
    recvs: VecDeque<Waiting>,
}

/// A send paired with a receive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pair {
    pub send_seq: u64,
    pub send_proc: u32,
    pub send_ns: u64,
    pub recv_seq: u64,
    pub recv_proc: u32,
    pub recv_thread: u32,
    pub recv_ns: u64,
    /// The receive completed inside its call (the message had arrived before it).
    pub recv_immediate: bool,
}

impl Pair {
    /// The receive was posted before the send (the usual case).
    pub fn pre_posted(&self) -> bool {
        self.recv_ns < self.send_ns
    }
}

#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct MatchStats {
    /// Two-sided sends whose destination is a traced process.
    pub sends: u64,
    /// Receives seen.
    pub recvs: u64,
    pub paired: u64,
    /// Sends to a process outside the recording, or whose peer could not be resolved.
    pub sends_unresolved: u64,
    /// Left waiting at the end (no matching operation on the other side).
    pub sends_unmatched: u64,
    pub recvs_unmatched: u64,
    /// Dropped from a channel holding more than `MAX_WAITING` operations.
    pub dropped: u64,
}

type ChannelKey = (u32, Kind, u64);

#[derive(Default)]
pub struct Matcher {
    /// Channel key → index in `chans`.
    channels: FxMap<ChannelKey, usize>,
    chans: Vec<Channel>,
    /// The channels used last (a stream between two processes alternates between two).
    recent: [Option<(ChannelKey, usize)>; 4],
    recent_next: usize,
    pub stats: MatchStats,
}

impl Matcher {
    fn channel(&mut self, key: ChannelKey) -> usize {
        let hit = self
            .recent
            .iter()
            .flatten()
            .find(|(k, _)| *k == key)
            .map(|(_, i)| *i);
        match hit {
            Some(i) => i,
            None => {
                let n = self.chans.len();
                let i = *self.channels.entry(key).or_insert(n);
                if i == n {
                    self.chans.push(Channel::default());
                }
                self.recent[self.recent_next] = Some((key, i));
                self.recent_next = (self.recent_next + 1) % self.recent.len();
                i
            }
        }
    }

    /// Feeds one operation: `proc` issued it, `peer` is the resolved other side, `peer_ep` the
    /// peer QP (process, endpoint) of a verbs QP when it was traced. Returns the pair it
    /// completes, if any.
    #[allow(clippy::too_many_arguments)]
    // Inlined into the correlator's loop: returned through memory, the Pair was written field by
    // field and copied out with 16-byte loads the CPU could not forward from those stores (a
    // stall per two-sided operation).
    #[inline(always)]
    pub fn feed(
        &mut self,
        seq: u64,
        ns: u64,
        proc: u32,
        thread: u32,
        ev: &Event,
        peer: Option<u32>,
        peer_ep: Option<(u32, u32)>,
    ) -> Option<Pair> {
        let (is_send, kind, mut tag) = role_fast(ev)?;
        let mut peer = peer;
        if is_send && kind == Kind::Verbs {
            // A verbs message lands in the receive queue of the peer QP, in that process.
            peer = peer_ep.map(|(p, _)| p);
            tag = peer_ep.map_or(0, |(_, e)| e as u64);
        }
        if is_send {
            let Some(dst) = peer else {
                self.stats.sends_unresolved += 1;
                return None;
            };
            self.stats.sends += 1;
            let ci = self.channel((dst, kind, tag));
            let ch = &mut self.chans[ci];
            // The oldest receive is nearly always the one (checked first: no search, no shift).
            let front = ch
                .recvs
                .front()
                .is_some_and(|r| r.src.is_none_or(|s| s == proc));
            let found = if front {
                Some(0)
            } else {
                ch.recvs
                    .iter()
                    .position(|r| r.src.is_none_or(|s| s == proc))
            };
            if let Some(i) = found {
                let r = if i == 0 {
                    ch.recvs.pop_front()?
                } else {
                    ch.recvs.remove(i)?
                };
                self.stats.paired += 1;
                return Some(Pair {
                    send_seq: seq,
                    send_proc: proc,
                    send_ns: ns,
                    recv_seq: r.seq,
                    recv_proc: r.proc,
                    recv_thread: r.thread,
                    recv_ns: r.ns,
                    recv_immediate: r.flags & flags::IMMEDIATE != 0,
                });
            }
            if ch.sends.len() >= MAX_WAITING {
                ch.sends.pop_front();
                self.stats.dropped += 1;
            }
            ch.sends.push_back(Waiting {
                seq,
                src: Some(proc),
                proc,
                thread,
                ns,
                flags: ev.flags,
            });
            None
        } else {
            self.stats.recvs += 1;
            let ci = self.channel((proc, kind, tag));
            let ch = &mut self.chans[ci];
            let front = ch
                .sends
                .front()
                .is_some_and(|s| peer.is_none_or(|p| s.src == Some(p)));
            let found = if front {
                Some(0)
            } else {
                ch.sends
                    .iter()
                    .position(|s| peer.is_none_or(|p| s.src == Some(p)))
            };
            if let Some(i) = found {
                let s = if i == 0 {
                    ch.sends.pop_front()?
                } else {
                    ch.sends.remove(i)?
                };
                self.stats.paired += 1;
                return Some(Pair {
                    send_seq: s.seq,
                    send_proc: s.proc,
                    send_ns: s.ns,
                    recv_seq: seq,
                    recv_proc: proc,
                    recv_thread: thread,
                    recv_ns: ns,
                    recv_immediate: ev.flags & flags::IMMEDIATE != 0,
                });
            }
            if ch.recvs.len() >= MAX_WAITING {
                ch.recvs.pop_front();
                self.stats.dropped += 1;
            }
            ch.recvs.push_back(Waiting {
                seq,
                src: peer,
                proc,
                thread,
                ns,
                flags: ev.flags,
            });
            None
        }
    }

    /// Counts what is left waiting.
    pub fn finish(&mut self) {
        for ch in &self.chans {
            self.stats.sends_unmatched += ch.sends.len() as u64;
            self.stats.recvs_unmatched += ch.recvs.len() as u64;
        }
        self.channels.clear();
        self.chans.clear();
        self.recent = Default::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table answers what `role` answers, for every op code, flags and field.
    #[test]
    fn role_table_is_role() {
        for op in 0..=255u8 {
            for flags in [0u8, flags::ERROR, flags::IMMEDIATE, 0xff] {
                let e = Event {
                    op,
                    flags,
                    ep: 77,
                    addr: 0x1234_5678_9abc,
                    ..Default::default()
                };
                assert_eq!(role_fast(&e), role(&e), "op {op} flags {flags:#x}");
            }
        }
    }

    fn ev(op: Op, tag: u64) -> Event {
        Event {
            op: op as u8,
            addr: tag,
            bytes: 8,
            ..Default::default()
        }
    }

    #[test]
    fn pairs_in_order_per_tag() {
        let mut m = Matcher::default();
        // Receiver (proc 1) posts two receives with tags 5 and 6, then sends arrive 6, 5.
        assert!(
            m.feed(0, 10, 1, 1, &ev(Op::UcxTagRecv, 5), None, None)
                .is_none()
        );
        assert!(
            m.feed(1, 11, 1, 1, &ev(Op::UcxTagRecv, 6), None, None)
                .is_none()
        );
        let p = m
            .feed(2, 20, 0, 0, &ev(Op::UcxTagSend, 6), Some(1), None)
            .unwrap();
        assert_eq!((p.send_seq, p.recv_seq), (2, 1));
        assert!(p.pre_posted());
        let p = m
            .feed(3, 21, 0, 0, &ev(Op::UcxTagSend, 5), Some(1), None)
            .unwrap();
        assert_eq!((p.send_seq, p.recv_seq), (3, 0));
        // A send before its receive.
        assert!(
            m.feed(4, 30, 0, 0, &ev(Op::UcxTagSend, 7), Some(1), None)
                .is_none()
        );
        let p = m
            .feed(5, 31, 1, 1, &ev(Op::UcxTagRecv, 7), None, None)
            .unwrap();
        assert_eq!((p.send_seq, p.recv_seq), (4, 5));
        assert!(!p.pre_posted());
        assert!(
            m.feed(6, 40, 0, 0, &ev(Op::UcxTagSend, 7), None, None)
                .is_none()
        );
        m.finish();
        assert_eq!(m.stats.paired, 3);
        assert_eq!(m.stats.sends_unresolved, 1);
    }

    fn verbs(op: Op, ep: u32) -> Event {
        Event {
            op: op as u8,
            ep,
            bytes: 64,
            ..Default::default()
        }
    }

    #[test]
    fn verbs_sends_consume_the_peer_qps_receives_in_order() {
        let mut m = Matcher::default();
        // Process 1 posts two receives on its QP endpoint 3 and one on endpoint 4.
        for (seq, ep) in [(0, 3), (1, 3), (2, 4)] {
            assert!(
                m.feed(
                    seq,
                    10 + seq,
                    1,
                    1,
                    &verbs(Op::VerbsRecv, ep),
                    Some(0),
                    None
                )
                .is_none()
            );
        }
        // Process 0's QP (its peer QP: process 1, endpoint 4) sends: the receive on endpoint 4.
        let p = m
            .feed(3, 20, 0, 0, &verbs(Op::VerbsSend, 7), Some(1), Some((1, 4)))
            .unwrap();
        assert_eq!((p.send_seq, p.recv_seq, p.recv_proc), (3, 2, 1));
        // Another QP of process 0, peer endpoint 3: the oldest receive posted there.
        let p = m
            .feed(
                4,
                21,
                0,
                0,
                &verbs(Op::VerbsSendImm, 8),
                Some(1),
                Some((1, 3)),
            )
            .unwrap();
        assert_eq!((p.send_seq, p.recv_seq), (4, 0));
        // The peer QP was not traced: unresolved, even with the peer process known.
        assert!(
            m.feed(5, 22, 0, 0, &verbs(Op::VerbsSend, 9), Some(1), None)
                .is_none()
        );
        m.finish();
        assert_eq!(m.stats.paired, 2);
        assert_eq!(m.stats.sends_unresolved, 1);
        assert_eq!(m.stats.recvs_unmatched, 1);
        assert_eq!(m.stats.sends_unmatched, 0);
    }
}
