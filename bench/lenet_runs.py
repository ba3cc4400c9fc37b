"""LeNet on Fashion-MNIST trained with Caffe's solver, each run once into a work directory and
reused: shared by bench/pruned_size.py and bench/channel_pruning.py."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENET = os.path.join(ROOT, "examples", "fashion_mnist", "lenet_train_test.prototxt")


def run(cmd):
    """stdout of cmd; exits with its output when it fails."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return r.stdout


def write_solver(path, iters, net=LENET):
    # Caffe's LeNet solver, testing the whole test set at the end.
    with open(path, "w") as f:
        f.write(f'net: "{net}"\ntest_iter: 100\ntest_interval: {iters}\nbase_lr: 0.01\nmomentum: 0.9\n'
                f'weight_decay: 0.0005\nlr_policy: "inv"\ngamma: 0.0001\npower: 0.75\ndisplay: 0\n'
                f'max_iter: {iters}\nrandom_seed: 1\n')


def trained(bks, work, name, iters, extra, net=LENET):
    """The weights after training `net` for `iters` iterations into WORK/name (once)."""
    out = os.path.join(work, name)
    weights = os.path.join(out, "snapshots", f"iter_{iters}.safetensors")
    if not os.path.exists(weights):
        s = os.path.join(work, f"{name}_solver.prototxt")
        write_solver(s, iters, net)
        subprocess.run(["rm", "-rf", out], check=True)
        text = run([bks, "train", "--solver", s, "--out", out, *extra])
        acc = re.search(r"Final test:\s+accuracy ([0-9.]+)", text).group(1)
        print(f"trained {name}: accuracy {acc}", flush=True)
    return weights
