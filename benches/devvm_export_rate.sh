#!/usr/bin/env bash
# Export throughput to real files against the floor of reading the record and writing the trace
# (issue 41, item 3). Records ucx_perftest tag_lat (8 B, UCX_TLS=$TLS, full mode, both sides
# traced, N iterations) into WORKDIR/rec-N unless it is there already, then runs ROUNDS rounds,
# each of, for every binary in $BINS (alternated within the round):
#   floor-read       cat every file of the record > /dev/null   (the record, from the page cache)
#   floor-write      WORKDIR/floor.out written with 1 MiB write(2) calls of one buffer, as many
#                    as the Perfetto trace has MiB (rounded up), the file removed before (as the
#                    exports' outputs are); perl, so that no read of /dev/zero is counted
#   perfetto-file    sigmatop export REC --perfetto WORKDIR/t.pftrace
#   json-file        sigmatop export REC --json WORKDIR/a.json   (correlate + JSON aggregates)
#   both-file        sigmatop export REC --perfetto WORKDIR/t.pftrace --json WORKDIR/a.json
# Before each timed command the page cache's dirty pages are written back (`sync`, untimed), so
# that no command pays for the writeback of the one before it (on the development VM a write of
# 300 MB right after another cost 0.07 to 0.4 s of system time without it).
# Each run line: wall, user and sys seconds and peak RSS from /usr/bin/time -v style fields,
# the output's size; `python3 benches/summarize.py export FILE` makes the table (medians, events
# per CPU second = events / (user + sys), the floor = floor-read + floor-write).
# Usage: bash benches/devvm_export_rate.sh WORKDIR [N] [ROUNDS]
#   BINS="before=/path/to/sigmatop after=target/release/sigmatop" (default: this=target/release/sigmatop)
#   TLS=shm,self by default; PORT.
# Needs: cargo build --release --workspace (the preload); ucx_perftest; /usr/bin/time.
set -euo pipefail
work=${1:?usage: bash benches/devvm_export_rate.sh WORKDIR [N] [ROUNDS]}
n=${2:-1000000}
rounds=${3:-5}
tls=${TLS:-shm,self}
port=${PORT:-14217}
root=$(cd "$(dirname "$0")/.." && pwd)
P=$root/target/release/libsigmatop_preload.so
bins=${BINS:-this=$root/target/release/sigmatop}
first_bin=${bins%% *}
first_bin=${first_bin#*=}
rec=$work/rec-$n
mkdir -p "$work"
echo "date $(date -Is) load=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,) nproc=$(nproc) commit=$(git -C "$root" rev-parse --short HEAD) bins=$(echo "$bins" | tr ' ' ,)"
if [ ! -d "$rec" ]; then
    export UCX_TLS=$tls
    LD_PRELOAD=$P SIGMATOP_MODE=full SIGMATOP_RECORD=$rec ucx_perftest -p "$port" >/dev/null &
    server=$!
    sleep 1
    LD_PRELOAD=$P SIGMATOP_MODE=full SIGMATOP_RECORD=$rec ucx_perftest 127.0.0.1 -p "$port" \
        -t tag_lat -s 8 -n "$n" | tail -1
    wait "$server"
    unset UCX_TLS
fi
bytes=$(du -sb "$rec" | cut -f1)
files=$(find "$rec" -type f | wc -l)
"$first_bin" export "$rec" --json "$work/a.json" --perfetto "$work/t.pftrace" 2>/dev/null
events=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["events"])' "$work/a.json")
trace_bytes=$(stat -c %s "$work/t.pftrace")
echo "record workload=ucx_perftest_tag_lat_8B_n=${n}_UCX_TLS=${tls}_full_mode events=$events bytes=$bytes files=$files trace_bytes=$trace_bytes"
mib=$(( (trace_bytes + (1 << 20) - 1) >> 20 ))
t() {  # WHAT BIN OUTPUT-FILE-OR-EMPTY COMMAND...
    local what=$1 bin=$2 out=$3; shift 3
    rm -f "$work/t.pftrace" "$work/a.json" "$work/floor.out"
    sync
    /usr/bin/time -f "wall_s=%e user_s=%U sys_s=%S rss_kb=%M" -o "$work/time.txt" "$@" >/dev/null 2>"$work/err.txt" \
        || { cat "$work/err.txt" >&2; exit 1; }
    local size=0
    [ -n "$out" ] && size=$(stat -c %s "$out")
    echo "run bin=$bin what=$what $(cat "$work/time.txt") out_bytes=$size"
}
for r in $(seq "$rounds"); do
    t floor-read - "" sh -c "find '$rec' -type f -exec cat {} + > /dev/null"
    t floor-write - "$work/floor.out" perl -e 'open(my $f, ">", $ARGV[0]) or die "$ARGV[0]: $!"; my $b = "\0" x (1 << 20); for (1 .. $ARGV[1]) { syswrite($f, $b) == length($b) or die "write: $!" }' "$work/floor.out" "$mib"
    for b in $bins; do
        name=${b%%=*} s=${b#*=}
        t perfetto-file "$name" "$work/t.pftrace" "$s" export "$rec" --perfetto "$work/t.pftrace"
        t json-file "$name" "$work/a.json" "$s" export "$rec" --json "$work/a.json"
        t both-file "$name" "$work/t.pftrace" "$s" export "$rec" --perfetto "$work/t.pftrace" --json "$work/a.json"
    done
done
rm -f "$work/t.pftrace" "$work/a.json" "$work/floor.out"
echo "end $(date -Is) load=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)"
