"""bakusoku against ONNX Runtime on the very same ONNX files: each network is exported once from
PyTorch (Debian's python3-torch / torchvision; random weights, fixed seed), or from its Caffe
prototxt by `bakusoku export` (cifar10_quick, the Caffe LeNet; the fillers' weights), deployed by
`bakusoku deploy --model NET.onnx` and timed by `bakusoku bench`, and timed by ONNX Runtime
(bench/ort/ort_time.mjs, npm onnxruntime-node) with the same threads and batch, in this run.
Prints one table row per network and batch: median milliseconds per batch on each side and
bakusoku's speed as a multiple of ONNX Runtime's (above 1: bakusoku is faster). Each side is
timed --rounds times, alternating, and keeps its lowest median: on a shared 2-core machine one
run's median moves by up to 40% with the neighbours' load.

--precision int8: bakusoku's INT8 bundle (calibrated on random inputs) against ONNX Runtime's
INT8 kernels on a QDQ model made from the same calibration table (bench/qdq.py), and against
ONNX Runtime's FP32.

--precision bf16 (CPUs with AVX-512 BF16 or AMX): bakusoku's BF16 bundle against ONNX Runtime's
FP32 (its CPU provider has no BF16 kernels for these networks on x86).

--bounds (FP32 and INT8): also how far each row could go on this machine. build/tests/
cpu_peak_bench measures the arithmetic ceiling (AVX-512 FMA, or VNNI for INT8) at the start
and the end of the run, the highest reading counts; `bench --layers` counts the bundle's
convolution and inner-product work as direct multiply-adds (2 operations each). At the
ceiling that work takes "ceiling ms", so an engine doing every multiply-add (ONNX Runtime's
CPU provider does) needs at least that long: "ORT share" and "bakusoku share" are each
side's ceiling ms over its time, and "most vs ORT" is the ratio bakusoku would reach at
the ceiling, ORT ms over ceiling ms. bakusoku's Winograd layers do fewer multiply-adds
than they are counted for, so its share can pass 100% and its ratio that column.

--torch: also PyTorch eager (bench/torch_infer.py, eval and no_grad; INT8: its eager static
quantization with conv + BN + ReLU fused) on the networks it defines (TORCH below), in
the same rounds.

Usage: /usr/bin/python3 bench/ort.py BAKUSOKU_BINARY [--threads N] [--iterations N] [--rounds N]
                                     [--precision fp32|int8|bf16] [--only REGEX] [--torch] [--bounds]
Needs `npm ci --prefix bench/ort --ignore-scripts` first (bench/ort.sh does both)."""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

HERE = os.path.dirname(os.path.abspath(__file__))

# name: (input shape without the batch, large batch); the models are built in export().
NETS = {
    "lenet": ((1, 28, 28), 256),
    "lenet_caffe": ((1, 28, 28), 256),
    "cifar10_quick": ((3, 32, 32), 64),
    "resnet18_32": ((3, 32, 32), 64),
    "resnet50": ((3, 224, 224), 32),
    "mobilenet_v2": ((3, 224, 224), 32),
    "mobilenet_v1": ((3, 224, 224), 32),
    "googlenet": ((3, 224, 224), 32),
}


# Networks bench/torch_infer.py also runs in PyTorch eager (--torch): the same definition
# the ONNX file is exported from.
TORCH = {"mobilenet_v1": "mobilenet_v1"}


def sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"ort bench: failed: {' '.join(cmd)}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return r.stdout


# Networks defined as Caffe prototxt files: ONNX from `bakusoku export`.
CAFFE = {
    "lenet_caffe": "examples/fashion_mnist/lenet_train_test.prototxt",
    "cifar10_quick": "examples/cifar10/cifar10_quick_train_test.prototxt",
}


def export(name, shape, path, binary):
    if name in CAFFE:
        sh([binary, "export", "--model", os.path.join(HERE, "..", CAFFE[name]), "--random-weights", "--dynamic-batch",
            "--input-shape", ",".join(map(str, (1, *shape))), "-o", path])
        return
    import torch
    import torchvision

    torch.manual_seed(1)
    if name == "lenet":
        m = torch.nn.Sequential(
            torch.nn.Conv2d(1, 20, 5), torch.nn.MaxPool2d(2), torch.nn.Conv2d(20, 50, 5), torch.nn.MaxPool2d(2),
            torch.nn.Flatten(), torch.nn.Linear(800, 500), torch.nn.ReLU(), torch.nn.Linear(500, 10))
    elif name.startswith("resnet18"):
        m = torchvision.models.resnet18()
    elif name == "resnet50":
        m = torchvision.models.resnet50()
    elif name == "mobilenet_v2":
        m = torchvision.models.mobilenet_v2()
    elif name == "mobilenet_v1":
        from torch_models import MobileNetV1

        m = MobileNetV1()
    elif name == "googlenet":
        m = torchvision.models.googlenet(aux_logits=False, init_weights=True)
    m.eval()
    torch.onnx.export(m, torch.randn(1, *shape), path, opset_version=13, input_names=["input"],
                      dynamic_axes={"input": {0: "N"}})


def deploy(binary, onnx, shape, batch, threads, precision, tmp):
    bundle = os.path.join(tmp, f"{os.path.basename(onnx)}.{precision}.b{batch}.bks")
    cmd = [binary, "deploy", "--model", onnx, "--input-shape", ",".join(map(str, (batch, *shape))), "-o", bundle,
           "--threads", str(threads)]
    if precision == "int8":
        cmd += ["--precision", "int8", "--calib", "random", "--calib-batches", "4"]
    elif precision == "bf16":
        cmd += ["--precision", "bf16"]
    sh(cmd)
    return bundle


def bakusoku_ms(binary, bundle, threads, iterations):
    out = json.loads(sh([binary, "bench", bundle, "--threads", str(threads), "--iterations", str(iterations),
                         "--json"]))
    return out["results"][0]["latency_ms"]["median"]


def ort_ms(onnx, batch, threads, iterations):
    out = json.loads(sh(["node", os.path.join(HERE, "ort", "ort_time.mjs"), onnx, "--batch", str(batch),
                         "--threads", str(threads), "--iterations", str(iterations)]).strip().splitlines()[-1])
    return out["median_ms"], out["version"]


def direct_gop(binary, bundle, threads):
    """The bundle's convolution and inner-product work in 10^9 operations (a multiply-add
    is 2), from `bench --layers`: each layer's achieved rate times its time."""
    out = json.loads(sh([binary, "bench", bundle, "--threads", str(threads), "--iterations", "3", "--layers",
                         "--json"]))
    return sum(l["gflops"] * l["ms"] / 1e3 for l in out["results"][0]["layers"])


def ceiling(binary, threads, int8):
    """This CPU's arithmetic ceiling in 10^9 operations per second (cpu_peak_bench beside
    the binary's build tree), for FP32 FMA or for INT8 VNNI."""
    peak = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(binary))), "tests", "cpu_peak_bench")
    if not os.path.exists(peak):
        sys.exit(f"ort bench: --bounds needs {peak} (built with the tests)")
    text = sh([peak, str(threads), "5"])
    m = re.search(r"^%s .*: ([0-9.]+) G" % ("int8" if int8 else "fp32"), text, re.M)
    if not m:
        sys.exit(f"ort bench: cpu_peak_bench printed no {'int8' if int8 else 'fp32'} figure:\n{text}")
    return float(m.group(1))


def torch_ms(name, batch, threads, iterations, int8):
    cmd = ["/usr/bin/python3", os.path.join(HERE, "torch_infer.py"), TORCH[name], str(threads), str(iterations),
           str(batch)] + (["int8"] if int8 else [])
    return json.loads(sh(cmd).strip().splitlines()[-1])[str(batch)]["median_ms"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--iterations", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--precision", choices=("fp32", "int8", "bf16"), default="fp32")
    ap.add_argument("--only", default="")
    ap.add_argument("--torch", action="store_true")
    ap.add_argument("--bounds", action="store_true")
    a = ap.parse_args()
    if a.bounds and a.precision == "bf16":
        sys.exit("ort bench: --bounds is for fp32 and int8")
    if not os.path.isdir(os.path.join(HERE, "ort", "node_modules", "onnxruntime-node")):
        sys.exit("ort bench: run `npm ci --prefix bench/ort --ignore-scripts` first")
    int8 = a.precision == "int8"
    load = os.getloadavg()
    print(f"# bakusoku vs ONNX Runtime, {a.precision.upper()}, {a.threads} threads, lowest of {a.rounds} medians of "
          f"{a.iterations} runs (load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f})")
    torch_cols = " PyTorch eager ms | vs PyTorch |" if a.torch else ""
    torch_rule = "---|---|" if a.torch else ""
    if int8:
        print("| network | batch | bakusoku INT8 ms | ORT INT8 (QDQ) ms | ORT FP32 ms | vs ORT INT8 | vs ORT FP32 |"
              + torch_cols.replace("eager ms", "eager INT8 ms"))
        print("|---|---|---|---|---|---|---|" + torch_rule)
    elif a.precision == "bf16":
        print("| network | batch | bakusoku BF16 ms | ORT FP32 ms | vs ORT FP32 |" + torch_cols)
        print("|---|---|---|---|---|" + torch_rule)
    else:
        print("| network | batch | bakusoku ms | ONNX Runtime ms | bakusoku speed vs ORT |" + torch_cols)
        print("|---|---|---|---|---|" + torch_rule)
    version = "?"
    peaks = [ceiling(a.binary, a.threads, int8)] if a.bounds else []
    bound_rows = []
    with tempfile.TemporaryDirectory(prefix="bks-ort-") as tmp:
        for name, (shape, large) in NETS.items():
            if a.only and not re.search(a.only, name):
                continue
            onnx = os.path.join(tmp, name + ".onnx")
            export(name, shape, onnx, a.binary)
            for batch in (1, large):
                bundle = deploy(a.binary, onnx, shape, batch, a.threads, a.precision, tmp)
                models = [onnx]
                if int8:
                    import qdq

                    models.insert(0, os.path.join(tmp, f"{name}.b{batch}.qdq.onnx"))
                    qdq.make_qdq(onnx, bundle, models[0])
                ours, theirs, eager = [], [[] for _ in models], []
                with_torch = a.torch and name in TORCH
                for _ in range(a.rounds):
                    ours.append(bakusoku_ms(a.binary, bundle, a.threads, a.iterations))
                    for k, m in enumerate(models):
                        ms, version = ort_ms(m, batch, a.threads, a.iterations)
                        theirs[k].append(ms)
                    if with_torch:
                        eager.append(torch_ms(name, batch, a.threads, a.iterations, int8))
                b, o = min(ours), [min(t) for t in theirs]
                ratios = " | ".join(f"{x / b:.2f}x" for x in o)
                extra = f" {min(eager):.2f} | {min(eager) / b:.2f}x |" if with_torch else (" - | - |" if a.torch else "")
                print(f"| {name} | {batch} | {b:.2f} | {' | '.join(f'{x:.2f}' for x in o)} | {ratios} |{extra}",
                      flush=True)
                if a.bounds:
                    bound_rows.append((name, batch, direct_gop(a.binary, bundle, a.threads), b, o[0]))
    print(f"# ONNX Runtime {version} (npm onnxruntime-node, CPU execution provider)")
    if a.bounds:
        peaks.append(ceiling(a.binary, a.threads, int8))
        peak, unit = max(peaks), "GOP/s INT8 VNNI" if int8 else "GFLOP/s FP32 FMA"
        print(f"\n# At this machine's ceiling: cpu_peak_bench read {' and '.join(f'{p:.0f}' for p in peaks)} {unit} "
              f"on {a.threads} threads (start and end); {peak:.0f} counts")
        print("| network | batch | direct GOP | ceiling ms | ORT share | bakusoku share | most vs ORT | measured |")
        print("|---|---|---|---|---|---|---|---|")
        for name, batch, gop, ours_ms, ort_ms_ in bound_rows:
            floor = gop / peak * 1e3
            print(f"| {name} | {batch} | {gop:.2f} | {floor:.2f} | {floor / ort_ms_:.0%} | {floor / ours_ms:.0%} | "
                  f"{ort_ms_ / floor:.2f}x | {ort_ms_ / ours_ms:.2f}x |")


if __name__ == "__main__":
    main()
