//! `sigmatop run` makes sigmatop NCCL's profiler plugin (NCCL_PROFILER_PLUGIN = the preload's
//! path) and leaves a plugin the user chose alone, saying so in one line (docs/NCCL.md).
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
        "echo \"plugin=$NCCL_PROFILER_PLUGIN\"",
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
    let want = format!("plugin={}", common::preload().display());
    assert!(out.lines().any(|l| l == want), "want {want}:\n{out}");
    assert!(!err.contains("NCCL_PROFILER_PLUGIN"), "{err}");
    let (out, err) = run(Some("inspector"));
    assert!(out.lines().any(|l| l == "plugin=inspector"), "{out}");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("NCCL_PROFILER_PLUGIN"))
        .collect();
    assert_eq!(
        lines,
        [
            "sigmatop: NCCL_PROFILER_PLUGIN=inspector is yours and stays: NCCL collectives are not attributed by sigmatop, verbs tracing goes on"
        ]
    );
}
