#!/usr/bin/env python3
"""Knowledge distillation on Fashion-MNIST: the MLP student trained alone against the same
student trained with `train --teacher`, over several seeds, on the full test set.

Usage: python3 bench/distillation.py [--bakusoku build/src/bakusoku] [--iters 5000]
       [--teacher-net NET] [--teacher-iters 5000] [--seeds 3] [--temperature 4]
       [--alpha 0.7 ...] [--work /tmp/bks_distill]
The teacher (default: the wide LeNet, Caffe's LeNet solver) is trained once into WORK and reused.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples", "fashion_mnist")


def solver(path, net, iters, seed):
    with open(path, "w") as f:
        f.write(f'net: "{net}"\ntest_iter: 100\ntest_interval: {iters}\nbase_lr: 0.01\nmomentum: 0.9\n'
                f'weight_decay: 0.0005\nlr_policy: "inv"\ngamma: 0.0001\npower: 0.75\ndisplay: 0\n'
                f'max_iter: {iters}\nrandom_seed: {seed}\n')


def train(bks, solver_path, out, extra=()):
    cmd = [bks, "train", "--solver", solver_path, "--out", out, *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    acc = re.search(r"Final test:\s+accuracy ([0-9.]+)", r.stdout)
    secs = re.search(r"iterations in ([0-9.]+) s", r.stdout)
    return float(acc.group(1)), float(secs.group(1))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bakusoku", default=os.path.join(ROOT, "build", "src", "bakusoku"))
    p.add_argument("--iters", type=int, default=5000)
    p.add_argument("--teacher-iters", type=int, default=5000)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--temperature", type=float, default=4.0)
    p.add_argument("--alpha", type=float, nargs="+", default=[0.7])
    p.add_argument("--teacher-net", default=os.path.join(EXAMPLES, "lenet_wide_train_test.prototxt"))
    p.add_argument("--work", default="/tmp/bks_distill")
    a = p.parse_args()
    os.makedirs(a.work, exist_ok=True)
    lenet = a.teacher_net
    mlp = os.path.join(EXAMPLES, "mlp_train_test.prototxt")

    teacher_name = os.path.splitext(os.path.basename(lenet))[0]
    teacher_run = os.path.join(a.work, f"teacher_{teacher_name}_{a.teacher_iters}")
    teacher_weights = os.path.join(teacher_run, "snapshots", f"iter_{a.teacher_iters}.safetensors")
    if not os.path.exists(teacher_weights):
        s = os.path.join(a.work, "teacher_solver.prototxt")
        solver(s, lenet, a.teacher_iters, 1)
        acc, secs = train(a.bakusoku, s, teacher_run)
        print(f"teacher {teacher_name}, {a.teacher_iters} iterations: accuracy {acc:.4f} ({secs:.0f} s)", flush=True)

    rows = {"alone": []}
    for alpha in a.alpha:
        rows[f"distilled T={a.temperature:g} alpha={alpha:g}"] = []
    for seed in range(1, a.seeds + 1):
        s = os.path.join(a.work, f"student_solver_{seed}.prototxt")
        solver(s, mlp, a.iters, seed)
        for name in rows:
            out = os.path.join(a.work, f"{name.replace(' ', '_').replace('=', '')}_seed{seed}")
            subprocess.run(["rm", "-rf", out], check=True)
            extra = []
            if name != "alone":
                alpha = float(name.split("alpha=")[1])
                extra = ["--teacher", lenet, "--teacher-weights", teacher_weights,
                         "--temperature", str(a.temperature), "--alpha", str(alpha)]
            acc, secs = train(a.bakusoku, s, out, extra)
            rows[name].append(acc)
            print(f"seed {seed} {name}: accuracy {acc:.4f} ({secs:.0f} s)", flush=True)

    base = statistics.mean(rows["alone"])
    print(f"\nMLP student (784-64-10), {a.iters} iterations, mean of {a.seeds} seeds, 10,000 test images:")
    print("| student | accuracy (mean) | per seed | vs alone |")
    print("|---|---|---|---|")
    for name, accs in rows.items():
        m = statistics.mean(accs)
        per = " ".join(f"{x:.4f}" for x in accs)
        print(f"| {name} | {m:.4f} | {per} | {100 * (m - base):+.2f} points |")


if __name__ == "__main__":
    main()
