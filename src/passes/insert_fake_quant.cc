// Pass: FakeQuant before the data input of every Convolution and InnerProduct (see
// insert_fake_quant.h).
#include "passes/insert_fake_quant.h"

#include <fmt/format.h>

#include <string_view>

#include "graph/graph_edit.h"
#include "ops/op_def.h"
#include "passes/insert_before_readers.h"

namespace bks {
namespace {
constexpr const char kSuffix[] = "/fake_quant";
constexpr const char kKeySuffix[] = "/fake_quant.0";
}  // namespace

PassReport insert_fake_quant(Graph& g) {
  PassReport r{"insert-fake-quant", {}};
  std::vector<bool> linear(g.nodes.size());
  for (size_t n = 0; n < g.nodes.size(); ++n) linear[n] = op_traits(g.nodes[n]).weighted_linear;
  insert_before_readers(g, linear, "FakeQuant", kSuffix, [&](const Node& reader, const std::string& value, bool made) {
    if (made) r.changes.push_back(fmt::format("'{}' quantized before {} '{}'", value, reader.type, reader.name));
  });
  verify_graph(g, r.pass);
  return r;
}

std::string fake_quant_blob(const std::string& param_key) {
  const std::string_view suffix = kKeySuffix;
  if (param_key.size() == suffix.size() || !param_key.ends_with(suffix)) return "";
  return param_key.substr(0, param_key.size() - suffix.size());
}

}  // namespace bks
