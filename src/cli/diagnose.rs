//! Why a run traced nothing, said at its end: a library whose layer `--layers` switched off, an
//! MPI launcher whose ranks sent nothing through a traced library (Open MPI's ob1 PML), or a
//! program that used no RDMA library at all.
//!
//! The preload of a switched-off layer installs no hooks, and a process that makes no traced call
//! starts no collector and opens no socket: it reports nothing. So what the program loaded is
//! learnt here, from outside: the memory maps of the program's processes (`/proc/PID/maps`),
//! read while nothing has been traced yet, during its first seconds, and from the lists of loaded
//! objects that its processes which traced nothing leave at exit in the run's final-state
//! directory (`<pid>.libs`, preload/src/final_state.rs): those cover a program too short-lived
//! for a look.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::event::{Layer, layer_names};

/// Libraries that tell which layer a process uses (file-name prefixes).
const LAYER_LIBRARIES: [(Layer, &str); 7] = [
    (Layer::Ucx, "libucp.so"),
    (Layer::Ucx, "libuct.so"),
    (Layer::Ucx, "libucs.so"),
    (Layer::Libfabric, "libfabric.so"),
    (Layer::Ibverbs, "libibverbs.so"),
    (Layer::Mlx5, "libmlx5.so"),
    (Layer::Cuda, "libcuda.so"),
];

/// Open MPI's point-to-point layer that carries MPI traffic over TCP and shared memory itself,
/// through none of the libraries sigmatop traces.
const OB1: &str = "mca_pml_ob1.so";
/// MPI libraries (Open MPI's and MPICH's file names): a process that maps one is an MPI rank.
const MPI_LIBRARIES: [&str; 2] = ["libmpi.so", "libmpich.so"];

/// How long after the start the program's processes are looked at, and how often.
const WATCH_FOR: Duration = Duration::from_secs(30);
const WATCH_EVERY: Duration = Duration::from_millis(100);
/// Most processes looked at per look (a `make -j` under `sigmatop run` has many).
const MAX_PROCESSES: usize = 256;

/// What the program's processes were seen to load.
#[derive(Debug)]
pub struct LibraryWatch {
    root: u32,
    started: Instant,
    last: Option<Instant>,
    /// Per layer, the library of it seen (its file name) with its rank in `LAYER_LIBRARIES`.
    pub layers: BTreeMap<u8, (usize, String)>,
    /// Some process loaded Open MPI's ob1 PML.
    pub ob1: bool,
    /// The MPI library some process loaded (its file name), if any.
    pub mpi: Option<String>,
}

/// `pid` and every process below it, through /proc/PID/task/TID/children.
fn descendants(root: u32, out: &mut Vec<u32>) {
    out.clear();
    out.push(root);
    let mut i = 0;
    while i < out.len() && out.len() < MAX_PROCESSES {
        let pid = out[i];
        i += 1;
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for t in tasks.flatten() {
            let Ok(text) = std::fs::read_to_string(t.path().join("children")) else {
                continue;
            };
            out.extend(
                text.split_whitespace()
                    .filter_map(|c| c.parse::<u32>().ok()),
            );
        }
    }
    out.truncate(MAX_PROCESSES);
}

impl LibraryWatch {
    pub fn new(root: u32) -> LibraryWatch {
        LibraryWatch {
            root,
            started: Instant::now(),
            last: None,
            layers: BTreeMap::new(),
            ob1: false,
            mpi: None,
        }
    }

    /// Looks at the program's processes when a look is due (every 100 ms during the first 30 s).
    pub fn poll(&mut self) {
        if self.started.elapsed() > WATCH_FOR
            || self.last.is_some_and(|t| t.elapsed() < WATCH_EVERY)
        {
            return;
        }
        self.last = Some(Instant::now());
        let mut pids = Vec::new();
        descendants(self.root, &mut pids);
        for pid in pids {
            if let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) {
                self.note_maps(&maps);
            }
        }
    }

    /// Notes the libraries named in the text of a /proc/PID/maps.
    pub fn note_maps(&mut self, maps: &str) {
        for line in maps.lines() {
            if let Some(path) = line.split_whitespace().nth(5) {
                self.note_library(path);
            }
        }
    }

    /// Notes one loaded object, by its path (a line of /proc/PID/maps, or of the lists the
    /// program's untraced processes leave: `FinalStates::loaded_objects`).
    pub fn note_library(&mut self, path: &str) {
        let name = Path::new(path)
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default();
        if name == OB1 {
            self.ob1 = true;
        }
        if self.mpi.is_none() && MPI_LIBRARIES.iter().any(|m| name.starts_with(m)) {
            self.mpi = Some(name.to_string());
        }
        // Per layer, the library listed first above (libucp before libucs: the one a program
        // calls).
        for (rank, (layer, prefix)) in LAYER_LIBRARIES.iter().enumerate() {
            if name.starts_with(prefix) {
                let e = self
                    .layers
                    .entry(*layer as u8)
                    .or_insert((usize::MAX, String::new()));
                if rank < e.0 {
                    *e = (rank, name.to_string());
                }
            }
        }
    }
}

/// The launchers of MPI jobs.
fn is_mpi_launcher(name: &str) -> bool {
    matches!(
        name,
        "mpirun"
            | "mpiexec"
            | "orterun"
            | "prterun"
            | "oshrun"
            | "mpirun.openmpi"
            | "mpiexec.openmpi"
    )
}

/// Is this launcher Open MPI's (its real file, or `ompi_info` beside it)?
fn is_open_mpi(program: &str) -> bool {
    let path = if program.contains('/') {
        Some(PathBuf::from(program))
    } else {
        std::env::var("PATH").ok().and_then(|p| {
            p.split(':')
                .map(|d| Path::new(d).join(program))
                .find(|c| c.is_file())
        })
    };
    let Some(path) = path else {
        return false;
    };
    let real = path.canonicalize().unwrap_or_else(|_| path.clone());
    let real_name = real.to_string_lossy();
    real_name.contains("openmpi")
        || real_name.ends_with("orterun")
        || real_name.ends_with("prterun")
        || path.parent().is_some_and(|d| d.join("ompi_info").is_file())
}

/// Does the command line or the environment already ask Open MPI for its UCX PML?
fn asks_for_pml_ucx(cmd: &[String]) -> bool {
    let on_line = cmd
        .windows(3)
        .any(|w| (w[0] == "--mca" || w[0] == "-mca") && w[1] == "pml" && w[2] == "ucx");
    let in_env = std::env::var("OMPI_MCA_pml").is_ok_and(|v| v.trim() == "ucx");
    on_line || in_env
}

/// Open MPI parameter files that exclude the UCX PML (`pml = ^ucx`), as Debian's does.
fn files_excluding_pml_ucx() -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("/etc/openmpi/openmpi-mca-params.conf")];
    if let Some(home) = std::env::var_os("HOME") {
        files.push(Path::new(&home).join(".openmpi/mca-params.conf"));
    }
    files
        .into_iter()
        .filter(|f| {
            std::fs::read_to_string(f).is_ok_and(|text| {
                text.lines().any(|l| {
                    let l = l.split('#').next().unwrap_or("");
                    l.split_once('=').is_some_and(|(k, v)| {
                        k.trim() == "pml" && v.trim().starts_with('^') && v.contains("ucx")
                    })
                })
            })
        })
        .collect()
}

/// What is known about a run that traced nothing.
pub struct NothingTraced<'a> {
    /// The command as given (`mpirun -np 4 ./app`).
    pub cmd: &'a [String],
    /// `--layers` as given, and the layers it leaves on.
    pub layers_arg: Option<&'a str>,
    pub layers_on: u32,
    pub seen: &'a LibraryWatch,
    /// How the program ended when it failed ("status 4", "signal 9"); None when it succeeded.
    pub failed: Option<String>,
}

impl NothingTraced<'_> {
    /// For an MPI launcher whose ranks sent nothing sigmatop traces: why, and what to do.
    /// `traced`: some of its processes were traced but sent nothing; the layers they used
    /// ("ucx").
    ///
    /// What is claimed is what was seen: Open MPI's ob1 PML is named as the reason only when a
    /// rank loaded it, or when the ranks ran MPI, succeeded and Open MPI's defaults here pick it;
    /// a launcher that failed is said to have failed, and programs that loaded no MPI library
    /// (`mpirun -np 2 hostname`) are not called MPI ranks.
    pub fn mpi_hint(&self, traced: Option<&str>) -> Option<String> {
        let prog = super::child::program_name(self.cmd);
        if !is_mpi_launcher(&prog) {
            return None;
        }
        let first = self.cmd.first().map(String::as_str).unwrap_or_default();
        let ob1_default = is_open_mpi(first) && !asks_for_pml_ucx(self.cmd);
        let failed = self.failed.as_deref();
        if self.seen.ob1 || (ob1_default && self.seen.mpi.is_some() && failed.is_none()) {
            let why = if self.seen.ob1 {
                "the ranks loaded Open MPI's ob1 PML".to_string()
            } else {
                "Open MPI chose its ob1 PML (its default on a host without an RDMA NIC)".to_string()
            };
            let conf = files_excluding_pml_ucx();
            let conf = if conf.is_empty() {
                String::new()
            } else {
                let f: Vec<String> = conf.iter().map(|p| p.display().to_string()).collect();
                format!(" ({} says `pml = ^ucx`)", f.join(", "))
            };
            let also = failed.map_or(String::new(), |d| {
                format!(" ({prog} also exited with {d}: its output says why)")
            });
            return Some(format!(
                "no MPI traffic was traced: {why}{conf}, which moves MPI messages over TCP and shared memory itself, through no library sigmatop traces{also}. Send them through UCX: `mpirun --mca pml ucx ...`; on a host without an RDMA NIC also `--mca pml_ucx_tls any --mca pml_ucx_devices any`"
            ));
        }
        // Open MPI's default would hide the traffic even once the program works: say so too.
        let ob1_note = |when: &str| {
            if ob1_default {
                format!(
                    "; {when}, add `--mca pml ucx`: Open MPI's default here, its ob1 PML, moves MPI messages where sigmatop does not see them"
                )
            } else {
                String::new()
            }
        };
        if let Some(d) = failed {
            let who = if let Some(layers) = traced {
                if layers.is_empty() {
                    "its ranks were traced but sent nothing".to_string()
                } else {
                    format!("its ranks were traced ({layers}) but sent nothing")
                }
            } else if let Some(lib) = &self.seen.mpi {
                format!("its ranks loaded {lib} but sent nothing through a library sigmatop traces")
            } else {
                "no rank was seen loading an MPI library or a library sigmatop traces".to_string()
            };
            let what = if traced.is_none() && self.seen.mpi.is_none() {
                "nothing was traced"
            } else {
                "no MPI traffic was traced"
            };
            let then = if traced.is_some() {
                String::new()
            } else {
                ob1_note("when it runs")
            };
            return Some(format!(
                "{what}: {prog} exited with {d} and {who}; its output says why{then}"
            ));
        }
        if traced.is_none() && self.seen.mpi.is_none() {
            return Some(format!(
                "nothing was traced: the programs {prog} started were not seen loading an MPI library or a library sigmatop traces (UCX, libfabric, ibverbs, mlx5){}",
                ob1_note("if they are MPI programs")
            ));
        }
        Some(format!(
            "no MPI traffic was traced: the ranks {prog} started sent nothing through a library sigmatop traces (UCX, libfabric, ibverbs, mlx5); pick the MPI library's UCX or libfabric transport"
        ))
    }

    /// The libraries of switched-off layers the program was seen loading ("libucp.so.0 (layer
    /// ucx)") and those layers' names, when `--layers` was given and some were. UCX and
    /// libfabric load verbs and mlx5 for their own device discovery: when a program's own
    /// library (UCX, libfabric) is among them, that is the one named.
    fn switched_off(&self) -> Option<(Vec<String>, Vec<&'static str>)> {
        self.layers_arg?;
        let mut off: Vec<(Layer, &String)> = self
            .seen
            .layers
            .iter()
            .filter_map(|(l, (_, lib))| Layer::from_u8(*l).map(|l| (l, lib)))
            .filter(|(l, _)| self.layers_on & l.bit() == 0)
            .collect();
        if off
            .iter()
            .any(|(l, _)| matches!(l, Layer::Ucx | Layer::Libfabric))
        {
            off.retain(|(l, _)| matches!(l, Layer::Ucx | Layer::Libfabric));
        }
        if off.is_empty() {
            return None;
        }
        let libs = off
            .iter()
            .map(|(l, lib)| format!("{lib} (layer {})", l.name()))
            .collect();
        Some((libs, off.iter().map(|(l, _)| l.name()).collect()))
    }

    /// "--layers -ucx switched that layer off; add ucx to --layers, or leave --layers out".
    fn switched_off_advice(&self, names: &[&str]) -> String {
        format!(
            "--layers {} switched {} off; add {} to --layers, or leave --layers out",
            self.layers_arg.unwrap_or_default(),
            if names.len() == 1 {
                "that layer"
            } else {
                "those layers"
            },
            names.join(",")
        )
    }

    /// For a run whose processes were traced but made no operation (`used`: the layers they
    /// were traced in, "ibverbs"): a library of a layer `--layers` switched off, the program's
    /// own (UCX loads verbs for its device discovery, so a UCX program run with `-ucx` is
    /// traced in ibverbs and moves nothing there), else the MPI launcher's hint; None when
    /// there is nothing to say (issue 39, item 4: ucx_perftest under `--layers -ucx` got no
    /// word, an MPI job advice to pick UCX, the layer it had switched off).
    pub fn idle_message(&self, used: &str) -> Option<String> {
        if let Some((libs, names)) = self.switched_off() {
            let prog = super::child::program_name(self.cmd);
            let traced = if used.is_empty() {
                "its processes were traced but made no operation".to_string()
            } else {
                format!("its processes were traced ({used}) but made no operation there")
            };
            return Some(format!(
                "nothing moved through a traced layer: {traced}; {prog} loaded {}, but {}",
                libs.join(", "),
                self.switched_off_advice(&names)
            ));
        }
        self.mpi_hint(Some(used))
    }

    /// The end-of-run message: what happened and what to do, one paragraph.
    pub fn message(&self) -> String {
        let prog = super::child::program_name(self.cmd);
        // A library of a layer that was switched off.
        if let Some((libs, names)) = self.switched_off() {
            return format!(
                "nothing was traced: {prog} loaded {}, but {}",
                libs.join(", "),
                self.switched_off_advice(&names)
            );
        }
        if let Some(h) = self.mpi_hint(None) {
            return h;
        }
        // A library of a layer that was on: the processes were traced but ended before
        // sigmatop connected to them (a live view only sees processes while they run).
        if let Some((l, lib)) = self
            .seen
            .layers
            .iter()
            .filter_map(|(l, (_, lib))| Layer::from_u8(*l).map(|l| (l, lib)))
            .find(|(l, _)| self.layers_on & l.bit() != 0)
        {
            if let Some(d) = &self.failed {
                return format!(
                    "nothing was traced: {prog} loaded {lib} (layer {}) but exited with {d} before a call sigmatop traces; its output says why",
                    l.name()
                );
            }
            return format!(
                "nothing was traced live: {prog} loaded {lib} (layer {}), but its processes ended before sigmatop could connect to them; --record DIR keeps every process, however short-lived",
                l.name()
            );
        }
        match self.layers_arg {
            Some(arg) => {
                let all: u32 = Layer::ALL.iter().map(|l| l.bit()).sum();
                format!(
                    "nothing was traced: {prog} used no library of the layers --layers {arg} leaves on ({}); it loaded none of the switched-off layers' libraries ({}) either while sigmatop looked",
                    layer_names(self.layers_on),
                    layer_names(all & !self.layers_on)
                )
            }
            None => match &self.failed {
                // It may have failed before it got to one: say what was seen, not more.
                Some(d) => format!(
                    "nothing was traced: {prog} exited with {d}, not seen loading a library sigmatop traces (UCX, libfabric, ibverbs, mlx5)"
                ),
                None => format!(
                    "{prog} used no RDMA library sigmatop traces (UCX, libfabric, ibverbs, mlx5): nothing was traced"
                ),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UCX_MAPS: &str = "\
7f1c2a000000-7f1c2a020000 r--p 00000000 08:01 123 /usr/lib/x86_64-linux-gnu/libucp.so.0.0.0
7f1c2b000000-7f1c2b020000 r--p 00000000 08:01 124 /usr/lib/x86_64-linux-gnu/libucs.so.0.0.0
7f1c2c000000-7f1c2c020000 rw-p 00000000 00:00 0
7ffd1c000000-7ffd1c021000 rw-p 00000000 00:00 0 [stack]";

    fn cmd(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_switched_off_layer_is_named() {
        let mut seen = LibraryWatch::new(1);
        seen.note_maps(UCX_MAPS);
        assert_eq!(
            seen.layers.get(&(Layer::Ucx as u8)).map(|l| l.1.as_str()),
            Some("libucp.so.0.0.0"),
            "libucp named, though libucs is mapped too"
        );
        // UCX maps verbs for its device discovery: the program's own library is the one named.
        seen.note_maps("7f0-7f1 r--p 0 08:01 9 /usr/lib/libibverbs.so.1.14.44.0");
        let c = cmd(&["/usr/bin/ucx_perftest", "127.0.0.1"]);
        let m = NothingTraced {
            cmd: &c,
            layers_arg: Some("libfabric"),
            layers_on: Layer::Libfabric.bit(),
            seen: &seen,
            failed: None,
        }
        .message();
        assert_eq!(
            m,
            "nothing was traced: ucx_perftest loaded libucp.so.0.0.0 (layer ucx), but --layers libfabric switched that layer off; add ucx to --layers, or leave --layers out"
        );
        // Nothing of an off layer seen: the layers are named, no library is invented.
        let none = LibraryWatch::new(1);
        let m = NothingTraced {
            cmd: &c,
            layers_arg: Some("libfabric"),
            layers_on: Layer::Libfabric.bit(),
            seen: &none,
            failed: None,
        }
        .message();
        assert!(
            m.contains("(libfabric)") && m.contains("(ucx,ibverbs,mlx5,cuda)"),
            "{m}"
        );
    }

    #[test]
    fn a_program_traced_in_one_layer_that_used_a_switched_off_one_is_told() {
        let mut seen = LibraryWatch::new(1);
        seen.note_maps(UCX_MAPS);
        seen.note_maps("7f0-7f1 r--p 0 08:01 9 /usr/lib/libibverbs.so.1.14.44.0");
        let c = cmd(&["mpirun", "-np", "2", "./app"]);
        let why = NothingTraced {
            cmd: &c,
            layers_arg: Some("-ucx"),
            layers_on: !Layer::Ucx.bit(),
            seen: &seen,
            failed: None,
        };
        assert_eq!(
            why.idle_message("ibverbs").as_deref(),
            Some(
                "nothing moved through a traced layer: its processes were traced (ibverbs) but made no operation there; mpirun loaded libucp.so.0.0.0 (layer ucx), but --layers -ucx switched that layer off; add ucx to --layers, or leave --layers out"
            )
        );
        // Without --layers, the MPI launcher's hint (not about layers).
        let why = NothingTraced {
            layers_arg: None,
            layers_on: u32::MAX,
            ..why
        };
        assert!(
            why.idle_message("ibverbs")
                .is_some_and(|m| !m.contains("--layers")),
            "{:?}",
            why.idle_message("ibverbs")
        );
    }

    #[test]
    fn a_traced_library_but_nothing_connected_is_not_called_no_rdma() {
        let mut seen = LibraryWatch::new(1);
        seen.note_maps(UCX_MAPS);
        let c = cmd(&["ucx_perftest"]);
        let m = NothingTraced {
            cmd: &c,
            layers_arg: None,
            layers_on: u32::MAX,
            seen: &seen,
            failed: None,
        }
        .message();
        assert!(
            m.starts_with("nothing was traced live: ucx_perftest loaded libucp.so.0.0.0 (layer ucx), but its processes ended before sigmatop could connect"),
            "{m}"
        );
    }

    #[test]
    fn pml_ucx_on_the_command_line_or_in_the_environment() {
        assert!(asks_for_pml_ucx(&cmd(&[
            "mpirun", "--mca", "pml", "ucx", "-np", "2"
        ])));
        assert!(!asks_for_pml_ucx(&cmd(&[
            "mpirun", "--mca", "btl", "ucx", "-np", "2"
        ])));
        assert!(is_mpi_launcher("mpiexec"));
        assert!(!is_mpi_launcher("ucx_perftest"));
    }
}
