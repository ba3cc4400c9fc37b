"""An INT8 ONNX model for ONNX Runtime, in the QDQ form its own quantizer writes, from an ONNX
model and the calibration table of a bakusoku INT8 bundle deployed from it (ONNX Runtime's
quantizer is Python-only and not in Debian; bakusoku's calibrated ranges stand in for it).

The form follows onnxruntime.quantization's QDQ output, which its graph optimizer turns into
QLinearConv / QLinearMatMul / QLinearAdd / ... kernels:
- every float tensor that a quantizable operator reads or writes gets QuantizeLinear ->
  DequantizeLinear (activations u8, or s8; the scale is the calibrated |x| over 127, zero point
  at the middle, or over 255 with zero point 0 where the tensor is a ReLU's output);
- weights of Conv, Gemm and MatMul are s8, symmetric, one scale per output channel;
- a Relu, or a Clip from 0, that directly follows a Conv or an Add is dropped: the u8
  quantization at zero point 0 clamps at 0 (its upper clamp at the calibrated range);
- MaxPool, Flatten and Reshape outputs keep their input's scale, so no requantization is needed.
Tensors bakusoku does not calibrate (it fuses, say, a Conv's output into the residual Add and
ReLU after it) borrow the range of the nearest calibrated tensor downstream. The values of the
scales change ONNX Runtime's accuracy, not its speed, which is what the bench measures.

Usage: python3 bench/qdq.py MODEL.onnx INT8_BUNDLE.bks OUT.onnx [--activations u8|s8]"""
import argparse
import json
import struct

import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto

QUANTIZABLE = {"Conv", "Gemm", "MatMul", "Add", "Relu", "Clip", "MaxPool", "AveragePool", "GlobalAveragePool",
               "Concat", "Flatten", "Reshape"}
SHARE_SCALE = {"MaxPool", "Flatten", "Reshape"}
WEIGHTED = {"Conv": 0, "Gemm": None, "MatMul": 1}  # the output-channel axis of the weights


def bundle_thresholds(path):
    """The calibration table (tensor name -> |x| range) saved in a bakusoku bundle."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        meta = json.loads(f.read(n))["__metadata__"]
    if meta.get("bakusoku_bundle_version") == "4":
        raise SystemExit(f"qdq: {path} is a --compress bundle, its metadata packed; deploy it without --compress")
    if "calibration" not in meta:
        raise SystemExit(f"qdq: {path} holds no calibration table (deploy it with --precision int8)")
    return {k: float(v) for k, v in json.loads(meta["calibration"])["threshold"].items()}


def index(nodes):
    """Each tensor's producing node, and the nodes reading each tensor."""
    producer = {o: n for n in nodes for o in n.output}
    consumers = {}
    for n in nodes:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    return producer, consumers


def weights_axis(node, w):
    if node.op_type == "Gemm":
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return 0 if trans_b else 1
    return WEIGHTED[node.op_type] if w.ndim > 1 else None


def make_qdq(model_path, bundle_path, out_path, activations="u8"):
    model = onnx.load(model_path)
    g = model.graph
    thresholds = bundle_thresholds(bundle_path)
    inits = {t.name: t for t in g.initializer}
    producer, consumers = index(g.node)

    # Drop activations right after a Conv: the Conv writes the activation's output tensor.
    dropped = set()
    for n in g.node:
        if n.op_type not in ("Relu", "Clip") or n.input[0] not in producer:
            continue
        if n.op_type == "Clip":
            lo = inits.get(n.input[1]) if len(n.input) > 1 and n.input[1] else None
            if lo is None or float(numpy_helper.to_array(lo)) != 0.0:
                continue
        p = producer[n.input[0]]
        if p.op_type in ("Conv", "Add") and len(consumers.get(n.input[0], [])) == 1:
            p.output[0] = n.output[0]
            dropped.add(id(n))
    nodes = [n for n in g.node if id(n) not in dropped]
    producer, consumers = index(nodes)
    nonnegative = {o for n in g.node if n.op_type in ("Relu", "Clip") and id(n) in dropped for o in n.output}
    nonnegative |= {n.output[0] for n in nodes if n.op_type == "Relu"}

    def threshold(t, seen=()):
        if t in thresholds:
            return thresholds[t]
        for c in consumers.get(t, []):
            if c.op_type in QUANTIZABLE and c.output and c.output[0] not in seen:
                r = threshold(c.output[0], seen + (t,))
                if r:
                    return r
        return None

    fallback = float(np.median(list(thresholds.values()))) if thresholds else 1.0
    quantized = {}  # tensor -> its DequantizeLinear output
    new_inits, qdq_nodes = [], []

    def params(t):
        p = producer.get(t)
        if p is not None and p.op_type in SHARE_SCALE:
            return params(p.input[0])
        r = max(threshold(t) or fallback, 1e-6)
        unsigned = activations == "u8"
        if t in nonnegative and unsigned:
            return r / 255.0, 0, TensorProto.UINT8
        return r / 127.0, 128 if unsigned else 0, TensorProto.UINT8 if unsigned else TensorProto.INT8

    def qdq_activation(t):
        if t in quantized:
            return quantized[t]
        scale, zp, ztype = params(t)
        new_inits.append(helper.make_tensor(t + "_scale", TensorProto.FLOAT, [], [scale]))
        new_inits.append(helper.make_tensor(t + "_zp", ztype, [], [zp]))
        qdq_nodes.append(helper.make_node("QuantizeLinear", [t, t + "_scale", t + "_zp"], [t + "_q"], t + "_Q"))
        qdq_nodes.append(helper.make_node("DequantizeLinear", [t + "_q", t + "_scale", t + "_zp"], [t + "_dq"],
                                          t + "_DQ"))
        quantized[t] = t + "_dq"
        return quantized[t]

    def qdq_weights(node, name):
        w = numpy_helper.to_array(inits[name]).astype(np.float32)
        axis = weights_axis(node, w)
        if axis is None:
            return name
        m = np.max(np.abs(np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)), axis=1)
        scale = np.where(m > 0, m / 127.0, 1.0).astype(np.float32)
        shape = [1] * w.ndim
        shape[axis] = -1
        q = np.clip(np.round(w / scale.reshape(shape)), -127, 127).astype(np.int8)
        new_inits.append(numpy_helper.from_array(q, name + "_q"))
        new_inits.append(numpy_helper.from_array(scale, name + "_wscale"))
        new_inits.append(numpy_helper.from_array(np.zeros(len(scale), np.int8), name + "_wzp"))
        qdq_nodes.append(helper.make_node("DequantizeLinear", [name + "_q", name + "_wscale", name + "_wzp"],
                                          [name + "_dq"], name + "_DQ", axis=axis))
        return name + "_dq"

    def is_activation(t):
        return t and t not in inits and (t in producer or any(i.name == t for i in g.input))

    out = []
    for n in nodes:
        if n.op_type in QUANTIZABLE:
            for k, t in enumerate(n.input):
                if k == 1 and n.op_type in WEIGHTED and t in inits:
                    n.input[k] = qdq_weights(n, t)
                elif (k == 0 or n.op_type in ("Add", "Concat")) and is_activation(t):
                    n.input[k] = qdq_activation(t)
        out.append(n)
    # The quantized outputs of quantizable operators: their readers see the dequantized tensor.
    graph_outputs = {o.name for o in g.output}
    for n in out:
        if n.op_type in QUANTIZABLE and n.output[0] not in graph_outputs:
            dq = qdq_activation(n.output[0])
            for c in consumers.get(n.output[0], []):
                for k, t in enumerate(c.input):
                    if t == n.output[0]:
                        c.input[k] = dq
    del g.node[:]
    g.node.extend(qdq_nodes + out)
    used = {i for n in g.node for i in n.input}
    kept = [t for t in g.initializer if t.name in used] + new_inits
    del g.initializer[:]
    g.initializer.extend(kept)
    # Topological order: Q/DQ pairs where their inputs exist.
    order, ready = [], {i.name for i in g.input} | {t.name for t in g.initializer}
    pending = list(g.node)
    while pending:
        rest = []
        for n in pending:
            if all(not i or i in ready for i in n.input):
                order.append(n)
                ready.update(n.output)
            else:
                rest.append(n)
        if len(rest) == len(pending):
            raise SystemExit(f"qdq: cannot order the graph; stuck at {rest[0].name}")
        pending = rest
    del g.node[:]
    g.node.extend(order)
    if model.opset_import[0].version < 13:
        model.opset_import[0].version = 13  # per-channel DequantizeLinear
    onnx.checker.check_model(model)
    onnx.save(model, out_path)
    return len(quantized)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("bundle")
    ap.add_argument("output")
    ap.add_argument("--activations", choices=("u8", "s8"), default="u8")
    a = ap.parse_args()
    print(f"{make_qdq(a.model, a.bundle, a.output, a.activations)} tensors quantized -> {a.output}")
