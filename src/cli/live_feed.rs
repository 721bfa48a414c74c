//! Live processes through their sockets, and the program `sigmatop run` launched, as a dashboard
//! `Source`.

use std::process::{Child, ExitStatus};

use super::child::{describe, interrupt_group, passed_on, signal_name};
use super::dashboard::Source;
use super::diagnose::{LibraryWatch, NothingTraced};
use super::final_state::FinalStates;
use crate::agg::Model;
use crate::live::LiveSource;

/// A program started by `sigmatop run`, watched alongside its processes' sockets. It runs in its
/// own process group (the dashboard has the terminal in raw mode, so the terminal sends no
/// signals): Ctrl-C in the dashboard sends SIGINT to that group, as a shell's Ctrl-C would.
pub struct ChildWatch {
    pub child: Child,
    pub name: String,
    /// Where the program's output goes, as the messages show it (`~` for the home directory).
    pub log_shown: String,
    pub status: Option<ExitStatus>,
    /// Ctrl-Cs forwarded to the program so far.
    pub interrupts: u32,
    /// Why the last Ctrl-C could not be forwarded.
    pub interrupt_error: Option<String>,
    /// What the program loaded while nothing was traced, for the advice at its end.
    pub diagnosis: Diagnosis,
}

/// The command and `--layers` of a run, and what its processes loaded while nothing was traced:
/// the dashboard's copy of the headless run's "nothing was traced, here is why" (issue 25,
/// item 9: the dashboard showed `Processes 0 (none yet)` to the end).
pub struct Diagnosis {
    pub cmd: Vec<String>,
    pub layers: Option<String>,
    pub libraries: LibraryWatch,
    /// The advice, once given (it is also in the model's messages).
    pub told: Option<String>,
}

impl Diagnosis {
    pub fn new(cmd: &[String], layers: Option<&str>, root: u32) -> Diagnosis {
        Diagnosis {
            cmd: cmd.to_vec(),
            layers: layers.map(str::to_string),
            libraries: LibraryWatch::new(root),
            told: None,
        }
    }

    /// The end-of-run advice for a program that exited with `status`, nothing traced.
    pub fn message(&mut self, status: ExitStatus, finals: Option<&FinalStates>) -> String {
        self.why(status, finals).message()
    }

    /// The end-of-run advice for a program whose processes were traced (in `used`, "ibverbs")
    /// but made no operation: a switched-off layer it used, or the MPI launcher's hint.
    pub fn idle_message(
        &mut self,
        status: ExitStatus,
        finals: Option<&FinalStates>,
        used: &str,
    ) -> Option<String> {
        self.why(status, finals).idle_message(used)
    }

    fn why(&mut self, status: ExitStatus, finals: Option<&FinalStates>) -> NothingTraced<'_> {
        if let Some(f) = finals {
            for path in f.loaded_objects() {
                self.libraries.note_library(&path);
            }
        }
        let layers_on = self
            .layers
            .as_deref()
            .map_or(Ok(u32::MAX), super::layers_mask)
            .unwrap_or(u32::MAX);
        NothingTraced {
            cmd: &self.cmd,
            layers_arg: self.layers.as_deref(),
            layers_on,
            seen: &self.libraries,
            failed: (!status.success()).then(|| describe(status)),
        }
    }
}

/// Live processes through their sockets (and the launched program, for `sigmatop run`).
pub struct LiveFeed {
    pub live: LiveSource,
    pub child: Option<ChildWatch>,
    /// `sigmatop run`: the final states of processes too short-lived to connect to.
    pub finals: Option<FinalStates>,
}

impl Source for LiveFeed {
    fn poll(&mut self, model: &mut Model) -> usize {
        let mut n = self.live.poll(model);
        if let Some(f) = self.finals.as_mut() {
            n += f.poll(model);
        }
        let nothing = self.live.sockets_seen == 0 && model.processes.is_empty();
        if let Some(c) = self.child.as_mut()
            && c.status.is_none()
        {
            // Until an operation is traced (`sigmatop run`'s headless loop does the same).
            if !model.any_operation() {
                c.diagnosis.libraries.poll();
            }
            if let Ok(Some(st)) = c.child.try_wait() {
                c.status = Some(st);
            }
        }
        // The program has ended and nothing was traced: the advice, for the empty process
        // table (the status line keeps the exit and "q to leave"; the summary prints it).
        if let Some(c) = self.child.as_mut()
            && let Some(st) = c.status
            && nothing
            && c.diagnosis.told.is_none()
        {
            // Its last processes' final states may still come: only once they have been read.
            let m = c.diagnosis.message(st, self.finals.as_ref());
            c.diagnosis.told = Some(m);
            n += 1;
        }
        n
    }

    fn label(&self) -> String {
        "live".into()
    }

    /// Ctrl-C while the program runs: SIGINT to its process group, and the dashboard stays until
    /// it exits (then closes by itself). Once the program has exited, Ctrl-C leaves like `q`.
    fn interrupt(&mut self) -> bool {
        let Some(c) = self.child.as_mut() else {
            return true;
        };
        if c.status.is_some() {
            return true;
        }
        match interrupt_group(c.child.id()) {
            Ok(()) => {
                c.interrupts += 1;
                c.interrupt_error = None;
            }
            Err(e) => c.interrupt_error = Some(e),
        }
        false
    }

    /// The program ended after a Ctrl-C in the dashboard, or after a signal sigmatop got and
    /// passed on (`kill`, `timeout`, Slurm): that was the way out, as in a shell.
    fn empty_hint(&self) -> Option<String> {
        self.child.as_ref().and_then(|c| c.diagnosis.told.clone())
    }

    fn wants_to_leave(&self) -> bool {
        self.child
            .as_ref()
            .is_some_and(|c| (c.interrupts > 0 || passed_on().is_some()) && c.status.is_some())
    }

    fn interrupt_label(&self) -> Option<String> {
        self.child
            .as_ref()
            .filter(|c| c.status.is_none())
            .map(|c| format!("stop {}", c.name))
    }

    fn note(&self) -> Option<String> {
        match &self.child {
            Some(c) => Some(match (c.status, c.interrupts, &c.interrupt_error) {
                (None, _, Some(e)) => format!("Ctrl-C: {e}"),
                (None, 0, None) => match passed_on() {
                    Some((sig, n)) => format!(
                        "{}{} passed on to {} (pid {}): waiting for it to exit",
                        signal_name(sig),
                        if n > 1 {
                            format!(" ×{n}")
                        } else {
                            String::new()
                        },
                        c.name,
                        c.child.id()
                    ),
                    None => format!(
                        "{} running (pid {}) · output in {}",
                        c.name,
                        c.child.id(),
                        c.log_shown
                    ),
                },
                (None, n, None) => format!(
                    "SIGINT{} sent to {} (pid {}): waiting for it to exit · Ctrl-C sends another · q leaves it running",
                    if n > 1 {
                        format!(" ×{n}")
                    } else {
                        String::new()
                    },
                    c.name,
                    c.child.id(),
                ),
                (Some(st), _, _) => format!(
                    "{} exited ({}) · output in {} · q to leave",
                    c.name,
                    describe(st),
                    c.log_shown
                ),
            }),
            None if self.live.sockets_seen == 0 => Some(format!(
                "waiting for traced processes in {}",
                self.live.dir().display()
            )),
            None => None,
        }
    }
}
