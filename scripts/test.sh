#!/usr/bin/env bash
# The README's test command: installs the real programs the tests run (Debian packages), builds
# the workspace (the preload .so and the CLI must exist beside the test binaries) and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(ucx-utils libucx0 libucx-dev libfabric-bin libfabric1 libfabric-dev openmpi-bin libopenmpi-dev
      ibverbs-utils ibverbs-providers libibverbs-dev rdma-core librdmacm1 rdmacm-utils perftest
      infiniband-diags gcc tmux)
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

# Open MPI refuses root without these; the tests pass --allow-run-as-root too.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

cargo build --workspace --all-targets
cargo test --workspace -- --test-threads=2
