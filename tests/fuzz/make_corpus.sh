#!/usr/bin/env bash
# Regenerates the seed corpora in tests/fuzz/corpus/<harness>/ (committed; run this only to
# change them). Python 3's standard library writes the binary seeds; the bundle seed comes
# from `bakusoku deploy` (BAKUSOKU, default build/src/bakusoku); the JPEG and HDF5 seeds
# from a small C program built against stb and libhdf5 (bakusoku's own dependencies).
# Usage: tests/fuzz/make_corpus.sh [BAKUSOKU]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bakusoku=${1:-$root/build/src/bakusoku}
out=$here/corpus
mkdir -p "$out"/{prototxt_net,prototxt_solver,safetensors,caffemodel,bundle,graph_json,solverstate,idx,hdf5,image,datum_db,json_body,onnx,shared_dataset,weight_coding,packed_parts,text}

# Nets: the examples (data sources renamed to the fixtures the harness writes beside the
# net: images-idx3-ubyte / labels-idx1-ubyte, and h5list.txt naming data.h5).
sed 's#source: ".*"#source: "images-idx3-ubyte"#' "$root/examples/fashion_mnist/lenet_train_test.prototxt" \
  > "$out/prototxt_net/lenet_train_test.prototxt"
cp "$root/examples/cifar10/cifar10_quick_train_test.prototxt" "$out/prototxt_net/"
cp "$root/examples/resnet/resnet18_cifar.prototxt" "$out/prototxt_net/"
cp "$root/examples/fashion_mnist/lenet_solver.prototxt" "$out/prototxt_solver/"

python3 - "$out" <<'PY'
import gzip, json, struct, sys, zlib
out = sys.argv[1]

def write(path, data):
    with open(f"{out}/{path}", "wb") as f:
        f.write(data)

# --- safetensors-style containers -------------------------------------------------
def safetensors(tensors, metadata):
    header, blob = {}, b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(blob), len(blob) + len(raw)]}
        blob += raw
    header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + blob

def f32(*xs):
    return struct.pack(f"<{len(xs)}f", *xs)

ip = {"ip.0": ("F32", [2, 3], f32(.1, .2, .3, .4, .5, .6)), "ip.1": ("F32", [2], f32(.5, -.5))}
write("safetensors/ip.safetensors", safetensors(ip, {"format": "bakusoku-weights"}))
write("safetensors/mixed_dtypes.safetensors", safetensors(
    {"ip.0": ("F64", [2, 3], struct.pack("<6d", *range(6))), "ip.1": ("BF16", [2], b"\x80\x3f\x00\x40"),
     "u": ("U8", [3], b"\x01\x02\x03"), "i": ("I32", [1], struct.pack("<i", -7)), "e": ("F32", [0], b"")},
    {"format": "bakusoku-weights"}))
history = {"ip.0.h0": ip["ip.0"], "ip.1.h0": ip["ip.1"], "ip.0.h1": ip["ip.0"], "ip.1.h1": ip["ip.1"]}
write("solverstate/iter_1.solverstate", safetensors(history, {
    "format": "bakusoku-solverstate", "iter": "1", "weights": "iter_1.safetensors", "seed": "1"}))

# --- .caffemodel: NetParameter (layer = 100) of LayerParameter (name 1, type 2, blobs 7) ---
def varint(n):
    b = b""
    while True:
        if n < 0x80:
            return b + bytes([n])
        b += bytes([n & 0x7F | 0x80])
        n >>= 7

def field(num, wire, payload):
    key = varint(num << 3 | wire)
    return key + (varint(len(payload)) + payload if wire == 2 else payload)

def blob(dims, values, legacy=False, double=False):
    b = b""
    if legacy:  # num, channels, height, width (Caffe before BlobShape)
        for i, d in enumerate(dims):
            b += field(i + 1, 0, varint(d))
    else:
        b += field(7, 2, field(1, 2, b"".join(varint(d) for d in dims)))
    b += field(8, 2, struct.pack(f"<{len(values)}d", *values)) if double else field(5, 2, f32(*values))
    return b

def layer(name, type_, blobs):
    return field(100, 2, field(1, 2, name.encode()) + field(2, 2, type_.encode()) +
                 b"".join(field(7, 2, b) for b in blobs))

w, bias = [.1, .2, .3, .4, .5, .6], [.5, -.5]
write("caffemodel/ip.caffemodel", field(1, 2, b"tiny") + layer("ip", "InnerProduct", [blob([2, 3], w), blob([2], bias)]))
write("caffemodel/legacy_4d.caffemodel", layer("ip", "InnerProduct", [blob([1, 1, 2, 3], w, legacy=True),
                                                                      blob([1, 1, 1, 2], bias, legacy=True)]))
write("caffemodel/double.caffemodel", layer("data", "Input", []) +
      layer("ip", "InnerProduct", [blob([2, 3], w, double=True), blob([2], bias, double=True)]))
# V1 (layers = 2: name 4, enum type 5, blobs 6, blobs_lr 7) and V0 (layers { layer = 1 {
# name 1, type 2, blobs 50 } bottom 2 top 3 }): upgraded on load (formats/caffe_upgrade.cc).
def v1_layer(name, type_enum, blobs, bottom=(), top=()):
    return field(2, 2, b"".join(field(2, 2, b.encode()) for b in bottom) +
                 b"".join(field(3, 2, t.encode()) for t in top) + field(4, 2, name.encode()) +
                 field(5, 0, varint(type_enum)) + b"".join(field(6, 2, b) for b in blobs) +
                 field(7, 5, f32(1)) + field(7, 5, f32(2)))
write("caffemodel/ip_v1.caffemodel", field(1, 2, b"tiny") + field(3, 2, b"data") +
      v1_layer("ip", 14, [blob([1, 1, 2, 3], w, legacy=True), blob([1, 1, 1, 2], bias, legacy=True)],
               bottom=["data"], top=["ip"]) + v1_layer("prob", 20, [], bottom=["ip"], top=["prob"]))
def v0_layer(name, type_, blobs, bottom, top):
    inner = field(1, 2, name.encode()) + field(2, 2, type_.encode()) + b"".join(field(50, 2, b) for b in blobs)
    return field(2, 2, field(1, 2, inner) + b"".join(field(2, 2, b.encode()) for b in bottom) +
                 b"".join(field(3, 2, t.encode()) for t in top))
write("caffemodel/ip_v0.caffemodel", field(3, 2, b"data") +
      v0_layer("pad", "padding", [], ["data"], ["padded"]) +
      v0_layer("ip", "innerproduct", [blob([1, 1, 2, 3], w, legacy=True), blob([1, 1, 1, 2], bias, legacy=True)],
               ["data"], ["ip"]))

# --- IDX: first byte = where the images end (fraction of 256 of the rest), images, labels ---
def idx(dims, data):
    return bytes([0, 0, 8, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + bytes(data)

def idx_input(images, labels):
    split = -(-len(images) * 256 // (len(images) + len(labels)))  # ceil, so the split lands on it
    while (len(images) + len(labels)) * split // 256 > len(images):
        split -= 1
    return bytes([split]) + images + labels

write("idx/gray_2x3x3.idx", idx_input(idx([2, 3, 3], range(18)), idx([2], [0, 1])))
write("idx/color_2x2x2x3.idx", idx_input(idx([2, 2, 2, 3], range(24)), idx([2], [1, 0])))
write("idx/vectors_3x4.idx", idx_input(idx([3, 4], range(12)), idx([3], [0, 1, 2])))
gz = lambda b: gzip.compress(b, mtime=0)
write("idx/gzip_2x3x3.idx", idx_input(gz(idx([2, 3, 3], range(18))), gz(idx([2], [0, 1]))))

# --- PNG (grey, RGB, palette) -------------------------------------------------------------
def png(w, h, color_type, rows, plte=None):
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    raw = b"".join(b"\x00" + bytes(r) for r in rows)
    body = chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, color_type, 0, 0, 0))
    if plte:
        body += chunk(b"PLTE", plte)
    return b"\x89PNG\r\n\x1a\n" + body + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")

write("image/gray_4x3.png", png(4, 3, 0, [[x * 60 + y for x in range(4)] for y in range(3)]))
write("image/rgb_3x2.png", png(3, 2, 2, [[(x * 80 + c * 30) % 256 for x in range(3) for c in range(3)] for _ in range(2)]))
write("image/palette_2x2.png", png(2, 2, 3, [[0, 1], [1, 0]], plte=b"\xff\x00\x00\x00\x00\xff"))

# --- Datum records (Caffe's LMDB/LevelDB values): an even first byte, records split at fe fe ---
def varint(v):
    out = b""
    while True:
        b, v = v & 0x7F, v >> 7
        out += bytes([b | (0x80 if v else 0)])
        if not v:
            return out
def datum(c=0, h=0, w=0, data=b"", label=0, floats=(), encoded=False):
    msg = b""
    for field, v in ((1, c), (2, h), (3, w)):
        if v:
            msg += varint(field << 3) + varint(v)
    if data:
        msg += varint(4 << 3 | 2) + varint(len(data)) + data
    msg += varint(5 << 3) + varint(label)
    for f in floats:
        msg += varint(6 << 3 | 5) + struct.pack("<f", f)
    if encoded:
        msg += varint(7 << 3) + b"\x01"
    return msg
write("datum_db/raw_two_records", b"\x00" + datum(1, 2, 2, bytes([1, 2, 3, 4]), 3) + b"\xfe\xfe" +
      datum(1, 2, 2, bytes([5, 6, 7, 8]), 1))
write("datum_db/float_record", b"\x00" + datum(1, 1, 2, floats=(0.5, -1.0), label=2))
write("datum_db/encoded_png", b"\x00" + datum(data=png(3, 2, 2, [[x * 40 + c for x in range(3) for c in range(3)]
                                                                 for _ in range(2)]), label=1, encoded=True))

# --- JSON request bodies ------------------------------------------------------------------
bodies = {
    "dataset_idx": {"name": "fashion", "source": "idx", "train_images": "/tmp/bks-fuzz-imports/train-images-idx3-ubyte",
                    "val_percent": 10, "class_names": ["a", "b"]},
    "dataset_folder": {"name": "folder", "source": "folder", "root": "/tmp/bks-fuzz-imports/folder",
                       "width": 32, "height": 32, "color": "color"},
    "model_sweep": {"name": "m", "network": "lenet", "dataset_id": 1,
                    "solver": {"type": "Adam", "base_lr": [0.01, 0.001], "batch_size": [32, 64], "lr_policy": "step",
                               "gamma": 0.5, "step_epochs": 2, "epochs": 3, "snapshot_epochs": 1}},
    "lr_schedule_multistep": {"iterations_per_epoch": 100,
                              "solver": {"lr_policy": "multistep", "stepvalue_epochs": [1, 2.5], "epochs": 4}},
    "validate_prototxt": {"prototxt": "layer { name: \"ip\" type: \"InnerProduct\" bottom: \"data\" top: \"ip\" "
                                      "inner_product_param { num_output: 10 } }\nlayer { name: \"loss\" "
                                      "type: \"SoftmaxWithLoss\" bottom: \"ip\" bottom: \"label\" top: \"loss\" }"},
}
for name, body in bodies.items():
    write(f"json_body/{name}.json", json.dumps(body).encode())

# --- shared dataset copies (data/shared_dataset.cc; the harness's key is "fuzz-key") ------
def fnv1a(b):
    h = 1469598103934665603
    for c in b:
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h

def text(s):
    return struct.pack("<Q", len(s)) + s.encode()

def shared(fields, size, key="fuzz-key"):
    # fields: (name, dtype code: 2 u8 / 0 f32, sample shape, bytes); offsets 64-aligned.
    head = b"BKSSHDS1" + text(key) + b"\x01" + text("fuzz") + text("idx") + struct.pack("<qI", size, len(fields))
    per_field = sum(8 + len(n) + 1 + 4 + 8 * len(shape) + 16 for n, _, shape, _ in fields)
    offset = (len(head) + per_field + 8 + 63) // 64 * 64
    body = []
    for name, dtype, shape, data in fields:
        head += text(name) + struct.pack("<BI", dtype, len(shape)) + b"".join(struct.pack("<q", d) for d in shape)
        head += struct.pack("<QQ", offset, len(data))
        body.append((offset, data))
        offset = (offset + len(data) + 63) // 64 * 64
    head += struct.pack("<Q", fnv1a(head))
    out = bytearray(max(offset, len(head)))
    out[:len(head)] = head
    for at, data in body:
        out[at:at + len(data)] = data
    return bytes(out)

pixels = bytes(range(12))
labels = struct.pack("<3f", 0, 1, 2)
write("shared_dataset/two_fields", shared([("data", 2, [1, 2, 2], pixels), ("label", 0, [], labels)], 3))
write("shared_dataset/one_field", shared([("data", 2, [4], pixels)], 3))
unshared = b"BKSSHDS1" + text("fuzz-key") + b"\x00"
write("shared_dataset/not_shared", unshared + struct.pack("<Q", fnv1a(unshared)))
write("shared_dataset/other_key", shared([("data", 2, [4], pixels)], 3, key="another-key"))
PY

# Hand-written nets and solvers covering more layer types and fields.
cat > "$out/prototxt_net/many_ops.prototxt" <<'NET'
name: "many_ops"
input: "data" input_shape { dim: 2 dim: 3 dim: 8 dim: 8 }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
  convolution_param { num_output: 4 kernel_size: 3 pad: 1 group: 1 dilation: 1 } }
layer { name: "bn" type: "BatchNorm" bottom: "conv" top: "conv" }
layer { name: "scale" type: "Scale" bottom: "conv" top: "conv" scale_param { bias_term: true } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" relu_param { negative_slope: 0.1 } }
layer { name: "deconv" type: "Deconvolution" bottom: "conv" top: "deconv"
  convolution_param { num_output: 2 kernel_h: 2 kernel_w: 2 stride_h: 2 stride_w: 2 } }
layer { name: "pool" type: "Pooling" bottom: "deconv" top: "pool" pooling_param { pool: AVE kernel_size: 2 stride: 2 } }
layer { name: "lrn" type: "LRN" bottom: "conv" top: "lrn" lrn_param { local_size: 3 alpha: 0.0001 beta: 0.75 } }
layer { name: "crop" type: "Crop" bottom: "lrn" bottom: "pool" top: "crop" crop_param { axis: 2 offset: 1 } }
layer { name: "prelu" type: "PReLU" bottom: "crop" top: "prelu" }
layer { name: "concat" type: "Concat" bottom: "prelu" bottom: "pool" top: "concat" concat_param { axis: 1 } }
layer { name: "slice" type: "Slice" bottom: "concat" top: "s1" top: "s2" slice_param { axis: 1 slice_point: 2 } }
layer { name: "sum" type: "Eltwise" bottom: "s1" bottom: "s2" top: "sum" eltwise_param { operation: SUM coeff: 1 coeff: -1 } }
layer { name: "power" type: "Power" bottom: "sum" top: "power" power_param { power: 2 scale: 0.5 shift: 1 } }
layer { name: "tanh" type: "TanH" bottom: "power" top: "tanh" }
layer { name: "drop" type: "Dropout" bottom: "tanh" top: "tanh" dropout_param { dropout_ratio: 0.3 } }
layer { name: "flat" type: "Flatten" bottom: "tanh" top: "flat" }
layer { name: "reshape" type: "Reshape" bottom: "flat" top: "reshape" reshape_param { shape { dim: 0 dim: -1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "reshape" top: "ip" inner_product_param { num_output: 5 } }
layer { name: "bias" type: "Bias" bottom: "ip" top: "ip2" }
layer { name: "softmax" type: "Softmax" bottom: "ip2" top: "prob" }
layer { name: "argmax" type: "ArgMax" bottom: "prob" top: "argmax" argmax_param { top_k: 2 } }
layer { name: "reduce" type: "Reduction" bottom: "ip" top: "reduce" reduction_param { operation: SUMSQ axis: 1 } }
layer { name: "silence" type: "Silence" bottom: "argmax" bottom: "reduce" }
NET
cat > "$out/prototxt_net/recurrent.prototxt" <<'NET'
name: "recurrent"
layer { name: "in" type: "Input" top: "x" top: "cont" top: "xs" top: "h0" top: "c0"
  input_param { shape { dim: 4 dim: 2 dim: 3 } shape { dim: 4 dim: 2 } shape { dim: 2 dim: 5 }
                shape { dim: 1 dim: 2 dim: 6 } shape { dim: 1 dim: 2 dim: 6 } } }
layer { name: "lstm" type: "LSTM" bottom: "x" bottom: "cont" bottom: "xs" bottom: "h0" bottom: "c0"
  top: "h" top: "hT" top: "cT" recurrent_param { num_output: 6 expose_hidden: true debug_info: false
  weight_filler { type: "uniform" min: -0.1 max: 0.1 } bias_filler { type: "constant" value: 0.5 } } }
layer { name: "gru" type: "GRU" bottom: "h" bottom: "cont" top: "g" recurrent_param { num_output: 4 } }
layer { name: "rnn" type: "RNN" bottom: "g" bottom: "cont" top: "r" recurrent_param { num_output: 3 } }
layer { name: "gates" type: "InnerProduct" bottom: "hT" top: "gates" inner_product_param { num_output: 24 axis: 2 } }
layer { name: "cont1" type: "Slice" bottom: "cont" top: "cont1" top: "rest" slice_param { axis: 0 slice_point: 1 } }
layer { name: "unit" type: "LSTMUnit" bottom: "cT" bottom: "gates" bottom: "cont1" top: "c1" top: "h1" }
layer { name: "silence" type: "Silence" bottom: "r" bottom: "rest" bottom: "c1" bottom: "h1" }
NET
cat > "$out/prototxt_net/data_layers.prototxt" <<'NET'
name: "data_layers"
state { phase: TRAIN stage: "a" }
layer { name: "data" type: "Data" top: "data" top: "label" include { phase: TRAIN }
  transform_param { scale: 0.00390625 mirror: true crop_size: 3 }
  data_param { source: "images-idx3-ubyte" batch_size: 2 backend: LMDB } }
layer { name: "h5" type: "HDF5Data" top: "data" top: "label" include { phase: TEST }
  hdf5_data_param { source: "h5list.txt" batch_size: 2 shuffle: true } }
layer { name: "embed" type: "Embed" bottom: "label" top: "embed" embed_param { num_output: 3 input_dim: 10 } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" param { name: "shared" lr_mult: 2 }
  inner_product_param { num_output: 3 axis: 1 } }
layer { name: "euclid" type: "EuclideanLoss" bottom: "ip" bottom: "embed" top: "euclid" loss_weight: 0.5 }
layer { name: "sig" type: "SigmoidCrossEntropyLoss" bottom: "ip" bottom: "embed" top: "sig"
  exclude { stage: "b" } propagate_down: true propagate_down: false }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss"
  loss_param { ignore_label: 1 normalization: VALID } }
layer { name: "acc" type: "Accuracy" bottom: "ip" bottom: "label" top: "acc" accuracy_param { top_k: 2 } }
NET
cat > "$out/prototxt_solver/inline_adam_multistep.prototxt" <<'SOLVER'
net_param {
  name: "inline"
  layer { name: "in" type: "Input" top: "x" top: "y" input_param { shape { dim: 4 dim: 6 } shape { dim: 4 } } }
  layer { name: "ip" type: "InnerProduct" bottom: "x" top: "ip" inner_product_param { num_output: 3 } }
  layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "y" top: "loss" }
}
test_iter: 2 test_interval: 10
type: "Adam" base_lr: 0.001 momentum: 0.9 momentum2: 0.999 delta: 1e-8
lr_policy: "multistep" gamma: 0.5 stepvalue: 10 stepvalue: 20
max_iter: 30 clip_gradients: 5 iter_size: 2 regularization_type: "L1" weight_decay: 0.001
SOLVER
# Old formats, upgraded on load: V1 LeNet (enum types, blobs_lr, data_param scale), a V0
# net with a padding layer, and a solver with the solver_type enum and an inline V1 net.
sed -e 's#source: ".*"#source: "images-idx3-ubyte"#' -e 's/type: "Data"/type: DATA/' \
    -e 's/type: "Convolution"/type: CONVOLUTION/' -e 's/type: "Pooling"/type: POOLING/' \
    -e 's/type: "InnerProduct"/type: INNER_PRODUCT/' -e 's/type: "ReLU"/type: RELU/' \
    -e 's/type: "Accuracy"/type: ACCURACY/' -e 's/type: "SoftmaxWithLoss"/type: SOFTMAX_LOSS/' \
    -e 's/^layer {/layers {/' -e 's/param { lr_mult: \([0-9]*\) }/blobs_lr: \1/' \
    -e '/transform_param/d' -e 's/^\(    batch_size: .*\)/\1\n    scale: 0.00390625/' \
    "$root/examples/fashion_mnist/lenet_train_test.prototxt" > "$out/prototxt_net/lenet_v1.prototxt"
cat > "$out/prototxt_net/v0_padding.prototxt" <<'NET'
name: "v0"
input: "data"
input_dim: 1 input_dim: 3 input_dim: 8 input_dim: 8
layers { layer { name: "pad1" type: "padding" pad: 2 } bottom: "data" top: "pad1" }
layers { layer { name: "conv1" type: "conv" num_output: 4 kernelsize: 3 stride: 1 biasterm: false
                 weight_filler { type: "gaussian" std: 0.01 } blobs_lr: 1 weight_decay: 1 }
         bottom: "pad1" top: "conv1" }
layers { layer { name: "relu1" type: "relu" } bottom: "conv1" top: "conv1" }
layers { layer { name: "pool1" type: "pool" pool: AVE kernelsize: 2 stride: 2 } bottom: "conv1" top: "pool1" }
layers { layer { name: "norm1" type: "lrn" local_size: 3 alpha: 0.0001 beta: 0.75 k: 2 } bottom: "pool1" top: "norm1" }
layers { layer { name: "fc" type: "innerproduct" num_output: 10 bias_filler { value: 0.1 } } bottom: "norm1" top: "fc" }
layers { layer { name: "drop" type: "dropout" dropout_ratio: 0.3 } bottom: "fc" top: "fc" }
layers { layer { name: "prob" type: "softmax" } bottom: "fc" top: "prob" }
NET
cat > "$out/prototxt_solver/v1_solver_type.prototxt" <<'SOLVER'
net_param {
  name: "inline_v1"
  input: "x" input_dim: 4 input_dim: 6 input_dim: 1 input_dim: 1
  input: "y" input_dim: 4 input_dim: 1 input_dim: 1 input_dim: 1
  layers { name: "ip" type: INNER_PRODUCT bottom: "x" top: "ip" blobs_lr: 1 blobs_lr: 2 weight_decay: 1
           weight_decay: 0 inner_product_param { num_output: 3 } }
  layers { name: "loss" type: SOFTMAX_LOSS bottom: "ip" bottom: "y" top: "loss" }
}
solver_type: NESTEROV base_lr: 0.01 momentum: 0.9 lr_policy: "step" gamma: 0.1 stepsize: 10 max_iter: 20
SOLVER
cat > "$out/prototxt_solver/policies.prototxt" <<'SOLVER'
train_net_param {
  layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 2 } } }
}
type: "RMSProp" rms_decay: 0.98 base_lr: 0.1 lr_policy: "poly" power: 2 max_iter: 100 display: 10 average_loss: 5
SOLVER

python3 - "$out" <<'PY'
# The ONNX seeds: small models made with onnx.helper (Debian's python3-onnx), each a path
# through the importer's translators that the fuzzer mutates from.
import sys
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
rng = np.random.default_rng(0)

def init(name, *shape, dtype=np.float32):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(dtype) * 0.1, name)

def const(name, values, dtype=np.int64):
    return numpy_helper.from_array(np.array(values, dtype=dtype), name)

def save(name, nodes, inputs, outputs, inits, opset):
    g = helper.make_graph(nodes, name, inputs, outputs, inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name="make_corpus")
    onnx.checker.check_model(m)
    onnx.save(m, f"{out}/onnx/{name}.onnx")

def value(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape if shape else None)

N = helper.make_node
save("conv_bn_pool_gemm", [
    N("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    N("BatchNormalization", ["c", "s", "bb", "m", "v"], ["n"], epsilon=1e-5),
    N("Relu", ["n"], ["r"]),
    N("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1),
    N("Flatten", ["p"], ["f"], axis=1),
    N("Gemm", ["f", "fw", "fb"], ["g"], transB=1, alpha=0.5),
    N("Softmax", ["g"], ["y"], axis=1)],
    [value("x", ["batch", 1, 5, 5])], [value("y", ["batch", 3])],
    [init("w", 2, 1, 3, 3), init("b", 2), init("s", 2), init("bb", 2), init("m", 2),
     numpy_helper.from_array(np.ones(2, np.float32), "v"), init("fw", 3, 18), init("fb", 3)], 13)
save("shape_chain_matmul", [
    N("Shape", ["x"], ["sh"]),
    N("Gather", ["sh", "zero"], ["n"], axis=0),
    N("Unsqueeze", ["n", "axes"], ["n1"]),
    N("Concat", ["n1", "minus1"], ["shape"], axis=0),
    N("Reshape", ["x", "shape"], ["flat"]),
    N("MatMul", ["flat", "w"], ["mm"]),
    N("Add", ["mm", "b"], ["y"])],
    [value("x", [2, 2, 2, 2])], [value("y", [2, 4])],
    [const("zero", 0), const("axes", [0]), const("minus1", [-1]), init("w", 8, 4), init("b", 4)], 13)
save("elementwise_resize_reduce", [
    N("Pad", ["x", "pads"], ["xp"], mode="constant"),
    N("AveragePool", ["xp"], ["a"], kernel_shape=[3, 3], strides=[1, 1]),
    N("Add", ["a", "cb"], ["a1"]),
    N("Mul", ["a1", "two"], ["a2"]),
    N("Clip", ["a2", "lo", "hi"], ["a3"]),
    N("Sigmoid", ["a3"], ["s"]),
    N("Tanh", ["a3"], ["t"]),
    N("LeakyRelu", ["a3"], ["l"], alpha=0.2),
    N("Concat", ["s", "t", "l"], ["cat"], axis=1),
    N("Resize", ["cat", "", "scales"], ["up"], mode="nearest", coordinate_transformation_mode="asymmetric",
      nearest_mode="floor"),
    N("Transpose", ["up"], ["tr"], perm=[0, 1, 3, 2]),
    N("GlobalAveragePool", ["tr"], ["gap"]),
    N("ReduceMean", ["up"], ["rm"], axes=[2, 3], keepdims=0),
    N("Squeeze", ["gap", "sq"], ["g2"]),
    N("Sub", ["g2", "rm"], ["d"]),
    N("Div", ["d", "two"], ["y"])],
    [value("x", [1, 2, 4, 4])], [value("y", [1, 6])],
    [const("pads", [0, 0, 1, 1, 0, 0, 1, 1]), init("cb", 1, 2, 1, 1), const("two", 2.0, np.float32),
     const("lo", 0.0, np.float32), const("hi", 6.0, np.float32), const("scales", [1, 1, 2, 2], np.float32),
     const("sq", [2, 3])], 13)
save("depthwise_dilated", [
    N("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3], pads=[2, 2, 2, 2], dilations=[2, 2], group=4),
    N("Clip", ["c", "lo"], ["r"]),
    N("Conv", ["r", "pw"], ["y"], kernel_shape=[1, 1], strides=[2, 2])],
    [value("x", [1, 4, 6, 6])], [value("y", [1, 3, 3, 3])], [init("w", 4, 1, 3, 3), init("pw", 3, 4, 1, 1), const("lo", 0.0, np.float32)], 11)
PY

# The bundle: an InnerProduct 3 -> 2 deployed with the safetensors seed's weights.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/ip.prototxt" <<'NET'
name: "ip"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param { num_output: 2 } }
layer { name: "relu" type: "ReLU" bottom: "ip" top: "ip" }
layer { name: "prob" type: "Softmax" bottom: "ip" top: "prob" }
NET
"$bakusoku" deploy --model "$tmp/ip.prototxt" --weights "$out/safetensors/ip.safetensors" -o "$out/bundle/ip.bks" \
  > "$tmp/deploy.log" 2>&1 || { cat "$tmp/deploy.log"; exit 1; }
python3 - "$out/bundle/ip.bks" "$out/graph_json/ip.json" <<'PY'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
open(sys.argv[2], "w").write(json.loads(data[8:8 + n])["__metadata__"]["graph"])
PY
# Coded weights (deploy --compress), in FP32 and in INT8 (weights on the int8 grid): the
# same net with a zero weight (streams this short are stored raw), and a 100 -> 10 one with
# 90% zeros (range-coded masks and planes). The bundle's packed part is a packed_parts
# seed; each coded weight in it is a weight_coding seed, after the byte that picks its shape
# in fuzz_weight_coding.cc. ip_coded_*_v3.bks and weight_coding/*_v1.bin were written by an
# earlier bakusoku (bundle format 3, coded tensors BKW1): kept to fuzz the readers of those
# formats, and not regenerated.
sed -e 's/dim: 3/dim: 100/' -e 's/num_output: 2/num_output: 10/' "$tmp/ip.prototxt" > "$tmp/ip_sparse.prototxt"
python3 - "$tmp" <<'PY'
import json, struct, sys

def save(path, tensors):
    header, raw = {}, b""
    for name, shape, values in tensors:
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [len(raw), len(raw) + 4 * len(values)]}
        raw += struct.pack(f"<{len(values)}f", *values)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + raw)

save(f"{sys.argv[1]}/ip_zeros.safetensors", [("ip.0", [2, 3], [0.5, 0, -0.25, 0, 0, 0.75]), ("ip.1", [2], [0.5, -0.5])])
state, sparse = 12345, []
for i in range(1000):  # one weight in ten, from a fixed linear congruential sequence
    state = (state * 1103515245 + 12345) % 2**31
    sparse.append((state / 2**31 - 0.5) if state % 10 == 0 else 0.0)
save(f"{sys.argv[1]}/ip_sparse.safetensors", [("ip.0", [10, 100], sparse), ("ip.1", [10], [0.1 * k for k in range(10)])])
PY
for net in ip ip_sparse; do
  for precision in fp32 int8; do
    flags=""
    [ $precision = int8 ] && flags="--precision int8 --calib random --int8-layers all"
    weights=$tmp/ip_zeros.safetensors
    [ $net = ip_sparse ] && weights=$tmp/ip_sparse.safetensors
    "$bakusoku" deploy --model "$tmp/$net.prototxt" --weights "$weights" $flags --compress \
      -o "$out/bundle/${net}_coded_$precision.bks" > "$tmp/deploy.log" 2>&1 || { cat "$tmp/deploy.log"; exit 1; }
  done
done
python3 - "$out" <<'PY'
import json, struct, sys, zlib
out = sys.argv[1]

def varint(b, at):
    v, shift = 0, 0
    while True:
        v |= (b[at] & 0x7f) << shift
        shift += 7
        at += 1
        if not b[at - 1] & 0x80:
            return v, at

# The harness's shape for each weight seed: its selector byte (fuzz_weight_coding.cc).
selectors = {("ip", "ip.0"): 0, ("ip", "ip.1"): 1, ("ip_sparse", "ip.0"): 3}
for net, precision in [(n, p) for n in ("ip", "ip_sparse") for p in ("fp32", "int8")]:
    data = open(f"{out}/bundle/{net}_coded_{precision}.bks", "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    a, b = json.loads(data[8:8 + n])["bakusoku_packed"]["data_offsets"]
    packed = data[8 + n + a:8 + n + b]
    open(f"{out}/packed_parts/{net}_coded_{precision}.bin", "wb").write(packed)
    # The index (formats/packed_parts.cc): its stream, checksum, then the blobs in its order.
    method, at = packed[4], 5
    raw_len, at = varint(packed, at)
    coded_len, at = varint(packed, at)
    index = packed[at:at + coded_len]
    index = zlib.decompress(index) if method == 1 else index
    at += coded_len + 4
    count, j = varint(index, 0)
    for _ in range(count):  # the metadata strings
        for _ in range(2):
            length, j = varint(index, j)
            j += length
    blobs, j = varint(index, j)
    for _ in range(blobs):
        length, j = varint(index, j)
        name = index[j:j + length].decode()
        j += length
        rank, j = varint(index, j)
        for _ in range(rank):
            _, j = varint(index, j)
        length, j = varint(index, j)
        if (net, name) in selectors:
            with open(f"{out}/weight_coding/{name.replace('ip', net, 1)}_{precision}.bin", "wb") as f:
                f.write(bytes([selectors[(net, name)]]) + packed[at:at + length])
        at += length
PY
# The JPEG and HDF5 seeds through the libraries bakusoku already depends on (stb, libhdf5).
cat > "$tmp/seeds.c" <<'C'
#include <hdf5.h>
#include <hdf5_hl.h>
#include <stb_image_write.h>
int main(int argc, char** argv) {
  unsigned char px[4 * 6 * 3];
  for (int i = 0; i < 4 * 6 * 3; ++i) px[i] = (unsigned char)(i * 11);
  if (!stbi_write_jpg(argv[1], 6, 4, 3, px, 50)) return 1;
  float data[2 * 16], label[2] = {0, 1};
  for (int i = 0; i < 32; ++i) data[i] = (float)i / 32;
  hid_t f = H5Fcreate(argv[2], H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t ddims[4] = {2, 1, 4, 4}, ldims[1] = {2};
  H5LTmake_dataset_float(f, "data", 4, ddims, data);
  H5LTmake_dataset_float(f, "label", 1, ldims, label);
  return H5Fclose(f) < 0;
}
C
cc -o "$tmp/seeds" "$tmp/seeds.c" $(pkg-config --cflags --libs stb hdf5) -lhdf5_hl
"$tmp/seeds" "$out/image/tiny.jpg" "$out/hdf5/data.h5"
# An LMDB data.mdb file (odd first byte) from bakusoku's own convert_imageset.
mkdir -p "$tmp/img"
cp "$out/image/gray_4x3.png" "$tmp/img/a.png"
printf 'a.png 1\n' > "$tmp/img/list.txt"
"$bakusoku" convert_imageset --gray "$tmp/img/" "$tmp/img/list.txt" "$tmp/img/db" > "$tmp/convert.log" 2>&1 ||
  { cat "$tmp/convert.log"; exit 1; }
{ printf '\x01'; cat "$tmp/img/db/data.mdb"; } > "$out/datum_db/lmdb_file"
# --- text (data/text_corpus.cc): byte 0 splits vocabulary file | text file (0: no vocabulary) ---
printf '\000the quick brown fox\n' > "$out/text/ascii.txt"
printf '\100ab\303\251\nxyz\303\251\342\202\254 ab\n' > "$out/text/vocab_then_text.txt"
printf '\000caf\303\251 \360\237\230\200 \357\273\277x' > "$out/text/multibyte.txt"
printf '\000ok\n\300\200' > "$out/text/overlong.txt"

echo "make_corpus: seeds written under $out"
