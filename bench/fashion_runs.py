"""Fashion-MNIST nets (LeNet, the small ResNet) trained with one solver each, every run once into a
work directory and reused: shared by bench/pruned_size.py and bench/channel_pruning.py."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples", "fashion_mnist")
LENET = os.path.join(EXAMPLES, "lenet_train_test.prototxt")
RESNET = os.path.join(EXAMPLES, "resnet_train_test.prototxt")
# Each net's file and solver: Caffe's LeNet solver; the ResNet's at a higher rate and less decay
# (BatchNorm). The "_ft" kinds fine-tune a trained net: the ResNet's last iterate at 0.05 is noisy,
# and at 0.01 under "inv" still moves a point between tests (a binary net's 0.86-0.88), so its
# fine-tunes drop the rate tenfold for their last third.
NETS = {
    "lenet": (LENET, "base_lr: 0.01\nweight_decay: 0.0005\n"),
    "resnet": (RESNET, "base_lr: 0.05\nweight_decay: 0.0001\n"),
    "lenet_ft": (LENET, "base_lr: 0.01\nweight_decay: 0.0005\n"),
    "resnet_ft": (RESNET, 'base_lr: 0.01\nweight_decay: 0.0001\nlr_policy: "step"\n'),
    # Pruning's long fine-tunes keep the net's training rate (step schedule): at 90% zeros the
    # ResNet recovered 0.9 points more at 0.05 than at 0.01 in the same 3,000 iterations.
    "lenet_prune": (LENET, 'base_lr: 0.01\nweight_decay: 0.0005\nlr_policy: "step"\n'),
    "resnet_prune": (RESNET, 'base_lr: 0.05\nweight_decay: 0.0001\nlr_policy: "step"\n'),
}


def run(cmd):
    """stdout of cmd; exits with its output when it fails."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout}{r.stderr}")
    return r.stdout


def write_solver(path, iters, net, rates):
    # An "inv" schedule (Caffe's LeNet), or "step" where `rates` names it (a tenth of the rate
    # for the last third), testing the whole test set at the end.
    schedule = (f"stepsize: {max(1, 2 * iters // 3)}\ngamma: 0.1\n" if 'lr_policy: "step"' in rates
                else 'lr_policy: "inv"\ngamma: 0.0001\npower: 0.75\n')
    with open(path, "w") as f:
        f.write(f'net: "{net}"\ntest_iter: 100\ntest_interval: {iters}\n{rates}momentum: 0.9\n'
                f'{schedule}display: 0\nmax_iter: {iters}\nrandom_seed: 1\n')


def trained(bks, work, name, iters, extra, net=LENET, kind="lenet"):
    """The weights after training `net` (a `kind` of NETS) for `iters` iterations into WORK/name, once."""
    out = os.path.join(work, name)
    weights = os.path.join(out, "snapshots", f"iter_{iters}.safetensors")
    if not os.path.exists(weights):
        s = os.path.join(work, f"{name}_solver.prototxt")
        write_solver(s, iters, net, NETS[kind][1])
        subprocess.run(["rm", "-rf", out], check=True)
        text = run([bks, "train", "--solver", s, "--out", out, *extra])
        acc = re.search(r"Final test:\s+accuracy ([0-9.]+)", text).group(1)
        print(f"trained {name}: accuracy {acc}", flush=True)
    return weights


def tested_accuracy(bks, model, weights=None):
    """Top-1 over the whole test set as `bakusoku test` prints it: of a bundle, or of a net with its weights."""
    cmd = [bks, "test", "--model", model, *(["--weights", weights] if weights else []), "--iterations", "100"]
    return float(re.search(r"accuracy = ([0-9.]+)", run(cmd)).group(1))
