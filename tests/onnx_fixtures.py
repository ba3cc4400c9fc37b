#!/usr/bin/python3
"""Writes ONNX fixtures for tests/test_onnx.cc: PyTorch/torchvision exports with a fixed
seed, each with its input and PyTorch's output as raw little-endian float32 files.

usage: onnx_fixtures.py OUT_DIR
  OUT_DIR/NAME.onnx, NAME.in.f32, NAME.out.f32 for lenet, lenet_view, ..., transformer,
  resnet18, mobilenet_v2 and the bad inputs: truncated.onnx, unknown_op.onnx, opset9.onnx
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision


class LeNet(nn.Module):
    """Conv/MaxPool/Gemm/ReLU/Softmax; `view` exports Shape->Gather->Unsqueeze->Concat->Reshape."""

    def __init__(self, view):
        super().__init__()
        self.view = view
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.bn = nn.BatchNorm2d(6)  # after a pool, so the export keeps it
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.pool = nn.AvgPool2d(2)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        x = self.bn(F.max_pool2d(F.relu(self.conv1(x)), 2))
        x = self.pool(F.relu(self.conv2(x)))
        x = x.view(x.size(0), -1) if self.view else torch.flatten(x, 1)
        x = self.drop(F.relu(self.fc1(x)))
        x = torch.clamp(self.fc2(x) * 10, 0, 6)  # a scalar Mul; values above 6 reach the clip
        return F.softmax(self.fc3(x), dim=1)


class OpsMix(nn.Module):
    """The importer's other operators: grouped dilated Conv, LeakyRelu, Sigmoid, Tanh, Mul/Sub
    of two computed tensors, Concat, AveragePool with ceil_mode and pads, scalar and
    per-channel arithmetic, Transpose, MatMul, Gemm with alpha/beta and transB=0,
    Unsqueeze/Squeeze of a computed tensor."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=2, dilation=2, groups=2)
        self.scale = nn.Parameter(torch.rand(16, 1, 1) + 0.5)
        self.shift = nn.Parameter(torch.randn(16, 1, 1))
        self.w = nn.Parameter(torch.randn(16, 10) * 0.3)
        self.w2 = nn.Parameter(torch.randn(160, 12) * 0.1)
        self.b2 = nn.Parameter(torch.randn(12))

    def forward(self, x):
        a = F.leaky_relu(self.conv(x), 0.1)
        b = torch.sigmoid(a) * a
        d = torch.cat([b, torch.tanh(a) - b], 1)
        d = F.avg_pool2d(d, 3, stride=2, padding=1, ceil_mode=True, count_include_pad=True)
        e = (d / 2.0 - 0.5) * self.scale + self.shift
        f = F.max_pool2d(e, 2, ceil_mode=True)
        t = torch.matmul(f.permute(0, 2, 3, 1), self.w).reshape(1, -1)
        u = torch.addmm(self.b2, t, self.w2, beta=0.5, alpha=2.0)
        return F.softmax(u.unsqueeze(2), dim=1).squeeze(2)


class Activations(nn.Module):
    """HardSwish, ConvTranspose (grouped, strided, padded), Elu, HardSigmoid, Softplus, Abs,
    Max of two computed tensors, Pow by a constant."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.up = nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, groups=2)

    def forward(self, x):
        a = F.hardswish(self.conv(x) * 3)  # inputs on both sides of HardSwish's -3..3 ramp
        b = self.up(a)
        c = F.elu(b, 0.7) * F.hardsigmoid(b * 4)
        return torch.maximum(F.softplus(c), torch.abs(b)) ** 2


class Upsample(nn.Module):
    """Resize (nearest, whole factors) as torch exports F.interpolate and nn.Upsample."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        y = F.interpolate(self.conv(x), scale_factor=2, mode="nearest")
        return F.interpolate(y, scale_factor=(3, 2), mode="nearest")


class MeanHead(nn.Module):
    """ReduceMean over H and W, with and without keepdims."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3)
        self.fc = nn.Linear(12, 5)

    def forward(self, x):
        y = F.relu(self.conv(x))
        return self.fc(torch.cat([y.mean((2, 3)), y.mean((-1, -2), keepdim=True).flatten(1)], 1))


class Transformer(nn.Module):
    """A small encoder as PyTorch writes one: a Linear embedding of the features, an
    nn.TransformerEncoder of two layers (GELU, then ReLU feed-forward; dropout 0) with a final
    LayerNorm, the mean over the sequence and a Linear head. Exports MatMul of computed
    tensors, Slice, Softmax over the last axis, Erf and LayerNormalization (opset 17) or its
    ReduceMean/Sub/Pow/Sqrt/Div pieces (before 17)."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(16, 32)
        layer = lambda act: nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, dropout=0.0,
                                                       activation=act, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer("gelu"), 2, norm=nn.LayerNorm(32), enable_nested_tensor=False)
        self.encoder.layers[1] = layer("relu")
        self.head = nn.Linear(32, 10)
        # Fresh LayerNorms are identities (and their ones and zeros fold into shared
        # initializers): random affine maps test the scale and bias.
        g = torch.Generator().manual_seed(11)
        for m in self.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.data.copy_(torch.rand(32, generator=g) + 0.5)
                m.bias.data.copy_(torch.randn(32, generator=g) * 0.5)

    def forward(self, x):
        return self.head(self.encoder(self.embed(x)).mean(1))


def export(model, x, path, opset, dynamic_batch=False):
    model.eval()
    kw = {}
    if dynamic_batch:
        kw["dynamic_axes"] = {"input": {0: "batch"}, "output": {0: "batch"}}
    torch.onnx.export(model, x, path, opset_version=opset, input_names=["input"], output_names=["output"],
                      do_constant_folding=True, **kw)


def write_case(out, name, model, x, opset, dynamic_batch=False):
    path = os.path.join(out, name + ".onnx")
    export(model, x, path, opset, dynamic_batch)
    # With gradients on, torch's TransformerEncoderLayer skips its fused inference kernel
    # ("fast path") and computes what the export traced; other models are the same either way.
    y = model(x).detach()
    x.numpy().astype("<f4").tofile(os.path.join(out, name + ".in.f32"))
    y.numpy().astype("<f4").tofile(os.path.join(out, name + ".out.f32"))


def randomise_bn(model):
    # Freshly built BatchNorms are identities; random statistics test the folding.
    g = torch.Generator().manual_seed(7)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 3)  # some ReLU6 inputs above 6


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    for name, view, batch, opset, dyn in (("lenet", False, 2, 11, False), ("lenet_view", True, 1, 13, True)):
        net = LeNet(view)
        randomise_bn(net)
        write_case(out, name, net, torch.randn(batch, 1, 28, 28), opset, dyn)
    write_case(out, "ops_mix", OpsMix(), torch.randn(1, 4, 15, 15), 14)
    write_case(out, "activations", Activations(), torch.randn(1, 3, 7, 7), 14)
    write_case(out, "upsample", Upsample(), torch.randn(1, 3, 5, 7), 13)
    write_case(out, "mean_head", MeanHead(), torch.randn(2, 3, 9, 9), 17)  # torch 1.13 exports up to 17
    t = Transformer()
    xt = torch.randn(2, 7, 16)
    write_case(out, "transformer", t, xt, 17)  # LayerNormalization is an operator from opset 17
    write_case(out, "transformer_opset14", t, xt, 14)
    # A dynamic batch: the attention's Reshape shapes come from Shape nodes, which fold once
    # --input-shape gives the batch (3).
    write_case(out, "transformer_dynamic", t, torch.randn(3, 7, 16), 17, dynamic_batch=True)
    r = torchvision.models.resnet18(num_classes=100)
    randomise_bn(r)
    write_case(out, "resnet18", r, torch.randn(1, 3, 64, 64), 13)
    m = torchvision.models.mobilenet_v2(num_classes=100)
    randomise_bn(m)
    write_case(out, "mobilenet_v2", m, torch.randn(1, 3, 64, 64), 17)

    # Bad inputs.
    with open(os.path.join(out, "lenet.onnx"), "rb") as f:
        data = f.read()
    with open(os.path.join(out, "truncated.onnx"), "wb") as f:
        f.write(data[: len(data) // 2])

    import onnx
    from onnx import helper, TensorProto
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4])
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="relu0"),
                           helper.make_node("Einsum", ["r"], ["y"], name="einsum1", equation="bchw->bchw")], "g", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)]),
              os.path.join(out, "unknown_op.onnx"))
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu0")], "g", [x], [y])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)]), os.path.join(out, "opset9.onnx"))
    w = helper.make_tensor("w", TensorProto.FLOAT, [3], [0.0] * 3)
    w.data_location = TensorProto.EXTERNAL
    w.ClearField("float_data")
    w.external_data.add(key="location", value="missing_weights.bin")
    g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"], name="add0")], "g", [x], [y], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(out, "external.onnx"))


if __name__ == "__main__":
    main()
    with open(os.path.join(sys.argv[1], "stamp"), "w") as f:
        f.write("done\n")
