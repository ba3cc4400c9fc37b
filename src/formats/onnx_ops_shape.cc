// Nodes that move data without computing: Reshape, Flatten, Concat, Transpose, Slice as
// Caffe layers (Slice as bakusoku's StridedSlice); Shape, Gather, Unsqueeze, Squeeze, Cast,
// Constant, Slice folded when their inputs are known (torch's `x.view(x.size(0), -1)`);
// Identity, Dropout and zero Pads dropped.
#include <onnx/onnx_pb.h>  // defines ONNX_API, then includes onnx-ml.pb.h

#include <algorithm>
#include <array>

#include "formats/onnx_ops.h"

namespace bks::onnx_import {
namespace {

Shape as_shape(const NodeCtx& c, const Const& k) { return Shape(k.ints(c.where())); }

// Folded values are shapes and small tables, never near 2^24 values; a crafted node that
// repeats its inputs (Gather's indices, Concat's inputs) could otherwise ask for terabytes.
void check_folded(const NodeCtx& c, const Shape& out) {
  check_shape(out, 8, c.where());
  if (shape_numel(out) > (int64_t{1} << 24))
    input_error("{}: folding it would make [{}] ({} values); constants computed at import are limited to 2^24",
                c.where(), fmt::join(out, ","), shape_numel(out));
}

void constant(NodeCtx& c) {
  if (const auto* a = c.attr("value")) {
    if (a->type() != onnx::AttributeProto::TENSOR) input_error("{}: 'value' must be a tensor", c.where());
    return c.set_const(0, read_tensor(a->t(), c.where(), ""));
  }
  if (const auto* a = c.attr("value_float")) {
    Const k = float_const({});
    k.f.f32()[0] = a->f();
    return c.set_const(0, std::move(k));
  }
  if (const auto* a = c.attr("value_floats")) {
    Const k = float_const({static_cast<int64_t>(a->floats_size())});
    for (int j = 0; j < a->floats_size(); ++j) k.f.f32()[j] = a->floats(j);
    return c.set_const(0, std::move(k));
  }
  if (const auto* a = c.attr("value_int")) return c.set_const(0, int_const({}, {a->i()}));
  if (const auto* a = c.attr("value_ints"))
    return c.set_const(0, int_const({static_cast<int64_t>(a->ints_size())}, {a->ints().begin(), a->ints().end()}));
  input_error("{}: only value, value_float(s) and value_int(s) constants are supported", c.where());
}

void shape_op(NodeCtx& c) {
  const Shape& s = c.in(0).shape;
  const auto r = static_cast<int64_t>(s.size());
  auto clampi = [&](int64_t v) { return std::clamp(v < 0 ? v + r : v, int64_t{0}, r); };
  const int64_t b = clampi(c.attr_int("start", 0)), e = clampi(c.attr_int("end", r));
  std::vector<int64_t> v(s.begin() + b, s.begin() + std::max(b, e));
  c.set_const(0, int_const({static_cast<int64_t>(v.size())}, v));
}

void gather(NodeCtx& c) {
  const Const& d = c.const_in(0);
  const Const& idx = c.const_in(1);
  if (!idx.integer) input_error("{}: indices must be integers", c.where());
  if (d.shape.empty()) input_error("{}: data must have a rank of 1 or more", c.where());
  const int axis = norm_axis(c, c.attr_int("axis", 0), d.shape.size());
  const int64_t n = d.shape[axis], outer = shape_count(d.shape, 0, axis),
                inner = shape_count(d.shape, axis + 1, static_cast<int>(d.shape.size()));
  Shape out(d.shape.begin(), d.shape.begin() + axis);
  out.insert(out.end(), idx.shape.begin(), idx.shape.end());
  out.insert(out.end(), d.shape.begin() + axis + 1, d.shape.end());
  check_folded(c, out);  // repeated indices could ask for far more than the data
  Const r = d.integer ? int_const(out, std::vector<int64_t>(shape_numel(out))) : float_const(out);
  int64_t o = 0;
  for (int64_t a = 0; a < outer; ++a)
    for (int64_t j = 0; j < idx.numel(); ++j) {
      int64_t i = idx.i[j] < 0 ? idx.i[j] + n : idx.i[j];
      if (i < 0 || i >= n) input_error("{}: index {} is outside an axis of {}", c.where(), idx.i[j], n);
      for (int64_t b = 0; b < inner; ++b, ++o) {
        const int64_t src = (a * n + i) * inner + b;
        if (d.integer) r.i[o] = d.i[src];
        else r.f.f32()[o] = d.f.f32()[src];
      }
    }
  c.set_const(0, std::move(r));
}

// The output of a node that only changes the shape: a folded constant, or a Reshape layer
// (its first dimension written as 0, "copy the input's", so a batch change carries over).
void reshape_to(NodeCtx& c, const Val& x, const Shape& out) {
  if (shape_numel(out) != shape_numel(x.shape))
    input_error("{}: [{}] cannot become [{}]", c.where(), fmt::join(x.shape, ","), fmt::join(out, ","));
  if (x.constant) return c.set_const(0, reshaped(*x.constant, out));
  auto& l = c.add_layer("Reshape", {x.blob}, c.out_name(0));
  auto* s = l.mutable_reshape_param()->mutable_shape();
  for (size_t a = 0; a < out.size(); ++a)
    s->add_dim(a == 0 && !x.shape.empty() && out[0] == x.shape[0] ? 0 : out[a]);
  c.set_output(0, out);
}

void reshape(NodeCtx& c) {
  const Val& x = c.in(0);
  const Const& k = c.const_in(1);
  if (!k.integer || k.shape.size() != 1) input_error("{}: the shape must be a 1-d integer tensor", c.where());
  const bool allowzero = c.attr_int("allowzero", 0) != 0;
  Shape out = as_shape(c, k);
  int infer = -1;
  int64_t known = 1;
  for (size_t a = 0; a < out.size(); ++a) {
    if (out[a] == 0 && !allowzero) {
      if (a >= x.shape.size()) input_error("{}: shape entry {} copies an axis the input lacks", c.where(), a);
      out[a] = x.shape[a];
    }
    if (out[a] == -1) {
      if (infer >= 0) input_error("{}: the shape [{}] has two -1 entries", c.where(), fmt::join(k.ints(c.where()), ","));
      infer = static_cast<int>(a);
    } else if (out[a] < 0) {
      input_error("{}: the shape [{}] has a negative entry", c.where(), fmt::join(k.ints(c.where()), ","));
    } else {
      // A crafted shape must not overflow the product (nothing real is near 2^40 elements).
      if (out[a] > (int64_t{1} << 40) || (out[a] > 0 && known > (int64_t{1} << 40) / out[a]))
        input_error("{}: the shape [{}] is too large", c.where(), fmt::join(k.ints(c.where()), ","));
      known *= out[a];
    }
  }
  if (infer >= 0) {
    if (known == 0 || shape_numel(x.shape) % known != 0)
      input_error("{}: [{}] cannot become [{}]", c.where(), fmt::join(x.shape, ","), fmt::join(k.ints(c.where()), ","));
    out[infer] = shape_numel(x.shape) / known;
  }
  reshape_to(c, x, out);
}

void flatten(NodeCtx& c) {
  const Val& x = c.in(0);
  const auto r = static_cast<int64_t>(x.shape.size());
  int64_t axis = c.attr_int("axis", 1);
  if (axis < -r || axis > r) input_error("{}: axis {} is outside a rank-{} tensor", c.where(), axis, r);
  if (axis < 0) axis += r;
  const int ax = static_cast<int>(axis);
  Shape out{shape_count(x.shape, 0, ax), shape_count(x.shape, ax, static_cast<int>(r))};
  if (ax != 1 || x.constant) return reshape_to(c, x, out);
  auto& l = c.add_layer("Flatten", {x.blob}, c.out_name(0));
  l.mutable_flatten_param()->set_axis(1);
  c.set_output(0, out);
}

std::vector<int64_t> axes_of(NodeCtx& c) {
  // Opset 13 moved `axes` from an attribute to the second input.
  if (c.opset() >= 13) return c.has_input(1) ? c.const_in(1).ints(c.where()) : std::vector<int64_t>{};
  return c.attr_ints("axes", {});
}

void unsqueeze(NodeCtx& c) {
  const Val& x = c.in(0);
  auto axes = axes_of(c);
  const size_t rank = x.shape.size() + axes.size();
  std::vector<bool> inserted(rank, false);
  for (int64_t a : axes) {
    const int ax = norm_axis(c, a, rank);
    if (inserted[ax]) input_error("{}: axis {} is given twice", c.where(), a);
    inserted[ax] = true;
  }
  Shape out;
  size_t k = 0;
  for (size_t a = 0; a < rank; ++a) out.push_back(inserted[a] ? 1 : x.shape[k++]);
  reshape_to(c, x, out);
}

void squeeze(NodeCtx& c) {
  const Val& x = c.in(0);
  auto axes = axes_of(c);
  std::vector<bool> drop(x.shape.size(), axes.empty());
  if (axes.empty())
    for (size_t a = 0; a < x.shape.size(); ++a) drop[a] = x.shape[a] == 1;
  for (int64_t a : axes) {
    const int ax = norm_axis(c, a, x.shape.size());
    if (x.shape[ax] != 1) input_error("{}: axis {} has size {}, not 1", c.where(), a, x.shape[ax]);
    drop[ax] = true;
  }
  Shape out;
  for (size_t a = 0; a < x.shape.size(); ++a)
    if (!drop[a]) out.push_back(x.shape[a]);
  reshape_to(c, x, out);
}

void concat(NodeCtx& c) {
  const Val& first = c.in(0);
  const int axis = norm_axis(c, c.attr_int("axis", 0), first.shape.size());
  Shape out = first.shape;
  out[axis] = 0;
  int consts = 0;
  for (int i = 0; i < c.num_inputs(); ++i) {
    const Val& v = c.in(i);
    consts += v.constant ? 1 : 0;
    bool fits = v.shape.size() == out.size();
    for (size_t a = 0; fits && a < out.size(); ++a) fits = static_cast<int>(a) == axis || v.shape[a] == out[a];
    if (!fits)
      input_error("{}: input {} of shape [{}] does not concatenate with [{}] on axis {}", c.where(), i,
                  fmt::join(v.shape, ","), fmt::join(first.shape, ","), axis);
    out[axis] += v.shape[axis];
    if (out[axis] > (int64_t{1} << 40)) input_error("{}: the concatenated axis is too long", c.where());
  }
  if (consts == c.num_inputs()) {
    check_folded(c, out);
    bool integer = true;
    for (int i = 0; i < c.num_inputs(); ++i) integer = integer && c.in(i).constant->integer;
    Const r = integer ? int_const(out, std::vector<int64_t>(shape_numel(out))) : float_const(out);
    const int64_t outer = shape_count(out, 0, axis);
    int64_t o = 0;
    for (int64_t a = 0; a < outer; ++a)
      for (int i = 0; i < c.num_inputs(); ++i) {
        const Const& k = *c.in(i).constant;
        const int64_t chunk = shape_count(k.shape, axis, static_cast<int>(k.shape.size()));
        for (int64_t j = 0; j < chunk; ++j, ++o) {
          if (integer) r.i[o] = k.i[a * chunk + j];
          else r.f.f32()[o] = static_cast<float>(k.at(a * chunk + j));
        }
      }
    return c.set_const(0, std::move(r));
  }
  if (consts > 0) input_error("{}: concatenating constants with computed tensors is not supported", c.where());
  std::vector<std::string> bottoms;
  for (int i = 0; i < c.num_inputs(); ++i) bottoms.push_back(c.in(i).blob);
  auto& l = c.add_layer("Concat", bottoms, c.out_name(0));
  l.mutable_concat_param()->set_axis(axis);
  c.set_output(0, out);
}

void cast(NodeCtx& c) {
  const Val& x = c.in(0);
  const int64_t to = c.attr_int("to", 0);
  const bool to_int = to == onnx::TensorProto::INT64 || to == onnx::TensorProto::INT32;
  if (!to_int && to != onnx::TensorProto::FLOAT)
    input_error("{}: a cast to type {} is not supported (FLOAT, INT32, INT64 are)", c.where(), to);
  if (!x.constant) {
    if (to_int) input_error("{}: casting a computed tensor to integers is not supported", c.where());
    return c.alias(0, x);
  }
  const Const& k = *x.constant;
  if (k.integer == to_int) return c.alias(0, x);
  Const r = to_int ? int_const(k.shape, k.ints(c.where())) : float_const(k.shape);
  if (!to_int)
    for (int64_t j = 0; j < k.numel(); ++j) r.f.f32()[j] = static_cast<float>(k.i[j]);
  c.set_const(0, std::move(r));
}

// Zero pads change nothing (torch's AvgPool export emits them); symmetric zero padding of
// H and W is left pending for the Conv or AveragePool that reads it (Val::pad_h).
void pad(NodeCtx& c) {
  const Val& x = c.in(0);
  if (c.attr_string("mode", "constant") != "constant")
    input_error("{}: mode '{}' is not supported", c.where(), c.attr_string("mode", ""));
  const auto pads = c.const_in(1).ints(c.where());
  if (c.has_input(2) && c.const_in(2).numel() == 1 && c.const_in(2).at(0) != 0)
    input_error("{}: a constant_value other than 0 is not supported", c.where());
  if (pads.size() != 2 * x.shape.size())
    input_error("{}: {} pads for a rank-{} input", c.where(), pads.size(), x.shape.size());
  bool zero = true;
  for (int64_t p : pads) zero = zero && p == 0;
  if (zero) return c.alias(0, x);
  const size_t r = x.shape.size();
  if (r != 4 || pads[0] || pads[1] || pads[4] || pads[5] || pads[2] != pads[6] || pads[3] != pads[7] ||
      pads[2] < 0 || pads[3] < 0)
    input_error("{}: pads [{}] are not supported (only equal, non-negative pads of H and W are)", c.where(),
                fmt::join(pads, ","));
  Val v = x;
  v.pad_h = pads[2];
  v.pad_w = pads[3];
  v.shape[2] += 2 * v.pad_h;
  v.shape[3] += 2 * v.pad_w;
  c.alias(0, v);
}

// Slice (opset 10 on: starts, ends, axes, steps are inputs, all constant): folded on a
// constant, StridedSlice on a computed tensor. Both read them as ONNX does: negative
// starts/ends count from the axis' end, then both are clamped to it.
void slice(NodeCtx& c) {
  const Val& x = c.in(0);
  const auto starts = c.const_in(1).ints(c.where()), ends = c.const_in(2).ints(c.where());
  std::vector<int64_t> axes, steps;
  if (c.has_input(3)) {
    axes = c.const_in(3).ints(c.where());
  } else {
    for (size_t a = 0; a < starts.size(); ++a) axes.push_back(static_cast<int64_t>(a));
  }
  steps = c.has_input(4) ? c.const_in(4).ints(c.where()) : std::vector<int64_t>(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    input_error("{}: {} starts, {} ends, {} axes and {} steps; one of each per sliced axis expected", c.where(),
                starts.size(), ends.size(), axes.size(), steps.size());
  const size_t r = x.shape.size();
  // Per axis: first element, step, count.
  std::vector<std::array<int64_t, 3>> ax(r);
  for (size_t a = 0; a < r; ++a) ax[a] = {0, 1, x.shape[a]};
  std::vector<bool> seen(r, false);
  for (size_t j = 0; j < axes.size(); ++j) {
    const int a = norm_axis(c, axes[j], r);
    if (seen[a]) input_error("{}: axis {} is sliced twice", c.where(), axes[j]);
    seen[a] = true;
    axes[j] = a;
    const int64_t d = x.shape[a], st = steps[j];
    if (st == 0) input_error("{}: a step of 0", c.where());
    auto clamp = [&](int64_t v, int64_t lo, int64_t hi) { return std::clamp(v < 0 ? v + d : v, lo, hi); };
    const int64_t b = st > 0 ? clamp(starts[j], 0, d) : clamp(starts[j], 0, d - 1);
    const int64_t e = st > 0 ? clamp(ends[j], 0, d) : clamp(ends[j], -1, d - 1);
    const int64_t n = st > 0 ? (e - b + st - 1) / st : (b - e - st - 1) / -st;
    if (n <= 0)
      input_error("{}: the slice [{}:{}:{}] of axis {} (size {}) is empty", c.where(), starts[j], ends[j], st, a, d);
    ax[a] = {b, st, n};
  }
  Shape out;
  for (const auto& s : ax) out.push_back(s[2]);
  if (x.constant) {
    const Const& k = *x.constant;
    Const y = k.integer ? int_const(out, std::vector<int64_t>(shape_numel(out))) : float_const(out);
    std::vector<int64_t> pos(r, 0);
    for (int64_t o = 0; o < shape_numel(out); ++o) {
      int64_t src = 0;
      for (size_t a = 0; a < r; ++a) src = src * x.shape[a] + ax[a][0] + pos[a] * ax[a][1];
      if (k.integer) y.i[o] = k.i[src];
      else y.f.f32()[o] = k.f.f32()[src];
      for (size_t a = r; a-- > 0;) {  // an odometer over the output's axes
        if (++pos[a] < out[a]) break;
        pos[a] = 0;
      }
    }
    return c.set_const(0, std::move(y));
  }
  auto& l = c.add_layer("StridedSlice", {x.blob}, c.out_name(0));
  auto* p = l.mutable_strided_slice_param();
  for (size_t j = 0; j < axes.size(); ++j) {
    p->add_axis(static_cast<int32_t>(axes[j]));
    p->add_start(starts[j]);
    p->add_end(ends[j]);
    p->add_step(steps[j]);
  }
  c.set_output(0, out);
}

void transpose(NodeCtx& c) {
  const Val& x = c.in(0);
  if (x.constant) input_error("{}: transposing a constant is not supported", c.where());
  const size_t r = x.shape.size();
  std::vector<int64_t> def(r);
  for (size_t a = 0; a < r; ++a) def[a] = static_cast<int64_t>(r - 1 - a);
  auto perm = c.attr_ints("perm", def);
  std::vector<bool> seen(r, false);
  if (perm.size() != r) input_error("{}: perm has {} entries for a rank-{} input", c.where(), perm.size(), r);
  Shape out;
  auto& l = c.add_layer("Permute", {x.blob}, c.out_name(0));
  for (int64_t p : perm) {
    const int a = norm_axis(c, p, r);
    if (seen[a]) input_error("{}: perm [{}] repeats an axis", c.where(), fmt::join(perm, ","));
    seen[a] = true;
    out.push_back(x.shape[a]);
    l.mutable_permute_param()->add_order(static_cast<uint32_t>(a));
  }
  c.set_output(0, out);
}

}  // namespace

BKS_ONNX_OP("Constant", constant);
BKS_ONNX_OP("Shape", shape_op);
BKS_ONNX_OP("Gather", gather);
BKS_ONNX_OP("Reshape", reshape);
BKS_ONNX_OP("Flatten", flatten);
BKS_ONNX_OP("Unsqueeze", unsqueeze);
BKS_ONNX_OP("Squeeze", squeeze);
BKS_ONNX_OP("Concat", concat);
BKS_ONNX_OP("Cast", cast);
BKS_ONNX_OP("Pad", pad);
BKS_ONNX_OP("Transpose", transpose);
BKS_ONNX_OP("Slice", slice);
BKS_ONNX_OP("Identity", [](NodeCtx& c) { c.alias(0, c.in(0)); });
// Inference drops Dropout; its mask output is not supported.
BKS_ONNX_OP("Dropout", [](NodeCtx& c) {
  if (c.has_output(1)) input_error("{}: the mask output is not supported", c.where());
  c.alias(0, c.in(0));
});

}  // namespace bks::onnx_import
