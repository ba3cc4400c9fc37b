// Pass: FakeQuant before the data input of every Convolution and InnerProduct (see
// insert_fake_quant.h).
#include "passes/insert_fake_quant.h"

#include <fmt/format.h>

#include <map>
#include <string_view>

#include "graph/graph_edit.h"
#include "ops/op_def.h"

namespace bks {
namespace {
constexpr const char kSuffix[] = "/fake_quant";
constexpr const char kKeySuffix[] = "/fake_quant.0";
}  // namespace

PassReport insert_fake_quant(Graph& g) {
  PassReport r{"insert-fake-quant", {}};
  std::vector<Node> nodes;
  std::map<int, int> quantized;  // value -> the FakeQuant output replacing it for these readers
  for (Node& n : g.nodes) {
    if (op_traits(n).weighted_linear && !n.inputs.empty()) {
      const int v = n.inputs[0];
      auto it = quantized.find(v);
      if (it == quantized.end()) {
        const std::string name = g.values[v].name + kSuffix;
        Node q;
        q.name = name;
        q.type = "FakeQuant";
        q.where = n.where;
        q.attrs = default_attrs("FakeQuant");
        q.inputs = {v};
        q.propagate_down = {true};
        q.outputs = {g.add_value(name)};
        nodes.push_back(std::move(q));
        it = quantized.emplace(v, nodes.back().outputs[0]).first;
        r.changes.push_back(fmt::format("'{}' quantized before {} '{}'", g.values[v].name, n.type, n.name));
      }
      n.inputs[0] = it->second;
    }
    nodes.push_back(std::move(n));
  }
  g.nodes = std::move(nodes);
  relink(g);
  verify_graph(g, r.pass);
  return r;
}

std::string fake_quant_blob(const std::string& param_key) {
  const std::string_view suffix = kKeySuffix;
  if (param_key.size() == suffix.size() || !param_key.ends_with(suffix)) return "";
  return param_key.substr(0, param_key.size() - suffix.size());
}

}  // namespace bks
