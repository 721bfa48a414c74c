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
    block: Vec<Event>,
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

pub struct Merger<'a> {
    clocks: &'a [ProcClock],
    cursors: Vec<Cursor>,
    heap: BinaryHeap<Reverse<(u64, u32, u32)>>,
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

    /// Loads the next block of cursor `i` if its block is used up, and pushes its head.
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
                    return;
                }
            }
        }
        let clock = &self.clocks[c.proc as usize];
        let ns = c.clock.to_real_ns(clock, c.block[c.pos].tsc).max(c.last_ns);
        c.last_ns = ns;
        self.heap.push(Reverse((ns, c.proc, i)));
    }

    /// The next event in time order (ties: by process, then thread file).
    #[inline]
    pub fn next_event(&mut self) -> Option<Merged> {
        let mut top = self.heap.peek_mut()?;
        let Reverse((ns, proc, i)) = *top;
        let c = &mut self.cursors[i as usize];
        let mut ev = c.block[c.pos];
        if let Some(ticks) = ev.blocked() {
            ev.addr = c.clock.span_ns(ticks);
        }
        c.pos += 1;
        self.threads[i as usize].events += 1;
        if c.pos < c.block.len() {
            // Replace the top in place (one sift instead of a pop and a push).
            let clock = &self.clocks[c.proc as usize];
            let n = c.clock.to_real_ns(clock, c.block[c.pos].tsc).max(ns);
            c.last_ns = n;
            *top = Reverse((n, c.proc, i));
        } else {
            std::collections::binary_heap::PeekMut::pop(top);
            self.refill(i);
        }
        Some(Merged {
            ns,
            proc,
            thread: i,
            ev,
        })
    }
}
