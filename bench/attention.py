#!/usr/bin/env python3
"""Exact (SOFTMAX) against random-feature (PERFORMER) attention, in one run:

1. crossover by sequence length: one MultiHeadAttention layer (width 256, 4 heads of 64,
   one stream, PERFORMER with --features random features) timed forward + backward by
   `bakusoku time`, and the process's peak resident memory (each length and kernel in a
   process of its own), causal and not;
2. the approximation error of PERFORMER against exact attention by number of features
   (attention_error_bench, built with the tests), as a table and an SVG plot;
3. the char transformer example (examples/char_transformer) trained for --iters
   iterations with each kernel, then its validation bits per character.

Usage: python3 bench/attention.py [--build build] [--threads 2] [--max-length 16384]
                                  [--iters 600] [--svg attention_error.svg] [--skip train]
"""
import argparse
import csv
import io
import math
import os
import re
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "char_transformer")
NET = os.path.join(EXAMPLE, "char_transformer_train_test.prototxt")
SOLVER = os.path.join(EXAMPLE, "char_transformer_solver.prototxt")
WIDTH, HEADS = 256, 4
STREAMS, SEQ, VALIDATION_BATCHES = 32, 64, 62


def layer_net(length, kernel, causal, features):
    return f"""name: "attention"
layer {{ name: "x" type: "Input" top: "x" input_param {{ shape {{ dim: {length} dim: 1 dim: {WIDTH} }} }} }}
layer {{ name: "att" type: "MultiHeadAttention" bottom: "x" top: "y"
  attention_param {{ num_heads: {HEADS} causal: {str(causal).lower()} kernel: {kernel} num_features: {features} }} }}
layer {{ name: "loss" type: "Reduction" bottom: "y" top: "loss" loss_weight: 1 reduction_param {{ operation: SUMSQ }} }}
"""


def run_measured(cmd):
    """stdout, stderr and peak resident memory (MiB) of one process."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)
        out.seek(0)
        err.seek(0)
        o, e = out.read().decode(), err.read().decode()
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{e}")
        return o, e, usage.ru_maxrss / 1024


def time_layer(bks, length, kernel, causal, features, threads):
    with tempfile.NamedTemporaryFile("w", suffix=".prototxt", delete=False) as f:
        f.write(layer_net(length, kernel, causal, features))
    iterations = max(1, min(20, int(4e7 / (length * length))))
    try:
        out, _, peak = run_measured([bks, "time", "--model", f.name, "--iterations", str(iterations),
                                     "--threads", str(threads)])
    finally:
        os.unlink(f.name)
    row = re.search(r"^att\s+MultiHeadAttention\s+([0-9.]+)\s+([0-9.]+)", out, re.M)
    return float(row.group(1)) + float(row.group(2)), peak


def crossover(bks, threads, max_length, features):
    lengths = [n for n in (128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768) if n <= max_length]
    print(f"\n## 1. One attention layer, forward + backward (width {WIDTH}, {HEADS} heads, 1 stream, "
          f"PERFORMER with {features} features, {threads} threads)\n")
    for causal in (False, True):
        print(f"{'causal' if causal else 'bidirectional'}:\n")
        print("| length | SOFTMAX ms | PERFORMER ms | SOFTMAX / PERFORMER | SOFTMAX peak MiB | PERFORMER peak MiB |")
        print("|---|---|---|---|---|---|")
        for n in lengths:
            s_ms, s_mem = time_layer(bks, n, "SOFTMAX", causal, features, threads)
            p_ms, p_mem = time_layer(bks, n, "PERFORMER", causal, features, threads)
            print(f"| {n} | {s_ms:,.1f} | {p_ms:,.1f} | {s_ms / p_ms:.2f}x | {s_mem:,.0f} | {p_mem:,.0f} |", flush=True)
        print()


def svg_plot(rows, path):
    """Relative error against features, log-log, one line per (scale, causal)."""
    w, h, left, bottom, top, right = 640, 400, 70, 50, 20, 170
    xs = sorted({r["features"] for r in rows})
    ys = [r["error"] for r in rows]
    lx0, lx1 = math.log2(xs[0]), math.log2(xs[-1])
    ly0, ly1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
    px = lambda f: left + (math.log2(f) - lx0) / (lx1 - lx0) * (w - left - right)
    py = lambda e: top + (ly1 - math.log10(e)) / (ly1 - ly0) * (h - top - bottom)
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" '
             f'font-size="12"><rect width="{w}" height="{h}" fill="white"/>']
    for f in xs:
        parts.append(f'<line x1="{px(f):.1f}" y1="{top}" x2="{px(f):.1f}" y2="{h - bottom}" stroke="#eee"/>'
                     f'<text x="{px(f):.1f}" y="{h - bottom + 16}" text-anchor="middle">{f}</text>')
    for d in range(ly0, ly1 + 1):
        parts.append(f'<line x1="{left}" y1="{py(10 ** d):.1f}" x2="{w - right}" y2="{py(10 ** d):.1f}" '
                     f'stroke="#eee"/><text x="{left - 6}" y="{py(10 ** d) + 4:.1f}" text-anchor="end">1e{d}</text>')
    parts.append(f'<text x="{(left + w - right) / 2}" y="{h - 12}" text-anchor="middle">random features</text>')
    parts.append(f'<text x="16" y="{(top + h - bottom) / 2}" text-anchor="middle" '
                 f'transform="rotate(-90 16 {(top + h - bottom) / 2})">relative error vs exact attention</text>')
    series = sorted({(r["scale"], r["causal"]) for r in rows})
    for i, (scale, causal) in enumerate(series):
        pts = [(r["features"], r["error"]) for r in rows if (r["scale"], r["causal"]) == (scale, causal)]
        c = colors[i % len(colors)]
        dash = ' stroke-dasharray="5,3"' if causal else ""
        path_d = " ".join(f"{px(f):.1f},{py(e):.1f}" for f, e in pts)
        parts.append(f'<polyline points="{path_d}" fill="none" stroke="{c}" stroke-width="2"{dash}/>')
        ly = top + 16 * i + 10
        parts.append(f'<line x1="{w - right + 12}" y1="{ly}" x2="{w - right + 36}" y2="{ly}" stroke="{c}" '
                     f'stroke-width="2"{dash}/>'
                     f'<text x="{w - right + 42}" y="{ly + 4}">scale {scale:g}{", causal" if causal else ""}</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts) + "\n")


def approximation(build, threads, svg, length):
    bench = os.path.join(build, "tests", "attention_error_bench")
    out = subprocess.run([bench, str(length), "0.25", "0.5", "1"], check=True, capture_output=True, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS=str(threads))).stdout
    rows = [{"scale": float(r["scale"]), "causal": r["causal"] == "1", "features": int(r["features"]),
             "error": float(r["relative_error"])} for r in csv.DictReader(io.StringIO(out))]
    print(f"## 2. PERFORMER against exact attention: relative error of the layer's output by number of features\n")
    print(f"{length} timesteps, inputs N(0, 1), W_qkv N(0, scale^2 / {WIDTH}) (scale 1: xavier's variance); "
          "the median over 5 feature draws.\n")
    features = sorted({r["features"] for r in rows})
    series = sorted({(r["scale"], r["causal"]) for r in rows})
    print("| features | " + " | ".join(f"scale {s:g}{' causal' if c else ''}" for s, c in series) + " |")
    print("|---|" + "---|" * len(series))
    for f in features:
        cells = [next(r["error"] for r in rows if (r["scale"], r["causal"], r["features"]) == (s, c, f))
                 for s, c in series]
        print(f"| {f} | " + " | ".join(f"{e:.4f}" for e in cells) + " |")
    svg_plot(rows, svg)
    print(f"\nplot: {svg}\n")


def train(bks, kernel, iters, threads, run_dir):
    with open(NET) as f:
        net = f.read().replace("kernel: SOFTMAX", f"kernel: {kernel}")
    net_path = os.path.join(run_dir, f"net_{kernel}.prototxt")
    with open(net_path, "w") as f:
        f.write(net)
    with open(SOLVER) as f:
        solver = f.read()
    solver = re.sub(r"max_iter: \d+", f"max_iter: {iters}", solver)
    solver = re.sub(r"test_interval: \d+", f"test_interval: {iters + 1}", solver)
    solver = re.sub(r"snapshot: \d+", f"snapshot: {iters}", solver)
    solver = re.sub(r'net: ".*"', f'net: "{net_path}"', solver)
    solver_path = os.path.join(run_dir, f"solver_{kernel}.prototxt")
    with open(solver_path, "w") as f:
        f.write(solver)
    out = os.path.join(run_dir, kernel)
    start = time.perf_counter()
    subprocess.run([bks, "train", "--solver", solver_path, "--out", out, "--threads", str(threads)], check=True,
                   capture_output=True, text=True)
    seconds = time.perf_counter() - start
    weights = os.path.join(out, "snapshots", f"iter_{iters}.safetensors")
    test = subprocess.run([bks, "test", "--model", net_path, "--weights", weights, "--iterations",
                           str(VALIDATION_BATCHES), "--stage", "validation", "--threads", str(threads)],
                          check=True, capture_output=True, text=True).stdout
    return iters * STREAMS * SEQ / seconds, float(re.search(r"^bpc = ([0-9.]+)", test, re.M).group(1))


def transformer(bks, iters, threads):
    print(f"## 3. The char transformer (examples/char_transformer) after {iters} iterations "
          f"({STREAMS} x {SEQ} characters each, {threads} threads)\n")
    print("| kernel | training characters/s | validation bits/character |")
    print("|---|---|---|")
    run_dir = tempfile.mkdtemp(prefix="bks_attention_bench_")
    for kernel in ("SOFTMAX", "PERFORMER"):
        cps, bpc = train(bks, kernel, iters, threads, run_dir)
        print(f"| {kernel} | {cps:,.0f} | {bpc:.3f} |", flush=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--max-length", type=int, default=16384)
    p.add_argument("--features", type=int, default=256)
    p.add_argument("--error-length", type=int, default=512)
    p.add_argument("--iters", type=int, default=600)
    p.add_argument("--svg", default="attention_error.svg")
    p.add_argument("--skip", action="append", default=[], choices=["crossover", "error", "train"])
    a = p.parse_args()
    bks = os.path.join(a.build, "src", "bakusoku")
    if "crossover" not in a.skip:
        crossover(bks, a.threads, a.max_length, a.features)
    if "error" not in a.skip:
        approximation(a.build, a.threads, a.svg, a.error_length)
    if "train" not in a.skip:
        transformer(bks, a.iters, a.threads)


if __name__ == "__main__":
    main()
