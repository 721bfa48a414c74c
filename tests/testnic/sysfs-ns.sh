#!/usr/bin/env bash
# Runs CMD ARGS... in a private mount namespace whose /sys/class/infiniband shows the software NIC
# the way a kernel with mlx5_ib would: what NVSHMEM's IBGDA transport reads besides the verbs
# calls (ibgda.cpp / transport_ib_common.h):
#   /sys/class/infiniband/mlx5_0/device               realpath = the "NIC's" PCI device
#   /sys/class/infiniband/mlx5_0/ports/1/gid_attrs/types/0   "RoCE v2"
# plus the plain attributes tools read (fw_ver, node_type, ...). Needs root (unshare --mount) and an
# existing /sys/class/infiniband to mount over (ib_core loaded, as on the H200 machine).
# scripts/with-testnic.sh calls this when TESTNIC_SYSFS=1.
#   TESTNIC_SYSFS_PCI   the device the "NIC" sits on (default: the first PCI device of the first
#                       NVIDIA GPU, else /sys/devices/pci0000:00), which decides NVSHMEM's NIC-GPU
#                       affinity; TESTNIC_SYSFS_DIR overrides the mount point (tests).
set -euo pipefail
dir="${TESTNIC_SYSFS_DIR:-/sys/class/infiniband}"
if [ ! -d "$dir" ]; then
  echo "testnic: $dir does not exist (load ib_core: modprobe ib_core) - cannot show the software NIC in sysfs" >&2
  exit 2
fi
pci="${TESTNIC_SYSFS_PCI:-}"
if [ -z "$pci" ]; then
  for d in /sys/bus/pci/devices/*; do
    if [ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] && [ "$(cat "$d/class" 2>/dev/null | cut -c1-4)" = 0x03 ]; then
      pci="$(realpath "$d")"
      break
    fi
  done
fi
pci="${pci:-/sys/devices/pci0000:00}"
exec unshare --mount --propagation private bash -c '
  set -e
  dir="$1" pci="$2"; shift 2
  mount -t tmpfs testnic-sysfs "$dir"
  d="$dir/mlx5_0"
  mkdir -p "$d/ports/1/gid_attrs/types" "$d/ports/1/gids"
  ln -s "$pci" "$d/device"
  echo "RoCE v2" > "$d/ports/1/gid_attrs/types/0"
  echo "0000:0000:0000:0000:0000:ffff:7f00:0001" > "$d/ports/1/gids/0"
  echo "4: ACTIVE" > "$d/ports/1/state"
  echo "Ethernet" > "$d/ports/1/link_layer"
  echo "28.39.1002" > "$d/fw_ver"
  echo "MT4129" > "$d/hca_type"
  echo "1: CA" > "$d/node_type"
  echo "02c9:0300:7f00:0001" > "$d/node_guid"
  exec "$@"' testnic-sysfs "$dir" "$pci" "$@"
