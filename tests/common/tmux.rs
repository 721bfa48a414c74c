//! A dashboard driven as a person over ssh would: a detached tmux session of its own server
//! (`tmux -L`, so nothing touches the user's sessions) with TERM=screen, keys sent with
//! `send-keys`, the screen read back with `capture-pane -p`.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::Bounded;

pub struct Tmux {
    server: String,
}

impl Tmux {
    /// Runs `cmd` (a shell command line) in a new 120×40 session; `; echo SIGMATOP-EXIT=$?`
    /// follows it, so a test can read its exit status off the screen. None when tmux is not
    /// installed: a failure under CI=true, elsewhere a skip recorded by [`super::skip`].
    pub fn start(name: &str, cmd: &str) -> Option<Tmux> {
        Tmux::start_in(name, cmd, None)
    }

    /// [`Tmux::start`] with the session's working directory (where `sigmatop run` writes the
    /// program's log).
    pub fn start_in(name: &str, cmd: &str, cwd: Option<&Path>) -> Option<Tmux> {
        Tmux::start_sized(name, cmd, cwd, 120, 40)
    }

    /// [`Tmux::start_in`] in a terminal of `w`×`h` (80×24: the ssh case; 200×60: a wide one).
    pub fn start_sized(name: &str, cmd: &str, cwd: Option<&Path>, w: u16, h: u16) -> Option<Tmux> {
        if Command::new("tmux")
            .arg("-V")
            .output_within(Duration::from_secs(30))
            .is_err()
        {
            super::skip(
                "tmux is not installed: install it (`apt-get install tmux`; scripts/test.sh does) to run the dashboard end-to-end tests",
            );
            return None;
        }
        let t = Tmux {
            server: format!("sigmatop-test-{name}-{}", std::process::id()),
        };
        let shell = format!("{cmd}; echo SIGMATOP-EXIT=$?; sleep 600");
        let mut new = Command::new("tmux");
        new.args(["-L", &t.server, "-f", "/dev/null", "new-session", "-d"]);
        if let Some(d) = cwd {
            new.arg("-c").arg(d);
        }
        let (w, h) = (w.to_string(), h.to_string());
        new.args(["-s", "main", "-x", &w, "-y", &h, "env", "TERM=screen"]);
        // `sigmatop run` keeps the program's output in $XDG_STATE_HOME/sigmatop: the test's own
        // directory's, not the user's.
        if let Some(d) = cwd {
            new.arg(format!("XDG_STATE_HOME={}", d.join("state").display()));
        }
        let ok = new
            .args(["sh", "-c", &shell])
            .status_bounded()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "tmux new-session failed");
        Some(t)
    }

    pub fn tmux(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.server])
            .args(args)
            .output_within(Duration::from_secs(30))
            .expect("tmux runs");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub fn keys(&self, keys: &[&str]) {
        let mut a = vec!["send-keys", "-t", "main"];
        a.extend_from_slice(keys);
        self.tmux(&a);
    }

    /// Literal text (no key-name lookup).
    pub fn type_text(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "main", "-l", text]);
    }

    pub fn capture(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "main"])
    }

    /// Captures until `pred` holds, panicking with the last screen after `limit`.
    pub fn wait_for(&self, what: &str, limit: Duration, pred: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        loop {
            let screen = self.capture();
            if pred(&screen) {
                return screen;
            }
            if start.elapsed() > limit {
                panic!("waited {limit:?} for {what}; screen:\n{screen}");
            }
            std::thread::sleep(Duration::from_millis(150));
        }
    }
}

impl Tmux {
    /// As [`Tmux::wait_for`], but only a screen drawn whole counts: `pred` holds on two captures
    /// in a row (150 ms apart) that are alike below their first two lines (which carry a clock).
    /// A capture can catch the dashboard halfway through drawing a frame.
    pub fn wait_settled(&self, what: &str, limit: Duration, pred: impl Fn(&str) -> bool) -> String {
        let body = |s: &str| s.lines().skip(2).collect::<Vec<_>>().join("\n");
        let start = Instant::now();
        let mut last: Option<String> = None;
        loop {
            let screen = self.capture();
            if pred(&screen) {
                if last.as_deref().is_some_and(|l| body(l) == body(&screen)) {
                    return screen;
                }
                last = Some(screen);
            } else {
                last = None;
                if start.elapsed() > limit {
                    panic!("waited {limit:?} for {what}; screen:\n{screen}");
                }
            }
            if start.elapsed() > limit {
                panic!(
                    "waited {limit:?} for {what} on a settled screen; it kept changing; the last:\n{}",
                    last.unwrap_or_default()
                );
            }
            std::thread::sleep(Duration::from_millis(150));
        }
    }
}

/// `pid` and all its descendants (from /proc's children lists), deepest last.
fn process_tree(pid: u32) -> Vec<u32> {
    let mut all = vec![pid];
    let mut i = 0;
    while i < all.len() {
        let p = all[i];
        let children =
            std::fs::read_to_string(format!("/proc/{p}/task/{p}/children")).unwrap_or_default();
        all.extend(
            children
                .split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok()),
        );
        i += 1;
    }
    all
}

impl Drop for Tmux {
    fn drop(&mut self) {
        // A test that failed leaves its command running in the pane: sigmatop passes SIGHUP on
        // to its program, so killing the server alone can leave it behind. Kill the pane's
        // whole process tree first.
        let panes = self.tmux(&["list-panes", "-s", "-F", "#{pane_pid}"]);
        for pane in panes
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
        {
            for pid in process_tree(pane) {
                // SAFETY: kill(2) of a process this test started (through tmux).
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
        }
        let _ = Command::new("tmux")
            .args(["-L", &self.server, "kill-server"])
            .status_bounded();
    }
}
