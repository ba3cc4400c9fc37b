#!/usr/bin/env bash
# One Fuzz.<harness> CTest: runs HARNESS over a copy of its seed corpus for RUNS inputs
# (fixed seed, so CI replays the same inputs) and fails on any finding. libFuzzer writes
# new inputs into its first corpus folder, so it gets a temporary copy: the tree stays clean.
# Usage: run_harness.sh HARNESS CORPUS_DIR RUNS MAX_LEN [LIBFUZZER_FLAG...]
set -euo pipefail
harness=$1 corpus=$2 runs=$3 max_len=$4
shift 4
work=$(mktemp -d "${TMPDIR:-/tmp}/bks-fuzz-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/corpus" "$work/artifacts"
cp -r "$corpus/." "$work/corpus/"
set +e
# malloc may fail as it does outside the sanitizers (C libraries such as libhdf5 and stb
# handle that); a C++ allocation beyond -rss_limit_mb is still a finding.
export ASAN_OPTIONS=allocator_may_return_null=1 LSAN_OPTIONS=suppressions=$(dirname "$0")/lsan.supp
"$harness" -runs="$runs" -seed=1 -rss_limit_mb=2048 -timeout=10 -max_len="$max_len" \
  -artifact_prefix="$work/artifacts/" -print_final_stats=1 "$@" "$work/corpus" > "$work/log" 2>&1
status=$?
set -e
tail -40 "$work/log"
if [ "$status" -ne 0 ] || [ -n "$(ls -A "$work/artifacts")" ]; then
  keep=$(dirname "$harness")/fuzz-findings/$(basename "$harness")
  mkdir -p "$keep"
  cp "$work/artifacts/"* "$keep/" 2>/dev/null || true
  echo "FAIL: $(basename "$harness") exited with $status; crashing inputs kept in $keep" >&2
  exit 1
fi
