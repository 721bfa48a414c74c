//! The final states the processes of one `sigmatop run` leave behind (preload/src/final_state.rs):
//! a private directory per run, `<socket dir>/run-<sigmatop pid>/`, passed to the program as
//! `SIGMATOP_FINAL_DIR`. A process too short-lived for the live view to connect to (it ended
//! before the next scan) still reaches the dashboard and the summary with its final totals.
//!
//! A file is applied to the model only when the live stream did not already say goodbye for that
//! process, and only once its live connection (if any) has closed, so snapshots stay in order.
//! Of a process that said goodbye live, only the file's queues are taken, when the live stream
//! gave none or older ones (a reader that falls behind loses frames).
//! Files are untrusted input: read with the live protocol's decoder, bounded in size, and removed
//! once read. Processes that traced nothing leave instead the list of objects they had loaded
//! (`<pid>.libs`, one path per line), which the end-of-run diagnosis reads (`cli::diagnose`).
//! A traced parent that reaps a child killed by a signal or exiting non-zero (`mpirun` and its
//! ranks) leaves `<pid>.exit` (preload/src/reap.rs), which marks that process.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::agg::{Model, ProcKey};
use crate::wire::{Decoder, Frame, MAX_FRAME};

/// The run's directory of final states; removed (with what is left in it) when dropped.
pub struct FinalStates {
    dir: PathBuf,
}

fn own_uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

/// Directories of runs whose sigmatop is gone (killed before it could remove its own).
fn remove_stale_runs(socket_dir: &Path) {
    let Ok(rd) = std::fs::read_dir(socket_dir) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("run-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let ours = e
            .metadata()
            .is_ok_and(|m| m.is_dir() && m.uid() == own_uid());
        if ours && !crate::live::process_exists(pid) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

impl FinalStates {
    /// Creates the run's directory in `socket_dir` (which is created 0700 when missing, as the
    /// preload would). None when it cannot be made: the run goes on without it.
    pub fn create(socket_dir: &Path) -> Option<FinalStates> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(socket_dir)
            .ok()?;
        remove_stale_runs(socket_dir);
        let dir = socket_dir.join(format!("run-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::DirBuilder::new().mode(0o700).create(&dir).ok()?;
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
        Some(FinalStates { dir })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Applies the final states that arrived to `model`; returns how many were applied.
    pub fn poll(&mut self, model: &mut Model) -> usize {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return 0;
        };
        let mut applied = 0;
        let mut ends = Vec::new();
        for e in rd.flatten() {
            let path = e.path();
            if path.extension().is_some_and(|x| x == "exit") {
                ends.push(path);
                continue;
            }
            if path.extension().is_none_or(|x| x != "final") {
                continue;
            }
            match read(&path) {
                Ok(frames) => match apply(model, frames) {
                    Apply::Later => continue,
                    Apply::Done(n) => applied += n,
                },
                Err(why) => model
                    .messages
                    .push(format!("final state {}: {why}", path.display())),
            }
            let _ = std::fs::remove_file(&path);
        }
        // After the final states: the process a status names may have arrived in one.
        for path in ends {
            if apply_end(model, &path) {
                let _ = std::fs::remove_file(&path);
            }
        }
        applied
    }
}

/// `<pid>.exit`, which the preload of a traced parent writes when it reaps a child that was
/// killed by a signal or exited non-zero (preload/src/reap.rs): applied to that pid's process.
/// True when done with the file (applied, or not a status): one whose process has not arrived
/// yet stays for the next poll.
fn apply_end(model: &mut Model, path: &Path) -> bool {
    let Some(pid) = path
        .file_stem()
        .and_then(|s| s.to_str())
        .and_then(|s| s.parse::<u32>().ok())
    else {
        return true;
    };
    let end = match own_file(path, 64, "a process status") {
        Ok(bytes) => crate::event::ProcessEnd::parse(&String::from_utf8_lossy(&bytes)),
        Err(_) => None,
    };
    match end {
        // A child that was never traced has no process here: dropped once it is 5 s old.
        Some(end) => model.note_end(None, pid, end) || older_than(path, Duration::from_secs(5)),
        None => true,
    }
}

fn older_than(path: &Path, age: Duration) -> bool {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .is_ok_and(|t| t.elapsed().is_ok_and(|e| e > age))
}

impl FinalStates {
    /// The paths in the lists of loaded objects the program's untraced processes left (at most
    /// 1 MiB each, read as text).
    pub fn loaded_objects(&self) -> Vec<String> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for e in rd.flatten() {
            let path = e.path();
            if path.extension().is_none_or(|x| x != "libs") {
                continue;
            }
            if let Ok(bytes) = own_file(&path, 1 << 20, "a list of loaded objects") {
                out.extend(String::from_utf8_lossy(&bytes).lines().map(String::from));
            }
        }
        out
    }
}

impl Drop for FinalStates {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The bytes of `path` when it is a regular file of ours of at most `max` bytes (`what` holds).
fn own_file(path: &Path, max: u64, what: &str) -> Result<Vec<u8>, String> {
    let md = std::fs::symlink_metadata(path).map_err(|e| e.to_string())?;
    if !md.is_file() || md.uid() != own_uid() {
        return Err("not a regular file of yours; ignored".into());
    }
    if md.len() > max {
        return Err(format!("{} bytes, more than {what} holds", md.len()));
    }
    std::fs::read(path).map_err(|e| e.to_string())
}

/// The frames of one final-state file: a regular file of ours, at most one frame's size.
fn read(path: &Path) -> Result<Vec<Frame>, String> {
    let bytes = own_file(path, MAX_FRAME as u64, "a final state")?;
    let mut d = Decoder::new();
    d.push(&bytes);
    let mut frames = Vec::new();
    while let Some(f) = d.next_frame().map_err(|e| e.to_string())? {
        frames.push(f);
    }
    if d.pending() > 0 {
        return Err("ends inside a frame".into());
    }
    Ok(frames)
}

enum Apply {
    /// The process is still connected live: its stream comes first.
    Later,
    /// Applied (1) or not needed (0: the live stream said goodbye).
    Done(usize),
}

fn apply(model: &mut Model, frames: Vec<Frame>) -> Apply {
    let Some(Frame::Hello { identity, .. }) = frames.first() else {
        return Apply::Done(0);
    };
    let key = ProcKey::of(identity);
    if let Some(p) = model.processes.get(&key) {
        if p.said_bye {
            return Apply::Done(fill_queues(model, &key, frames));
        }
        if !p.exited {
            return Apply::Later;
        }
    }
    // Snapshots in time order: one older than what the live stream gave is left out.
    let newest = model
        .processes
        .get(&key)
        .and_then(|p| p.last())
        .map_or(0, |s| s.at_ns);
    for f in frames {
        if let Frame::Snapshot(s) = &f
            && s.at_ns <= newest
        {
            continue;
        }
        model.apply(&key, f);
    }
    // A process that closed without a goodbye live, and whose final state came: it ended well.
    if let Some(p) = model.processes.get_mut(&key)
        && p.said_bye
    {
        p.problem = None;
    }
    Apply::Done(1)
}

/// A process that said goodbye live may still lack its last queues: a live reader that falls
/// behind loses frames (resolution, never totals), and a process that lives less than one
/// interval sends one `Queues` frame in all. The final state's queues are the process's last
/// word on its outstanding work, so they are taken when the live stream gave none or an older
/// one (1); otherwise nothing is applied (0).
fn fill_queues(model: &mut Model, key: &ProcKey, frames: Vec<Frame>) -> usize {
    let have = model
        .processes
        .get(key)
        .and_then(|p| p.queues.as_ref())
        .map(|q| q.at_ns);
    let Some(q) = frames.into_iter().find_map(|f| match f {
        Frame::Queues(q) => Some(q),
        _ => None,
    }) else {
        return 0;
    };
    if have.is_some_and(|at| at >= q.at_ns) {
        return 0;
    }
    model.apply(key, Frame::Queues(q));
    1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Identity;
    use crate::queue::{QueueState, Queues};

    const T0: u64 = 1_700_000_000_000_000_000;

    fn ident() -> Identity {
        Identity {
            host: "node0".into(),
            pid: 7,
            start_ns: T0,
            ..Default::default()
        }
    }

    fn queues(at_ns: u64, errors: u64) -> Frame {
        Frame::Queues(Queues {
            at_ns,
            queues: vec![QueueState {
                ep: 1,
                sq_posted: 50,
                sq_completed: 50,
                errors: vec![(12, errors)],
                ..Default::default()
            }],
        })
    }

    /// A process that said goodbye live: hello and bye, and the queues of `live` if any.
    fn said_bye(live: Option<Frame>) -> (Model, ProcKey) {
        let mut m = Model::new();
        let k = ProcKey::of(&ident());
        m.apply(&k, Frame::hello(ident()));
        if let Some(q) = live {
            m.apply(&k, q);
        }
        m.apply(&k, Frame::Bye { at_ns: T0 + 300 });
        assert!(m.processes[&k].said_bye);
        (m, k)
    }

    fn final_file(q: Frame) -> Vec<Frame> {
        vec![Frame::hello(ident()), q, Frame::Bye { at_ns: T0 + 300 }]
    }

    #[test]
    fn a_goodbye_without_queues_takes_the_final_states_queues() {
        let (mut m, k) = said_bye(None);
        assert!(matches!(
            apply(&mut m, final_file(queues(T0 + 200, 1))),
            Apply::Done(1)
        ));
        let q = m.processes[&k]
            .queues
            .as_ref()
            .expect("queues from the file");
        assert_eq!(
            (q.at_ns, q.queues[0].errors.clone()),
            (T0 + 200, vec![(12, 1)])
        );
    }

    #[test]
    fn newer_live_queues_are_kept_and_older_ones_replaced() {
        let (mut m, k) = said_bye(Some(queues(T0 + 200, 0)));
        assert!(matches!(
            apply(&mut m, final_file(queues(T0 + 200, 1))),
            Apply::Done(0)
        ));
        assert_eq!(
            m.processes[&k]
                .queues
                .as_ref()
                .map(|q| q.queues[0].errors.clone()),
            Some(vec![(12, 0)])
        );
        let (mut m, k) = said_bye(Some(queues(T0 + 100, 0)));
        assert!(matches!(
            apply(&mut m, final_file(queues(T0 + 200, 1))),
            Apply::Done(1)
        ));
        assert_eq!(
            m.processes[&k].queues.as_ref().map(|q| q.at_ns),
            Some(T0 + 200)
        );
    }
}
