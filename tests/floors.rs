//! The floors only look down (issue 26, docs/PRELOAD.md): no import circle among the modules of
//! the preload (preload/src), the core (src) or the dashboard (tui/src), at the grain of top-level
//! modules nor at that of files, as scripts/modcycles.py counts them (`crate::` and `super::`
//! paths in code, not in comments or unit tests). And the check itself can fail: a crate with one
//! circle, written here, is reported.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// scripts/modcycles.py on `src`: (exit code, what it printed).
fn modcycles(src: &Path) -> (Option<i32>, String) {
    let python = common::require("python3");
    let mut cmd = Command::new(python);
    cmd.arg(root().join("scripts/modcycles.py")).arg(src);
    let out = common::wait_timeout(common::spawn(&mut cmd), LIMIT);
    (
        out.status.code(),
        format!("{}{}", common::stdout_of(&out), common::stderr_of(&out)),
    )
}

#[test]
fn no_import_circle_in_the_preload_the_core_or_the_dashboard() {
    for dir in ["preload/src", "src", "tui/src"] {
        let (code, text) = modcycles(&root().join(dir));
        assert_eq!(
            code,
            Some(0),
            "import circle in {dir} (a floor looks up; docs/PRELOAD.md says which way each may \
             look):\n{text}"
        );
        assert!(text.contains(", 0 circles"), "{dir}: {text}");
    }
}

#[test]
fn the_check_reports_a_circle() {
    let dir = common::scratch("floors");
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("b")).expect("scratch dir");
    let files = [
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "pub fn f() { crate::b::c::g() }\n"),
        ("b/mod.rs", "pub mod c;\n"),
        // A comment naming crate::a is no tie; the code below it is.
        (
            "b/c.rs",
            "// crate::a\npub fn g() {}\npub fn h() { crate::a::f() }\n",
        ),
    ];
    for (name, text) in files {
        std::fs::write(src.join(name), text).expect("scratch file");
    }
    let (code, text) = modcycles(&src);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("top-level circle of 2: a, b"), "{text}");
    assert!(text.contains("file circle of 2: a, b::c"), "{text}");
}
