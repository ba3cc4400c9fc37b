#!/usr/bin/env bash
# Runs the libFuzzer harnesses (tests/fuzz/) for a while each, growing their corpora outside
# the tree, and prints per harness the executions, final coverage (libFuzzer's cov: and ft:)
# and the crashes found.
#
#   scripts/fuzz.sh [SECONDS_PER_HARNESS] [HARNESS...]     (default: 60 s, every harness)
#
# Builds (or reuses) build-fuzz/ with clang, address+undefined sanitizers and BKS_FUZZ=ON.
# Corpus: build-fuzz/corpus/<harness> (seeded from tests/fuzz/corpus/<harness>, which is
# never written; hdf5_in_process takes hdf5's seeds, and its findings that the forked
# reader contains move to contained/); crashing inputs: build-fuzz/fuzz-findings/<harness>/; full logs:
# build-fuzz/fuzz-logs/<harness>.log. To keep a crash as a regression input, copy it into
# tests/fuzz/corpus/<harness>/ once fixed: the Fuzz.<harness> CTest replays it.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
build=build-fuzz

command -v clang++ > /dev/null || { echo "fuzz: clang++ not found (scripts/install_deps.sh installs clang)" >&2; exit 1; }
if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DBKS_SANITIZE=address,undefined -DBKS_FUZZ=ON -DBKS_WERROR=ON > "$build.log" 2>&1 || { cat "$build.log"; exit 1; }
fi
# The harness table (name, max_len, CTest share, extra flags) is tests/fuzz/CMakeLists.txt's.
table=$(sed -n 's/^  \([a-z0-9_]*\) \([0-9]*\) [0-9]* \([^ )]*\))\{0,1\}$/\1 \2 \3/p' tests/fuzz/CMakeLists.txt)
all=$(echo "$table" | cut -d' ' -f1)
harnesses=${*:-$all}
targets=$(for h in $harnesses; do echo "fuzz_$h"; done)
# hdf5_in_process findings are replayed through hdf5 below.
case " $harnesses " in *" hdf5_in_process "*) targets="$targets fuzz_hdf5" ;; esac
echo "fuzz: building $(echo $targets | wc -w) harnesses in $build/"
# shellcheck disable=SC2086
ninja -C "$build" -j "$(nproc)" $targets >> "$build.log" 2>&1 || { tail -50 "$build.log"; exit 1; }

mkdir -p "$build/fuzz-logs"
printf '%-16s %12s %8s %8s %8s  %s\n' harness executions cov ft crashes corpus
failed=0
for h in $harnesses; do
  corpus=$build/corpus/$h findings=$build/fuzz-findings/$h log=$build/fuzz-logs/$h.log
  mkdir -p "$corpus" "$findings"
  row=$(echo "$table" | grep "^$h " || { echo "fuzz: no harness $h in tests/fuzz/CMakeLists.txt" >&2; exit 1; })
  max_len=$(echo "$row" | cut -d' ' -f2)
  flags=()
  [ "$(echo "$row" | cut -d' ' -f3)" = - ] || flags=("$(echo "$row" | cut -d' ' -f3)")
  # -fork keeps fuzzing after a crash, so one run reports every distinct finding.
  # As tests/fuzz/run_harness.sh: malloc may fail as outside the sanitizers (libhdf5, stb).
  ASAN_OPTIONS=allocator_may_return_null=1 LSAN_OPTIONS=suppressions=$PWD/tests/fuzz/lsan.supp OMP_NUM_THREADS=1 \
    "$build/tests/fuzz/fuzz_$h" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
    -max_len="${max_len:-4096}" -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 \
    -artifact_prefix="$findings/" -print_final_stats=1 "${flags[@]}" "$corpus" "tests/fuzz/corpus/${h%_in_process}" > "$log" 2>&1 || true
  execs=$(grep -oE '^#[0-9]+|number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+' | sort -n | tail -1)
  last=$(grep -E 'cov: [0-9]+' "$log" | tail -1)
  cov=$(echo "$last" | grep -oE 'cov: [0-9]+' | grep -oE '[0-9]+' || true)
  ft=$(echo "$last" | grep -oE 'ft: [0-9]+' | grep -oE '[0-9]+' || true)
  if [ "$h" = hdf5_in_process ]; then
    # A crash inside libhdf5 is contained where bakusoku reads HDF5 (a forked child): such
    # findings move to contained/; one that the forked harness also fails on stays a finding.
    hdf5_flags=$(echo "$table" | grep '^hdf5 ' | cut -d' ' -f3)
    mkdir -p "$findings/contained"
    for f in "$findings"/*; do
      [ -f "$f" ] || continue
      if ASAN_OPTIONS=allocator_may_return_null=1 LSAN_OPTIONS=suppressions=$PWD/tests/fuzz/lsan.supp \
        "$build/tests/fuzz/fuzz_hdf5" -rss_limit_mb=2048 -timeout=10 "$hdf5_flags" "$f" >> "$log.replay" 2>&1; then
        mv "$f" "$findings/contained/"
      fi
    done
    echo "fuzz: hdf5_in_process: $(ls "$findings/contained" | wc -l) findings inside libhdf5, contained by the forked reader"
  fi
  crashes=$(find "$findings" -maxdepth 1 -type f | wc -l)
  printf '%-16s %12s %8s %8s %8s  %s\n' "$h" "${execs:-?}" "${cov:-?}" "${ft:-?}" "$crashes" "$(ls "$corpus" | wc -l) inputs"
  [ "$crashes" -eq 0 ] || failed=1
done
[ "$failed" -eq 0 ] || echo "fuzz: crashing inputs under $build/fuzz-findings/ (logs in $build/fuzz-logs/)"
exit "$failed"
