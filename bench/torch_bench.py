"""PyTorch measurements, one per process (so peak memory is per measurement).
Prints one JSON line."""
import json
import sys
import time

import torch
import torch.nn.functional as F

from torch_models import LeNet, Cifar10Quick, fashion_mnist, caffe_sgd, set_lr


def lenet_throughput(threads, iters):
    torch.set_num_threads(threads)
    x, y = fashion_mnist("train")
    model = LeNet()
    opt = caffe_sgd(model, 0.01, 0.9, 5e-4)
    n = x.shape[0]

    def step(i):
        s = (i * 64) % (n - 64)
        xb = x[s:s + 64].float() * 0.00390625
        loss = F.cross_entropy(model(xb), y[s:s + 64])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for i in range(20):
        step(i)
    t = time.perf_counter()
    for i in range(iters):
        step(i + 20)
    dt = time.perf_counter() - t
    return {"images_per_s": iters * 64 / dt}


def cifar_throughput(threads, iters):
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    x = torch.rand(100, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (100,), generator=g)
    model = Cifar10Quick()
    opt = caffe_sgd(model, 0.001, 0.9, 0.004)

    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(5):
        step()
    t = time.perf_counter()
    for _ in range(iters):
        step()
    return {"images_per_s": iters * 100 / (time.perf_counter() - t)}


def lenet_full(threads, max_iter, seed=1):
    """Caffe's LeNet solver: SGD momentum 0.9, wd 5e-4, lr inv(gamma 1e-4, power 0.75),
    batch 64 in file order, test on the 10,000 test images every 500 iterations."""
    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    x, y = fashion_mnist("train")
    tx, ty = fashion_mnist("test")
    model = LeNet()
    opt = caffe_sgd(model, 0.01, 0.9, 5e-4)
    n = x.shape[0]

    def test():
        model.eval()
        correct = 0
        with torch.no_grad():
            for s in range(0, tx.shape[0], 100):
                correct += (model(tx[s:s + 100].float() * 0.00390625).argmax(1) == ty[s:s + 100]).sum().item()
        model.train()
        return correct / tx.shape[0]

    t = time.perf_counter()
    acc = None
    for it in range(max_iter):
        if it % 500 == 0:
            acc = test()
        set_lr(opt, 0.01 * (1 + 1e-4 * it) ** -0.75)
        s = (it * 64) % n
        idx = torch.arange(s, s + 64) % n
        xb = x[idx].float() * 0.00390625
        loss = F.cross_entropy(model(xb), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    acc = test()
    return {"wall_s": time.perf_counter() - t, "accuracy": acc}


if __name__ == "__main__":
    what, threads, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    fn = {"lenet": lenet_throughput, "cifar": cifar_throughput, "lenet_full": lenet_full}[what]
    extra = [int(a) for a in sys.argv[4:]]  # lenet_full: the random seed
    print(json.dumps(fn(threads, n, *extra)))
