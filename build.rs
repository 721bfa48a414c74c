//! Lists the files of the bundled demo recordings for `sigmatop demo` (fixtures/nccl/moe_np4/rec:
//! an MoE all_to_all over NCCL, 4 ranks on an H200), `sigmatop demo collectives`
//! (fixtures/nccl/moe_cpu_np4/rec: an NCCL-shaped MoE exchange on the CPU, with its NCCL profiler
//! events), `sigmatop demo mpi` (fixtures/demo-moe: a
//! 4-rank MPI job) and `sigmatop demo gpu` (fixtures/nvshmem/put_bw.gpumem.traced/rec: NVIDIA's
//! NVSHMEM on an H200), which embeds them with include_bytes! so the binary works from any
//! directory.
//!
//! With `SIGMATOP_EMBED_PRELOAD=PATH` (scripts/install.sh sets it after building the preload), the
//! binary also carries that preload library (`cli::preload`); without it, it carries none and
//! finds the library beside itself, in ../lib, or through $SIGMATOP_PRELOAD. Cargo cannot build
//! the preload before this crate by itself, so a plain `cargo build --workspace` embeds nothing.

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

/// `pub static NAME: &[(relative path, bytes)]` for every file under `root`. The files are named
/// from `CARGO_MANIFEST_DIR` in the generated code, never by this checkout's absolute path, so a
/// target directory reused from another checkout (a clean clone built with the same
/// CARGO_TARGET_DIR) still compiles here.
fn table(name: &str, manifest: &Path, root: &Path) -> String {
    let mut files = Vec::new();
    walk(root, &mut files);
    let mut src = format!("pub static {name}: &[(&str, &[u8])] = &[\n");
    for f in &files {
        let (Ok(rel), Ok(from_manifest)) = (f.strip_prefix(root), f.strip_prefix(manifest)) else {
            continue;
        };
        let (Some(rel), Some(from_manifest)) = (rel.to_str(), from_manifest.to_str()) else {
            continue;
        };
        let from_manifest = format!("/{from_manifest}");
        src.push_str(&format!(
            "    ({rel:?}, include_bytes!(concat!(env!(\"CARGO_MANIFEST_DIR\"), {from_manifest:?}))),\n"
        ));
    }
    src.push_str("];\n");
    src
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let fixtures = manifest.join("fixtures");
    println!("cargo:rerun-if-changed=fixtures/demo-moe");
    println!("cargo:rerun-if-changed=fixtures/nvshmem");
    println!("cargo:rerun-if-changed=fixtures/nccl/moe_np4/rec");
    println!("cargo:rerun-if-changed=fixtures/nccl/moe_cpu_np4/rec");
    println!("cargo:rerun-if-changed=build.rs");
    let src = table("DEMO_FILES", &manifest, &fixtures.join("demo-moe"))
        + &table(
            "DEMO_GPU_FILES",
            &manifest,
            &fixtures.join("nvshmem/put_bw.gpumem.traced/rec"),
        )
        + &table(
            "DEMO_NCCL_FILES",
            &manifest,
            &fixtures.join("nccl/moe_np4/rec"),
        )
        + &table(
            "DEMO_COLL_FILES",
            &manifest,
            &fixtures.join("nccl/moe_cpu_np4/rec"),
        );
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap_or_default());
    let out = out_dir.join("demo_files.rs");
    if let Err(e) = std::fs::write(&out, src) {
        panic!("cannot write {}: {e}", out.display());
    }

    println!("cargo:rerun-if-env-changed=SIGMATOP_EMBED_PRELOAD");
    let embed = match std::env::var("SIGMATOP_EMBED_PRELOAD") {
        Ok(p) if !p.is_empty() => {
            let path = PathBuf::from(&p);
            let abs = path
                .canonicalize()
                .unwrap_or_else(|e| panic!("SIGMATOP_EMBED_PRELOAD={p}: {e}"));
            println!("cargo:rerun-if-changed={}", abs.display());
            format!(
                "pub static EMBEDDED_PRELOAD: Option<&[u8]> = Some(include_bytes!({:?}));\n",
                abs.display().to_string()
            )
        }
        _ => "pub static EMBEDDED_PRELOAD: Option<&[u8]> = None;\n".to_string(),
    };
    let out = out_dir.join("embedded_preload.rs");
    if let Err(e) = std::fs::write(&out, embed) {
        panic!("cannot write {}: {e}", out.display());
    }
}
