#!/usr/bin/env python3
"""LSTM and GRU layers, forward + backward, bakusoku against PyTorch (Debian's python3-torch)
on the same sizes and threads, in the same run: wall-clock milliseconds of one training
step's pass through the layer (median of --iters), and the ratio.

bakusoku's figure is the layer's own forward + backward time from `bakusoku time` on a net
of Input -> the layer -> EuclideanLoss. PyTorch's is nn.LSTM / nn.GRU on (T, N, I) with
sum().backward(), timed around the call (its loss is negligible next to the layer).

Usage: python3 bench/recurrent.py [--bakusoku build/src/bakusoku] [--threads 2] [--iters 20]
"""
import argparse
import os
import re
import statistics
import subprocess
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIZES = [  # T, N, inputs, hidden
    (50, 1, 64, 256),
    (50, 32, 64, 256),
    (100, 64, 128, 512),
]


def bakusoku_ms(bks, cell, t, n, i, h, threads, iters, kernel=None):
    # cont is all ones (one sequence carried through, as TextData gives it): `time` fills
    # inputs with random 0s and 1s, resets that would cut oneDNN's primitive into segments.
    net = f"""name: "{cell}"
layer {{ name: "in" type: "Input" top: "x" top: "c0" top: "target"
  input_param {{ shape {{ dim: {t} dim: {n} dim: {i} }} shape {{ dim: {t} dim: {n} }} shape {{ dim: {t} dim: {n} dim: {h} }} }} }}
layer {{ name: "ones" type: "Power" bottom: "c0" top: "cont" power_param {{ scale: 0 shift: 1 }} }}
layer {{ name: "rec" type: "{cell}" bottom: "x" bottom: "cont" top: "h"
  recurrent_param {{ num_output: {h} weight_filler {{ type: "uniform" min: -0.08 max: 0.08 }} }} }}
layer {{ name: "loss" type: "EuclideanLoss" bottom: "h" bottom: "target" top: "loss" }}
"""
    with tempfile.NamedTemporaryFile("w", suffix=".prototxt", delete=False) as f:
        f.write(net)
    cmd = [bks, "time", "--model", f.name, "--iterations", str(iters), "--threads", str(threads)]
    if kernel:
        cmd += ["--kernel", f"{cell}={kernel}"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    os.unlink(f.name)
    m = re.search(r"^rec\s+\S+\s+([0-9.]+)\s+([0-9.]+)\s+(.*)$", out, re.M)
    return float(m.group(1)) + float(m.group(2)), m.group(3).strip()


def torch_ms(cell, t, n, i, h, iters):
    layer = (torch.nn.LSTM if cell == "LSTM" else torch.nn.GRU)(i, h)
    x = torch.randn(t, n, i, requires_grad=True)
    times = []
    for k in range(iters + 3):
        start = time.perf_counter()
        y, _ = layer(x)
        y.sum().backward()
        if k >= 3:
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bakusoku", default=os.path.join(ROOT, "build", "src", "bakusoku"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--iters", type=int, default=20)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    print(f"| cell | T x N, inputs -> hidden | bakusoku ms | PyTorch {torch.__version__} ms | bakusoku faster "
          "| oneDNN's RNN primitive ms |")
    print("|---|---|---|---|---|---|")
    for cell in ("LSTM", "GRU"):
        for t, n, i, h in SIZES:
            ours, kernel = bakusoku_ms(a.bakusoku, cell, t, n, i, h, a.threads, a.iters)
            theirs = torch_ms(cell, t, n, i, h, a.iters)
            # The kernel on oneDNN's RNN primitive (--kernel), beside the default one.
            ms, name = bakusoku_ms(a.bakusoku, cell, t, n, i, h, a.threads, a.iters, f"oneDNN {cell}")
            primitive = f"{ms:.2f}"
            print(f"| {cell} | {t} x {n}, {i} -> {h} | {ours:.2f} | {theirs:.2f} | {theirs / ours:.2f}x | {primitive} |",
                  flush=True)


if __name__ == "__main__":
    main()
