"""Scaling beyond this machine, by simulation: ResNet-50 data-parallel training from 1 to
1,024 ranks with bakusoku's gradient buckets, from measured per-layer backward times and a
link's latency and bandwidth.

Usage: /usr/bin/python3 bench/dist_model.py build/src/bakusoku [--batch 32] [--rank-images-per-s R]

1. Writes ResNet-50 (ImageNet, 224x224, bottleneck blocks, Caffe layer style) and times one
   training step of it on this machine (`bakusoku time --trace`): forward, then each
   layer's backward, in the order backward runs them.
2. Lays the gradients out in buckets as GradientBuckets does (src/dist/gradient_buckets.cc:
   backward's order, a 1 MB first bucket, 25 MB buckets, a small last bucket).
3. Replays one step on N ranks: each bucket's ring allreduce, 2(N-1) a + 2(N-1)/N S/b
   for S bytes over a link of latency a and bandwidth b, starts once its last gradient is
   ready and the link is free; the step ends when backward and the last reduction have.
   Efficiency is the one-rank step time over the N-rank one (same batch per rank).
Links: shared memory and TCP over veth as bench/allreduce.py measures them here (a and b
fitted to its MPI_Allreduce times), and the published figure of an ABCI compute node's
interconnect (2 x InfiniBand EDR, 2 x 100 Gb/s; latency assumed 2 us), whole for one rank
or shared by the node's 4 GPUs. The what-if table at the end uses the shared one.
`--rank-images-per-s` rescales the measured compute to a faster rank (a GPU) keeping the
layers' proportions: CPU steps are so long that any link hides behind them."""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import allreduce  # noqa: E402  (bench/allreduce.py: the measured links)

FIRST_BUCKET = 1 << 20
BUCKET = 25 << 20


class Net:
    def __init__(self):
        self.layers, self.params = [], []  # prototxt text; (layer, learnable floats) in forward order

    def add(self, text, name=None, floats=0):
        self.layers.append("layer {\n" + text.strip() + "\n}")
        if floats:
            self.params.append((name, floats))

    def conv_bn(self, name, bottom, cin, cout, k, stride, relu):
        self.add(f'name: "{name}" type: "Convolution" bottom: "{bottom}" top: "{name}"\n'
                 f'convolution_param {{ num_output: {cout} kernel_size: {k} stride: {stride} pad: {k // 2} '
                 f'bias_term: false weight_filler {{ type: "msra" }} }}', name, cin * cout * k * k)
        self.add(f'name: "{name}_bn" type: "BatchNorm" bottom: "{name}" top: "{name}"')
        self.add(f'name: "{name}_scale" type: "Scale" bottom: "{name}" top: "{name}" scale_param {{ bias_term: true }}',
                 name + "_scale", 2 * cout)
        if relu:
            self.add(f'name: "{name}_relu" type: "ReLU" bottom: "{name}" top: "{name}"')
        return name


def resnet50(batch):
    n = Net()
    n.add(f'name: "data" type: "Input" top: "data" top: "label"\n'
          f'input_param {{ shape {{ dim: {batch} dim: 3 dim: 224 dim: 224 }} shape {{ dim: {batch} }} }}')
    x = n.conv_bn("conv1", "data", 3, 64, 7, 2, True)
    n.add(f'name: "pool1" type: "Pooling" bottom: "{x}" top: "pool1"\n'
          'pooling_param { pool: MAX kernel_size: 3 stride: 2 pad: 1 }')
    x, cin = "pool1", 64
    for stage, (width, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)], start=2):
        for i in range(blocks):
            name, stride = f"res{stage}_{i}", (2 if stage > 2 and i == 0 else 1)
            a = n.conv_bn(name + "_a", x, cin, width, 1, 1, True)
            b = n.conv_bn(name + "_b", a, width, width, 3, stride, True)
            c = n.conv_bn(name + "_c", b, width, 4 * width, 1, 1, False)
            short = n.conv_bn(name + "_proj", x, cin, 4 * width, 1, stride, False) if i == 0 else x
            n.add(f'name: "{name}" type: "Eltwise" bottom: "{short}" bottom: "{c}" top: "{name}"')
            n.add(f'name: "{name}_relu" type: "ReLU" bottom: "{name}" top: "{name}"')
            x, cin = name, 4 * width
    n.add(f'name: "pool5" type: "Pooling" bottom: "{x}" top: "pool5" pooling_param {{ pool: AVE global_pooling: true }}')
    n.add('name: "fc" type: "InnerProduct" bottom: "pool5" top: "fc"\n'
          'inner_product_param { num_output: 1000 weight_filler { type: "xavier" } }', "fc", 2048 * 1000 + 1000)
    n.add('name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss"')
    return 'name: "ResNet50"\n' + "\n".join(n.layers) + "\n", n.params


def measure_step(binary, prototxt, iterations):
    """Forward seconds, and [(layer, backward seconds)] in the order backward ran them."""
    with tempfile.TemporaryDirectory() as tmp:
        model, trace = os.path.join(tmp, "r50.prototxt"), os.path.join(tmp, "trace.json")
        with open(model, "w") as f:
            f.write(prototxt)
        p = subprocess.run([binary, "time", "--model", model, "--iterations", str(iterations), "--trace", trace],
                           capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit(f"bakusoku time failed:\n{p.stdout}\n{p.stderr}")
        events = json.load(open(trace))
        events = events["traceEvents"] if isinstance(events, dict) else events
    forward, backward, order = 0.0, {}, []
    for e in events:
        if e.get("ph") != "X":
            continue
        if e["cat"] == "forward":
            forward += e["dur"] / 1e6 / iterations
        elif e["cat"] == "backward":
            if e["name"] not in backward:
                order.append(e["name"])
                backward[e["name"]] = 0.0
            backward[e["name"]] += e["dur"] / 1e6 / iterations
    return forward, [(name, backward[name]) for name in order]


def buckets(grads):
    return buckets_of(grads, FIRST_BUCKET, BUCKET)


def buckets_of(grads, first, later):
    """GradientBuckets' layout of [(layer, bytes)] in ready order: [(last layer, bytes)]."""
    tail, tail_bytes = len(grads), 0
    while tail > 0 and (tail == len(grads) or tail_bytes + grads[tail - 1][1] <= first):
        tail -= 1
        tail_bytes += grads[tail][1]
    out, limit, size = [], first, 0
    for i, (layer, nbytes) in enumerate(grads):
        if not out or size >= limit or (i == tail and i > 0):
            if out:
                limit = later
            out.append([layer, 0])
            size = 0
        out[-1][0] = layer
        out[-1][1] += nbytes
        size += nbytes
    return [tuple(b) for b in out]


def ring(ranks, nbytes, alpha, beta):
    """A ring allreduce: 2 (N-1) steps, each a latency and 1/N of the message."""
    return 2 * (ranks - 1) * alpha + 2 * (ranks - 1) / ranks * nbytes / beta


def torus(ranks, nbytes, alpha, beta):
    """A 2D-torus allreduce (Mikami et al., 2018) over X x Y ranks: reduce-scatter along X,
    allreduce along Y, all-gather along X; the same bytes as a ring, 2 (X-1) + 2 (Y-1) latencies."""
    x = 1
    while x * x < ranks:
        x *= 2
    y = ranks // x
    return 2 * (x - 1 + y - 1) * alpha + 2 * (ranks - 1) / ranks * nbytes / beta


def step_time(forward, backward, layout, ranks, alpha, beta, allreduce=ring):
    """Seconds of one step on `ranks` ranks, and the seconds of it spent only communicating."""
    done_at, t = {}, 0.0
    for layer, dur in backward:
        t += dur
        done_at[layer] = t
    backward_end, link_free = t, 0.0
    if ranks > 1:
        for last, nbytes in layout:
            start = max(done_at.get(last, backward_end), link_free)
            link_free = start + allreduce(ranks, nbytes, alpha, beta)
    end = max(backward_end, link_free)
    return forward + end, end - backward_end


def fit_link(rows):
    """Latency and bandwidth from MPI_Allreduce times of 2 ranks (the smallest and the 16 MB message)."""
    small = min(rows, key=lambda r: r["bytes"])
    big = min(rows, key=lambda r: abs(r["bytes"] - (16 << 20)))
    alpha = small["allreduce_ms"] / 1e3 / 2  # 2 (N - 1) latencies for N = 2
    beta = big["bytes"] / max(big["allreduce_ms"] / 1e3 - 2 * alpha, 1e-9)  # 2 (N-1)/N = 1 for N = 2
    return alpha, beta


def main():
    binary = os.path.abspath(sys.argv[1])
    arg = lambda flag, default: type(default)(sys.argv[sys.argv.index(flag) + 1]) if flag in sys.argv else default
    batch, iterations, rank_ips = arg("--batch", 32), arg("--iterations", 2), arg("--rank-images-per-s", 0.0)
    prototxt, params = resnet50(batch)
    print(f"Timing one ResNet-50 training step at batch {batch} on this machine ...", flush=True)
    forward, backward = measure_step(binary, prototxt, iterations)
    measured = forward + sum(d for _, d in backward)
    scale = batch / rank_ips / measured if rank_ips > 0 else 1.0
    forward *= scale
    backward = [(name, d * scale) for name, d in backward]
    floats = dict(params)
    grads = [(name, 4 * floats[name]) for name, _ in backward if name in floats]
    layout = buckets(grads)
    print(f"Step: {measured:.2f} s measured ({batch / measured:.1f} images/s)"
          + (f", modelled at {rank_ips:.0f} images/s per rank ({forward + sum(d for _, d in backward):.4f} s)"
             if rank_ips > 0 else ""))
    print(f"Gradients: {sum(b for _, b in grads) / 1e6:.1f} MB in {len(layout)} buckets "
          f"({', '.join(f'{b / 1e6:.1f}' for _, b in layout)} MB)\n")
    links = []
    shm = allreduce.shared_memory(binary, 5)
    links.append(("shared memory (measured)",) + fit_link(shm))
    veth = allreduce.veth(binary, 5)
    if veth:
        links.append(("TCP over veth (measured)",) + fit_link(veth))
    links.append(("2 x InfiniBand EDR, one rank per node (2 us assumed)", 2e-6, 2 * 100e9 / 8))
    # An ABCI node holds 4 GPUs: as ranks, they share its two links.
    links.append(("2 x InfiniBand EDR shared by a node's 4 GPU ranks (2 us assumed)", 2e-6, 2 * 100e9 / 8 / 4))
    one, _ = step_time(forward, backward, layout, 1, 0, 1)
    for name, alpha, beta in links:
        print(f"{name}: latency {alpha * 1e6:.1f} us, bandwidth {beta / 1e9:.2f} GB/s\n")
        print("| ranks | step s | waiting for reductions s | scaling efficiency |")
        print("|---|---|---|---|")
        for ranks in [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]:
            t, exposed = step_time(forward, backward, layout, ranks, alpha, beta)
            print(f"| {ranks} | {t:.4f} | {exposed:.4f} | {100 * one / t:.1f}% |")
        print()
    # What would hold the efficiency at 1,024 ranks on the InfiniBand figures.
    name, alpha, beta = links[-1]
    fp16 = [(last, nbytes / 2) for last, nbytes in layout]
    coarse = buckets_of(grads, 4 * FIRST_BUCKET, 4 * BUCKET)
    print(f"At 1,024 ranks, {name}:\n")
    print("| change | step s | scaling efficiency |")
    print("|---|---|---|")
    for label, lay, algo in [("as built: ring allreduce, 1 MB / 25 MB buckets, fp32 gradients", layout, ring),
                             ("buckets 4x larger (4 MB / 100 MB)", coarse, ring),
                             ("hierarchical (2D-torus) allreduce", layout, torus),
                             ("2D-torus + fp16 gradients", fp16, torus)]:
        t, _ = step_time(forward, backward, lay, 1024, alpha, beta, algo)
        print(f"| {label} | {t:.4f} | {100 * one / t:.1f}% |")


if __name__ == "__main__":
    main()
