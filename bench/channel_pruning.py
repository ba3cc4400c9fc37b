#!/usr/bin/env python3
"""Structured pruning on Fashion-MNIST (LeNet or the small ResNet): bakusoku prune-channels
removes a share of the convolutions' multiply-adds, the smaller net fine-tunes, and its FP32
bundle is timed against the unpruned net given the same fine-tune (same solver, same
iterations), with the accuracy of each over the whole test set.

Usage: python3 bench/channel_pruning.py [--net lenet|resnet] [--bakusoku build/src/bakusoku]
       [--fp32-iters 2000] [--ft-iters 4000] [--flops 0.5 0.7 ...] [--multiple 1 8 ...]
       [--criterion l1|l2|bn] [--rounds 5] [--work DIR]
The FP32 model and the unpruned fine-tune are trained once into WORK and reused (for LeNet,
the same ones bench/pruned_size.py trains in its default WORK, /tmp/bks_pruned_size). Bundles are timed in turns, `rounds` times each, and
every figure is the median of the rounds' medians, so a burst of load on the machine moves
both sides alike.
"""
import argparse
import json
import os
import re
import statistics

from fashion_runs import NETS, ROOT, run, tested_accuracy, trained


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--net", choices=sorted(NETS), default="lenet")
    p.add_argument("--bakusoku", default=os.path.join(ROOT, "build", "src", "bakusoku"))
    p.add_argument("--fp32-iters", type=int, default=2000)
    p.add_argument("--ft-iters", type=int, default=4000)
    p.add_argument("--flops", type=float, nargs="+", default=[0.5])
    p.add_argument("--multiple", type=int, nargs="+", default=[1])
    p.add_argument("--criterion", default="l1")
    p.add_argument("--batch", default="1,64")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--work", help="default: /tmp/bks_pruned_size for LeNet, /tmp/bks_resnet for the ResNet")
    a = p.parse_args()
    a.work = a.work or {"lenet": "/tmp/bks_pruned_size", "resnet": "/tmp/bks_resnet"}[a.net]
    model = NETS[a.net][0]
    os.makedirs(a.work, exist_ok=True)
    bks = a.bakusoku

    base = trained(bks, a.work, "fp32", a.fp32_iters, [], model, a.net)
    control = trained(bks, a.work, f"ft_{a.ft_iters}", a.ft_iters, ["--weights", base], model, a.net)
    models = {"unpruned, fine-tuned": (model, control, "", "")}
    for f, m in [(f, m) for f in a.flops for m in a.multiple]:
        tag = f"channels{f:g}_{a.criterion}" + (f"_m{m}" if m > 1 else "")
        out = os.path.join(a.work, tag)
        text = run([bks, "prune-channels", "--model", model, "--weights", base, "--flops", str(f),
                    "--criterion", a.criterion, "--multiple", str(m), "-o", out])
        conv = re.search(r"Convolution multiply-adds per item: (\S+) -> (\S+) \(([0-9.]+)% fewer\)", text)
        net, pruned = os.path.join(out, "net.prototxt"), os.path.join(out, "weights.safetensors")
        widths = ", ".join(f"{m[0]} {m[2]}/{m[1]}" for m in
                           re.findall(r"^(\S.*?)\s{2,}(\d+)\s+(\d+)\s", text, re.M))
        before = tested_accuracy(bks, net, pruned)
        tuned = trained(bks, a.work, f"{tag}_{a.ft_iters}", a.ft_iters, ["--weights", pruned], net, a.net)
        name = f"--flops {f:g}" + (f" --multiple {m}" if m > 1 else "") + f": {conv.group(3)}% fewer conv multiply-adds"
        models[name] = (net, tuned, widths, f"{before:.4f}")

    bundles, accuracies = {}, {}
    for name, (net, weights, _, _) in models.items():
        bundle = os.path.join(a.work, re.sub(r"[^A-Za-z0-9]+", "_", name) + ".bks")
        run([bks, "deploy", "--model", net, "--weights", weights, "-o", bundle])
        bundles[name] = bundle
        accuracies[name] = tested_accuracy(bks, net, weights)
    batches = [int(b) for b in a.batch.split(",")]
    times = {name: {b: [] for b in batches} for name in bundles}
    for r in range(a.rounds):
        for name, bundle in bundles.items():
            res = json.loads(run([bks, "bench", bundle, "--batch", a.batch, "--iterations", "200", "--json"]))
            for x in res["results"]:
                times[name][x["batch"]].append(x["latency_ms"]["median"])
    ref = next(iter(bundles))
    head = " | ".join(f"batch {b} (ms)" for b in batches)
    print(f"\n| model | layers (kept/all) | right after pruning | after the fine-tune | {head} |")
    print("|---|---|---|---|" + "---|" * len(batches))
    for name, (_, _, widths, before) in models.items():
        cells = []
        for b in batches:
            t, t0 = statistics.median(times[name][b]), statistics.median(times[ref][b])
            cells.append(f"{t:.3f}" + ("" if name == ref else f" ({t0 / t:.2f}x)"))
        delta = "" if name == ref else f" ({100 * (accuracies[name] - accuracies[ref]):+.2f})"
        print(f"| {name} | {widths or '-'} | {before or '-'} | {accuracies[name]:.4f}{delta} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
