#!/usr/bin/env python3
"""Binary LeNets on Fashion-MNIST: binary weights (train --qat binary) and XNOR-Net (binary
weights and inputs, train --qat xnor) against the FP32 control, each a fine-tune of the same FP32
model with the same solver and iterations. Prints each deployed bundle's accuracy over the whole
test set and its size (with and without --compress), then the time of every layer at batch 1 and
64: the XNOR bundle's binary layers against the same layers in FP32 and INT8, the lowest of
ROUNDS alternating runs each.

Usage: python3 bench/binary_nets.py [--bakusoku build/src/bakusoku] [--fp32-iters 2000]
       [--ft-iters 4000] [--rounds 3] [--threads 0] [--work /tmp/bks_binary_nets]
The FP32 model and each fine-tune are trained once into WORK and reused.
"""
import argparse
import json
import os

from fashion_runs import LENET, ROOT, run, tested_accuracy, trained


def layer_times(bks, bundle, batch, threads):
    """{layer: (type, kernel, ms)} from one `bench --layers` run."""
    cmd = [bks, "bench", bundle, "--batch", str(batch), "--iterations", "200", "--layers", "--json"]
    if threads:
        cmd += ["--threads", str(threads)]
    r = json.loads(run(cmd))["results"][0]
    return {l["layer"]: (l["type"], l["kernel"], l["ms"]) for l in r["layers"]}, r["latency_ms"]["median"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bakusoku", default=os.path.join(ROOT, "build", "src", "bakusoku"))
    p.add_argument("--fp32-iters", type=int, default=2000)
    p.add_argument("--ft-iters", type=int, default=4000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--work", default="/tmp/bks_binary_nets")
    a = p.parse_args()
    os.makedirs(a.work, exist_ok=True)
    bks = a.bakusoku

    base = trained(bks, a.work, "fp32", a.fp32_iters, [])
    models = {
        "FP32 (control)": trained(bks, a.work, f"ft_{a.ft_iters}", a.ft_iters, ["--weights", base]),
        "--qat binary": trained(bks, a.work, f"binary_ends_{a.ft_iters}", a.ft_iters,
                                ["--weights", base, "--qat", "binary"]),
        "--qat binary --qat-every-layer": trained(bks, a.work, f"binary_all_{a.ft_iters}", a.ft_iters,
                                                  ["--weights", base, "--qat", "binary", "--qat-every-layer"]),
        "--qat xnor": trained(bks, a.work, f"xnor_ends_{a.ft_iters}", a.ft_iters, ["--weights", base, "--qat", "xnor"]),
    }
    print("\n| weights | accuracy | bundle | with `--compress` |")
    print("|---|---|---|---|")
    bundles, control = {}, None
    for name, weights in models.items():
        stem = os.path.join(a.work, name.replace(" ", "_").replace("-", "").replace("(", "").replace(")", ""))
        for flags, suffix in (([], ".bks"), (["--compress"], "_compressed.bks")):
            run([bks, "deploy", "--model", LENET, "--weights", weights, "--batch", "1", *flags, "-o", stem + suffix])
        bundles[name] = stem + ".bks"
        acc = tested_accuracy(bks, stem + ".bks")
        control = control if control is not None else acc
        plain, small = os.path.getsize(stem + ".bks"), os.path.getsize(stem + "_compressed.bks")
        print(f"| {name} | {acc:.4f} ({100 * (acc - control):+.2f}) | {plain:,} bytes | {small:,} bytes |", flush=True)
    int8 = os.path.join(a.work, "control_int8.bks")
    run([bks, "deploy", "--model", LENET, "--weights", models["FP32 (control)"], "--batch", "1", "--precision",
         "int8", "--calib", "test", "--int8-layers", "all", "-o", int8])

    runs = {"FP32": bundles["FP32 (control)"], "INT8": int8, "XNOR": bundles["--qat xnor"]}
    for batch in (1, 64):
        best = {}
        for _ in range(a.rounds):
            for name, bundle in runs.items():
                layers, whole = layer_times(bks, bundle, batch, a.threads)
                old = best.get(name)
                best[name] = (
                    {k: (t, kern, min(ms, old[0][k][2]) if old else ms) for k, (t, kern, ms) in layers.items()},
                    min(whole, old[1]) if old else whole)
        print(f"\nbatch {batch}: ms per layer (lowest of {a.rounds} rounds)\n")
        print("| layer | FP32 | INT8 | XNOR (binary layers) | XNOR vs FP32 | XNOR vs INT8 |")
        print("|---|---|---|---|---|---|")
        for layer, (t, kern, ms) in best["XNOR"][0].items():
            if t not in ("BinaryConvolution", "BinaryInnerProduct"):
                continue
            f, i = best["FP32"][0][layer][2], best["INT8"][0][layer][2]
            print(f"| {layer} ({t}) | {f:.4f} | {i:.4f} | {ms:.4f} | {f / ms:.2f}x | {i / ms:.2f}x |")
        print(f"| whole net (median) | {best['FP32'][1]:.4f} | {best['INT8'][1]:.4f} | {best['XNOR'][1]:.4f} | "
              f"{best['FP32'][1] / best['XNOR'][1]:.2f}x | {best['INT8'][1] / best['XNOR'][1]:.2f}x |")
        print(f"kernels: {', '.join(f'{k}: {v[1]}' for k, v in best['XNOR'][0].items() if v[0].startswith('Binary'))}")


if __name__ == "__main__":
    main()
