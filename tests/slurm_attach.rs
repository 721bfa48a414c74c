//! `sigmatop attach --slurm JOBID` against a real Slurm: the test runs its own munged, slurmctld
//! and slurmd (Debian's packages; configuration, key, sockets, state and logs in its scratch
//! directory, on ports of its own, through SLURM_CONF), a one-node cluster on this host.
//! A batch job holds the node; a traced ucx_perftest tag_bw pair runs beside it and lingers
//! after its work (tests/programs/linger.c). `attach --slurm JOB --json --once` must find the
//! job's node with `scontrol`, reach it with `srun --overlap` (a job step running `sigmatop
//! relay`), and print the exact figures: (N + 1) × SIZE from the client to the server, on that
//! node.
//!
//! Needs root; without it, or without Slurm, it says so and is skipped, except under CI=true,
//! where a missing prerequisite fails (scripts/test.sh installs slurmctld, slurmd, slurm-client
//! and munge).
mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const N: u64 = 1000;
const SIZE: u64 = 4096;

fn skip(what: &str) {
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "slurm_attach: {what} (CI=true: scripts/test.sh installs Slurm and runs as root)"
    );
    eprintln!("\n!!!!!!!! SKIPPED slurm_attach: {what} !!!!!!!!\n");
}

/// Runs a Slurm client command with the test's configuration; its stdout.
fn slurm(conf: &Path, args: &[&str]) -> Result<String, String> {
    let o = Command::new(args[0])
        .args(&args[1..])
        .env("SLURM_CONF", conf)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", args[0]))?;
    if o.status.success() {
        Ok(stdout_of(&o))
    } else {
        Err(format!("{}: {}", args.join(" "), stderr_of(&o)))
    }
}

fn short_hostname() -> String {
    let o = Command::new("hostname")
        .arg("-s")
        .output()
        .expect("hostname");
    stdout_of(&o).trim().to_string()
}

/// Waits for `what` to hold, up to 60 s.
fn wait(what: &str, mut ok: impl FnMut() -> Result<bool, String>) {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < Duration::from_secs(60) {
        match ok() {
            Ok(true) => return,
            Ok(false) => {}
            Err(e) => last = e,
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    panic!("waited 60 s for {what}: {last}");
}

/// When the test ends: every process started with this test's SLURM_CONF (slurmstepd detaches
/// from slurmd, so killing the daemons does not reach a step still running).
struct Sweep(String);

impl Drop for Sweep {
    fn drop(&mut self) {
        let want = format!("SLURM_CONF={}", self.0);
        let Ok(rd) = std::fs::read_dir("/proc") else {
            return;
        };
        for e in rd.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
                continue;
            };
            let env = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            if env.split(|b| *b == 0).any(|v| v == want.as_bytes()) {
                // SAFETY: kill(2) of a process this test's Slurm started.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
    }
}

/// The job is cancelled when the test ends, whatever happens.
struct Job<'a> {
    conf: &'a Path,
    id: String,
}

impl Drop for Job<'_> {
    fn drop(&mut self) {
        let _ = slurm(self.conf, &["scancel", &self.id]);
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn attach_slurm_finds_the_jobs_node_through_srun() {
    // SAFETY: getuid cannot fail.
    if unsafe { libc::getuid() } != 0 {
        return skip("not root: the test runs slurmctld and slurmd");
    }
    for p in [
        "/usr/sbin/munged",
        "/usr/sbin/slurmctld",
        "/usr/sbin/slurmd",
        "/usr/bin/srun",
        "/usr/bin/scontrol",
        "/usr/bin/sbatch",
    ] {
        if !Path::new(p).is_file() {
            return skip(&format!(
                "{p} is missing (slurmctld, slurmd, slurm-client, munge)"
            ));
        }
    }
    let perftest = require("ucx_perftest").display().to_string();
    let dir = scratch("slurm");
    let d = dir.display().to_string();
    for sub in ["state", "spool"] {
        std::fs::create_dir_all(dir.join(sub)).expect("mkdir");
    }
    let key: Vec<u8> = (0..1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 ^ std::process::id() as u8)
        .collect();
    std::fs::write(dir.join("munge.key"), key).expect("munge key");
    std::fs::set_permissions(
        dir.join("munge.key"),
        std::os::unix::fs::PermissionsExt::from_mode(0o400),
    )
    .expect("chmod");
    let node = short_hostname();
    let (ctld_port, d_port) = (port(), port());
    let conf = dir.join("slurm.conf");
    let _sweep = Sweep(conf.display().to_string());
    std::fs::write(
        &conf,
        format!(
            "ClusterName=sigmatop\nSlurmctldHost={node}(127.0.0.1)\nSlurmctldPort={ctld_port}\n\
             SlurmdPort={d_port}\nSlurmUser=root\nSlurmdUser=root\nAuthType=auth/munge\n\
             AuthInfo=socket={d}/munge.sock\nCredType=cred/munge\nStateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool\nSlurmctldPidFile={d}/ctld.pid\nSlurmdPidFile={d}/d.pid\n\
             ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\nReturnToService=2\n\
             MpiDefault=none\nSchedulerType=sched/builtin\nJobCompType=jobcomp/none\n\
             AccountingStorageType=accounting_storage/none\nSlurmctldLogFile={d}/ctld.log\n\
             SlurmdLogFile={d}/d.log\n\
             NodeName={node} NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN\n\
             PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES\n"
        ),
    )
    .expect("slurm.conf");

    let daemon = |args: &[&str]| {
        Command::new(args[0])
            .args(&args[1..])
            .env("SLURM_CONF", &conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(dir.join(format!(
                    "{}.out",
                    args[0].rsplit('/').next().unwrap_or("daemon")
                )))
                .expect("log"),
            )
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {e}", args[0]))
    };
    let mut daemons = Procs(vec![daemon(&[
        "/usr/sbin/munged",
        "-F",
        "-f",
        &format!("--socket={d}/munge.sock"),
        &format!("--key-file={d}/munge.key"),
        &format!("--log-file={d}/munge.log"),
        &format!("--pid-file={d}/munge.pid"),
        &format!("--seed-file={d}/munge.seed"),
    ])]);
    wait("munged's socket", || Ok(dir.join("munge.sock").exists()));
    let conf_s = conf.display().to_string();
    daemons
        .0
        .push(daemon(&["/usr/sbin/slurmctld", "-D", "-f", &conf_s]));
    daemons.0.push(daemon(&[
        "/usr/sbin/slurmd",
        "-D",
        "-f",
        &conf_s,
        "-N",
        &node,
    ]));
    wait("the node idle", || {
        slurm(&conf, &["sinfo", "-h", "-o", "%t"]).map(|s| s.trim() == "idle")
    });

    let submitted = slurm(
        &conf,
        &[
            "sbatch",
            "-N1",
            "--parsable",
            "-o",
            &format!("{d}/job.out"),
            "--wrap",
            "sleep 600",
        ],
    )
    .expect("sbatch");
    let job = Job {
        conf: &conf,
        id: submitted.trim().to_string(),
    };
    wait("the job running", || {
        slurm(&conf, &["squeue", "-h", "-j", &job.id, "-o", "%t"]).map(|s| s.trim() == "R")
    });

    // The traced pair, beside the job, lingering after its work.
    let sock = dir.join("sock");
    std::fs::create_dir_all(&sock).expect("sock");
    std::fs::set_permissions(&sock, std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .expect("chmod");
    let linger = dir.join("liblinger.so");
    let o = Command::new(require("cc"))
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&linger)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/linger.c"))
        .arg("-ldl")
        .output()
        .expect("cc");
    assert!(o.status.success(), "cc: {}", stderr_of(&o));
    let p = port().to_string();
    let traced = |args: &[&str], log: &str| -> std::process::Child {
        Command::new(&perftest)
            .args(args)
            .env(
                "LD_PRELOAD",
                format!("{} {}", preload().display(), linger.display()),
            )
            .env("SIGMATOP_SOCKET_DIR", &sock)
            .env("UCX_TLS", "tcp")
            .env("LINGER_S", "600")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join(log)).expect("log"))
            .spawn()
            .expect("ucx_perftest")
    };
    let mut work = Procs(vec![traced(&["-p", &p], "server.log")]);
    wait_listening(p.parse().expect("port"), Duration::from_secs(20));
    let (n, size) = (N.to_string(), SIZE.to_string());
    work.0.push(traced(
        &[
            "127.0.0.1",
            "-p",
            &p,
            "-t",
            "tag_bw",
            "-n",
            &n,
            "-s",
            &size,
            "-w",
            "1",
        ],
        "client.log",
    ));
    for log in ["server.log", "client.log"] {
        wait(log, || {
            let t = std::fs::read_to_string(dir.join(log)).unwrap_or_default();
            if t.contains("linger: main returned") && !t.contains("returned 0") {
                return Err(t);
            }
            Ok(t.contains("linger: main returned 0"))
        });
    }

    // The relay runs as a step of the job; srun passes the environment on (its socket dir).
    let o = Command::new(sigmatop_bin())
        .args(["attach", "--json", "--once", "--slurm", &job.id])
        .arg(format!("--remote-cmd={}", sigmatop_bin().display()))
        .env("SLURM_CONF", &conf)
        .env("SIGMATOP_SOCKET_DIR", &sock)
        .stdin(Stdio::null())
        .output()
        .expect("attach");
    assert!(
        o.status.success(),
        "attach --slurm: {}\n{}",
        stderr_of(&o),
        stdout_of(&o)
    );
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(j["hosts"][0]["destination"], node.as_str(), "{j}");
    assert_eq!(j["hosts"][0]["state"]["state"], "up", "{j}");
    assert_eq!(j["processes"].as_array().map(Vec::len), Some(2), "{j}");
    let sent = (N + 1) * SIZE;
    assert_eq!(j["totals"]["tx_bytes"], sent, "{j}");
    let host = j["processes"][0]["host"].clone();
    assert_eq!(j["node_matrix"]["labels"], serde_json::json!([host]));
    assert_eq!(j["node_matrix"]["bytes"], serde_json::json!([[sent]]));

    // A job that does not exist: one line naming it.
    let o = Command::new(sigmatop_bin())
        .args(["attach", "--json", "--once", "--slurm", "999999"])
        .env("SLURM_CONF", &conf)
        .stdin(Stdio::null())
        .output()
        .expect("attach");
    assert!(!o.status.success());
    let err = stderr_of(&o);
    assert!(
        err.trim().lines().count() == 1 && err.contains("--slurm 999999"),
        "{err}"
    );
    drop(work);
    drop(job);
    drop(daemons);
}
