//! Live processes through their sockets, and the program `sigmatop run` launched, as a dashboard
//! `Source`.

use std::path::PathBuf;
use std::process::{Child, ExitStatus};

use super::child::describe;
use super::dashboard::Source;
use crate::agg::Model;
use crate::live::LiveSource;

/// A program started by `sigmatop run`, watched alongside its processes' sockets.
pub struct ChildWatch {
    pub child: Child,
    pub name: String,
    pub log: PathBuf,
    pub status: Option<ExitStatus>,
}

/// Live processes through their sockets (and the launched program, for `sigmatop run`).
pub struct LiveFeed {
    pub live: LiveSource,
    pub child: Option<ChildWatch>,
}

impl Source for LiveFeed {
    fn poll(&mut self, model: &mut Model) -> usize {
        let n = self.live.poll(model);
        if let Some(c) = self.child.as_mut()
            && c.status.is_none()
            && let Ok(Some(st)) = c.child.try_wait()
        {
            c.status = Some(st);
        }
        n
    }

    fn label(&self) -> String {
        "live".into()
    }

    fn note(&self) -> Option<String> {
        match &self.child {
            Some(c) => Some(match c.status {
                None => format!(
                    "{} running (pid {}) · output in {}",
                    c.name,
                    c.child.id(),
                    c.log.display()
                ),
                Some(st) => format!(
                    "{} exited ({}) · output in {} · q to leave",
                    c.name,
                    describe(st),
                    c.log.display()
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
