#!/usr/bin/env bash
# The README's test command: installs the real programs the tests run (Debian packages), builds
# the workspace (the preload .so and the CLI must exist beside the test binaries) and runs every test.
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

# The soft-RoCE guest (tests/verbs_guest.rs) boots with virtme-ng, from PyPI, in a venv under target/.
if [ ! -x target/vng-venv/bin/vng ]; then
  echo "scripts/test.sh: installing virtme-ng==1.42 into target/vng-venv"
  python3 -m venv target/vng-venv
  target/vng-venv/bin/pip install -q virtme-ng==1.42
fi

# Open MPI refuses root without these; the tests pass --allow-run-as-root too.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cargo build --workspace --all-targets
# The software mlx5 NIC (tests/testnic) the testnic_* tests run rdma-core's programs on.
bash scripts/with-testnic.sh true
cargo test --workspace --no-fail-fast -- --test-threads=2
