#!/usr/bin/env python3
"""The compression targets of docs/compression.md on one net (the small ResNet by default):
QAT INT8 against FP32 and against post-training INT8, binary weights, and 90% magnitude
pruning (alone, and distilled from the control) with its compressed bundles, every bundle
scored on the whole Fashion-MNIST test set.

Usage: python3 bench/compression_targets.py [--net resnet|lenet] [--bakusoku build/src/bakusoku]
       [--fp32-iters 3000] [--ft-iters 3000] [--threads N] [--work /tmp/bks_targets_resnet]
The FP32 net is trained once; every variant fine-tunes it for --ft-iters at the net's
fine-tuning rate (the control without any technique), each once into WORK and reused.
"""
import argparse
import os

from fashion_runs import NETS, ROOT, run, tested_accuracy, trained


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--net", choices=["resnet", "lenet"], default="resnet")
    p.add_argument("--bakusoku", default=os.path.join(ROOT, "build", "src", "bakusoku"))
    p.add_argument("--fp32-iters", type=int, default=3000)
    p.add_argument("--ft-iters", type=int, default=3000)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--work")
    a = p.parse_args()
    work = a.work or f"/tmp/bks_targets_{a.net}"
    os.makedirs(work, exist_ok=True)
    bks, net = a.bakusoku, NETS[a.net][0]
    threads = ["--threads", str(a.threads)] if a.threads else []

    base = trained(bks, work, "fp32", a.fp32_iters, threads, net, a.net)
    ft = a.net + "_ft"
    tune = ["--weights", base, *threads]
    runs = {
        "control": [],
        "QAT int8": ["--qat", "int8"],
        "binary weights": ["--qat", "binary"],
        "binary every layer": ["--qat", "binary", "--qat-every-layer"],
        "90% pruned": ["--prune", "0.9", "--prune-until", str(a.ft_iters // 2)],
    }
    weights = {name: trained(bks, work, name.replace(" ", "_").replace("%", ""), a.ft_iters, tune + extra, net, ft)
               for name, extra in runs.items()}
    # The pruned net also learns from the control (distillation, T 4, alpha 0.5).
    distilled = runs["90% pruned"] + ["--teacher", net, "--teacher-weights", weights["control"], "--temperature", "4",
                                      "--alpha", "0.5"]
    weights["90% pruned, distilled"] = trained(bks, work, "90_pruned_distilled", a.ft_iters, tune + distilled, net, ft)

    int8 = ["--precision", "int8", "--int8-layers", "all"]
    calibrated = int8 + ["--calib", "test"]
    bundles = [
        ("control", "FP32", []),
        ("control", "FP32 --compress", ["--compress"]),
        ("control", "INT8 PTQ (mse, the default)", calibrated),
        ("control", "INT8 PTQ (entropy)", calibrated + ["--calib-method", "entropy"]),
        ("QAT int8", "FP32 (its float weights)", []),
        ("QAT int8", "INT8 from the learned ranges", int8),
        ("binary weights", "FP32 --compress (binary, ends float)", ["--compress"]),
        ("binary every layer", "FP32 --compress (binary grid)", ["--compress"]),
        ("90% pruned", "FP32 --compress", ["--compress"]),
        ("90% pruned", "INT8 --compress", calibrated + ["--compress"]),
        ("90% pruned", "INT8 --compress --weight-bits 5", calibrated + ["--compress", "--weight-bits", "5"]),
        ("90% pruned, distilled", "FP32 --compress", ["--compress"]),
    ]
    rows, reference = [], None
    for model, variant, flags in bundles:
        out = os.path.join(work, f"{model}_{variant}".replace(" ", "_").replace("%", "").replace(",", "").replace("(", "")
                           .replace(")", "") + ".bks")
        run([bks, "deploy", "--model", net, "--weights", weights[model], "--batch", "100", *threads, *flags,
             "-o", out])
        acc, size = tested_accuracy(bks, out), os.path.getsize(out)
        reference = reference or (acc, size)  # the control's dense FP32 bundle
        rows.append((model, variant, acc, size))
        print(f"{model:<21} {variant:<33} accuracy {acc:.4f} ({100 * (acc - reference[0]):+.2f})  {size:>9} bytes  "
              f"{reference[1] / size:5.1f}x", flush=True)

    print(f"\n| {a.net} | bundle | accuracy | change (points) | bytes | smaller |")
    print("|---|---|---|---|---|---|")
    for model, variant, acc, size in rows:
        print(f"| {model} | {variant} | {acc:.4f} | {100 * (acc - reference[0]):+.2f} | {size:,} | "
              f"{reference[1] / size:.1f}x |")


if __name__ == "__main__":
    main()
