//! The command line's papercuts of issue 25, item 13, each as a user met it: the program without
//! `--`, a negative `--sample`, the card's `sigmatop --layers … -- CMD`, `relay` in the help, two
//! JSON documents that both said `"schema": 1`, and the empty record directory of a run that
//! traced nothing.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::*;

fn sigmatop(args: &[&str], dir: &Path) -> Output {
    Command::new(sigmatop_bin())
        .args(args)
        .env("SIGMATOP_SOCKET_DIR", dir.join("sock"))
        .current_dir(dir)
        .output_bounded()
        .expect("sigmatop runs")
}

/// `sigmatop run ./app` failed with "unexpected argument" and no hint: now the program may come
/// without `--`, as with `strace` or `time`, and its own flags stay its own.
#[test]
fn the_program_may_come_without_the_double_dash() {
    let dir = scratch("papercut-dashdash");
    let out = sigmatop(&["run", "--headless", "sh", "-c", "exit 3"], &dir);
    let err = stderr_of(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(
        err.contains("sigmatop: nothing was traced: sh exited with status 3"),
        "{err}"
    );
    // A flag after the program is the program's.
    let out = sigmatop(&["run", "sh", "-c", "echo $0", "--headless"], &dir);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(stdout_of(&out).trim(), "--headless");
}

/// The tip for `--sample -1` was "use '-- -1'", which would run `-1` as the program.
#[test]
fn a_negative_sample_gets_one_line_that_says_what_to_give() {
    let dir = scratch("papercut-sample");
    for bad in ["-1", "0"] {
        let out = sigmatop(&["run", "--sample", bad, "--", "true"], &dir);
        let err = stderr_of(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!(
                "{bad} is not a positive count: give N of 1 or more"
            )),
            "{err}"
        );
        assert!(!err.contains("'-- "), "no tip to pass it after --: {err}");
    }
}

/// `sigmatop --layers ucx -- x` (the card's spelling with a layer list) failed to parse.
#[test]
fn the_cards_spelling_takes_layers() {
    let dir = scratch("papercut-top-layers");
    let out = sigmatop(&["--layers", "ucx", "--", "true"], &dir);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("the layers --layers ucx leaves on (ucx)"),
        "{err}"
    );
}

/// `relay` is run by `attach HOST` over ssh, not by hands: not in the help, still there.
#[test]
fn relay_is_left_out_of_the_help() {
    let dir = scratch("papercut-help");
    let help = stdout_of(&sigmatop(&["--help"], &dir));
    assert!(help.contains("attach"), "{help}");
    assert!(!help.contains("relay"), "{help}");
    let relay = sigmatop(&["relay", "--help"], &dir);
    assert!(relay.status.success(), "{}", stderr_of(&relay));
}

/// `run --json` (the summary's fields) and `export --json` (those and the correlator's) both
/// said `"schema": 1`: `kind` tells them apart.
#[test]
fn the_two_json_documents_say_which_they_are() {
    let dir = scratch("papercut-json");
    let out = sigmatop(&["run", "--json", "-", "--", "true"], &dir);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("run --json");
    assert_eq!(v["schema"], 1);
    assert_eq!(v["kind"], "summary");
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/demo-moe");
    let e = export_json(&demo, "demo");
    assert_eq!(e["schema"], 1);
    assert_eq!(e["kind"], "export");
}

/// `run --record DIR -- true` left an empty DIR behind.
#[test]
fn a_run_that_recorded_nothing_leaves_no_empty_directory() {
    let dir = scratch("papercut-record");
    let out = sigmatop(&["run", "--record", "out", "--", "true"], &dir);
    let err = stderr_of(&out);
    assert!(out.status.success(), "{err}");
    assert!(!dir.join("out").exists(), "{err}");
    assert!(
        err.contains("sigmatop: nothing was recorded; removed the empty record directory out"),
        "{err}"
    );
}
