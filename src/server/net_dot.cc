#include "server/net_dot.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <vector>

#include "formats/caffe_net.h"
#include "ops/op_def.h"
#include "ops/shape_inference.h"
#include "server/dot_text.h"

namespace bks::server {

namespace {

// Whether node i writes in place over the blob of a single layer nobody else reads it from:
// then it is drawn inside that layer's box.
bool joins_previous_box(const Graph& g, int i) {
  const Node& n = g.nodes[i];
  if (n.inputs.size() != 1 || n.outputs.size() != 1) return false;
  const Value& in = g.values[n.inputs[0]];
  return in.producer >= 0 && in.consumers.size() == 1 && in.name == g.values[n.outputs[0]].name;
}

// Whether node i has parameter blobs (weights): its box is coloured as one that learns.
bool has_params(const Graph& g, int i) {
  try {
    const OpContext c{g.nodes[i], g.describe(i), proto::TRAIN};
    return !checked_def(g, i, proto::TRAIN).params(c, input_shapes(g, i)).empty();
  } catch (const std::exception&) {
    return false;  // shown all the same, as a layer without weights
  }
}

const char* fill_of(const Graph& g, int i) {
  const Node& n = g.nodes[i];
  if (caffe_data_layer_type(n.type)) return "#dbe9f7";
  if (n.type == "Accuracy" || n.type.find("Loss") != std::string::npos) return "#f8dde2";
  if (has_params(g, i)) return "#fde7d9";
  return "#eef0f4";
}

constexpr const char* kSmall = "<FONT POINT-SIZE=\"9\" COLOR=\"#556677\">";

// A box: the first layer's name, type and attributes, then one line per layer joined to it.
std::string box_label(const Graph& g, const std::vector<int>& layers) {
  const Node& n = g.nodes[layers[0]];
  std::string s = "<B>" + dot_html_text(n.name) + "</B><BR/><FONT POINT-SIZE=\"10\" COLOR=\"#556677\">" +
                  dot_html_text(n.type) + "</FONT>";
  for (const auto& line : wrap(attrs_text(n), 28)) s += "<BR/>" + std::string(kSmall) + dot_html_text(line) + "</FONT>";
  for (size_t k = 1; k < layers.size(); ++k) {
    const Node& m = g.nodes[layers[k]];
    std::string attrs = attrs_text(m);
    s += "<BR/>" + std::string(kSmall) + "+ <B>" + dot_html_text(m.name) + "</B>&#160;" + dot_html_text(m.type) +
         (attrs.empty() ? "" : " (" + dot_html_text(attrs) + ")") + "</FONT>";
  }
  return s;
}

// The small label of a blob: its name where the arrow alone does not say it (a layer's top
// named after the layer is the usual case), then its shape.
std::string blob_label(const Value& v, bool with_name) {
  return std::string(kSmall) + (with_name ? dot_html_text(v.name) + "<BR/>" : "") + dot_html_text(shape_text(v.shape)) +
         "</FONT>";
}

// A box or an oval, and the row of the drawing it sits in.
struct Item {
  std::string id, name, attrs;
  int rank = 0;  // distance from the net's inputs: its column
  bool box = false;
  int row = 0;
};

// An arrow from item `from` to item `to` carrying blob `value` (-1: said by the oval).
struct Edge {
  int from, to, value;
  bool named;  // the blob's name said on the arrow
};

struct Drawing {
  std::vector<Item> items;  // producers before their readers
  std::vector<Edge> edges;
  int rows = 1, per_row = 1;
};

// The boxes, the ovals of the net's inputs and outputs, and the arrows between them.
Drawing collect(const Graph& g) {
  const int n = static_cast<int>(g.nodes.size());
  // Each layer's box is its own or, for one writing in place, its predecessor's.
  std::vector<int> box(n);
  std::map<int, std::vector<int>> layers_of;  // box -> its layers, in order
  for (int i = 0; i < n; ++i) {
    box[i] = joins_previous_box(g, i) ? box[g.values[g.nodes[i].inputs[0]].producer] : i;
    layers_of[box[i]].push_back(i);
  }
  Drawing d;
  std::map<int, int> item_of_box, oval_of_value;
  auto oval = [&](int v, int rank) {
    auto [it, fresh] = oval_of_value.try_emplace(v, static_cast<int>(d.items.size()));
    if (fresh)
      d.items.push_back({fmt::format("v{}", v), g.values[v].name,
                         "shape=ellipse, style=filled, fillcolor=\"#ffffff\", margin=\"0.04,0.02\", label=<" +
                             blob_label(g.values[v], true) + ">",
                         rank});
    return it->second;
  };
  for (int i = 0; i < n; ++i) {
    if (box[i] != i) continue;
    Item item{fmt::format("n{}", i), g.nodes[i].name,
              fmt::format("label=<{}>, fillcolor=\"{}\"", box_label(g, layers_of[i]), fill_of(g, i)), 0, true};
    std::vector<Edge> in;
    for (int v : g.nodes[i].inputs) {
      const Value& val = g.values[v];
      if (val.producer < 0) {
        in.push_back({oval(v, 0), -1, -1, false});
      } else {
        const int from = box[val.producer];
        in.push_back({item_of_box[from], -1, v, val.name != g.nodes[from].name});
      }
      item.rank = std::max(item.rank, d.items[in.back().from].rank + 1);
    }
    item_of_box[i] = static_cast<int>(d.items.size());
    for (Edge& e : in) e.to = item_of_box[i];
    d.edges.insert(d.edges.end(), in.begin(), in.end());
    d.items.push_back(item);
  }
  for (int v : g.outputs()) {
    const int p = g.values[v].producer;
    if (p < 0) continue;
    const int from = item_of_box[box[p]];
    d.edges.push_back({from, oval(v, d.items[from].rank + 1), -1, false});
  }
  return d;
}

// Rows of about `ranks_per_row` ranks, as even as the ranks allow, read like lines of text.
// An oval sits in the row of the box it belongs to.
void wrap_rows(Drawing& d, int ranks_per_row) {
  const int most = std::max(1, ranks_per_row);
  int ranks = 1;
  for (const Item& it : d.items)
    if (it.box) ranks = std::max(ranks, it.rank + 1);
  d.rows = (ranks + most - 1) / most;
  d.per_row = (ranks + d.rows - 1) / d.rows;
  for (Item& it : d.items) it.row = it.box ? it.rank / d.per_row : 0;
  for (const Edge& e : d.edges)
    if (!d.items[e.to].box) d.items[e.to].row = d.items[e.from].row;  // an output: its maker's row
  for (auto e = d.edges.rbegin(); e != d.edges.rend(); ++e)
    if (!d.items[e->from].box) d.items[e->from].row = d.items[e->to].row;  // an input: its first reader's
}

// Where an arrow that leaves its row goes: "res2a, res2_proj".
std::string names_of(const std::vector<std::string>& names) {
  std::string s;
  for (size_t k = 0; k < names.size() && k < 3; ++k) s += (k ? ", " : "") + names[k];
  return names.size() > 3 ? s + ", …" : s;
}

std::string connector(const std::string& id, const std::string& text) {
  return fmt::format(
      "{} [shape=rarrow, style=filled, fillcolor=\"#ffffff\", margin=\"0.12,0.02\", label=<{}{}</FONT>>];\n", id,
      kSmall, dot_html_text(text));
}

}  // namespace

std::string network_dot(const Graph& g, int ranks_per_row) {
  Drawing d = collect(g);
  wrap_rows(d, ranks_per_row);
  std::vector<std::string> row_text(d.rows);
  for (const Item& it : d.items) row_text[it.row] += it.id + " [" + it.attrs + "];\n";
  auto label_of = [&](int value, bool named) {
    return value < 0 ? std::string() : " [label=<" + blob_label(g.values[value], named) + ">]";
  };
  std::string arrows;
  // An arrow to a later row ends at a connector ("to ip1") at the end of its row, and a
  // connector ("from pool2") at the start of that row leads on: long arrows from row to
  // row would cross everything between them.
  std::map<std::pair<int, int>, std::vector<const Edge*>> leaving;  // (item, blob) -> its arrows
  for (const Edge& e : d.edges) {
    const Item &a = d.items[e.from], &b = d.items[e.to];
    if (a.row == b.row)
      arrows += a.id + " -> " + b.id + label_of(e.value, e.named) + ";\n";
    else
      leaving[{e.from, e.value}].push_back(&e);
  }
  int connectors = 0;
  for (const auto& [key, out] : leaving) {
    const Item& a = d.items[key.first];
    std::vector<std::string> to;
    for (const Edge* e : out) to.push_back(d.items[e->to].name);
    const std::string away = fmt::format("c{}", connectors++);
    row_text[a.row] += connector(away, "to " + names_of(to));
    arrows += a.id + " -> " + away + label_of(key.second, out[0]->named) + ";\n";
    std::map<int, std::string> entry;  // row -> its connector
    for (const Edge* e : out) {
      const Item& b = d.items[e->to];
      auto [it, fresh] = entry.try_emplace(b.row, fmt::format("c{}", connectors));
      if (fresh) {
        ++connectors;
        row_text[b.row] += connector(it->second, "from " + a.name);
      }
      arrows += it->second + " -> " + b.id + ";\n";
    }
  }

  // Left to right along a row; rows one below the other (clusters never overlap), their
  // columns lined up ("rank=same", which needs newrank across clusters).
  std::string dot = R"(digraph net {
graph [rankdir=LR, newrank=true, nodesep=0.18, ranksep=0.3, pad=0.1, bgcolor="transparent"];
node [shape=box, style="rounded,filled", color="#8a8fa0", fillcolor="#eef0f4", fontname="Helvetica,Arial,sans-serif", fontsize=12, margin="0.08,0.04"];
edge [color="#667788", arrowsize=0.6, fontname="Helvetica,Arial,sans-serif"];
)";
  // dot lays out top to bottom and turns the drawing a quarter for LR, which puts the
  // first cluster at the bottom: the last row is written first.
  for (int r = d.rows - 1; r >= 0; --r)
    dot += fmt::format("subgraph cluster_row{} {{ peripheries=0;\n{}}}\n", r, row_text[r]);
  if (d.rows > 1) {
    std::vector<std::string> column(d.per_row);
    for (const Item& it : d.items)
      if (it.box) column[it.rank % d.per_row] += it.id + "; ";
    for (const auto& c : column)
      if (!c.empty()) dot += "{ rank=same; " + c + "}\n";
  }
  return dot + arrows + "}\n";
}

}  // namespace bks::server
