#!/usr/bin/env bash
# Runs every libFuzzer harness of a build for a bounded time, seeded from tests/data (and the
# kept crash inputs in tests/fuzz/regressions), and fails on the first crash, leak, timeout or
# sanitizer report. Usage: tests/fuzz/run_all.sh BUILD_DIR [SECONDS_PER_HARNESS]
set -euo pipefail
build=${1:?usage: run_all.sh BUILD_DIR [SECONDS_PER_HARNESS]}
seconds=${2:-20}
here="$(cd "$(dirname "$0")" && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/stroboscope-fuzz-run-XXXXXX")"
trap 'rm -rf "$work"' EXIT
python3 "$here/make_seeds.py" "$work/seeds" >/dev/null
mkdir -p "$work/artifacts"
failed=()
for harness in fuzz_proc_stat fuzz_meminfo fuzz_net_dev fuzz_diskstats fuzz_loadavg \
               fuzz_pressure fuzz_pid fuzz_cgroup fuzz_netlink fuzz_trees \
               fuzz_py_elf fuzz_py_maps fuzz_py_unicode; do
  exe="$build/tests/fuzz/$harness"
  # The stack reader's three (ELF, maps, str objects) are small: a third of the time each.
  case $harness in fuzz_py_*) budget=$(( (seconds + 2) / 3 ));; *) budget=$seconds;; esac
  mkdir -p "$work/corpus/$harness"
  echo "-- $harness (${budget} s, $(ls "$work/seeds/$harness" | wc -l) seeds)"
  # The first corpus directory receives new inputs; the seeds are only read.
  if ! TMPDIR="$work" "$exe" -max_total_time="$budget" -timeout=10 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$work/artifacts/$harness-" \
      "$work/corpus/$harness" "$work/seeds/$harness" >"$work/$harness.log" 2>&1; then
    failed+=("$harness")
    tail -n 40 "$work/$harness.log"
    for crash in "$work/artifacts/$harness-"*; do
      [ -e "$crash" ] || continue
      echo "crash input ($harness), base64:"
      base64 "$crash"
    done
  else
    grep -E '^stat::number_of_executed_units|^Done' "$work/$harness.log" | tail -n 1
  fi
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzzing failed: ${failed[*]} (keep each crash input under tests/fuzz/regressions/<harness>/)"
  exit 1
fi
