//! Lists the files of the bundled demo recording (fixtures/demo-moe) for `sigmatop demo`, which
//! embeds them with include_bytes! so the binary works from any directory.

use std::path::{Path, PathBuf};

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            walk(&p, out);
        } else if p.is_file() {
            out.push(p);
        }
    }
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let root = manifest.join("fixtures").join("demo-moe");
    println!("cargo:rerun-if-changed=fixtures/demo-moe");
    println!("cargo:rerun-if-changed=build.rs");
    let mut files = Vec::new();
    walk(&root, &mut files);
    let mut src = String::from("pub static DEMO_FILES: &[(&str, &[u8])] = &[\n");
    for f in &files {
        let (Ok(rel), Some(abs)) = (f.strip_prefix(&root), f.to_str()) else {
            continue;
        };
        let Some(rel) = rel.to_str() else { continue };
        src.push_str(&format!("    ({rel:?}, include_bytes!({abs:?})),\n"));
    }
    src.push_str("];\n");
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default()).join("demo_files.rs");
    if let Err(e) = std::fs::write(&out, src) {
        panic!("cannot write {}: {e}", out.display());
    }
}
