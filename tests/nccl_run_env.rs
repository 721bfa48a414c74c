//! `sigmatop run` makes sigmatop NCCL's profiler plugin (NCCL_PROFILER_PLUGIN = the preload's
//! path) and chains a plugin the user chose behind it (SIGMATOP_NCCL_PROFILER_PLUGIN = the
//! user's value), saying so in one line (docs/NCCL.md); `none` stays none.
mod common;

use common::Bounded;

use std::process::Command;

fn run(user_plugin: Option<&str>) -> (String, String) {
    let mut c = Command::new(common::sigmatop_bin());
    c.args([
        "run",
        "--headless",
        "--",
        "sh",
        "-c",
        "echo \"plugin=$NCCL_PROFILER_PLUGIN chained=$SIGMATOP_NCCL_PROFILER_PLUGIN\"",
    ]);
    match user_plugin {
        Some(p) => c.env("NCCL_PROFILER_PLUGIN", p),
        None => c.env_remove("NCCL_PROFILER_PLUGIN"),
    };
    let out = c.output_bounded().expect("sigmatop run");
    assert!(out.status.success(), "{}", common::stderr_of(&out));
    (common::stdout_of(&out), common::stderr_of(&out))
}

#[test]
fn run_sets_the_nccl_profiler_plugin_unless_the_user_chose_one() {
    let (out, err) = run(None);
    let want = format!("plugin={} chained=", common::preload().display());
    assert!(out.lines().any(|l| l == want), "want {want}:\n{out}");
    assert!(!err.contains("NCCL_PROFILER_PLUGIN"), "{err}");
    let (out, err) = run(Some("inspector"));
    let want = format!("plugin={} chained=inspector", common::preload().display());
    assert!(out.lines().any(|l| l == want), "want {want}:\n{out}");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("NCCL_PROFILER_PLUGIN"))
        .collect();
    assert_eq!(
        lines,
        [
            "sigmatop: NCCL_PROFILER_PLUGIN=inspector is yours: chained behind sigmatop's (NCCL loads sigmatop, sigmatop loads yours and forwards every event it asks for)"
        ]
    );
    let (out, _) = run(Some("none"));
    assert!(out.lines().any(|l| l == "plugin=none chained="), "{out}");
}
