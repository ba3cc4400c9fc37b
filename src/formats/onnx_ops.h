// The ONNX importer's inside: values known at import time, and the translators (one per
// ONNX operator, registered with BKS_ONNX_OP) that turn a node into Caffe layers.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "formats/caffe_net.h"
#include "formats/unique_names.h"

namespace onnx {
class NodeProto;
class TensorProto;
class AttributeProto;
}  // namespace onnx

namespace bks::onnx_import {

// A tensor known at import time: an initializer, a Constant, or what folds from them
// (torch's Shape -> Gather -> Unsqueeze -> Concat chains). Floats live in a Tensor so a
// weight reaches the blob store without a copy.
struct Const {
  Shape shape;
  bool integer = false;
  Tensor f;                // !integer
  std::vector<int64_t> i;  // integer
  int64_t numel() const { return shape_numel(shape); }
  double at(int64_t k) const { return integer ? static_cast<double>(i[k]) : f.f32()[k]; }
  // The values as integers; InputError prefixed by `where` for a float that is not finite
  // or outside int64's range (the model's own fault: it cannot be a size, axis or index).
  std::vector<int64_t> ints(const std::string& where) const;
};
Const int_const(Shape shape, std::vector<int64_t> v);
Const float_const(Shape shape);  // zero-filled
// Same elements, another shape (numel checked by the caller).
Const reshaped(const Const& c, Shape shape);

// A TensorProto's values, checked against its dims before anything is allocated. Data kept
// outside the file (data_location EXTERNAL) is read from beside the model (`model_dir`).
Const read_tensor(const onnx::TensorProto& t, const std::string& what, const std::string& model_dir);

// An ONNX value as the importer knows it: its shape, and either the Caffe blob that holds
// it or its constant value.
struct Val {
  Shape shape;
  std::string blob;
  std::shared_ptr<const Const> constant;
  // A zero Pad of the spatial axes not yet applied: `blob` holds the unpadded tensor and
  // `shape` the padded one. Caffe has no Pad layer, so only a Conv or an AveragePool,
  // whose own padding is zeros, can take it up (torch exports AvgPool's padding this way).
  int64_t pad_h = 0, pad_w = 0;
  bool padded() const { return pad_h || pad_w; }
};

struct ImportState {
  std::string file, model_dir;
  int opset = 0;
  std::map<std::string, Val> values;
  NetLoad* net = nullptr;
  UniqueNames layer_names;
  int64_t const_values = 0;                // held by Constant nodes and folded nodes so far
  std::map<std::string, int> blob_count;  // blobs added per layer
};

class NodeCtx {
 public:
  NodeCtx(ImportState& s, const onnx::NodeProto& n, std::string name);
  const std::string& where() const { return where_; }  // "file: node 'name' (Op)"
  int opset() const { return s_.opset; }

  int num_inputs() const;
  bool has_input(int i) const;  // given and not empty
  const Val& in(int i) const;  // InputError when it carries a pending Pad
  const Val& in_padded(int i) const;  // for the translators that take up a pending Pad
  const Const& const_in(int i) const;  // InputError unless known at import time
  bool is_const(int i) const { return has_input(i) && in(i).constant != nullptr; }

  const onnx::AttributeProto* attr(const char* name) const;
  int64_t attr_int(const char* name, int64_t def) const;
  float attr_float(const char* name, float def) const;
  std::vector<int64_t> attr_ints(const char* name, std::vector<int64_t> def) const;
  std::string attr_string(const char* name, const std::string& def) const;

  int num_outputs() const;
  bool has_output(int i) const;  // given and not empty
  std::string out_name(int i) const;
  void set_const(int i, Const c);
  void alias(int i, const Val& v);  // output i is the value v (Identity, Dropout)
  // A layer named after the node (`suffix` tells apart the layers of one node).
  proto::LayerParameter& add_layer(const std::string& type, const std::vector<std::string>& bottoms,
                                   const std::string& top, const std::string& suffix = "");
  void set_output(int i, Shape shape);  // output i is the blob out_name(i)
  void add_param(const proto::LayerParameter& l, Tensor t);  // the layer's next blob

 private:
  ImportState& s_;
  const onnx::NodeProto& n_;
  std::string name_, where_;
};

using Translator = void (*)(NodeCtx&);
bool register_onnx_op(const char* type, Translator fn);
Translator find_onnx_op(const std::string& type);

// -1 -> rank-1 etc.; InputError when outside [-rank, rank).
int norm_axis(const NodeCtx& c, int64_t axis, size_t rank);
// The shape a and b broadcast to (ONNX's multidirectional broadcasting: aligned at the last
// axes, each pair equal or one of them 1); InputError when they do not.
Shape broadcast_shape(const NodeCtx& c, const Shape& a, const Shape& b);

}  // namespace bks::onnx_import

#define BKS_ONNX_OP_CAT2(a, b) a##b
#define BKS_ONNX_OP_CAT(a, b) BKS_ONNX_OP_CAT2(a, b)
#define BKS_ONNX_OP(type, fn)                                                      \
  [[maybe_unused]] static const bool BKS_ONNX_OP_CAT(bks_onnx_op_, __LINE__) = \
      ::bks::onnx_import::register_onnx_op(type, fn)
