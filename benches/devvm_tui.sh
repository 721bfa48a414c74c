#!/usr/bin/env bash
# The dashboard and many-host benches (ignored tests in tests/dashboard_bench.rs and
# tests/multihost_bench.rs), one process per test so that peak RSS is per test, each line of the
# output kept, with the load average before and after each test.
# Usage: bash benches/devvm_tui.sh [TEST...] > OUT.txt     (default: the list below)
# Needs: cargo build --release --workspace && cargo test --release --test dashboard_bench --test multihost_bench --no-run
# Summary: python3 benches/summarize.py tui OUT.txt
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin() { ls -t "$root"/target/release/deps/"$1"-* | grep -v '\.d$' | head -1; }
D=$(bin dashboard_bench) M=$(bin multihost_bench)
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=(dashboard:rows_4096_at_4hz dashboard:events_1m_per_s dashboard:build_view_4096_profile
    dashboard:draw_4096_profile multihost:merge_256_hosts_at_4hz multihost:merge_256_hosts_cpu_per_tick
    multihost:serve_64_processes)
echo "date $(date -Is) nproc=$(nproc) commit=$(git -C "$root" rev-parse --short HEAD) env: SIGMATOP_BENCH_SECS=${SIGMATOP_BENCH_SECS:-} SIGMATOP_BENCH_TICKS=${SIGMATOP_BENCH_TICKS:-} SIGMATOP_BENCH_JITTER=${SIGMATOP_BENCH_JITTER:-}"
for t in "${tests[@]}"; do
    b=$D; [ "${t%%:*}" = multihost ] && b=$M
    echo "test ${t#*:} load_before=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)"
    "$b" --ignored --nocapture --exact "${t#*:}" 2>&1 | grep -v '^$\|^running\|^test result\|^test .* \.\.\. '
    echo "end ${t#*:} load_after=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' ,)"
done
