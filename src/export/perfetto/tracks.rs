//! Tracks: uuids, their descriptors, and the tree of process, thread, endpoint / QP and GPU
//! tracks (pids and tids made unique over hosts).

use std::collections::HashSet;
use std::io::Write;

use super::PerfettoSink;
use super::fields::*;
use crate::correlate::merge::ThreadInfo;
use crate::correlate::{Correlation, PhaseTrack};
use crate::export::proto::{begin, end, string, uint};

impl<W: Write> PerfettoSink<W> {
    pub(super) fn uuid(&mut self) -> u64 {
        let u = self.next_uuid;
        self.next_uuid += 1;
        self.stats.tracks += 1;
        u
    }

    /// Writes a TrackDescriptor; `body` adds fields after uuid and parent.
    pub(super) fn track(
        &mut self,
        uuid: u64,
        parent: Option<u64>,
        name: &str,
        body: impl FnOnce(&mut Vec<u8>),
    ) {
        self.pkt.clear();
        uint(&mut self.pkt, P_SEQ_ID, SEQ);
        let d = begin(&mut self.pkt, P_TRACK_DESC);
        uint(&mut self.pkt, 1, uuid);
        if let Some(p) = parent {
            uint(&mut self.pkt, 5, p);
        }
        if !name.is_empty() {
            string(&mut self.pkt, 2, name);
        }
        body(&mut self.pkt);
        end(&mut self.pkt, d);
        self.emit();
    }

    pub(super) fn counter_track(&mut self, parent: Option<u64>, name: &str) -> u64 {
        let u = self.uuid();
        self.track(u, parent, name, |b| {
            let c = begin(b, 8);
            uint(b, 3, 3); // UNIT_SIZE_BYTES (per second: see the name)
            end(b, c);
        });
        u
    }

    pub(super) fn ep_track(&mut self, proc: u32, ep: u32) -> u64 {
        if let Some(&u) = self.ep_uuid.get(&(proc, ep)) {
            return u;
        }
        let parent = match self.ep_gpu.get(&(proc, ep)).copied() {
            Some(g) => self.gpu_track(proc, g),
            None => self.proc_uuid[proc as usize],
        };
        let name = self
            .ep_label
            .get(&(proc, ep))
            .cloned()
            .unwrap_or_else(|| format!("ep#{ep}"));
        let u = self.uuid();
        self.track(u, Some(parent), &name, |_| {});
        self.ep_uuid.insert((proc, ep), u);
        u
    }

    /// The "GPU n" track of a process (under its process track), defined on first use.
    pub(super) fn gpu_track(&mut self, proc: u32, g: u32) -> u64 {
        if let Some(&u) = self.gpu_uuid.get(&(proc, g)) {
            return u;
        }
        let u = self.uuid();
        let pu = self.proc_uuid[proc as usize];
        self.track(u, Some(pu), &format!("GPU {g}"), |_| {});
        self.gpu_uuid.insert((proc, g), u);
        u
    }

    pub(super) fn write_tracks(&mut self, c: &Correlation, threads: &[ThreadInfo]) {
        let mut used: HashSet<u32> = HashSet::new();
        let mut synthetic = 1u32 << 30;
        let mut fresh = |want: u32, used: &mut HashSet<u32>| -> u32 {
            if want != 0 && used.insert(want) {
                return want;
            }
            while !used.insert(synthetic) {
                synthetic += 1;
            }
            synthetic
        };
        for (pi, p) in c.rec.processes.iter().enumerate() {
            let pid = fresh(p.identity.pid, &mut used);
            self.proc_pid.push(pid);
            let u = self.uuid();
            let label = c.proc_label(pi as u32);
            self.track(u, None, "", |b| {
                let d = begin(b, 3);
                uint(b, 1, pid as u64);
                string(b, 6, &label);
                end(b, d);
            });
            self.proc_uuid.push(u);
            let ph = self.uuid();
            self.track(ph, Some(u), "phases", |_| {});
            self.phase_uuid.push(ph);
            for d in &p.endpoints {
                if let Some(g) = d.gpu {
                    self.ep_gpu.insert((pi as u32, d.id), g);
                }
                let peer = c
                    .topo
                    .ep(pi as u32, d.id)
                    .and_then(|e| e.single_peer())
                    .map(|q| format!(" → {}", c.proc_label(q)))
                    .unwrap_or_else(|| {
                        if d.peer.text.is_empty() {
                            String::new()
                        } else {
                            format!(" → {}", d.peer.text)
                        }
                    });
                let qpn = d.qpn.map(|q| format!(" qpn {q:#x}")).unwrap_or_default();
                self.ep_label.insert(
                    (pi as u32, d.id),
                    format!("{} {} {}{qpn}{peer}", d.label, d.kind.name(), d.transport),
                );
            }
            self.ep_label
                .entry((pi as u32, 0))
                .or_insert_with(|| "(unattributed)".into());
        }
        for t in threads {
            let proc = t.proc as usize;
            let pid = self.proc_pid.get(proc).copied().unwrap_or(0);
            let tid = if t.tid == c.rec.processes[proc].identity.pid {
                pid
            } else {
                fresh(t.tid, &mut used)
            };
            let name = c.rec.processes[proc]
                .threads
                .iter()
                .find(|(id, _)| *id == t.tid)
                .map(|(_, n)| n.clone())
                .unwrap_or_else(|| format!("thread {}", t.tid));
            let u = self.uuid();
            let parent = self.proc_uuid[proc];
            self.track(u, Some(parent), "", |b| {
                let d = begin(b, 4);
                uint(b, 1, pid as u64);
                uint(b, 2, tid as u64);
                string(b, 5, &name);
                end(b, d);
            });
            self.thread_uuid.push(u);
            let files = threads.iter().filter(|x| x.proc == t.proc).count();
            self.thread_tid.push((files > 1).then_some(tid));
        }
    }

    /// The track a phase's slices go on: its process's "phases" track, or its thread's track
    /// (the thread's "busy" slices).
    pub(super) fn phase_track(&self, t: PhaseTrack) -> Option<u64> {
        match t {
            PhaseTrack::Process(p) => self.phase_uuid.get(p as usize).copied(),
            PhaseTrack::Thread(i) => self.thread_uuid.get(i as usize).copied(),
        }
    }
}
