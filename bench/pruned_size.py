#!/usr/bin/env python3
"""Bundle size of a pruned LeNet on Fashion-MNIST: deploy with and without --compress, in FP32
and INT8, each bundle's accuracy over the whole test set and its size against the dense FP32
bundle of the same network fine-tuned without pruning.

Usage: python3 bench/pruned_size.py [--bakusoku build/src/bakusoku] [--fp32-iters 2000]
       [--ft-iters 4000] [--sparsity 0.9 ...] [--work /tmp/bks_pruned_size]
The FP32 model and each fine-tune are trained once into WORK and reused.
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENET = os.path.join(ROOT, "examples", "fashion_mnist", "lenet_train_test.prototxt")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return r.stdout


def solver(path, iters):
    # Caffe's LeNet solver, testing the whole test set at the end.
    with open(path, "w") as f:
        f.write(f'net: "{LENET}"\ntest_iter: 100\ntest_interval: {iters}\nbase_lr: 0.01\nmomentum: 0.9\n'
                f'weight_decay: 0.0005\nlr_policy: "inv"\ngamma: 0.0001\npower: 0.75\ndisplay: 0\n'
                f'max_iter: {iters}\nrandom_seed: 1\n')


def trained(bks, work, name, iters, extra):
    out = os.path.join(work, name)
    weights = os.path.join(out, "snapshots", f"iter_{iters}.safetensors")
    if not os.path.exists(weights):
        s = os.path.join(work, f"{name}_solver.prototxt")
        solver(s, iters)
        subprocess.run(["rm", "-rf", out], check=True)
        text = run([bks, "train", "--solver", s, "--out", out, *extra])
        acc = re.search(r"Final test:\s+accuracy ([0-9.]+)", text).group(1)
        print(f"trained {name}: accuracy {acc}", flush=True)
    return weights


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bakusoku", default=os.path.join(ROOT, "build", "src", "bakusoku"))
    p.add_argument("--fp32-iters", type=int, default=2000)
    p.add_argument("--ft-iters", type=int, default=4000)
    p.add_argument("--sparsity", type=float, nargs="+", default=[0.9])
    p.add_argument("--work", default="/tmp/bks_pruned_size")
    a = p.parse_args()
    os.makedirs(a.work, exist_ok=True)
    bks = a.bakusoku

    base = trained(bks, a.work, "fp32", a.fp32_iters, [])
    models = {"FP32 fine-tune": trained(bks, a.work, f"ft_{a.ft_iters}", a.ft_iters, ["--weights", base])}
    for s in a.sparsity:
        extra = ["--weights", base, "--prune", str(s), "--prune-until", str(a.ft_iters // 2)]
        models[f"{s:.0%} pruned"] = trained(bks, a.work, f"prune{s:g}_{a.ft_iters}", a.ft_iters, extra)

    int8 = ["--precision", "int8", "--calib", "test", "--int8-layers", "all"]
    variants = {"FP32": [], "FP32 --compress": ["--compress"], "INT8": int8, "INT8 --compress": int8 + ["--compress"]}
    rows, reference = [], None
    for model, weights in models.items():
        for variant, flags in variants.items():
            bundle = os.path.join(a.work, f"{model}_{variant}.bks".replace(" ", "_").replace("%", ""))
            run([bks, "deploy", "--model", LENET, "--weights", weights, "--batch", "100", *flags, "-o", bundle])
            text = run([bks, "test", "--model", bundle, "--iterations", "100"])
            acc = float(re.search(r"accuracy = ([0-9.]+)", text).group(1))
            size = os.path.getsize(bundle)
            reference = reference or size
            rows.append((model, variant, acc, size))
            print(f"{model:<16} {variant:<16} accuracy {acc:.4f}  {size:>9} bytes  {reference / size:5.1f}x", flush=True)

    print("\n| model | bundle | accuracy | bytes | smaller than the dense FP32 bundle |")
    print("|---|---|---|---|---|")
    for model, variant, acc, size in rows:
        print(f"| {model} | {variant} | {acc:.4f} | {size:,} | {reference / size:.1f}x |")


if __name__ == "__main__":
    main()
