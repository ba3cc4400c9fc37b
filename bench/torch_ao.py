#!/usr/bin/env python3
"""PyTorch's own compression tools (torch.ao quantization, torch.nn.utils.prune) on the same
LeNet, data and solver as bakusoku's, side by side in one run: dynamic INT8, static INT8 (PTQ)
and QAT INT8, and 90% magnitude pruning with a fine-tune, each scored on the whole Fashion-MNIST
test set and timed at batch 1 and 64 (median ms, the lowest of ROUNDS alternating rounds),
against bakusoku's PTQ INT8, `train --qat int8` and `train --prune 0.9` bundles.

Each side trains its own FP32 LeNet (2,000 iterations of Caffe's LeNet solver) and fine-tunes
it 4,000 iterations for every variant, the FP32 control included. Both calibrate static INT8 on
the same 1,000 test images (bakusoku's `--calib test`, 10 batches of 100). PyTorch runs eager
mode on its x86 INT8 engine (oneDNN in Debian's build, which has no FBGEMM).

Usage: /usr/bin/python3 bench/torch_ao.py [--bakusoku build/src/bakusoku] [--threads 2]
       [--fp32-iters 2000] [--ft-iters 4000] [--rounds 3] [--work /tmp/bks_torch_ao]
"""
import argparse
import copy
import gzip
import io
import json
import os
import re

import torch
import torch.ao.quantization as q
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils.prune as prune

from fashion_runs import LENET, ROOT, run, tested_accuracy, trained
from torch_models import LeNet, caffe_sgd, eager_times_ms, fashion_mnist, set_lr

SCALE = 0.00390625  # Caffe's transform_param scale


class QuantLeNet(nn.Module):
    """LeNet as eager-mode quantization needs it: stubs around it, the ReLU a module."""

    def __init__(self, fp32):
        super().__init__()
        self.quant, self.dequant = q.QuantStub(), q.DeQuantStub()
        self.conv1, self.conv2, self.ip1, self.ip2 = (copy.deepcopy(m) for m in
                                                      (fp32.conv1, fp32.conv2, fp32.ip1, fp32.ip2))
        self.relu = nn.ReLU()

    def forward(self, x):
        x = self.quant(x)
        x = F.max_pool2d(self.conv1(x), 2, 2)
        x = F.max_pool2d(self.conv2(x), 2, 2)
        x = self.relu(self.ip1(x.flatten(1)))
        return self.dequant(self.ip2(x))


def train(model, data, iters, seed):
    """Caffe's LeNet solver (SGD, momentum 0.9, decay 5e-4, lr 0.01 'inv'), batches of 64."""
    x, y = data
    torch.manual_seed(seed)
    opt = caffe_sgd(model, 0.01, 0.9, 5e-4)
    model.train()
    order, at = torch.randperm(len(x)), 0
    for it in range(iters):
        if at + 64 > len(x):
            order, at = torch.randperm(len(x)), 0
        idx = order[at:at + 64]
        at += 64
        set_lr(opt, 0.01 * (1 + 1e-4 * it) ** -0.75)
        opt.zero_grad()
        F.cross_entropy(model(x[idx].float() * SCALE), y[idx]).backward()
        opt.step()
    return model.eval()


def accuracy(model, data):
    x, y = data
    model.eval()
    with torch.no_grad():
        right = sum((model(x[s:s + 500].float() * SCALE).argmax(1) == y[s:s + 500]).sum().item()
                    for s in range(0, len(x), 500))
    return right / len(x)


def median_ms(model, batch, iters=200):
    ms = eager_times_ms(model, torch.rand(batch, 1, 28, 28), iters, 20)
    return ms[len(ms) // 2]


def saved_bytes(model):
    """torch.save of the state dict, and that file gzipped (torch stores zeros densely)."""
    buf = io.BytesIO()
    torch.save(model.state_dict(), buf)
    return len(buf.getvalue()), len(gzip.compress(buf.getvalue()))


def bakusoku_ms(bks, bundle, batch, threads):
    r = json.loads(run([bks, "bench", bundle, "--batch", str(batch), "--iterations", "200", "--threads",
                        str(threads), "--json"]))
    return r["results"][0]["latency_ms"]["median"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bakusoku", default=os.path.join(ROOT, "build", "src", "bakusoku"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--fp32-iters", type=int, default=2000)
    p.add_argument("--ft-iters", type=int, default=4000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--work", default="/tmp/bks_torch_ao")
    a = p.parse_args()
    os.makedirs(a.work, exist_ok=True)
    torch.set_num_threads(a.threads)
    engine = "fbgemm" if "fbgemm" in torch.backends.quantized.supported_engines else "onednn"
    torch.backends.quantized.engine = engine
    train_data, test_data = fashion_mnist("train"), fashion_mnist("test")
    calib = test_data[0][:1000].float() * SCALE

    # PyTorch: its FP32 LeNet, then each variant fine-tuned from it.
    base = train(LeNet(), train_data, a.fp32_iters, 1)
    torch_models = {}
    control = train(copy.deepcopy(base), train_data, a.ft_iters, 2)
    torch_models["FP32 (control)"] = control
    torch_models["dynamic INT8 (Linear layers)"] = q.quantize_dynamic(copy.deepcopy(control), {nn.Linear},
                                                                      dtype=torch.qint8)
    static = QuantLeNet(control).eval()
    static.qconfig = q.get_default_qconfig(engine)
    q.prepare(static, inplace=True)
    with torch.no_grad():
        for s in range(0, 1000, 100):
            static(calib[s:s + 100])
    torch_models["static INT8 (PTQ)"] = q.convert(static)
    qat = QuantLeNet(base).train()
    qat.qconfig = q.get_default_qat_qconfig(engine)
    q.prepare_qat(qat, inplace=True)
    torch_models["QAT INT8"] = q.convert(train(qat, train_data, a.ft_iters, 2).eval())
    pruned = copy.deepcopy(base)
    layers = [(m, "weight") for m in (pruned.conv1, pruned.conv2, pruned.ip1, pruned.ip2)]
    prune.global_unstructured(layers, pruning_method=prune.L1Unstructured, amount=0.9)
    train(pruned, train_data, a.ft_iters, 2)  # the masks stay applied while it fine-tunes
    for m, name in layers:
        prune.remove(m, name)
    torch_models["90% pruned (global L1, one shot)"] = pruned

    # bakusoku: the same recipe.
    bks = a.bakusoku
    bbase = trained(bks, a.work, "fp32", a.fp32_iters, [])
    ft = lambda name, extra: trained(bks, a.work, f"{name}_{a.ft_iters}", a.ft_iters, ["--weights", bbase, *extra])
    bundles = {}

    def deploy(name, weights, flags):
        out = os.path.join(a.work, re.sub(r"[^A-Za-z0-9]+", "_", name) + ".bks")
        run([bks, "deploy", "--model", LENET, "--weights", weights, "--batch", "1", *flags, "-o", out])
        bundles[name] = out

    control_w = ft("ft", [])
    int8 = ["--precision", "int8", "--int8-layers", "all"]
    deploy("FP32 (control)", control_w, [])
    # --compress: INT8 layers store int8 weights (as PyTorch's INT8 models do); same speed.
    deploy("PTQ INT8 (mse)", control_w, int8 + ["--calib", "test", "--compress"])
    deploy("QAT INT8 (train --qat int8)", ft("qat", ["--qat", "int8"]), int8 + ["--compress"])
    deploy("90% pruned (train --prune 0.9, AGP), INT8 --compress",
           ft("prune0.9", ["--prune", "0.9", "--prune-until", str(a.ft_iters // 2)]),
           int8 + ["--calib", "test", "--compress"])

    rows = {}
    for name, model in torch_models.items():
        plain, packed = saved_bytes(model)
        rows[("PyTorch", name)] = {"accuracy": accuracy(model, test_data), "bytes": f"{plain:,} ({packed:,} gzipped)"}
    for name, bundle in bundles.items():
        rows[("bakusoku", name)] = {"accuracy": tested_accuracy(bks, bundle), "bytes": f"{os.path.getsize(bundle):,}"}
    for batch in (1, 64):
        for _ in range(a.rounds):
            for name, model in torch_models.items():
                r = rows[("PyTorch", name)]
                r[batch] = min(r.get(batch, 1e9), median_ms(model, batch))
            for name, bundle in bundles.items():
                r = rows[("bakusoku", name)]
                r[batch] = min(r.get(batch, 1e9), bakusoku_ms(bks, bundle, batch, a.threads))

    print(f"\nPyTorch {torch.__version__} ({engine} INT8 engine), {a.threads} threads; "
          f"lowest median of {a.rounds} rounds\n")
    print("| tool | model | accuracy | ms, batch 1 | ms, batch 64 | size (bytes) |")
    print("|---|---|---|---|---|---|")
    for (tool, name), r in rows.items():
        print(f"| {tool} | {name} | {r['accuracy']:.4f} | {r[1]:.4f} | {r[64]:.4f} | {r['bytes']} |")


if __name__ == "__main__":
    main()
