"""PyTorch DistributedDataParallel (gloo) training throughput: the data-parallel peer of
bench/dist_scaling.py. Usage: torch_ddp.py lenet|cifar RANKS ITERS. Each rank runs one
thread, pinned to core `rank`, on its own share of the batches (batch 64 for LeNet, 100
for cifar10_quick per rank). Prints one JSON line: images per second over all ranks."""
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from torch_models import LeNet, Cifar10Quick, fashion_mnist, caffe_sgd


def worker(rank, ranks, what, iters, port, out):
    os.sched_setaffinity(0, {rank % os.cpu_count()})
    torch.set_num_threads(1)
    if ranks > 1:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=ranks)
    torch.manual_seed(1)
    if what == "lenet":
        x, y = fashion_mnist("train")
        model, batch, lr = LeNet(), 64, 0.01
    else:
        g = torch.Generator().manual_seed(0)
        x = torch.rand(1000, 3, 32, 32, generator=g)
        y = torch.randint(0, 10, (1000,), generator=g)
        model, batch, lr = Cifar10Quick(), 100, 0.001
    if ranks > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = caffe_sgd(model, lr, 0.9, 5e-4)
    n = x.shape[0]

    def step(i):
        # Rank r reads batch ranks * i + r, as bakusoku's ranks do.
        s = ((i * ranks + rank) * batch) % (n - batch)
        xb = x[s:s + batch].float()
        if what == "lenet":
            xb = xb * 0.00390625
        loss = F.cross_entropy(model(xb), y[s:s + batch])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for i in range(10):
        step(i)
    if ranks > 1:
        dist.barrier()
    t = time.perf_counter()
    for i in range(iters):
        step(i + 10)
    if ranks > 1:
        dist.barrier()
    dt = time.perf_counter() - t
    if rank == 0:
        out.put({"images_per_s": iters * batch * ranks / dt, "ranks": ranks})
    if ranks > 1:
        dist.destroy_process_group()


def main():
    what, ranks, iters = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = 29500 + os.getpid() % 1000
    procs = [ctx.Process(target=worker, args=(r, ranks, what, iters, port, q)) for r in range(ranks)]
    for p in procs:
        p.start()
    result = q.get()
    for p in procs:
        p.join()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
