"""Writes resnet18_cifar.prototxt: a ResNet-18 for 32x32x3 inputs in Caffe's layer style
(Convolution without bias, BatchNorm + Scale, Eltwise SUM shortcuts, projection shortcuts
where the shape changes, global average pooling). Run: python3 generate.py"""

LAYERS = []


def layer(text):
    LAYERS.append("layer {\n" + "\n".join("  " + line for line in text.strip().splitlines()) + "\n}")


def conv_bn(name, bottom, out, k, stride, relu):
    pad = k // 2
    layer(f'''name: "{name}"
type: "Convolution"
bottom: "{bottom}"
top: "{name}"
convolution_param {{
  num_output: {out} kernel_size: {k} stride: {stride} pad: {pad} bias_term: false
  weight_filler {{ type: "msra" }}
}}''')
    layer(f'name: "{name}_bn"\ntype: "BatchNorm"\nbottom: "{name}"\ntop: "{name}"')
    layer(f'name: "{name}_scale"\ntype: "Scale"\nbottom: "{name}"\ntop: "{name}"\nscale_param {{ bias_term: true }}')
    if relu:
        layer(f'name: "{name}_relu"\ntype: "ReLU"\nbottom: "{name}"\ntop: "{name}"')
    return name


def block(name, bottom, out, stride, project):
    a = conv_bn(name + "_a", bottom, out, 3, stride, True)
    b = conv_bn(name + "_b", a, out, 3, 1, False)
    shortcut = conv_bn(name + "_proj", bottom, out, 1, stride, False) if project else bottom
    layer(f'name: "{name}"\ntype: "Eltwise"\nbottom: "{shortcut}"\nbottom: "{b}"\ntop: "{name}"')
    layer(f'name: "{name}_relu"\ntype: "ReLU"\nbottom: "{name}"\ntop: "{name}"')
    return name


def main():
    layer('''name: "data"
type: "Input"
top: "data"
top: "label"
input_param { shape { dim: 64 dim: 3 dim: 32 dim: 32 } shape { dim: 64 } }''')
    x = conv_bn("conv1", "data", 64, 3, 1, True)
    channels = 64
    for stage, out in enumerate([64, 128, 256, 512], start=2):
        for i in range(2):
            stride = 2 if stage > 2 and i == 0 else 1
            x = block(f"res{stage}{'ab'[i]}", x, out, stride, project=(out != channels or stride != 1))
            channels = out
    layer(f'name: "pool"\ntype: "Pooling"\nbottom: "{x}"\ntop: "pool"\npooling_param {{ pool: AVE global_pooling: true }}')
    layer('''name: "fc"
type: "InnerProduct"
bottom: "pool"
top: "fc"
inner_product_param { num_output: 10 weight_filler { type: "xavier" } }''')
    layer('name: "accuracy"\ntype: "Accuracy"\nbottom: "fc"\nbottom: "label"\ntop: "accuracy"\ninclude { phase: TEST }')
    layer('name: "loss"\ntype: "SoftmaxWithLoss"\nbottom: "fc"\nbottom: "label"\ntop: "loss"')
    head = ("# ResNet-18 for 32x32x3 images (CIFAR-10 sized), written by generate.py. Input layers, so it\n"
            "# runs on any batch: `bakusoku time` feeds zeros, bench/ feeds random images.\n"
            'name: "ResNet18_CIFAR"\n')
    with open("resnet18_cifar.prototxt", "w") as f:
        f.write(head + "\n".join(LAYERS) + "\n")


if __name__ == "__main__":
    main()
