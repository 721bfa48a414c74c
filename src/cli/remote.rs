//! `sigmatop attach HOST...`: one `sigmatop relay` per host, reached through the user's own ssh
//! (their config, agent, ProxyJump and ControlMaster apply) or a `--via` command (srun), its
//! stdout merged into the one model by `relay::Merge`. A host that cannot be reached or drops is
//! marked lost with the transport's own last line (ssh's stderr) and retried with backoff; the
//! others carry on.

use std::io::{self, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use super::AttachArgs;
use super::dashboard::Source;
use super::hostlist;
use crate::agg::{LinkState, Model};
use crate::relay::{HEARTBEAT_MS, Merge, qp_every_for};

/// First retry after a failure; doubled on each failure up to `MAX_BACKOFF`.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A link that says nothing (not even a heartbeat) this long is dead.
pub const SILENT_LIMIT: Duration = Duration::from_millis(10 * HEARTBEAT_MS);
/// A transport that has not brought a relay's hello this long has failed.
pub const HELLO_LIMIT: Duration = Duration::from_secs(40);
/// sigmatop's ssh options, after the user's `--ssh-opt` (ssh keeps the first value it gets of an
/// option, so theirs win). Options on the command line also win over ssh_config: BatchMode so a
/// password prompt fails with ssh's own line instead of hanging a dashboard, keep-alives so a
/// dead link is noticed.
const SSH_DEFAULTS: &[&str] = &[
    "-o",
    "BatchMode=yes",
    "-o",
    "ServerAliveInterval=5",
    "-o",
    "ServerAliveCountMax=3",
    "-o",
    "ConnectTimeout=15",
    "-T",
];

/// How each host is reached.
#[derive(Clone, Debug, PartialEq)]
pub enum Transport {
    /// `ssh [OPTS] -- HOST REMOTE relay`.
    Ssh {
        ssh: String,
        opts: Vec<String>,
        remote: String,
    },
    /// `sh -c TEMPLATE` with `{host}` and `{cmd}` replaced.
    Via { template: String, remote: String },
}

/// Quotes `s` for a POSIX shell (and csh, fish: plain single quotes).
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:@,+%".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}

/// Checks a `--via` template: `{host}` must be there, and `{host}` and `{cmd}` are the only
/// placeholders.
pub fn check_template(t: &str) -> Result<(), String> {
    let mut rest = t;
    let mut has_host = false;
    while let Some(open) = rest.find('{') {
        if rest[..open].contains('}') {
            return Err(format!("bad --via template '{t}': '}}' without '{{'"));
        }
        let Some(close) = rest[open..].find('}').map(|c| open + c) else {
            return Err(format!(
                "bad --via template '{t}': '{{' without '}}' (placeholders: {{host}}, {{cmd}})"
            ));
        };
        match &rest[open + 1..close] {
            "host" => has_host = true,
            "cmd" => {}
            other => {
                return Err(format!(
                    "bad --via template '{t}': unknown placeholder {{{other}}} (placeholders: {{host}}, {{cmd}})"
                ));
            }
        }
        rest = &rest[close + 1..];
    }
    if rest.contains('}') {
        return Err(format!("bad --via template '{t}': '}}' without '{{'"));
    }
    if !has_host {
        return Err(format!(
            "bad --via template '{t}': it has no {{host}}, so every host would be the same (example: --via 'srun --overlap --jobid=1234 -w {{host}} -N1 -n1')"
        ));
    }
    Ok(())
}

impl Transport {
    /// The transport `attach` was asked for.
    pub fn from_args(args: &AttachArgs) -> Result<Transport, String> {
        let remote = format!("{} relay", shell_quote(&args.remote_cmd));
        if let Some(t) = &args.via {
            check_template(t)?;
            return Ok(Transport::Via {
                template: t.clone(),
                remote,
            });
        }
        if let Some(job) = &args.slurm {
            return Ok(Transport::Via {
                template: format!(
                    "srun --overlap --jobid={} -w {{host}} -N1 -n1 {{cmd}}",
                    shell_quote(job)
                ),
                remote,
            });
        }
        Ok(Transport::Ssh {
            ssh: std::env::var("SIGMATOP_SSH").unwrap_or_else(|_| "ssh".into()),
            opts: args.ssh_opts.clone(),
            remote,
        })
    }

    /// The command that brings host `dest`'s relay stream to our stdin.
    pub fn command(&self, dest: &str) -> Command {
        match self {
            Transport::Ssh { ssh, opts, remote } => {
                let mut c = Command::new(ssh);
                c.args(opts)
                    .args(SSH_DEFAULTS)
                    .arg("--")
                    .arg(dest)
                    .arg(remote);
                c
            }
            Transport::Via { template, remote } => {
                let mut line = template.replace("{host}", &shell_quote(dest));
                if line.contains("{cmd}") {
                    line = line.replace("{cmd}", remote);
                } else {
                    line.push(' ');
                    line.push_str(remote);
                }
                let mut c = Command::new("sh");
                c.arg("-c").arg(line);
                c
            }
        }
    }

    /// "ssh", "srun": what the messages call the transport.
    fn name(&self) -> String {
        match self {
            Transport::Ssh { ssh, .. } => ssh.clone(),
            Transport::Via { template, .. } => template
                .split_whitespace()
                .next()
                .unwrap_or("--via")
                .to_string(),
        }
    }
}

/// The nodes of Slurm job `job`: its NodeList (`scontrol show job`) through `scontrol show
/// hostnames`.
pub fn slurm_hosts(job: &str) -> Result<Vec<String>, String> {
    let run = |args: &[&str]| -> Result<String, String> {
        let out = Command::new("scontrol").args(args).output().map_err(|e| {
            format!("--slurm {job}: cannot run scontrol: {e} (is this a Slurm cluster?)")
        })?;
        if !out.status.success() {
            return Err(format!(
                "--slurm {job}: `scontrol {}` failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let job_text = run(&["show", "job", "-o", job])?;
    let nodelist = job_text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("NodeList="))
        .filter(|n| !n.is_empty() && *n != "(null)")
        .ok_or_else(|| format!("--slurm {job}: the job has no nodes (not running yet?)"))?;
    let hosts: Vec<String> = run(&["show", "hostnames", nodelist])?
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    if hosts.is_empty() {
        return Err(format!("--slurm {job}: scontrol named no hosts"));
    }
    Ok(hosts)
}

/// The destinations of `attach HOST...`: each expanded as a hostlist, duplicates dropped.
pub fn destinations(hosts: &[String]) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = Vec::new();
    for h in hosts {
        for d in hostlist::expand(h)? {
            if d.starts_with('-') {
                return Err(format!(
                    "'{d}' is not a host (an ssh option? pass those with --ssh-opt)"
                ));
            }
            if !out.contains(&d) {
                out.push(d);
            }
        }
    }
    Ok(out)
}

/// A running transport.
struct Running {
    child: Child,
    /// The relay's stdin: the dashboard's requests (`qp-every N`).
    stdin: Option<ChildStdin>,
    /// The `qp-every` this relay was told (1: what it starts with).
    told: u32,
    stdout: ChildStdout,
    stderr: ChildStderr,
    /// The transport's stderr so far (its last line is the reason when it fails).
    err: Vec<u8>,
    started: Instant,
    heard: Instant,
}

impl Running {
    /// Reads what the transport wrote on stderr, keeping the last 8–16 KiB. A read error is
    /// ignored: stdout's end says the transport is gone.
    fn read_stderr(&mut self, buf: &mut [u8]) {
        let err = &mut self.err;
        let _ = drain(&mut self.stderr, buf, |b| {
            err.extend_from_slice(b);
            if err.len() > 16 << 10 {
                err.drain(..err.len() - (8 << 10));
            }
        });
    }

    /// The exit status, waiting up to 200 ms for it; then the transport is stopped (None).
    fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        for _ in 0..20 {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.stop();
        None
    }

    /// The last non-empty line the transport wrote on stderr.
    fn last_err_line(&self) -> Option<String> {
        String::from_utf8_lossy(&self.err)
            .lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .map(str::to_string)
    }

    /// Ends the transport and everything it started (its own process group: a `--via` shell's
    /// children, ssh's ProxyCommand).
    fn stop(&mut self) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            // SAFETY: kill(2) of the process group this transport leads (made at spawn).
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One host's link as the runner sees it.
struct Link {
    dest: String,
    run: Option<Running>,
    next_try: Instant,
    backoff: Duration,
    /// The failure cannot go away by itself (a version mismatch): no retry.
    permanent: bool,
    /// The last reason said in the messages (each new reason is said once).
    said: Option<String>,
}

impl Link {
    /// May this link start (again)?
    fn attempts_left(&self, retry: bool, shown: Option<&crate::agg::HostLink>) -> bool {
        !self.permanent && (retry || shown.is_none_or(|s| s.attempts == 0))
    }
}

fn set_nonblocking(fd: &impl AsRawFd) -> io::Result<()> {
    let fd = fd.as_raw_fd();
    // SAFETY: fcntl on a descriptor this process owns, reading then setting its flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads what is there; `Ok(true)` at end of stream.
fn drain(r: &mut impl Read, buf: &mut [u8], mut sink: impl FnMut(&[u8])) -> io::Result<bool> {
    loop {
        match r.read(buf) {
            Ok(0) => return Ok(true),
            Ok(n) => sink(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// How often the dashboard looks at how many counters it follows.
const QP_EVERY_CHECK: Duration = Duration::from_secs(1);

/// Every remote host's link, merged into one model.
pub struct Remote {
    /// Failed links are tried again (with backoff); off for `--once`, which reports them.
    pub retry: bool,
    /// The relays send every QP's counters every `qp_every`th snapshot (`relay::qp_every_for`
    /// of the counters followed), and every process's totals every snapshot.
    pub qp_every: u32,
    checked: Instant,
    transport: Transport,
    merge: Merge,
    links: Vec<Link>,
    buf: Vec<u8>,
}

impl Remote {
    /// Links to `dests`, all to be started at the first poll; `model.links` is set.
    pub fn new(dests: Vec<String>, transport: Transport, model: &mut Model) -> Remote {
        let merge = Merge::new(&dests, model);
        let now = Instant::now();
        Remote {
            retry: true,
            qp_every: 1,
            checked: now,
            transport,
            merge,
            links: dests
                .into_iter()
                .map(|dest| Link {
                    dest,
                    run: None,
                    next_try: now,
                    backoff: FIRST_BACKOFF,
                    permanent: false,
                    said: None,
                })
                .collect(),
            buf: vec![0u8; 1 << 16],
        }
    }

    /// True when every host is up or has failed at least once (and none is connecting).
    pub fn settled(&self, model: &Model) -> bool {
        model
            .links
            .iter()
            .all(|l| l.attempts > 0 && l.state != LinkState::Connecting)
    }

    /// The link of host `i` failed for `reason`: stop its transport, mark it, schedule a retry.
    fn fail(&mut self, i: usize, reason: String, permanent: bool, model: &mut Model) {
        let l = &mut self.links[i];
        l.run = None;
        l.permanent |= permanent;
        l.next_try = Instant::now() + l.backoff;
        l.backoff = (l.backoff * 2).min(MAX_BACKOFF);
        if l.said.as_deref() != Some(reason.as_str()) {
            model.messages.push(format!("{}: {reason}", l.dest));
            l.said = Some(reason.clone());
        }
        let shown = if l.permanent || !self.retry {
            reason
        } else {
            format!("{reason} (retrying)")
        };
        self.merge.lost(i, &shown, model);
    }

    fn start(&mut self, i: usize, model: &mut Model) {
        let dest = self.links[i].dest.clone();
        self.merge.connecting(i, model);
        let mut cmd = self.transport.command(&dest);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                let reason = format!("cannot run {}: {e}", self.transport.name());
                return self.fail(i, reason, e.kind() == io::ErrorKind::NotFound, model);
            }
        };
        let mut child = child;
        let stdin = child.stdin.take();
        let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            return self.fail(i, "no pipes to the transport".into(), false, model);
        };
        let piped = stdin.as_ref().map_or(Ok(()), set_nonblocking);
        if let Err(e) = set_nonblocking(&stdout)
            .and_then(|_| set_nonblocking(&stderr))
            .and(piped)
        {
            let _ = child.kill();
            let _ = child.wait();
            return self.fail(i, format!("cannot set up its pipes: {e}"), false, model);
        }
        let now = Instant::now();
        self.links[i].run = Some(Running {
            child,
            stdin,
            told: 1,
            stdout,
            stderr,
            err: Vec::new(),
            started: now,
            heard: now,
        });
    }

    /// Tells every relay that is up the `qp-every` the counters followed call for, when it
    /// was told another (a relay that cannot take it now is told at a later poll).
    fn tell_qp_every(&mut self, model: &Model) {
        for (l, shown) in self.links.iter_mut().zip(&model.links) {
            let Some(r) = l.run.as_mut() else {
                continue;
            };
            if r.told == self.qp_every || shown.state != LinkState::Up {
                continue;
            }
            let Some(stdin) = r.stdin.as_mut() else {
                continue;
            };
            // The line is far shorter than a pipe's atomic write: all of it or nothing.
            match stdin.write(format!("qp-every {}\n", self.qp_every).as_bytes()) {
                Ok(_) => r.told = self.qp_every,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                // The relay's stdin is gone: its stdout's end will say why.
                Err(_) => r.stdin = None,
            }
        }
    }

    /// Starts due links, reads every running one into `model`. Returns frames applied.
    pub fn poll(&mut self, model: &mut Model) -> usize {
        let now = Instant::now();
        if now.duration_since(self.checked) >= QP_EVERY_CHECK {
            self.checked = now;
            self.qp_every = qp_every_for(model.counters());
        }
        self.tell_qp_every(model);
        let mut applied = 0;
        for i in 0..self.links.len() {
            let l = &self.links[i];
            let may_start = l.attempts_left(self.retry, model.links.get(i));
            if l.run.is_none() && may_start && now >= l.next_try {
                self.start(i, model);
            }
            let Some(r) = self.links[i].run.as_mut() else {
                continue;
            };
            // stderr first: when stdout ends, the reason is already there.
            r.read_stderr(&mut self.buf);
            let mut got: Vec<u8> = Vec::new();
            let end = drain(&mut r.stdout, &mut self.buf, |b| got.extend_from_slice(b));
            if !got.is_empty() {
                r.heard = now;
            }
            let mut failure: Option<(String, bool)> = None;
            if !got.is_empty() {
                match self.merge.push(i, &got, model) {
                    Ok(n) => applied += n,
                    Err(e) => failure = Some((e.reason, e.permanent)),
                }
            }
            let Some(r) = self.links[i].run.as_mut() else {
                continue;
            };
            if failure.is_none() {
                let up = model.links.get(i).is_some_and(|l| l.state == LinkState::Up);
                failure = match end {
                    Ok(true) | Err(_) => {
                        // The transport ended: its status and its stderr's last words (a moment
                        // for it to exit after closing stdout; one that stays is stopped).
                        let status = r.exit_status();
                        r.read_stderr(&mut self.buf);
                        let mut reason = r.last_err_line().unwrap_or_else(|| match status {
                            Some(s) => format!("the relay ended ({s})"),
                            None => "the relay ended".into(),
                        });
                        if status.and_then(|s| s.code()) == Some(127) {
                            // The shell there found no such command.
                            reason.push_str(
                                " (no sigmatop there: install it on every node, or name it with --remote-cmd PATH)",
                            );
                        }
                        Some((reason, false))
                    }
                    Ok(false) if up && now.duration_since(r.heard) > SILENT_LIMIT => Some((
                        format!(
                            "nothing heard for {} s (the link or the relay hangs)",
                            SILENT_LIMIT.as_secs()
                        ),
                        false,
                    )),
                    Ok(false) if !up && now.duration_since(r.started) > HELLO_LIMIT => Some((
                        r.last_err_line().unwrap_or_else(|| {
                            format!("no relay answered within {} s", HELLO_LIMIT.as_secs())
                        }),
                        false,
                    )),
                    Ok(false) => None,
                };
                if failure.is_none() && up {
                    // A link that came up starts its next failure's backoff from the beginning.
                    self.links[i].backoff = FIRST_BACKOFF;
                }
            }
            if let Some((reason, permanent)) = failure {
                self.fail(i, reason, permanent, model);
            }
        }
        applied
    }

    /// "2 of 3 hosts up" and "QP detail every 2 s at this scale" for the status line; None
    /// when all are up and every QP comes every snapshot.
    pub fn note(&self, model: &Model) -> Option<String> {
        let up = model
            .links
            .iter()
            .filter(|l| l.state == LinkState::Up)
            .count();
        let hosts = (up < model.links.len()).then(|| {
            format!(
                "{up} of {} hosts up · the Nodes view (4) says why",
                model.links.len()
            )
        });
        let detail = (self.qp_every > 1).then(|| qp_detail_note(self.qp_every));
        match (hosts, detail) {
            (Some(h), Some(d)) => Some(format!("{h} · {d}")),
            (h, d) => h.or(d),
        }
    }
}

/// "QP detail every 2 s at this scale": what the views of QPs, matrices and peers show when the
/// relays send every QP's counters every `n`th snapshot (4 Hz snapshots).
pub fn qp_detail_note(n: u32) -> String {
    let ms = 250 * u64::from(n);
    let every = if ms % 1000 == 0 {
        format!("{} s", ms / 1000)
    } else {
        format!("{ms} ms")
    };
    format!("QP detail every {every} at this scale (process totals every 250 ms)")
}

/// Remote hosts as a dashboard `Source`.
pub struct RemoteFeed {
    pub remote: Remote,
    /// The state of the links at the last poll, for the status line.
    note: Option<String>,
}

impl RemoteFeed {
    pub fn new(remote: Remote) -> RemoteFeed {
        RemoteFeed { remote, note: None }
    }
}

impl Source for RemoteFeed {
    fn poll(&mut self, model: &mut Model) -> usize {
        let before: Vec<LinkState> = model.links.iter().map(|l| l.state.clone()).collect();
        let n = self.remote.poll(model);
        self.note = self.remote.note(model);
        // A link that changed state changes the view even when no frame came.
        let changed = model.links.iter().zip(&before).any(|(l, b)| l.state != *b);
        n + usize::from(changed)
    }

    fn label(&self) -> String {
        "live".into()
    }

    fn note(&self) -> Option<String> {
        self.note.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(c: &Command) -> Vec<String> {
        std::iter::once(c.get_program())
            .chain(c.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn ssh_command_puts_the_users_options_first_and_guards_the_destination() {
        let t = Transport::Ssh {
            ssh: "ssh".into(),
            opts: vec!["-p2222".into(), "-oProxyJump=gw".into()],
            remote: format!("{} relay", shell_quote("/opt/sigma top/bin/sigmatop")),
        };
        let v = argv(&t.command("user@node7"));
        assert_eq!(&v[..3], ["ssh", "-p2222", "-oProxyJump=gw"]);
        assert!(v.contains(&"BatchMode=yes".to_string()));
        let n = v.len();
        assert_eq!(&v[n - 3..n - 1], ["--", "user@node7"]);
        assert_eq!(v[n - 1], "'/opt/sigma top/bin/sigmatop' relay");
    }

    #[test]
    fn via_templates_take_host_and_cmd() {
        let t = Transport::Via {
            template: "srun --overlap --jobid=12 -w {host} -N1 -n1".into(),
            remote: "sigmatop relay".into(),
        };
        assert_eq!(
            argv(&t.command("node3")),
            [
                "sh",
                "-c",
                "srun --overlap --jobid=12 -w node3 -N1 -n1 sigmatop relay"
            ]
        );
        let t = Transport::Via {
            template: "docker exec {host} {cmd} --socket-dir /s".into(),
            remote: "sigmatop relay".into(),
        };
        assert_eq!(
            argv(&t.command("a;b"))[2],
            "docker exec 'a;b' sigmatop relay --socket-dir /s"
        );
    }

    #[test]
    fn bad_templates_are_one_clear_line() {
        for (t, what) in [
            ("ssh node", "no {host}"),
            ("ssh {hots}", "unknown placeholder {hots}"),
            ("ssh {host", "without"),
            ("ssh host} {host}", "without"),
        ] {
            let e = check_template(t).expect_err(t);
            assert!(e.contains(what) && e.contains(t), "{t}: {e}");
            assert!(!e.contains('\n'));
        }
        check_template("srun -w {host} {cmd}").unwrap();
    }

    #[test]
    fn destinations_expand_and_refuse_options() {
        let d = destinations(&["n[1-2]".into(), "user@m".into(), "n1".into()]).unwrap();
        assert_eq!(d, ["n1", "n2", "user@m"]);
        assert!(destinations(&["-oProxyCommand=x".into()]).is_err());
    }

    #[test]
    fn the_status_line_says_how_often_qp_detail_comes() {
        assert_eq!(
            qp_detail_note(8),
            "QP detail every 2 s at this scale (process totals every 250 ms)"
        );
        assert_eq!(
            qp_detail_note(2),
            "QP detail every 500 ms at this scale (process totals every 250 ms)"
        );
        let mut m = Model::new();
        let mut r = Remote::new(
            vec!["a".into(), "b".into()],
            Transport::Via {
                template: "true {host}".into(),
                remote: "sigmatop relay".into(),
            },
            &mut m,
        );
        assert_eq!(
            r.note(&m).as_deref(),
            Some("0 of 2 hosts up · the Nodes view (4) says why")
        );
        r.qp_every = 4;
        assert_eq!(
            r.note(&m).as_deref(),
            Some(
                "0 of 2 hosts up · the Nodes view (4) says why · QP detail every 1 s at this scale (process totals every 250 ms)"
            )
        );
        for l in &mut m.links {
            l.state = LinkState::Up;
        }
        assert_eq!(
            r.note(&m).as_deref(),
            Some("QP detail every 1 s at this scale (process totals every 250 ms)")
        );
        r.qp_every = 1;
        assert_eq!(r.note(&m), None);
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("sigmatop"), "sigmatop");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
