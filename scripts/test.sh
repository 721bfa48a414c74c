#!/usr/bin/env bash
# The README's test command: installs the real programs the tests run (Debian packages), builds
# the workspace (the preload .so, with its bench entry points, and the CLI must exist beside the
# test binaries) and runs every test. It fails, listing them, when a program the suite started is
# still running at the end, or when the run changed the checkout.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(ucx-utils libucx0 libucx-dev libfabric-bin libfabric1 libfabric-dev openmpi-bin libopenmpi-dev
      ibverbs-utils ibverbs-providers libibverbs-dev rdma-core librdmacm1 rdmacm-utils perftest
      infiniband-diags gcc make tmux prometheus openssh-server openssh-client
      slurmctld slurmd slurm-client munge
      qemu-system-x86 linux-image-amd64 busybox-static python3-venv)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "scripts/test.sh: installing ${missing[*]}"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The soft-RoCE guest (tests/verbs_guest/) boots with virtme-ng, from PyPI, in a venv under target/.
if [ ! -x target/vng-venv/bin/vng ]; then
  echo "scripts/test.sh: installing virtme-ng==1.42 into target/vng-venv"
  python3 -m venv target/vng-venv
  target/vng-venv/bin/pip install -q virtme-ng==1.42
fi

# Open MPI refuses root without these; the tests pass --allow-run-as-root too.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# The README's test command behaves as CI does: a test whose prerequisite is missing fails
# (tests/common `skip`), the development shortcuts (SIGMATOP_SKIP_GUEST, SIGMATOP_GUEST_REUSE)
# are refused; only the GPU tests may skip, and they are listed below.
export CI=true

# What the checkout looks like before the run: every changed or untracked path with a hash of
# its content. The run must leave it so (a test that writes into the tree, a snapshot tool that
# adds or removes files, fails the run). Not a git checkout (a tarball): not checked.
checkout_state() {
  git status --porcelain=v1 --untracked-files=all | while IFS= read -r line; do
    path=${line:3}
    path=${path##* -> }
    if [ -f "$path" ]; then
      printf '%s %s\n' "$line" "$(sha1sum <"$path" | cut -c1-12)"
    else
      printf '%s -\n' "$line"
    fi
  done
}
in_git=0
git rev-parse --is-inside-work-tree >/dev/null 2>&1 && in_git=1
[ $in_git = 1 ] && checkout_before=$(checkout_state)

# The preload's sigmatop_bench_* entry points (feature `bench`) are what the benchmark probes and
# tests/guest/verbs_fake.c drive the runtime through; the shipped library has none. Both cargo
# commands name the feature, so the test build does not rebuild the preload without it.
# CI builds once: no incremental state (it was ~5 GB of target/ on a disk CI shares).
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
cargo build --workspace --all-targets --features sigmatop-preload/bench
# The software mlx5 NIC (tests/testnic) the testnic_* tests run rdma-core's programs on.
bash scripts/with-testnic.sh true
# Each skipped test appends one line here (tests/common `skip`), and each run a test had to
# repeat (tests/common `note_retry`): printed after the run.
skips=target/test-skips.txt
rm -f "$skips"
# insta (the dashboard's snapshots) compares and never writes: no .snap.new in the tree.
export INSTA_UPDATE=no
# Every process the suite starts inherits this mark (a daemon, a process whose parent died, a
# tmux server and its panes too): whatever still carries it after the run was left running.
run_mark="SIGMATOP_TEST_RUN=$$-$(date +%s%N)"
export "${run_mark?}"
status=0
cargo test --workspace --no-fail-fast --features sigmatop-preload/bench -- --test-threads=2 || status=$?
skipped=$(grep -c '^SKIPPED' "$skips" 2>/dev/null || true)
retried=$(grep -c '^RETRIED' "$skips" 2>/dev/null || true)
echo
if [ "${skipped:-0}" -gt 0 ]; then
  echo "scripts/test.sh: ${skipped} tests skipped:"
  grep '^SKIPPED' "$skips" | sed 's/^/  /'
else
  echo "scripts/test.sh: no test skipped"
fi
if [ "${retried:-0}" -gt 0 ]; then
  echo "scripts/test.sh: ${retried} runs repeated (a third-party program's own race):"
  grep '^RETRIED' "$skips" | sed 's/^/  /'
fi

# Processes the suite started that still run: those with the mark, but this script. The look
# itself runs without the mark, and leaves out its own ancestors. Processes killed at the very end may take a moment to go: looked
# at again for up to 10 s until none is left.
left_running() {
  env -u SIGMATOP_TEST_RUN bash -c '
    # This look and what runs it (this script, a subshell) are not left over.
    mine=" "
    q=$$
    while [ "${q:-1}" -gt 1 ]; do
      mine="$mine$q "
      q=$(ps -o ppid= -p "$q" | tr -d " ")
    done
    for f in $(grep -slzxF "$1" /proc/[0-9]*/environ); do
      p=${f#/proc/}
      p=${p%/environ}
      case $mine in *" $p "*) continue ;; esac
      printf "  pid %s (%s s): %s\n" "$p" "$(ps -o etimes= -p "$p" | tr -d " ")" \
        "$(tr "\0" " " <"/proc/$p/cmdline" 2>/dev/null | cut -c1-200)"
    done' _ "$run_mark"
}
left=$(left_running)
for _ in $(seq 100); do
  [ -z "$left" ] && break
  sleep 0.1
  left=$(left_running)
done
if [ -n "$left" ]; then
  echo "scripts/test.sh: programs the suite started still run (ended now):"
  echo "$left"
  # Ended, so that the next run (or anything else on the machine) does not share a core with them.
  echo "$left" | awk '{print $2}' | xargs -r kill -KILL 2>/dev/null || true
  status=1
else
  echo "scripts/test.sh: no program the suite started is left running"
fi

# Changes the run made to the checkout.
if [ $in_git = 1 ]; then
  checkout_after=$(checkout_state)
  changed=$(diff <(echo "$checkout_before") <(echo "$checkout_after") | grep '^[<>]' || true)
  if [ -n "$changed" ]; then
    echo "scripts/test.sh: the run changed the checkout (< before, > after: git status and content hash):"
    echo "$changed" | sed 's/^/  /'
    status=1
  else
    echo "scripts/test.sh: the checkout is as the run found it"
  fi
fi
exit "$status"
