"""Data-parallel scaling on this machine: 1 rank x 1 thread against 2 ranks x 1 thread,
the same batch per rank, for bakusoku (Open MPI) and PyTorch DDP (gloo), in one run.
Usage: /usr/bin/python3 bench/dist_scaling.py build/src/bakusoku [--iterations N]

Every rank is pinned to a core of its own, and so is the single rank it is compared with:
"1 thread" then means one core, data loading included (unpinned, a single process's loader
thread would run on the idle second core and the ratio would measure that instead)."""
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = "/usr/bin/python3"
NETS = {
    "lenet": (os.path.join(ROOT, "examples/fashion_mnist/lenet_train_test.prototxt"), 0.01),
    "cifar": (os.path.join(ROOT, "examples/cifar10/cifar10_quick_train_test.prototxt"), 0.001),
}


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p.stdout + p.stderr


def solver(tmp, name, iters):
    net, lr = NETS[name]
    path = os.path.join(tmp, name + ".prototxt")
    with open(path, "w") as f:
        f.write(f'net: "{net}"\nbase_lr: {lr}\nmomentum: 0.9\nweight_decay: 0.0005\nlr_policy: "fixed"\n'
                f'display: 100000\nmax_iter: {iters}\nrandom_seed: 1\nsnapshot_after_train: false\n')
    return path


def bakusoku(binary, tmp, name, ranks, iters):
    out_dir = os.path.join(tmp, f"{name}-{ranks}")
    args = [binary, "train", "--threads", "1", "--solver", solver(tmp, name, iters), "--out", out_dir]
    if ranks == 1:
        cmd = ["taskset", "-c", "0"] + args
    else:
        cmd = ["mpirun", "-np", str(ranks), "--bind-to", "core", "--map-by", "core"]
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        cmd += args
    out = run(cmd)
    ips = float(re.search(r": (\d+) images/s", out).group(1))
    waited = re.search(r"Gradient reductions: ([\d.]+) s waited.*?([\d.]+)% of", out)
    return ips, (float(waited.group(2)) if waited else 0.0)


def bakusoku_two_apart(binary, tmp, name, iters):
    """Two independent single-rank runs at once, one per core: what this machine gives two
    processes that never talk (its ceiling for 2 ranks)."""
    procs = []
    for core in (0, 1):
        out_dir = os.path.join(tmp, f"{name}-apart{core}")
        cmd = ["taskset", "-c", str(core), binary, "train", "--threads", "1", "--solver", solver(tmp, name, iters),
               "--out", out_dir]
        procs.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    total = 0.0
    for p in procs:
        out = p.communicate()[0]
        if p.returncode != 0:
            sys.exit(f"failed: {out}")
        total += float(re.search(r": (\d+) images/s", out).group(1))
    return total


def torch_ddp(name, ranks, iters):
    out = run([PY, os.path.join(HERE, "torch_ddp.py"), name, str(ranks), str(iters)])
    return json.loads(out.strip().splitlines()[-1])["images_per_s"]


def main():
    binary = os.path.abspath(sys.argv[1])
    iters = int(sys.argv[sys.argv.index("--iterations") + 1]) if "--iterations" in sys.argv else 600
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in NETS:
            b1, _ = bakusoku(binary, tmp, name, 1, iters)
            b2, waited = bakusoku(binary, tmp, name, 2, iters)
            apart = bakusoku_two_apart(binary, tmp, name, iters)
            t1 = torch_ddp(name, 1, iters)
            t2 = torch_ddp(name, 2, iters)
            rows.append((name, b1, b2, waited, apart, t1, t2))
    print(f"Data-parallel scaling, {iters} iterations, 1 thread per rank, each rank on a core of its own\n")
    print("| network | bakusoku 1 rank img/s | 2 ranks img/s | scaling | reductions waited for | "
          "2 independent runs at once | PyTorch DDP 1 rank | 2 ranks | scaling | bakusoku / PyTorch at 2 ranks |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, b1, b2, waited, apart, t1, t2 in rows:
        print(f"| {name} | {b1:.0f} | {b2:.0f} | {b2 / b1:.2f}x | {waited:.1f}% of training | {apart:.0f} "
              f"({apart / b1:.2f}x) | {t1:.0f} | {t2:.0f} | {t2 / t1:.2f}x | {b2 / t2:.2f}x |")


if __name__ == "__main__":
    main()
