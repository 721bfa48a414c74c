#!/usr/bin/env bash
# Bytes per event on disk and export throughput, small enough for a shared 2-core machine.
# Records ucx_perftest tag_lat (8 B, UCX_TLS=$TLS, full mode, both sides traced, N iterations),
# prints the record's events and bytes, then runs each export ROUNDS times, alternated:
#   json-devnull      sigmatop export REC --json /dev/null                 (correlate only)
#   perfetto-devnull  sigmatop export REC --perfetto /dev/null             (output discarded)
#   perfetto-file     sigmatop export REC --perfetto OUT/t.pftrace         (a real file)
#   both-file         sigmatop export REC --perfetto OUT/t.pftrace --json OUT/a.json
# Each run line: wall, user and sys seconds and peak RSS from /usr/bin/time, and the output's size.
# Usage: bash benches/devvm_export.sh WORKDIR [N] [ROUNDS]   (TLS=shm,self by default; PORT)
# Needs: cargo build --release --workspace; ucx_perftest; /usr/bin/time.
set -euo pipefail
work=${1:?usage: bash benches/devvm_export.sh WORKDIR [N] [ROUNDS]}
n=${2:-1000000}
rounds=${3:-3}
tls=${TLS:-shm,self}
port=${PORT:-14213}
root=$(cd "$(dirname "$0")/.." && pwd)
P=$root/target/release/libsigmatop_preload.so
S=$root/target/release/sigmatop
rec=$work/rec
mkdir -p "$work"
rm -rf "$rec" "$work/t.pftrace" "$work/a.json"
echo "date $(date -Is) load=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,) nproc=$(nproc) commit=$(git -C "$root" rev-parse --short HEAD)"
export UCX_TLS=$tls
LD_PRELOAD=$P SIGMATOP_MODE=full SIGMATOP_RECORD=$rec ucx_perftest -p "$port" >/dev/null &
server=$!
sleep 1
LD_PRELOAD=$P SIGMATOP_MODE=full SIGMATOP_RECORD=$rec ucx_perftest 127.0.0.1 -p "$port" \
    -t tag_lat -s 8 -n "$n" | tail -3
wait "$server"
bytes=$(du -sb "$rec" | cut -f1)
"$S" export "$rec" --json "$work/a.json" >/dev/null
events=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["events"])' "$work/a.json")
echo "record workload=ucx_perftest_tag_lat_8B_n=${n}_UCX_TLS=${tls}_full_mode events=$events bytes=$bytes"
"$S" report "$rec" 2>/dev/null | grep -i -m3 'drop\|lost' || true
timed() {  # WHAT OUTPUT-FILE-OR-EMPTY ARGS...
    local what=$1 out=$2; shift 2
    rm -f "$work/t.pftrace" "$work/a.json"
    /usr/bin/time -f "wall_s=%e user_s=%U sys_s=%S rss_kb=%M" -o "$work/time.txt" "$S" export "$rec" "$@" >/dev/null
    local size=0
    [ -n "$out" ] && size=$(stat -c %s "$out")
    echo "run what=$what $(cat "$work/time.txt") out_bytes=$size"
}
for r in $(seq "$rounds"); do
    timed json-devnull "" --json /dev/null
    timed perfetto-devnull "" --perfetto /dev/null
    timed perfetto-file "$work/t.pftrace" --perfetto "$work/t.pftrace"
    timed both-file "$work/t.pftrace" --perfetto "$work/t.pftrace" --json "$work/a.json"
done
rm -f "$work/t.pftrace"
echo "end $(date -Is) load=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)"
