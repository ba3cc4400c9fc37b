#!/usr/bin/env bash
# The dashboard server under load: N live-chart viewers on a running training job while the
# JSON API gets bursts of C parallel requests on fresh connections (bench/api_burst.py,
# --rounds bursts per path; its latencies include the Python client's own time, tens of ms
# a burst of 200), then C wrk connections for --seconds per run (a saturating closed loop:
# its latency is about C / throughput). Prints how many viewers stream, how many API
# requests were answered and their latency percentiles, and the kernel's listen-queue
# overflows during the run.
#
# Usage: bash bench/server_load.sh [--binary PATH] [--viewers 500] [--connections 200]
#                                  [--seconds 15] [--rounds 20] [--max-viewers M] [--keep-training]
#   --binary        bakusoku to run (default build/src/bakusoku, built when missing)
#   --rounds        bursts of parallel requests per path (each waits up to 60 s per request)
#   --max-viewers   passed to `bakusoku serve` (leave out for a build without the flag)
#   --keep-training let the watched job train during the measurement; by default its
#                   trainer is paused (SIGSTOP) once the viewers are in, so the figures are
#                   the server's own and not a race with the trainer for the cores.
set -euo pipefail
cd "$(dirname "$0")/.."

binary=build/src/bakusoku viewers=500 connections=200 seconds=15 rounds=20 max_viewers="" keep_training=0
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) binary=$2; shift 2 ;;
    --viewers) viewers=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --max-viewers) max_viewers=$2; shift 2 ;;
    --keep-training) keep_training=1; shift ;;
    *) echo "server_load: unknown argument $1" >&2; exit 2 ;;
  esac
done

bash bench/install_load_tools.sh
[ -x "$binary" ] || { bash scripts/install_deps.sh && bash scripts/build.sh; }
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

work=$(mktemp -d /tmp/bks_server_load.XXXXXX)
server_pid="" viewers_pid="" trainer_pid=""
cleanup() {
  [ -n "$trainer_pid" ] && kill -CONT "$trainer_pid" 2>/dev/null || true
  [ -n "$viewers_pid" ] && kill "$viewers_pid" 2>/dev/null || true
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

listen_overflows() { awk '/^TcpExt:/ { if (!h) { split($0, n); h = 1 } else { for (i = 2; i <= NF; i++) if (n[i] == "ListenOverflows") print $i } }' /proc/net/netstat; }

extra=()
[ -n "$max_viewers" ] && extra=(--max-viewers "$max_viewers")
"$binary" serve --port 0 --data-dir "$work/data" --slots 1 --threads 1 "${extra[@]}" > "$work/serve.out" 2>&1 &
server_pid=$!
for _ in $(seq 100); do grep -q "^bakusoku serve: http" "$work/serve.out" 2>/dev/null && break; sleep 0.1; done
port=$(sed -n 's|^bakusoku serve: http://[^:]*:\([0-9]*\)/.*|\1|p' "$work/serve.out" | head -1)
[ -n "$port" ] || { cat "$work/serve.out"; exit 1; }
api="http://127.0.0.1:$port"

# A job to watch: LeNet on Fashion-MNIST's test images (the fastest to pack), for long enough.
json_field() { python3 -c "import json,sys; print(json.load(sys.stdin)$1)"; }
ds=$(curl -sf "$api/api/datasets" -H 'Content-Type: application/json' -d '{"name": "load", "source": "idx",
  "train_images": "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz", "val_percent": 10}' | json_field '["id"]')
for _ in $(seq 600); do
  [ "$(curl -sf "$api/api/datasets/$ds" | json_field '["status"]')" = done ] && break
  sleep 0.2
done
job=$(curl -sf "$api/api/models" -H 'Content-Type: application/json' -d "{\"name\": \"load\", \"network\": \"lenet\",
  \"dataset_id\": $ds, \"solver\": {\"epochs\": 1000, \"batch_size\": 64}}" | json_field '["jobs"][0]["id"]')
for _ in $(seq 600); do
  trainer_pid=$(curl -sf "$api/api/jobs/$job" | json_field '.get("pid", "")')
  [ -n "$trainer_pid" ] && [ "$(curl -sf "$api/api/jobs/$job" | json_field '["state"]')" = running ] && break
  sleep 0.2
done
echo "server_load: bakusoku serve on port $port, job $job training (pid $trainer_pid); $(nproc) cores"

overflows_before=$(listen_overflows)
python3 bench/sse_viewers.py --port "$port" --job "$job" --viewers "$viewers" --hold 3600 \
  --ready-file "$work/ready" --ready-timeout 30 > "$work/viewers.out" &
viewers_pid=$!
for _ in $(seq 400); do [ -s "$work/ready" ] && break; sleep 0.1; done
echo "server_load: $viewers viewers opened, $(cat "$work/ready" 2>/dev/null || echo '? streaming')"
if [ "$keep_training" = 0 ]; then
  kill -STOP "$trainer_pid"
  echo "server_load: trainer paused for the measurement (--keep-training to let it run)"
fi

run_wrk() {  # label, path, extra wrk arguments
  local label=$1 path=$2
  shift 2
  printf 'server_load: %-34s ' "$label"
  wrk -t2 -c"$connections" -d"${seconds}s" --timeout 30s -s bench/wrk_report.lua "$@" "$api$path" | tail -1
}
for path in /api/status /api/jobs; do
  printf 'server_load: %-34s ' "burst of $connections GET $path"
  python3 bench/api_burst.py --port "$port" --path "$path" --parallel "$connections" --rounds "$rounds" | sed 's/^path=[^ ]* //'
done
run_wrk "GET /api/status (keep-alive)" /api/status
run_wrk "GET /api/jobs (keep-alive)" /api/jobs
run_wrk "GET /api/status (new connection each)" /api/status -H "Connection: close"

[ "$keep_training" = 0 ] && kill -CONT "$trainer_pid"
kill -TERM "$viewers_pid"
wait "$viewers_pid" || true
viewers_pid=""
echo "server_load: viewers: $(cat "$work/viewers.out")"
echo "server_load: listen queue overflows during the run: $(($(listen_overflows) - overflows_before))"
