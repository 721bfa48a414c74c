#!/usr/bin/env bash
# Runs CMD ARGS... on the software mlx5 NIC (tests/testnic, docs/TESTNIC.md): builds its
# libibverbs.so.1 + libmlx5.so.1 into target/testnic/lib when missing or stale, then runs the
# command with LD_LIBRARY_PATH pointing there, so unmodified RDMA programs (ibv_rc_pingpong,
# perftest, NVSHMEM) pick up the NIC instead of the system's libraries. Nothing is installed.
#   bash scripts/with-testnic.sh ibv_devinfo
#   bash scripts/with-testnic.sh ibv_rc_pingpong -g 0 & bash scripts/with-testnic.sh ibv_rc_pingpong -g 0 127.0.0.1
# TESTNIC_BUILD_DIR overrides the output directory. TESTNIC_SYSFS=1 (root) also shows the NIC in a
# private /sys/class/infiniband, which NVSHMEM reads (tests/testnic/sysfs-ns.sh).
set -euo pipefail
if [ $# -eq 0 ]; then
  echo "usage: bash scripts/with-testnic.sh CMD [ARGS...]" >&2
  exit 2
fi
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${TESTNIC_BUILD_DIR:-$root/target/testnic}"
mkdir -p "$out"
# Several invocations may start at once (a server and its client): one builds, the others wait.
(
  flock 9
  make -s -C "$root/tests/testnic" OUT="$out" all >&2
) 9>"$out/.build.lock"
export LD_LIBRARY_PATH="$out/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ "${TESTNIC_SYSFS:-0}" = 1 ]; then
  exec bash "$root/tests/testnic/sysfs-ns.sh" "$@"
fi
exec "$@"
