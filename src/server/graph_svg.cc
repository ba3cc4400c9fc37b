#include "server/graph_svg.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <vector>

#include "formats/caffe_net.h"
#include "ops/shape_inference.h"

namespace bks::server {

namespace {

std::string xml(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

constexpr int kBoxW = 180, kBoxH = 42, kColW = 220, kRowH = 96, kMargin = 20;

}  // namespace

std::string network_svg(const std::string& net_file) {
  NetLoad nl = load_net_file(net_file);
  proto::NetState st;
  st.set_phase(proto::TEST);
  Graph g = build_caffe_graph(nl, st);
  infer_shapes(g, proto::TEST);
  const int n = static_cast<int>(g.nodes.size());
  // Depth: one row below the deepest producer of any input.
  std::vector<int> depth(n, 0), col(n, 0);
  std::map<int, int> width;
  for (int i = 0; i < n; ++i) {
    for (int v : g.nodes[i].inputs)
      if (g.values[v].producer >= 0) depth[i] = std::max(depth[i], depth[g.values[v].producer] + 1);
    col[i] = width[depth[i]]++;
  }
  int cols = 1, rows = 1;
  for (auto& [d, w] : width) {
    cols = std::max(cols, w);
    rows = std::max(rows, d + 1);
  }
  const int W = 2 * kMargin + cols * kColW, H = 2 * kMargin + rows * kRowH;
  auto x_of = [&](int i) { return kMargin + col[i] * kColW + (cols - width[depth[i]]) * kColW / 2; };
  auto y_of = [&](int i) { return kMargin + depth[i] * kRowH; };
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\">\n"
      "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" markerWidth=\"7\" markerHeight=\"7\" "
      "orient=\"auto\">"
      "<path d=\"M0,0 L10,5 L0,10 z\" fill=\"#667\"/></marker></defs>\n",
      W, H, W, H);
  for (int i = 0; i < n; ++i)
    for (int v : g.nodes[i].inputs) {
      int p = g.values[v].producer;
      if (p < 0) continue;
      int x1 = x_of(p) + kBoxW / 2, y1 = y_of(p) + kBoxH, x2 = x_of(i) + kBoxW / 2, y2 = y_of(i);
      svg += fmt::format("<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"#667\" marker-end=\"url(#arrow)\"/>\n",
                         x1, y1, x2, y2);
      svg +=
          fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"#445\" text-anchor=\"middle\">{} {}</text>\n",
                      (x1 + x2) / 2 + 4, (y1 + y2) / 2 + 3, xml(g.values[v].name), xml(shape_str(g.values[v].shape)));
    }
  for (int i = 0; i < n; ++i) {
    const Node& node = g.nodes[i];
    bool param = !node.params.empty();
    svg += fmt::format(
        "<g><title>{}</title><rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" rx=\"5\" fill=\"{}\" "
        "stroke=\"#889\"/>\n",
        xml(node.name + " (" + node.type + ")"), x_of(i), y_of(i), kBoxW, kBoxH, param ? "#fde7d9" : "#eef0f4");
    svg +=
        fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"13\" font-weight=\"bold\" text-anchor=\"middle\">{}</text>\n",
                    x_of(i) + kBoxW / 2, y_of(i) + 18, xml(node.name));
    svg += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"11\" fill=\"#556\" text-anchor=\"middle\">{}</text></g>\n",
                       x_of(i) + kBoxW / 2, y_of(i) + 34, xml(node.type));
  }
  // Net outputs (accuracy, loss) hang below their layers.
  for (int v : g.outputs()) {
    int p = g.values[v].producer;
    if (p < 0) continue;
    svg += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"10\" fill=\"#445\" text-anchor=\"middle\">→ {} {}</text>\n",
                       x_of(p) + kBoxW / 2, y_of(p) + kBoxH + 14, xml(g.values[v].name),
                       xml(shape_str(g.values[v].shape)));
  }
  return svg + "</svg>\n";
}

}  // namespace bks::server
