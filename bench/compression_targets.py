#!/usr/bin/env python3
"""The compression targets of docs/compression.md on one net (the small ResNet by default):
QAT INT8 against FP32 and against post-training INT8, binary weights, and 90% magnitude
pruning (alone, and distilled from the control) with its compressed bundles, every bundle
scored on the whole Fashion-MNIST test set.

Usage: python3 bench/compression_targets.py [--net resnet|lenet] [--bakusoku build/src/bakusoku]
       [--fp32-iters 3000] [--ft-iters 3000] [--prune-iters 12000] [--threads N]
       [--work /tmp/bks_targets_resnet]
The FP32 net is trained once; every variant fine-tunes it for --ft-iters at the net's
fine-tuning rate (the control without any technique), each once into WORK and reused.
90% pruning is also fine-tuned --prune-iters at the net's training rate, beside a control
trained the same way (the "long" rows; 0 skips them). Each row's change is against its own
control's FP32 bundle, its size against the first control's.
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
    p.add_argument("--prune-iters", type=int, default=12000)
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
    if a.prune_iters:
        long, n = a.net + "_prune", a.prune_iters
        weights["control, long"] = trained(bks, work, f"control_{n}", n, tune, net, long)
        weights["90% pruned, long"] = trained(bks, work, f"90_pruned_{n}", n,
                                              tune + ["--prune", "0.9", "--prune-until", str(n // 2)], net, long)

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
    if a.prune_iters:
        bundles += [
            ("control, long", "FP32", []),
            ("90% pruned, long", "FP32 --compress", ["--compress"]),
            ("90% pruned, long", "INT8 --compress", calibrated + ["--compress"]),
            ("90% pruned, long", "INT8 --compress --weight-bits 5", calibrated + ["--compress", "--weight-bits", "5"]),
        ]
    rows, reference, controls = [], None, {}
    for model, variant, flags in bundles:
        out = os.path.join(work, f"{model}_{variant}".replace(" ", "_").replace("%", "").replace(",", "").replace("(", "")
                           .replace(")", "") + ".bks")
        run([bks, "deploy", "--model", net, "--weights", weights[model], "--batch", "100", *threads, *flags,
             "-o", out])
        acc, size = tested_accuracy(bks, out), os.path.getsize(out)
        reference = reference or size  # the first control's dense FP32 bundle
        if model.startswith("control") and variant == "FP32":
            controls[model.endswith(", long")] = acc
        change = 100 * (acc - controls[model.endswith(", long")])
        rows.append((model, variant, acc, change, size))
        print(f"{model:<21} {variant:<33} accuracy {acc:.4f} ({change:+.2f})  {size:>9} bytes  "
              f"{reference / size:5.1f}x", flush=True)

    print(f"\n| {a.net} | bundle | accuracy | change (points) | bytes | smaller |")
    print("|---|---|---|---|---|---|")
    for model, variant, acc, change, size in rows:
        print(f"| {model} | {variant} | {acc:.4f} | {change:+.2f} | {size:,} | {reference / size:.1f}x |")


if __name__ == "__main__":
    main()
