#!/usr/bin/env bash
# Runs every Caffe network file of a model-zoo folder through `bakusoku time` and
# `bakusoku deploy --random-weights`, each under a timeout, and prints one table row per file:
# the forward time (and its slowest layer) or the error's first line, and the deploy result.
# It measures what real files do today; it asserts nothing and changes nothing.
#
# Usage: bash bench/zoo.sh [--binary PATH] [--timeout S] [--iterations N] [--phase TEST|TRAIN|'']
#                          [--logs DIR] [--only REGEX] [ZOO_DIR]
# bench/zoo-manifest.tsv lists the 70 files of the collection in docs/model-zoo.md (source
# repository, commit, path in it): a session with the search tool's `fetch` rebuilds ZOO_DIR
# from it, with the manifest copied to ZOO_DIR/MANIFEST.tsv.
#   ZOO_DIR       folder of <short-name>/*.prototxt (default /work/zoo); solver and labelmap
#                 files in it are skipped. ZOO_DIR/MANIFEST.tsv, when present, may give a file
#                 (its 2nd column, relative to ZOO_DIR) a 6th column, an input shape such as
#                 64,1,28,28 passed as --input-shape, a 7th, a reason to skip the file, and an
#                 8th, more flags for both commands (e.g. --stage test-on-test).
#   --binary      bakusoku to run (default build/src/bakusoku)
#   --timeout     seconds allowed to each command (default 300; a timed-out one reads "timeout")
#   --iterations  timed forward passes for `time` (default 2)
#   --phase       passed to `time --phase` (default TEST: forward only, the data layers' TEST
#                 batch); '' leaves the file's default (TRAIN: forward and backward)
#   --logs        where each command's full output goes (default a new folder under /tmp)
#   --only        run only files whose path matches this extended regex
#   --threads     passed to time and deploy (default: theirs, all cores)
#   --guess-shape for files the manifest gives no shape, pass one made from crop_size (see below)
# --input-shape is passed only when `bakusoku time --help` lists it, for files with no Input
# layer or input_dim, with the manifest's shape; without one, bakusoku takes the shape from the
# file (batch_size, crop_size, the mean's channels). With --guess-shape, batch,3,crop,crop
# from the file's last batch_size and first crop_size is passed instead. ZOO_DIR/weights/PAIRS.tsv (model<TAB>weights, relative to
# ZOO_DIR) adds `deploy --weights` rows for real trained .caffemodel files.
# Exit code: 0 when the table was written (whatever the rows say), 2 on bad arguments.
set -uo pipefail

binary="$(dirname "$0")/../build/src/bakusoku" timeout_s=300 iterations=2 phase=TEST logs="" only="" threads="" guess=0
zoo=/work/zoo
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --iterations) iterations=$2; shift 2 ;;
    --phase) phase=$2; shift 2 ;;
    --logs) logs=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --guess-shape) guess=1; shift ;;
    -h|--help) sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; exit 0 ;;
    -*) echo "zoo.sh: unknown option $1" >&2; exit 2 ;;
    *) zoo=$1; shift ;;
  esac
done
[ -x "$binary" ] || { echo "zoo.sh: no bakusoku binary at $binary (build it, or pass --binary)" >&2; exit 2; }
[ -d "$zoo" ] || { echo "zoo.sh: no zoo folder $zoo" >&2; exit 2; }
binary=$(realpath "$binary") zoo=$(realpath "$zoo")
[ -n "$logs" ] || logs=$(mktemp -d /tmp/zoo-logs.XXXXXX)
mkdir -p "$logs"
has_input_shape=0
"$binary" time --help 2>&1 | grep -q -- '--input-shape' && has_input_shape=1

manifest_field() {  # manifest_field REL COLUMN: that column of the file's manifest row
  [ -f "$zoo/MANIFEST.tsv" ] || return 0
  awk -F'\t' -v f="$1" -v c="$2" '$2 == f { print $c; exit }' "$zoo/MANIFEST.tsv"
}

is_net_file() {  # solvers name a net and a learning rate; labelmaps hold only items
  ! grep -qE '^[[:space:]]*(net|train_net|test_net|base_lr)[[:space:]]*:' "$1" &&
    ! grep -qE '^[[:space:]]*item[[:space:]]*\{' "$1"
}

has_inputs() {  # an Input layer or the old top-level input/input_dim/input_shape fields
  grep -qE '^[[:space:]]*(input_dim|input_shape)[[:space:]]*[:{]|^input[[:space:]]*:|type:[[:space:]]*"Input"' "$1"
}

guess_shape() {  # batch,3,crop,crop from the last batch_size (TEST comes after TRAIN) and crop_size
  local crop batch
  crop=$(grep -oE 'crop_size:[[:space:]]*[0-9]+' "$1" | head -1 | grep -oE '[0-9]+$')
  batch=$(grep -oE 'batch_size:[[:space:]]*[0-9]+' "$1" | tail -1 | grep -oE '[0-9]+$')
  [ -n "$crop" ] && [ -n "$batch" ] && echo "$batch,3,$crop,$crop"
}

first_error() {  # bakusoku's "error: " line, else a line that reads like one, else the last line
  local line
  line=$(grep -m1 -E '^(error: |bakusoku: )' "$1")
  [ -n "$line" ] || line=$(grep -m1 -iE 'error|unknown|unsupported|cannot|fail|invalid|abort|terminate|signal' "$1")
  [ -n "$line" ] || line=$(grep -v '^[[:space:]]*$' "$1" | tail -1)
  line=${line#error: }
  line=${line//"$zoo/"/}
  echo "$line" | cut -c1-200 | tr '|' '/'
}

# run_cmd LOG CMD...: runs under the timeout; echoes rc and wall seconds
run_cmd() {
  local log=$1; shift
  local t0 t1 rc
  { printf '%q ' "$@"; echo; } > "${log%.log}.cmd"
  t0=$(date +%s.%N)
  timeout -k 10 "$timeout_s" "$@" > "$log" 2>&1 < /dev/null
  rc=$?
  t1=$(date +%s.%N)
  echo "$rc $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')"
}

outcome() {  # outcome RC LOG: a failure's cell text
  local rc=$1 log=$2
  case $rc in
    124|137) echo "TIMEOUT after ${timeout_s} s" ;;
    2) echo "refused: $(first_error "$log")" ;;
    1) echo "runtime error: $(first_error "$log")" ;;
    *) if [ "$rc" -gt 128 ]; then echo "CRASH (signal $((rc - 128))): $(first_error "$log")"
       else echo "exit $rc: $(first_error "$log")"; fi ;;
  esac
}

slowest_layer() {  # from time's per-layer table: "name (type) ms"
  awk '/^layer[[:space:]]+type[[:space:]]+forward ms/ { t = 1; next }
       /^Average/ { t = 0 }
       t && NF >= 4 && $3 + 0 > best { best = $3 + 0; name = $1; type = $2 }
       END { if (name != "") printf "%s (%s) %.1f ms", name, type, best }' "$1"
}

echo "# bakusoku model zoo run: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores (load average $(cut -d' ' -f1-3 /proc/loadavg)), binary $binary"
echo "# time: --iterations $iterations${phase:+ --phase $phase}${threads:+ --threads $threads}; deploy: --random-weights; timeout ${timeout_s} s each"
echo "# each command's output is in $logs/<file>.{time,deploy}.log, the command itself in the .cmd beside it"
[ $has_input_shape = 1 ] || echo "# this binary has no --input-shape: files whose data source is absent are run as they are"
echo
echo "| file | time: ms per iteration (slowest layer) or error | deploy --random-weights | wall s (time/deploy) |"
echo "|---|---|---|---|"

n=0 n_time=0 n_deploy=0
while IFS= read -r f; do
  rel=${f#"$zoo"/}
  [ -z "$only" ] || [[ $rel =~ $only ]] || continue
  is_net_file "$f" || continue
  n=$((n + 1))
  key=$(echo "$rel" | tr '/' '_')
  skip=$(manifest_field "$rel" 7)
  if [ -n "$skip" ]; then
    echo "| $rel | skipped: $skip | skipped | - |"
    continue
  fi
  extra=()
  [ -z "$threads" ] || extra=(--threads "$threads")
  read -ra more <<< "$(manifest_field "$rel" 8)"
  extra+=("${more[@]}")
  if [ $has_input_shape = 1 ] && ! has_inputs "$f"; then
    shape=$(manifest_field "$rel" 6)
    [ -n "$shape" ] || [ $guess = 0 ] || shape=$(guess_shape "$f")
    [ -z "$shape" ] || extra+=(--input-shape "$shape")
  fi
  targs=(time --model "$f" --iterations "$iterations")
  [ -z "$phase" ] || targs+=(--phase "$phase")
  read -r trc tsec < <(run_cmd "$logs/$key.time.log" "$binary" "${targs[@]}" "${extra[@]}")
  if [ "$trc" = 0 ]; then
    ms=$(grep -oE 'Average (forward|forward-backward) iteration: [0-9.]+' "$logs/$key.time.log" | grep -oE '[0-9.]+$')
    tcell="${ms:-?} ms ($(slowest_layer "$logs/$key.time.log"))"
    n_time=$((n_time + 1))
  else
    tcell=$(outcome "$trc" "$logs/$key.time.log")
  fi
  bundle="$logs/$key.bks"
  read -r drc dsec < <(run_cmd "$logs/$key.deploy.log" "$binary" deploy --model "$f" --random-weights -o "$bundle" "${extra[@]}")
  if [ "$drc" = 0 ]; then
    dcell="ok ($(awk -v b="$(stat -c %s "$bundle")" 'BEGIN { printf "%.1f", b / 1048576 }') MiB)"
    n_deploy=$((n_deploy + 1))
    rm -f "$bundle"
  else
    dcell=$(outcome "$drc" "$logs/$key.deploy.log")
  fi
  echo "| $rel | $tcell | $dcell | $tsec/$dsec |"
done < <(find "$zoo" -name '*.prototxt' -not -path '*/weights/*' | sort)

echo
echo "$n files: time ran $n_time, deploy ran $n_deploy."

pairs="$zoo/weights/PAIRS.tsv"
if [ -f "$pairs" ]; then
  echo
  echo "| model + real weights | deploy --weights |"
  echo "|---|---|"
  while IFS=$'\t' read -r model weights; do
    case "$model" in ''|'#'*) continue ;; esac
    key=$(basename "$weights")
    read -r drc _ < <(run_cmd "$logs/$key.weights.log" "$binary" deploy --model "$zoo/$model" --weights "$zoo/$weights" -o "$logs/$key.bks" ${threads:+--threads "$threads"})
    if [ "$drc" = 0 ]; then cell=ok; rm -f "$logs/$key.bks"; else cell=$(outcome "$drc" "$logs/$key.weights.log"); fi
    echo "| $model + $weights | $cell |"
  done < "$pairs"
fi
exit 0
