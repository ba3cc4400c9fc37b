#!/usr/bin/env python3
"""PyTorch's figures for the convolutions bench/gpu_conv.cc times (ResNet-50's, at 224x224):
forward and backward (data + filter + bias) milliseconds and TFLOP/s, FP32 and TF32, with
cudnn.benchmark on (PyTorch's fastest setting). Run on the same GPU in the same session:
    python3 bench/torch_gpu_conv.py [batch ...]      (default: 64 256)"""
import sys

import torch

CASES = [  # name, in channels, size, out channels, kernel, stride, pad
    ("conv1 7x7/2 3>64 @224", 3, 224, 64, 7, 2, 3),
    ("res2 3x3 64>64 @56", 64, 56, 64, 3, 1, 1),
    ("res2 1x1 64>256 @56", 64, 56, 256, 1, 1, 0),
    ("res3 3x3 128>128 @28", 128, 28, 128, 3, 1, 1),
    ("res4 3x3 256>256 @14", 256, 14, 256, 3, 1, 1),
    ("res4 1x1 1024>256 @14", 1024, 14, 256, 1, 1, 0),
    ("res5 3x3 512>512 @7", 512, 7, 512, 3, 1, 1),
]


def time_ms(f, reps=10):
    f()
    f()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        f()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return sorted(times)[len(times) // 2]


def main():
    batches = [int(a) for a in sys.argv[1:]] or [64, 256]
    if not torch.cuda.is_available():
        print("torch_gpu_conv: skipped: no GPU")
        return
    torch.backends.cudnn.benchmark = True
    print(f"PyTorch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name(0)}")
    print(f"{'convolution':<24} {'batch':>5} {'math':>5} {'fwd ms':>9} {'TFLOP/s':>8} {'bwd ms':>9} {'TFLOP/s':>8}")
    for n in batches:
        for name, c, hw, oc, k, s, p in CASES:
            for tf32 in (False, True):
                torch.backends.cudnn.allow_tf32 = tf32
                torch.backends.cuda.matmul.allow_tf32 = tf32
                conv = torch.nn.Conv2d(c, oc, k, s, p).cuda()
                x = torch.rand(n, c, hw, hw, device="cuda", requires_grad=True) * 2 - 1
                x.retain_grad()
                with torch.no_grad():
                    y0 = conv(x)
                fwd = time_ms(lambda: conv(x))
                y = conv(x)
                dy = torch.rand_like(y0) * 2 - 1
                bwd = time_ms(lambda: torch.autograd.grad(y, [x, conv.weight, conv.bias], dy, retain_graph=True))
                o = (hw + 2 * p - k) // s + 1
                flops = 2.0 * n * oc * o * o * c * k * k
                print(f"{name:<24} {n:>5} {'TF32' if tf32 else 'FP32':>5} {fwd:>9.3f} {flops / fwd / 1e9:>8.1f} "
                      f"{bwd:>9.3f} {2 * flops / bwd / 1e9:>8.1f}", flush=True)


if __name__ == "__main__":
    main()
