"""PyTorch inference timing, one measurement per process: eager mode, eval(), no_grad().
Prints one JSON line: latency percentiles (ms) and throughput per batch size."""
import json
import sys

import torch

from torch_models import LeNet, Cifar10Quick, MobileNetV1, ResNet18Cifar, eager_times_ms


def int8(model, shape):
    """Static post-training quantization, calibrated on random batches. Debian's torch is
    built without FBGEMM; its x86 INT8 engine is oneDNN's (the one PyTorch 2 calls "x86")."""
    import torch.ao.quantization as q
    engine = "fbgemm" if "fbgemm" in torch.backends.quantized.supported_engines else "onednn"
    torch.backends.quantized.engine = engine
    if hasattr(model, "fuse_names"):  # conv + BN + ReLU as one quantized module, as users would
        model = q.fuse_modules(model, model.fuse_names())
    wrapped = torch.nn.Sequential(q.QuantStub(), model, q.DeQuantStub()).eval()
    wrapped.qconfig = q.get_default_qconfig(engine)
    q.prepare(wrapped, inplace=True)
    with torch.no_grad():
        for _ in range(4):
            wrapped(torch.rand(64, *shape))
    return q.convert(wrapped)


def main():
    what, threads, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    batches = [int(b) for b in sys.argv[4].split(",")]
    torch.set_num_threads(threads)
    model = {"lenet": LeNet, "cifar": Cifar10Quick, "resnet18": ResNet18Cifar, "mobilenet_v1": MobileNetV1}[what]().eval()
    shape = {"lenet": (1, 28, 28), "cifar": (3, 32, 32), "resnet18": (3, 32, 32), "mobilenet_v1": (3, 224, 224)}[what]
    if len(sys.argv) > 5 and sys.argv[5] == "int8":
        model = int8(model, shape)
    out = {}
    for b in batches:
        ms = eager_times_ms(model, torch.rand(b, *shape), iters, max(5, iters // 10))
        mean = sum(ms) / len(ms)
        out[str(b)] = {"median_ms": ms[len(ms) // 2], "mean_ms": mean, "throughput_per_s": b / (mean / 1000)}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
