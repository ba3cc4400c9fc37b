#!/usr/bin/env python3
"""Bundle size of a pruned LeNet on Fashion-MNIST: deploy with and without --compress, in FP32
and INT8, each bundle's accuracy over the whole test set and its size against the dense FP32
bundle of the same network fine-tuned without pruning.

Usage: python3 bench/pruned_size.py [--bakusoku build/src/bakusoku] [--fp32-iters 2000]
       [--ft-iters 4000] [--sparsity 0.9 ...] [--weight-bits 5 ...] [--work /tmp/bks_pruned_size]
The FP32 model and each fine-tune are trained once into WORK and reused. Each --weight-bits B
adds an INT8 bundle whose weights are stored on B-bit grids (deploy --compress --weight-bits B).
"""
import argparse
import os

from fashion_runs import LENET, ROOT, run, tested_accuracy, trained


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bakusoku", default=os.path.join(ROOT, "build", "src", "bakusoku"))
    p.add_argument("--fp32-iters", type=int, default=2000)
    p.add_argument("--ft-iters", type=int, default=4000)
    p.add_argument("--sparsity", type=float, nargs="+", default=[0.9])
    p.add_argument("--weight-bits", type=int, nargs="*", default=[5])
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
    for b in a.weight_bits:
        variants[f"INT8 --compress --weight-bits {b}"] = int8 + ["--compress", "--weight-bits", str(b)]
    rows, reference = [], None
    for model, weights in models.items():
        for variant, flags in variants.items():
            bundle = os.path.join(a.work, f"{model}_{variant}.bks".replace(" ", "_").replace("%", ""))
            run([bks, "deploy", "--model", LENET, "--weights", weights, "--batch", "100", *flags, "-o", bundle])
            acc = tested_accuracy(bks, bundle)
            size = os.path.getsize(bundle)
            reference = reference or size
            rows.append((model, variant, acc, size))
            print(f"{model:<16} {variant:<34} accuracy {acc:.4f}  {size:>9} bytes  {reference / size:5.1f}x", flush=True)

    print("\n| model | bundle | accuracy | bytes | smaller than the dense FP32 bundle |")
    print("|---|---|---|---|---|")
    for model, variant, acc, size in rows:
        print(f"| {model} | {variant} | {acc:.4f} | {size:,} | {reference / size:.1f}x |")


if __name__ == "__main__":
    main()
