"""Deployed-model inference: `bakusoku deploy` + `bakusoku bench` against PyTorch eager
(eval, no_grad), same machine, same run, same threads: FP32 against PyTorch FP32, LeNet INT8
against PyTorch INT8, CIFAR-10 quick and ResNet-18 INT8 against bakusoku's own FP32.
Usage: inference.py BAKUSOKU_BINARY [--threads N] [--iterations N]"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PY = "/usr/bin/python3"
NETS = {
    "lenet": (os.path.join(ROOT, "examples/fashion_mnist/lenet_train_test.prototxt"), "1,256"),
    "cifar": (os.path.join(ROOT, "examples/cifar10/cifar10_quick_train_test.prototxt"), "1,64"),
    "resnet18": (os.path.join(ROOT, "examples/resnet/resnet18_cifar.prototxt"), "1,64"),
}


def sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stdout}\n{r.stderr}")
    return r.stdout


def weights_for(binary, tmp, net):
    """Weights of the right shapes: the net's initial values after one training step (the
    speed of inference does not depend on them)."""
    solver = os.path.join(tmp, os.path.basename(net) + ".solver")
    with open(solver, "w") as f:
        f.write(f'net: "{net}"\nbase_lr: 0.001\nmax_iter: 1\nlr_policy: "fixed"\nrandom_seed: 1\n')
    out = os.path.join(tmp, "run-" + os.path.basename(net))
    sh([binary, "train", "--solver", solver, "--out", out, "--threads", "2"])
    return os.path.join(out, "snapshots", "iter_1.safetensors")


def neutral_batchnorm(weights):
    """One training step on an Input layer's zeros leaves BatchNorm with zero variances,
    which makes the folded weights huge; set mean 0, variance 1, factor 1 in place, as a
    trained net's statistics would be in scale."""
    import struct
    data = bytearray(open(weights, "rb").read())
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    for key, t in header.items():
        if key == "__metadata__" or "_bn." not in key:
            continue
        start, end = t["data_offsets"]
        value = {"0": 0.0, "1": 1.0, "2": 1.0}[key.rsplit(".", 1)[1]]
        data[8 + n + start:8 + n + end] = struct.pack(f"<{(end - start) // 4}f", *([value] * ((end - start) // 4)))
    open(weights, "wb").write(data)


def sgemm_peak(threads):
    """OpenBLAS SGEMM GFLOP/s on this machine (numpy's BLAS), same threads."""
    code = ("import numpy as np, time\n"
            "a = np.random.rand(2048, 2048).astype(np.float32); b = np.random.rand(2048, 2048).astype(np.float32)\n"
            "a @ b\nt = time.perf_counter()\nfor _ in range(10): a @ b\n"
            "print(2 * 2048**3 * 10 / (time.perf_counter() - t) / 1e9)\n")
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    r = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=env)
    return float(r.stdout.strip()) if r.returncode == 0 else float("nan")


def main():
    binary = sys.argv[1]
    threads = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else 2
    iters = int(sys.argv[sys.argv.index("--iterations") + 1]) if "--iterations" in sys.argv else 100
    rows, own_rows, conv_rows = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name, (net, batches) in NETS.items():
            w = weights_for(binary, tmp, net)
            neutral_batchnorm(w)
            bundle = os.path.join(tmp, name + ".bks")
            sh([binary, "deploy", "--model", net, "--weights", w, "-o", bundle, "--threads", str(threads)])
            b = json.loads(sh([binary, "bench", bundle, "--batch", batches, "--iterations", str(iters), "--threads",
                               str(threads), "--json", "--layers"]).strip().splitlines()[-1])
            big = b["results"][-1]  # the largest batch: its three largest convolutions by time
            convs = sorted((l for l in big["layers"] if l["type"] == "Convolution"), key=lambda l: -l["ms"])[:3]
            conv_rows.extend((name, big["batch"], l) for l in convs)
            t = json.loads(sh([PY, os.path.join(HERE, "torch_infer.py"), name, str(threads), str(iters), batches])
                           .strip().splitlines()[-1])
            if name == "lenet":
                # INT8: bakusoku calibrated on the test set (mse), PyTorch's static quantization
                # (fbgemm, or oneDNN where torch lacks it, as Debian's does) on random data.
                q = os.path.join(tmp, name + "_int8.bks")
                sh([binary, "deploy", "--model", net, "--weights", w, "-o", q, "--threads", str(threads), "--precision",
                    "int8", "--calib", "test", "--calib-batches", "5"])
                bq = json.loads(sh([binary, "bench", q, "--batch", batches, "--iterations", str(iters), "--threads",
                                    str(threads), "--json"]).strip().splitlines()[-1])
                tq = json.loads(sh([PY, os.path.join(HERE, "torch_infer.py"), name, str(threads), str(iters), batches,
                                    "int8"]).strip().splitlines()[-1])
                for r in bq["results"]:
                    rows.append((f"{name} INT8 batch {r['batch']} throughput", "items/s", r["throughput_per_s"],
                                 tq[str(r["batch"])]["throughput_per_s"]))
            else:
                # INT8 against bakusoku's own FP32 (no CIFAR-10 data on the machine: calibrated
                # on uniform random inputs, which sets the speed but not a usable accuracy).
                q = os.path.join(tmp, name + "_int8.bks")
                sh([binary, "deploy", "--model", net, "--weights", w, "-o", q, "--threads", str(threads), "--precision",
                    "int8", "--calib", "random", "--calib-batches", "3"])
                bq = json.loads(sh([binary, "bench", q, "--batch", batches, "--iterations", str(iters), "--threads",
                                    str(threads), "--json"]).strip().splitlines()[-1])
                for r, rf in zip(bq["results"], b["results"]):
                    if r["batch"] > 1:
                        own_rows.append((f"{name} INT8 vs own FP32 batch {r['batch']}", "items/s", r["throughput_per_s"],
                                         rf["throughput_per_s"]))
            for r in b["results"]:
                batch = r["batch"]
                tr = t[str(batch)]
                rows.append((f"{name} FP32 batch {batch} throughput", "items/s", r["throughput_per_s"],
                             tr["throughput_per_s"]))
                rows.append((f"{name} FP32 batch {batch} median latency", "ms", r["latency_ms"]["median"],
                             tr["median_ms"]))
    print(f"\n{'benchmark (' + str(threads) + ' threads)':<44} {'unit':<8} {'bakusoku':>10} {'PyTorch':>10} {'ratio':>7}")
    for name, unit, b, t in rows:
        print(f"{name:<44} {unit:<8} {b:>10.4g} {t:>10.4g} {b / t:>7.3f}")
    print(f"\n{'INT8 against bakusoku FP32 (' + str(threads) + ' threads)':<44} {'unit':<8} {'INT8':>10} {'FP32':>10} {'ratio':>7}")
    for name, unit, b, t in own_rows:
        print(f"{name:<44} {unit:<8} {b:>10.4g} {t:>10.4g} {b / t:>7.3f}")
    peak = sgemm_peak(threads)
    print(f"\nLargest convolutions (FP32, GFLOP/s counted as direct convolution; Winograd does fewer "
          f"multiplications) against OpenBLAS SGEMM peak {peak:.0f} GFLOP/s ({threads} threads):")
    for name, batch, l in conv_rows:
        print(f"  {name:<9} b{batch:<4} {l['layer']:<12} {l['ms']:>8.3f} ms {l['gflops']:>8.1f} GFLOP/s "
              f"{100 * l['gflops'] / peak:>5.0f}%   {l['kernel']}")


if __name__ == "__main__":
    main()
