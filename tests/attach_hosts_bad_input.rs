//! `sigmatop attach HOST...` given bad hosts: each is one clear line on stderr naming the host,
//! the merged snapshot still comes for the others (`--json --once`, exit status 1 when a host
//! failed), and a bad `--via` template is refused before anything runs.
//!
//! Real parts: OpenSSH's own client for the unknown host and the refused connection (it prints
//! the reason; sigmatop passes it on), a real `sigmatop relay` for the good host; `--via` commands
//! of the test's own stand in for a relay of another version and a remote that sends garbage.

mod common;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::*;

fn attach(args: &[&str]) -> Output {
    let sock = scratch("bad-hosts-sock");
    Command::new(sigmatop_bin())
        .arg("attach")
        .args(args)
        .env("SIGMATOP_SOCKET_DIR", &sock)
        .stdin(Stdio::null())
        .output_bounded()
        .expect("sigmatop attach runs")
}

/// The stderr lines that name `host`.
fn lines_about(o: &Output, host: &str) -> Vec<String> {
    stderr_of(o)
        .lines()
        .filter(|l| l.contains(host))
        .map(str::to_string)
        .collect()
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\n{}", stdout_of(o), stderr_of(o)))
}

fn ssh_present() -> bool {
    if Command::new("ssh").arg("-V").output_bounded().is_ok() {
        return true;
    }
    skip("ssh is not installed: scripts/test.sh installs openssh-client");
    false
}

#[test]
fn unknown_host_and_refused_ssh_are_one_line_each() {
    if !ssh_present() {
        return;
    }
    // A port the kernel gave this test, bound and not listening: a connection to it is refused,
    // and no other process can take it while `_held` lives.
    let (_held, p) = refusing_port();
    let p = p.to_string();
    for (host, opts, said) in [
        (
            "nosuch.invalid",
            vec!["--ssh-opt=-F/dev/null"],
            "Could not resolve hostname",
        ),
        (
            "127.0.0.1",
            vec!["--ssh-opt=-F/dev/null", "--ssh-opt=-p", "--ssh-opt", &p],
            "Connection refused",
        ),
    ] {
        let mut args = vec!["--json", "--once"];
        args.extend(opts);
        args.push(host);
        let o = attach(&args);
        assert_eq!(o.status.code(), Some(1), "{}", stderr_of(&o));
        let lines = lines_about(&o, host);
        assert_eq!(lines.len(), 1, "one line about {host}: {}", stderr_of(&o));
        assert!(
            lines[0].starts_with(&format!("sigmatop: {host}: ")) && lines[0].contains(said),
            "{}",
            lines[0]
        );
        let j = json(&o);
        assert_eq!(j["hosts"][0]["destination"], host);
        assert_eq!(j["hosts"][0]["state"]["state"], "lost");
    }
}

/// One good host (a real relay) and bad ones side by side: each bad one says what is wrong, the
/// good one is up.
#[test]
fn a_bad_host_leaves_the_others_working() {
    let bin = sigmatop_bin().display().to_string();
    // `{host}` picks what runs: the relay itself, nothing of sigmatop, a relay of another
    // version, garbage after a valid hello, or text that is no relay.
    // The garbage host's hello is of this sigmatop's versions, so the garbage after it is what
    // fails.
    let template = format!(
        "case {{host}} in \
        good) {{cmd}} ;; \
        missing) exec /nonexistent/sigmatop relay ;; \
        future) printf 'SIGMATOP-RELAY relay=99 wire=7 sigmatop=9.9.9 host=future\\n'; sleep 30 ;; \
        garbage) printf 'SIGMATOP-RELAY relay={} wire={} sigmatop=0.1.0 host=garbage\\n\\377\\377\\377\\377'; sleep 30 ;; \
        shell) printf '\\001\\002 binary noise\\n'; sleep 30 ;; \
        esac",
        sigmatop::relay::RELAY_PROTOCOL,
        sigmatop::wire::PROTOCOL_VERSION
    );
    let via = format!("--via={template}");
    let remote = format!("--remote-cmd={bin}");
    let o = attach(&[
        "--json", "--once", &via, &remote, "good", "missing", "future", "garbage", "shell",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr_of(&o));
    for (host, said) in [
        ("missing", "no sigmatop there"),
        (
            "future",
            "sigmatop 9.9.9 there speaks relay protocol 99 (live protocol 7), this sigmatop",
        ),
        ("garbage", "relay frame of 4294967295 bytes exceeds"),
        ("shell", "not a sigmatop relay"),
    ] {
        let lines = lines_about(&o, &format!("{host}: "));
        assert_eq!(lines.len(), 1, "one line about {host}: {}", stderr_of(&o));
        assert!(lines[0].contains(said), "{host}: {}", lines[0]);
    }
    let j = json(&o);
    let states: Vec<(String, String)> = j["hosts"]
        .as_array()
        .expect("hosts")
        .iter()
        .map(|h| {
            (
                h["destination"].as_str().unwrap_or("?").to_string(),
                h["state"]["state"].as_str().unwrap_or("?").to_string(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [
        ("good", "up"),
        ("missing", "lost"),
        ("future", "lost"),
        ("garbage", "lost"),
        ("shell", "lost"),
    ]
    .iter()
    .map(|(a, b)| (a.to_string(), b.to_string()))
    .collect();
    assert_eq!(states, want);
    // The good host's relay reported this host's name and version.
    assert_eq!(j["hosts"][0]["version"], env!("CARGO_PKG_VERSION"));
}

#[test]
fn bad_via_templates_and_arguments_are_refused_at_once() {
    for (args, said) in [
        (vec!["--via=ssh {hots}", "n1"], "unknown placeholder {hots}"),
        (vec!["--via=ssh node", "n1"], "has no {host}"),
        (vec!["n[1-2", "--once"], "'[' without ']'"),
        (vec!["n1", "42"], "looks like a pid"),
        (vec!["--via=x {host}"], "need hosts"),
    ] {
        let o = attach(&args);
        assert!(!o.status.success(), "{args:?}");
        let err = stderr_of(&o);
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(said), "{args:?}: {err}");
    }
}

/// A link that says hello and then nothing (a hung relay, a dead network path that TCP has not
/// noticed): after 10 s without a byte, not even a heartbeat, the link is dropped, said once, and
/// tried again (here it comes back up: the stand-in relay says hello again).
#[test]
fn a_silent_link_is_noticed() {
    // In a process group of its own, guarded: ended when the test ends with everything it
    // started (the stand-in relay's `sleep 60` too).
    let mut child = spawn(
        Command::new(sigmatop_bin())
            .args(["attach", "--json", "--interval-ms", "12500"])
            .arg(format!(
                "--via=printf 'SIGMATOP-RELAY relay={} wire={} sigmatop=0.1.0 host=quiet\\n'; sleep 60; : {{host}}",
                sigmatop::relay::RELAY_PROTOCOL,
                sigmatop::wire::PROTOCOL_VERSION
            ))
            .arg("quiet"),
    );
    let out = PipeReader::new(child.stdout.take().expect("stdout"));
    let err = PipeReader::new(child.stderr.take().expect("stderr"));
    // The first snapshot comes after 12.5 s (the link is dropped after 10 s of silence).
    let first = out.wait_for("\n", Duration::from_secs(60));
    let first = first.lines().next().unwrap_or_default().to_string();
    drop(child);
    let j: serde_json::Value = serde_json::from_str(&first).expect("JSON");
    assert_eq!(j["hosts"][0]["host"], "quiet");
    assert_eq!(
        j["hosts"][0]["attempts"], 2,
        "dropped once and tried again: {j}"
    );
    assert_eq!(
        j["messages"],
        serde_json::json!(["quiet: nothing heard for 10 s (the link or the relay hangs)"])
    );
    let err = err.finish();
    assert_eq!(
        err.lines()
            .filter(|l| l.contains("quiet: nothing heard"))
            .count(),
        1,
        "{err}"
    );
}
