//! Runs in a record directory: the processes of one job overlap in time; two jobs recorded into
//! one directory one after the other do not. `export` and `report` keep runs apart instead of
//! merging them into one job that never happened (a rank matrix of the first run, a node matrix
//! of both, a "barrier spread" of minutes).
//!
//! A process lives from its start to its goodbye (or its last snapshot when the record was cut).
//! Processes whose lives overlap, or start within `RUN_GAP_NS` of the end of the run so far,
//! belong to one run. `sigmatop run --record` refuses a non-empty directory, so this only has
//! to sort out directories filled by hand (`SIGMATOP_RECORD` set twice).

use super::reader::{ProcessRecording, Recording};

/// A process that starts this long after every earlier one ended begins a new run.
pub const RUN_GAP_NS: u64 = 1_000_000_000;

/// One run: indices into `Recording::processes`, and when it began and ended (ns, CLOCK_REALTIME).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Run {
    pub processes: Vec<usize>,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// When a process began and ended, as far as its record says.
pub fn lifetime(p: &ProcessRecording) -> (u64, u64) {
    let last = p.last_snapshot().map_or(0, |s| s.at_ns);
    let start = match p.identity.start_ns {
        0 => p.snapshots.first().map_or(0, |s| s.at_ns),
        s => s,
    };
    (start, last.max(start))
}

impl Recording {
    /// The runs of this recording, in time order; one run when everything overlaps.
    pub fn runs(&self) -> Vec<Run> {
        let mut order: Vec<(u64, u64, usize)> = self
            .processes
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let (s, e) = lifetime(p);
                (s, e, i)
            })
            .collect();
        order.sort_unstable();
        let mut runs: Vec<Run> = Vec::new();
        for (s, e, i) in order {
            match runs.last_mut() {
                Some(r) if s <= r.end_ns.saturating_add(RUN_GAP_NS) => {
                    r.processes.push(i);
                    r.end_ns = r.end_ns.max(e);
                }
                _ => runs.push(Run {
                    processes: vec![i],
                    start_ns: s,
                    end_ns: e,
                }),
            }
        }
        for r in &mut runs {
            r.processes.sort_unstable();
        }
        runs
    }

    /// This recording with only the processes of `run` (the problems of the others dropped).
    pub fn only(mut self, run: &Run) -> Recording {
        let keep: Vec<bool> = (0..self.processes.len())
            .map(|i| run.processes.binary_search(&i).is_ok())
            .collect();
        let dirs: Vec<std::path::PathBuf> = self
            .processes
            .iter()
            .zip(&keep)
            .filter(|(_, k)| !**k)
            .map(|(p, _)| p.dir.clone())
            .collect();
        let mut i = 0;
        self.processes.retain(|_| {
            i += 1;
            keep[i - 1]
        });
        self.problems
            .retain(|pr| !dirs.iter().any(|d| pr.file.starts_with(d)));
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Identity, Snapshot};

    fn proc(pid: u32, start: u64, end: u64) -> ProcessRecording {
        ProcessRecording {
            dir: format!("/r/h/{pid}").into(),
            identity: Identity {
                pid,
                start_ns: start,
                ..Default::default()
            },
            snapshots: vec![Snapshot {
                at_ns: end,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn overlapping_processes_are_one_run_and_a_later_job_another() {
        const S: u64 = 1_000_000_000;
        let rec = Recording {
            processes: vec![
                proc(1, 100 * S, 110 * S),
                proc(2, 101 * S, 109 * S),
                proc(3, 130 * S, 140 * S),
                proc(4, 110 * S + S / 2, 111 * S), // starts within the gap: same run
                proc(5, 131 * S, 139 * S),
            ],
            problems: Vec::new(),
        };
        let runs = rec.runs();
        assert_eq!(runs.len(), 2);
        assert_eq!(runs[0].processes, vec![0, 1, 3]);
        assert_eq!((runs[0].start_ns, runs[0].end_ns), (100 * S, 111 * S));
        assert_eq!(runs[1].processes, vec![2, 4]);
        let second = rec.only(&runs[1]);
        let pids: Vec<u32> = second.processes.iter().map(|p| p.identity.pid).collect();
        assert_eq!(pids, vec![3, 5]);
    }
}
