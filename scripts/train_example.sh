#!/usr/bin/env bash
# The main job: installs dependencies, builds, trains Caffe's LeNet on Fashion-MNIST with
# Caffe's LeNet solver (10,000 iterations), and shows the results.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh
out="runs/lenet-fashion-mnist-$(date -u +%Y%m%d-%H%M%S)"
./build/src/bakusoku train --solver examples/fashion_mnist/lenet_solver.prototxt --out "$out" "$@"
echo
echo "Test accuracy over training (from $out/metrics.jsonl):"
python3 - "$out/metrics.jsonl" <<'PY' 2>/dev/null || grep '"phase":"test"' "$out/metrics.jsonl"
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("phase") == "test":
        print(f"  iter {r['iter']:>6}  accuracy {r.get('accuracy', float('nan')):.4f}  loss {r['loss']:.4f}")
PY
