"""The PyTorch side of the benchmark: Caffe's LeNet and cifar10_quick, written as a PyTorch
user would, trained with the same data, batch, schedule and threads as bakusoku."""
import gzip
import math
import time
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

FMNIST = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    nd = data[3]
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(nd)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * nd).reshape(dims)


def fashion_mnist(split):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(f"{FMNIST}/{prefix}-images-idx3-ubyte.gz")
    y = read_idx(f"{FMNIST}/{prefix}-labels-idx1-ubyte.gz")
    # Kept as uint8 in memory, like bakusoku; converted per batch.
    return torch.from_numpy(x.copy()).unsqueeze(1), torch.from_numpy(y.astype(np.int64))


def eager_times_ms(model, x, iters, warmup):
    """Sorted wall times (ms) of model(x), `iters` runs after `warmup` untimed ones, without autograd."""
    with torch.no_grad():
        for _ in range(warmup):
            model(x)
        ms = []
        for _ in range(iters):
            t = time.perf_counter()
            model(x)
            ms.append((time.perf_counter() - t) * 1000)
    return sorted(ms)


def caffe_xavier(t):
    # Caffe's xavier: uniform(+-sqrt(3 / fan_in)).
    fan_in = t[0].numel()
    s = math.sqrt(3.0 / fan_in)
    with torch.no_grad():
        t.uniform_(-s, s)


class LeNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 20, 5)
        self.conv2 = nn.Conv2d(20, 50, 5)
        self.ip1 = nn.Linear(800, 500)
        self.ip2 = nn.Linear(500, 10)
        for m in (self.conv1, self.conv2, self.ip1, self.ip2):
            caffe_xavier(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, x):
        x = F.max_pool2d(self.conv1(x), 2, 2)
        x = F.max_pool2d(self.conv2(x), 2, 2)
        x = F.relu(self.ip1(x.flatten(1)))
        return self.ip2(x)


class Cifar10Quick(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 32, 5, padding=2)
        self.conv3 = nn.Conv2d(32, 64, 5, padding=2)
        self.ip1 = nn.Linear(64 * 4 * 4, 64)
        self.ip2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 3, 2, ceil_mode=True))
        x = F.avg_pool2d(F.relu(self.conv2(x)), 3, 2, ceil_mode=True)
        x = F.avg_pool2d(F.relu(self.conv3(x)), 3, 2, ceil_mode=True)
        return self.ip2(self.ip1(x.flatten(1)))


def caffe_sgd(model, base_lr, momentum, weight_decay):
    # Caffe's lr_mult 2 for biases.
    weights = [p for n, p in model.named_parameters() if n.endswith("weight")]
    biases = [p for n, p in model.named_parameters() if n.endswith("bias")]
    return torch.optim.SGD([{"params": weights, "lr_mult": 1.0}, {"params": biases, "lr_mult": 2.0}],
                           lr=base_lr, momentum=momentum, weight_decay=weight_decay)


def set_lr(opt, lr):
    for g in opt.param_groups:
        g["lr"] = lr * g["lr_mult"]


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.a = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.a_bn = nn.BatchNorm2d(cout)
        self.b = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b_bn = nn.BatchNorm2d(cout)
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = F.relu(self.a_bn(self.a(x)))
        y = self.b_bn(self.b(y))
        return F.relu(y + (self.proj(x) if self.proj is not None else x))


class ResNet18Cifar(nn.Module):
    """examples/resnet/resnet18_cifar.prototxt in PyTorch."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        layers, cin = [], 64
        for stage, cout in enumerate([64, 128, 256, 512]):
            for i in range(2):
                layers.append(BasicBlock(cin, cout, 2 if stage > 0 and i == 0 else 1))
                cin = cout
        self.blocks = nn.Sequential(*layers)
        self.fc = nn.Linear(512, 10)

    def forward(self, x):
        x = self.blocks(F.relu(self.bn1(self.conv1(x))))
        return self.fc(F.adaptive_avg_pool2d(x, 1).flatten(1))


class MobileNetV1(nn.Module):
    """MobileNet v1 (224x224, width 1.0) as its Caffe port (shicai/MobileNet-Caffe) lays it
    out: a 3x3/2 convolution, 13 depthwise-separable blocks, each convolution followed by
    BatchNorm and ReLU, global average pooling and a 1000-way classifier."""

    BLOCKS = [(32, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2), (256, 256, 1), (256, 512, 2)] + \
        [(512, 512, 1)] * 5 + [(512, 1024, 2), (1024, 1024, 1)]

    def __init__(self):
        super().__init__()

        def unit(cin, cout, k, stride, groups):
            return nn.Sequential(nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False),
                                 nn.BatchNorm2d(cout), nn.ReLU())

        layers = [unit(3, 32, 3, 2, 1)]
        for cin, cout, stride in self.BLOCKS:
            layers += [unit(cin, cin, 3, stride, cin), unit(cin, cout, 1, 1, 1)]
        self.features = nn.Sequential(*layers)
        self.fc = nn.Linear(1024, 1000)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(self.features(x), 1).flatten(1))

    def fuse_names(self):
        """The (conv, bn, relu) module names that eager-mode quantization fuses."""
        return [[f"features.{i}.0", f"features.{i}.1", f"features.{i}.2"] for i in range(len(self.features))]
