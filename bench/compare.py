"""bakusoku vs PyTorch on this machine, same run, same threads. Prints a table and ratios.

Each measurement runs in its own process; peak resident memory is that process's.
Usage: compare.py BAKUSOKU_BINARY [--quick] [--seeds N]
"""
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = "/usr/bin/python3"  # Debian's python, which has python3-torch
LENET = os.path.join(ROOT, "examples/fashion_mnist/lenet_train_test.prototxt")
CIFAR = os.path.join(ROOT, "examples/cifar10/cifar10_quick_train_test.prototxt")


def run(cmd, env=None):
    """Runs cmd, returns (stdout, peak RSS in MiB)."""
    # Output goes to files, not pipes, so a chatty child never blocks before wait4.
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe, text=True, env=env)
        _, status, usage = os.wait4(p.pid, 0)
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read(), fe.read()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{out}\n{err}")
    return out, usage.ru_maxrss / 1024.0


def torch(what, threads, n, *extra):
    out, rss = run([PY, os.path.join(HERE, "torch_bench.py"), what, str(threads), str(n)] + [str(e) for e in extra])
    r = json.loads(out.strip().splitlines()[-1])
    r["rss_mb"] = rss
    return r


def solver(tmp, name, net, max_iter, extra=""):
    path = os.path.join(tmp, name + ".prototxt")
    with open(path, "w") as f:
        f.write(f'net: "{net}"\nbase_lr: 0.01\nmomentum: 0.9\nweight_decay: 0.0005\nlr_policy: "inv"\n'
                f'gamma: 0.0001\npower: 0.75\ndisplay: 100000\nmax_iter: {max_iter}\nrandom_seed: 1\n'
                f'snapshot_after_train: false\n{extra}')
    return path


def bks_train(binary, tmp, solver_path, threads):
    out, rss = run([binary, "train", "--solver", solver_path, "--threads", str(threads),
                    "--out", os.path.join(tmp, "run-" + os.path.basename(solver_path))])
    m = re.search(r"iterations in ([\d.]+) s \(([\d.]+) s training.*: (\d+) images/s", out)
    acc = re.search(r"accuracy ([\d.]+)", out)
    return {"images_per_s": float(m.group(3)), "wall_s": float(m.group(1)), "train_s": float(m.group(2)),
            "accuracy": float(acc.group(1)) if acc else None, "rss_mb": rss, "out": out}


def main():
    binary = sys.argv[1]
    quick = "--quick" in sys.argv
    seeds = int(sys.argv[sys.argv.index("--seeds") + 1]) if "--seeds" in sys.argv else 1
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for threads in (1, 2):
            b = bks_train(binary, tmp, solver(tmp, f"lenet{threads}", LENET, 600), threads)
            t = torch("lenet", threads, 600)
            rows.append((f"LeNet train, batch 64, {threads} thread(s)", "images/s", b["images_per_s"],
                         t["images_per_s"], ">= 2.0"))
        rows.append(("  peak resident memory of that run", "MiB", b["rss_mb"], t["rss_mb"], "<= 0.25"))
        # cifar10_quick: training steps (forward, backward, SGD update) on one batch of
        # 32x32x3 data held in memory, as PyTorch does below.
        b = bks_train(binary, tmp, solver(tmp, "cifar", CIFAR, 60), 2)
        t = torch("cifar", 2, 60)
        rows.append(("cifar10_quick train, batch 100, 2 threads", "images/s", b["images_per_s"], t["images_per_s"], ">= 1.3"))
        if not quick:
            full = os.path.join(ROOT, "examples/fashion_mnist/lenet_solver.prototxt")
            b = bks_train(binary, tmp, full, 2)
            t = torch("lenet_full", 2, 10000)
            rows.append(("LeNet 10,000-iteration solver, 2 threads", "wall s", b["wall_s"], t["wall_s"], "<= 0.5"))
            # Accuracy depends on the random seed (about +-0.3 points either side); with
            # --seeds N both sides train N times (seeds 1..N) and their means are compared.
            b_acc, t_acc = [b["accuracy"]], [t["accuracy"]]
            with open(full) as f:
                text = f.read().replace('examples/', os.path.join(ROOT, "examples") + "/").replace("snapshot: 5000", "snapshot: 0")
            for seed in range(2, seeds + 1):
                path = os.path.join(tmp, f"full_seed{seed}.prototxt")
                with open(path, "w") as f:
                    f.write(text + f"\nrandom_seed: {seed}\n")
                b_acc.append(bks_train(binary, tmp, path, 2)["accuracy"])
                t_acc.append(torch("lenet_full", 2, 10000, seed)["accuracy"])
            label = "  test accuracy after 10,000 iterations" + (f" (mean of {seeds} seeds)" if seeds > 1 else "")
            rows.append((label, "accuracy", sum(b_acc) / len(b_acc), sum(t_acc) / len(t_acc), "within 0.005"))
            if seeds > 1:
                print(f"accuracy per seed: bakusoku {b_acc}, PyTorch {t_acc}")
            rows.append(("  peak resident memory", "MiB", b["rss_mb"], t["rss_mb"], "<= 0.25"))
    print(f"\n{'benchmark':<46} {'unit':<15} {'bakusoku':>10} {'PyTorch':>10} {'ratio':>7}  target")
    for name, unit, b, t, target in rows:
        ratio = b / t if t else float("nan")
        if unit == "accuracy":
            ratio = b - t
        print(f"{name:<46} {unit:<15} {b:>10.4g} {t:>10.4g} {ratio:>7.3f}  {target}")
    print(f"\nPyTorch {subprocess.run([PY, '-c', 'import torch; print(torch.__version__)'], capture_output=True, text=True).stdout.strip()}"
          f" (Debian), threads set with torch.set_num_threads; bakusoku --threads.")


if __name__ == "__main__":
    main()
