"""Where bakusoku and ONNX Runtime spend their time, layer by layer, on one network of
bench/ort.py: the same ONNX file, batch and threads. bakusoku's side is `bakusoku bench
--layers`; ONNX Runtime's is its own profiler (bench/ort/ort_time.mjs --profile). A bakusoku layer and
an ONNX Runtime node are the same work when they write the same value (ONNX Runtime names its
NCHWc nodes after their output, "<value>_nchwc", and fuses as bakusoku does: a convolution
with its ReLU writes the ReLU's output on both sides); nodes left unmatched are listed. With
--precision int8 ONNX Runtime runs the QDQ model bench/qdq.py makes from the INT8 bundle's
calibration, as bench/ort.py does.

Prints both medians without profiling (bench, ort_time.mjs), each side's sum of per-layer
times, then the layers ordered by how much longer bakusoku takes than ONNX Runtime. ONNX
Runtime's profiler adds a few microseconds to every node, so its sum exceeds its median.
bakusoku's per-layer times are means over the runs, ONNX Runtime's medians.

Usage: /usr/bin/python3 bench/ort_layers.py BAKUSOKU_BINARY NETWORK [--batch N] [--threads N]
                                            [--iterations N] [--precision fp32|bf16|int8] [--top N]
NETWORK is one of bench/ort.py's (resnet18_32, googlenet, mobilenet_v2, ...) or an .onnx file
(then --shape C,H,W). Needs `npm ci --prefix bench/ort --ignore-scripts` first."""
import argparse
import collections
import glob
import json
import os
import re
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ort  # noqa: E402  (bench/ort.py: the networks, their export and deploy)


def ort_node_times(onnx, batch, threads, iterations, tmp):
    """Median microseconds of each ONNX Runtime node over the runs (warm-up runs included,
    which the median outweighs): {name: (op type, us)}."""
    prefix = os.path.join(tmp, "ort_profile")
    ort.sh(["node", os.path.join(ort.HERE, "ort", "ort_time.mjs"), onnx, "--batch", str(batch), "--threads",
            str(threads), "--iterations", str(iterations), "--profile", prefix])
    files = glob.glob(prefix + "*.json")
    if not files:
        sys.exit("ort_layers: ONNX Runtime wrote no profile")
    times, op = collections.defaultdict(list), {}
    for e in json.load(open(files[0])):
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            name = e["name"][:-len("_kernel_time")]
            times[name].append(e["dur"])
            op[name] = e.get("args", {}).get("op_name", "?")
    # ONNX Runtime names a QLinearConv fused from a QDQ group "<Conv node>_token_<n>": key it by the node.
    return {re.sub(r"_token_\d+$", "", k): (op[k], statistics.median(v)) for k, v in times.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("network")
    ap.add_argument("--shape", default="")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--precision", choices=("fp32", "bf16", "int8"), default="fp32")
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bks-ort-layers-") as tmp:
        if a.network.endswith(".onnx"):
            if not a.shape:
                sys.exit("ort_layers: an .onnx file needs --shape C,H,W")
            onnx, shape = a.network, tuple(int(x) for x in a.shape.split(","))
        elif a.network in ort.NETS:
            shape = ort.NETS[a.network][0]
            onnx = os.path.join(tmp, a.network + ".onnx")
            ort.export(a.network, shape, onnx, a.binary)
        else:
            sys.exit(f"ort_layers: unknown network '{a.network}' (one of {', '.join(ort.NETS)}, or an .onnx file)")
        bundle = ort.deploy(a.binary, onnx, shape, a.batch, a.threads, a.precision, tmp)
        if a.precision == "int8":  # ONNX Runtime runs the QDQ model made from the bundle's calibration
            import qdq

            qdq.make_qdq(onnx, bundle, os.path.join(tmp, "qdq.onnx"))
            onnx = os.path.join(tmp, "qdq.onnx")
        # One bench run: its median is timed before, and apart from, the per-layer times.
        ours = json.loads(ort.sh([a.binary, "bench", bundle, "--threads", str(a.threads), "--iterations",
                                  str(a.iterations), "--json", "--layers"]))["results"][0]
        ours_ms, layers = ours["latency_ms"]["median"], ours["layers"]
        theirs_ms, version = ort.ort_ms(onnx, a.batch, a.threads, a.iterations)
        nodes = ort_node_times(onnx, a.batch, a.threads, a.iterations, tmp)

    rows, matched = [], set()
    for layer in layers:
        us = layer["ms"] * 1000
        # Its output's name; a convolution that adds the residual writes the Add's output, where
        # ONNX Runtime's node keeps the convolution's ("<node>_output_0", torch.onnx's naming).
        outputs = layer.get("outputs", []) + [layer["layer"] + "_output_0"]
        keys = [o + "_nchwc" for o in outputs] + outputs + [layer["layer"]]
        peer = next((k for k in keys if k in nodes and k not in matched), None)
        if peer:
            matched.add(peer)
        rows.append((layer["layer"], layer["type"], us, nodes[peer][1] if peer else None, layer["kernel"]))
    print(f"{a.network}, batch {a.batch}, {a.threads} threads, {a.precision}: bakusoku median {ours_ms:.3f} ms, "
          f"ONNX Runtime {version} median {theirs_ms:.3f} ms ({theirs_ms / ours_ms:.2f}x)")
    print(f"sum of per-layer times: bakusoku {sum(r[2] for r in rows) / 1000:.3f} ms, ONNX Runtime "
          f"{sum(us for _, us in nodes.values()) / 1000:.3f} ms (profiled)")
    rows.sort(key=lambda r: -(r[2] - (r[3] if r[3] is not None else 0)))
    print(f"\n{'layer':<48} {'type':<12} {'bakusoku us':>11} {'ORT us':>8}  kernel")
    for name, typ, us, peer_us, kernel in rows[:a.top]:
        peer = f"{peer_us:8.1f}" if peer_us is not None else f"{'-':>8}"
        print(f"{name[-48:]:<48} {typ[:12]:<12} {us:11.1f} {peer}  {kernel}")
    left = sorted(set(nodes) - matched, key=lambda k: -nodes[k][1])
    if left:
        print("\nONNX Runtime nodes matched to no bakusoku layer: " +
              ", ".join(f"{k} ({nodes[k][0]}, {nodes[k][1]:.1f} us)" for k in left))


if __name__ == "__main__":
    main()
