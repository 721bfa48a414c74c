//! Streaming k-way merge of every thread file of every process in CLOCK_REALTIME order.
//! Memory: one decoded block per thread file (≤ 16 Ki events each) plus a heap entry.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::clock::{ClockCursor, ProcClock};
use crate::event::Event;
use crate::trace::reader::{Problem, ProcessRecording, ThreadEventReader};

/// One event with its place in the merged stream. For a call that blocked (`Op::blocks`),
/// `ev.addr` is the time it blocked in ns (ticks in the record).
#[derive(Clone, Copy, Debug, Default)]
pub struct Merged {
    /// CLOCK_REALTIME ns.
    pub ns: u64,
    /// Index of the process.
    pub proc: u32,
    /// Index of the thread file (stable over the whole merge: `Merger::threads`).
    pub thread: u32,
    pub ev: Event,
}

struct Cursor {
    proc: u32,
    reader: ThreadEventReader,
    /// The decoded block, blocking calls' `addr` already in ns.
    block: Vec<Event>,
    /// Merged time of each event of `block` (its own clock, never going backwards).
    ns: Vec<u64>,
    pos: usize,
    clock: ClockCursor,
    last_ns: u64,
}

/// A thread file taking part in the merge.
#[derive(Clone, Debug)]
pub struct ThreadInfo {
    pub proc: u32,
    pub tid: u32,
    pub events: u64,
}

/// Order of the merge: time, then process, then thread file, in one integer (ns in the high
/// 64 bits, process and thread file below): compared, written and read back whole. As a tuple
/// it was written field by field and read back as one 16-byte load right after, which the CPU
/// cannot forward from the stores: a stall at every change of thread file (4 % of an export).
type Key = u128;

#[inline(always)]
fn key(ns: u64, proc: u32, thread: u32) -> Key {
    ((ns as u128) << 64) | ((proc as u128) << 32) | thread as u128
}

/// The thread file of a key.
#[inline(always)]
fn thread_of(k: Key) -> u32 {
    k as u32
}

pub struct Merger<'a> {
    clocks: &'a [ProcClock],
    cursors: Vec<Cursor>,
    /// The head of every cursor with events left, but the running one's.
    heap: BinaryHeap<Reverse<Key>>,
    /// The cursor events are taken from while they come before every other cursor's head
    /// (`limit`, the heap's top): most steps then touch no heap.
    run: Option<u32>,
    limit: Key,
    pub threads: Vec<ThreadInfo>,
    /// Files that could not be read, or stopped early (file, offset, reason).
    pub problems: Vec<Problem>,
}

impl<'a> Merger<'a> {
    /// Opens every thread file of `procs`; `clocks[i]` converts the ticks of `procs[i]`.
    pub fn new(procs: &[ProcessRecording], clocks: &'a [ProcClock]) -> Merger<'a> {
        let mut m = Merger {
            clocks,
            cursors: Vec::new(),
            heap: BinaryHeap::new(),
            run: None,
            limit: NO_LIMIT,
            threads: Vec::new(),
            problems: Vec::new(),
        };
        for (pi, p) in procs.iter().enumerate() {
            let Some(clock) = clocks.get(pi) else { break };
            for (tid, path) in p.thread_files() {
                match ThreadEventReader::open(&path, tid) {
                    Ok(reader) => {
                        let idx = m.cursors.len() as u32;
                        m.cursors.push(Cursor {
                            proc: pi as u32,
                            reader,
                            block: Vec::new(),
                            ns: Vec::new(),
                            pos: 0,
                            clock: clock.cursor(),
                            last_ns: 0,
                        });
                        m.threads.push(ThreadInfo {
                            proc: pi as u32,
                            tid,
                            events: 0,
                        });
                        m.refill(idx);
                    }
                    Err(p) => m.problems.push(p),
                }
            }
        }
        m
    }

    /// Loads the next block of cursor `i` (its block used up), converts its times, and pushes
    /// its head; a cursor at its end is left out.
    fn refill(&mut self, i: u32) {
        let c = &mut self.cursors[i as usize];
        while c.pos >= c.block.len() {
            match c.reader.next_block().map(|_| ()) {
                Some(()) => {
                    c.reader.swap_events(&mut c.block);
                    c.pos = 0;
                }
                None => {
                    if let Some(p) = c.reader.problem.take() {
                        self.problems.push(p);
                    }
                    c.block = Vec::new();
                    c.ns = Vec::new();
                    return;
                }
            }
        }
        // The whole block at once: each time through the clock segment of its own tick
        // count, never before the cursor's previous event; a blocking call's duration at the
        // rate of the segment its return falls in.
        let clock = &self.clocks[c.proc as usize];
        c.ns.clear();
        c.ns.resize(c.block.len(), 0);
        let mut last = c.last_ns;
        for (ev, ns) in c.block.iter_mut().zip(c.ns.iter_mut()) {
            last = c.clock.to_real_ns(clock, ev.tsc).max(last);
            *ns = last;
            if let Some(ticks) = ev.blocked() {
                ev.addr = c.clock.span_ns(ticks);
            }
        }
        c.last_ns = last;
        self.threads[i as usize].events += c.block.len() as u64;
        self.heap.push(Reverse(key(c.ns[0], c.proc, i)));
    }

    /// The next event in time order (ties: by process, then thread file).
    #[inline]
    pub fn next_event(&mut self) -> Option<Merged> {
        loop {
            if let Some(i) = self.run {
                let c = &mut self.cursors[i as usize];
                if let (Some(&ns), Some(&ev)) = (c.ns.get(c.pos), c.block.get(c.pos)) {
                    let key = key(ns, c.proc, i);
                    if key < self.limit {
                        c.pos += 1;
                        return Some(Merged {
                            ns,
                            proc: c.proc,
                            thread: i,
                            ev,
                        });
                    }
                    // The heap's top comes first: it runs next, this head takes its place.
                    let next = match self.heap.peek_mut() {
                        Some(mut top) => std::mem::replace(&mut *top, Reverse(key)).0,
                        None => key,
                    };
                    // With one other head (two thread files), this one is the heap's top now.
                    self.limit = if self.heap.len() == 1 {
                        key
                    } else {
                        self.heap.peek().map_or(NO_LIMIT, |r| r.0)
                    };
                    self.run = Some(thread_of(next));
                    continue;
                }
                // Its block is used up.
                self.run = None;
                self.refill(i);
            }
            let Reverse(first) = self.heap.pop()?;
            self.limit = self.heap.peek().map_or(NO_LIMIT, |r| r.0);
            self.run = Some(thread_of(first));
        }
    }
}

/// No other cursor has events left.
const NO_LIMIT: Key = u128::MAX;
