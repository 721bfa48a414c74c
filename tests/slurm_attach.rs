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

/// A missing prerequisite: a failure under CI=true, a loud skip elsewhere, listed by
/// scripts/test.sh (tests/common `skip`).
fn skip(what: &str) {
    common::skip(&format!(
        "{what} (scripts/test.sh installs Slurm and runs as root)"
    ));
}

/// Runs a Slurm client command with the test's configuration; its stdout.
fn slurm(conf: &Path, args: &[&str]) -> Result<String, String> {
    let o = Command::new(args[0])
        .args(&args[1..])
        .env("SLURM_CONF", conf)
        .stdin(Stdio::null())
        .output_bounded()
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
        .output_bounded()
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
    /// Cancels the job and waits (up to 30 s, never failing: this runs on a panic too) until
    /// Slurm no longer lists it.
    fn drop(&mut self) {
        let _ = slurm(self.conf, &["scancel", &self.id]);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            match slurm(self.conf, &["squeue", "-h", "-j", &self.id, "-o", "%t"]) {
                Ok(s) if !s.trim().is_empty() => {}
                _ => return,
            }
            std::thread::sleep(Duration::from_millis(100));
        }
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
    let conf = dir.join("slurm.conf");
    let _sweep = Sweep(conf.display().to_string());
    let write_conf = |ctld_port: u16, d_port: u16| {
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
    };

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
    // slurmctld and slurmd on ports free when looked at; one that another process took in the
    // meantime ends the daemon with "Address already in use" (in its log): both start again on
    // other ports, from a clean state.
    let mut started = false;
    for _ in 0..8 {
        let (ctld_port, d_port) = (port(), port());
        write_conf(ctld_port, d_port);
        let mut pair = Procs(vec![
            daemon(&["/usr/sbin/slurmctld", "-D", "-f", &conf_s]),
            daemon(&["/usr/sbin/slurmd", "-D", "-f", &conf_s, "-N", &node]),
        ]);
        let mut ended = None;
        for (i, p) in [ctld_port, d_port].into_iter().enumerate() {
            if let Err(why) = listened(&mut pair.0[i], p, Duration::from_secs(60)) {
                ended = Some(why);
                break;
            }
        }
        let Some(why) = ended else {
            daemons.0.append(&mut pair.0);
            started = true;
            break;
        };
        drop(pair);
        let logs: String = ["ctld.log", "d.log", "slurmctld.out", "slurmd.out"]
            .iter()
            .map(|f| std::fs::read_to_string(dir.join(f)).unwrap_or_default())
            .collect();
        assert!(
            logs.contains("Address already in use"),
            "{why}\nthe daemons' logs:\n{logs}"
        );
        for f in ["ctld.log", "d.log"] {
            let _ = std::fs::remove_file(dir.join(f));
        }
        for sub in ["state", "spool"] {
            let _ = std::fs::remove_dir_all(dir.join(sub));
            std::fs::create_dir_all(dir.join(sub)).expect("mkdir");
        }
    }
    assert!(
        started,
        "8 port pairs were taken between the look and the daemons' bind"
    );
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
        .output_bounded()
        .expect("cc");
    assert!(o.status.success(), "cc: {}", stderr_of(&o));
    let traced = |c: &mut Command| {
        c.env(
            "LD_PRELOAD",
            format!("{} {}", preload().display(), linger.display()),
        )
        .env("SIGMATOP_SOCKET_DIR", &sock)
        .env("UCX_TLS", "tcp")
        .env("LINGER_S", "600");
    };
    let (mut server, p) = start_server(
        |port| {
            let mut c = Command::new(&perftest);
            c.args(["-p", &port.to_string()]);
            traced(&mut c);
            c
        },
        Duration::from_secs(20),
    );
    let server_log = PipeReader::new(server.stderr.take().expect("stderr"));
    let _server_out = PipeReader::new(server.stdout.take().expect("stdout"));
    let (n, size, p) = (N.to_string(), SIZE.to_string(), p.to_string());
    let mut client = Command::new(&perftest);
    client.args([
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
    ]);
    traced(&mut client);
    let mut client = spawn(&mut client);
    let client_log = PipeReader::new(client.stderr.take().expect("stderr"));
    let _client_out = PipeReader::new(client.stdout.take().expect("stdout"));
    for (who, log) in [("the server", &server_log), ("the client", &client_log)] {
        wait(&format!("{who}'s main to return (linger.c's line)"), || {
            let t = log.text();
            if t.contains("linger: main returned") && !t.contains("returned 0") {
                return Err(t);
            }
            Ok(t.contains("linger: main returned 0"))
        });
    }
    let work = (server, client);

    // The relay runs as a step of the job; srun passes the environment on (its socket dir).
    let o = Command::new(sigmatop_bin())
        .args(["attach", "--json", "--once", "--slurm", &job.id])
        .arg(format!("--remote-cmd={}", sigmatop_bin().display()))
        .env("SLURM_CONF", &conf)
        .env("SIGMATOP_SOCKET_DIR", &sock)
        .stdin(Stdio::null())
        .output_bounded()
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
        .output_bounded()
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
