// The ONNX exporter's inside: what a node's writer sees (its inputs and outputs as ONNX
// value names, its attributes, its blobs) and adds (nodes, initializers).
#pragma once

#include <fmt/format.h>

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <onnx/onnx_pb.h>

#include "core/error.h"
#include "core/tensor.h"
#include "formats/unique_names.h"
#include "graph/graph.h"

namespace bks::onnx_export {

struct ExportState {
  const Graph& g;
  const std::map<std::string, Tensor>& weights;
  onnx::GraphProto& out;
  std::vector<std::string> value_names{};  // per graph value
  int nodes = 0;
  int nodes_of_layer = 0;  // ONNX nodes the current layer has added
  bool dynamic_batch = false;
  UniqueNames names{};
  // A name not yet used in the ONNX graph, from `base`.
  std::string unique(const std::string& base) { return names.take(base); }
};

class NodeWriter {
 public:
  NodeWriter(ExportState& s, int node);
  const Node& node() const { return n_; }
  std::string where() const;  // "file:line: layer 'name' (Type)"
  template <class... A>
  [[noreturn]] void fail(fmt::format_string<A...> f, A&&... a) const {
    throw InputError(where() + ": " + fmt::format(f, std::forward<A>(a)...));
  }

  // The node's attributes as bundles write them (formats/graph_json.h).
  const nlohmann::json& attrs() const { return attrs_; }
  int64_t attr_int(const char* name) const;
  float attr_float(const char* name) const;
  bool attr_bool(const char* name) const;
  std::string attr_enum(const char* name) const;
  std::vector<int64_t> attr_ints(const char* name) const;
  std::vector<float> attr_floats(const char* name) const;

  int num_inputs() const { return static_cast<int>(n_.inputs.size()); }
  std::string in(int i) const;
  const Shape& in_shape(int i) const;
  std::string out(int i = 0) const;
  const Shape& out_shape(int i = 0) const;
  int num_blobs() const { return static_cast<int>(n_.params.size()); }
  const Tensor& blob(int i) const;

  // An intermediate value between the nodes one layer becomes.
  std::string temp(const std::string& suffix);
  // Initializers named after the layer.
  std::string initializer(const std::string& suffix, const Tensor& t, const Shape& shape);
  std::string initializer(const std::string& suffix, const std::vector<float>& v, const Shape& shape);
  std::string int64s(const std::string& suffix, const std::vector<int64_t>& v);
  // Output i of an Input layer is a graph input.
  void graph_input(int i);
  onnx::NodeProto& add(const std::string& op, const std::vector<std::string>& inputs,
                       const std::vector<std::string>& outputs);

 private:
  ExportState& s_;
  const Node& n_;
  int index_;
  nlohmann::json attrs_;
};

void set_attr(onnx::NodeProto& n, const char* name, int64_t v);
void set_attr(onnx::NodeProto& n, const char* name, float v);
void set_attr(onnx::NodeProto& n, const char* name, const std::vector<int64_t>& v);

using Writer = void (*)(NodeWriter&);
bool register_onnx_export(const char* type, Writer fn);
Writer find_onnx_export(const std::string& type);

}  // namespace bks::onnx_export

#define BKS_ONNX_EXPORT_CAT2(a, b) a##b
#define BKS_ONNX_EXPORT_CAT(a, b) BKS_ONNX_EXPORT_CAT2(a, b)
#define BKS_ONNX_EXPORT(type, fn)                                                          \
  [[maybe_unused]] static const bool BKS_ONNX_EXPORT_CAT(bks_onnx_export_, __LINE__) = \
      ::bks::onnx_export::register_onnx_export(type, fn)
