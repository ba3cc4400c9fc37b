#include "server/graph_svg.h"

#include <fmt/format.h>

#include <cstdio>

#include "formats/caffe_net.h"
#include "ops/shape_inference.h"
#include "server/api_error.h"
#include "server/filter_command.h"
#include "server/net_dot.h"

namespace bks::server {

namespace {

// Removes the attribute `name="..."` from the tag text `tag`; true when it was there.
bool drop_attribute(std::string& tag, const std::string& name) {
  const size_t at = tag.find(" " + name + "=\"");
  if (at == std::string::npos) return false;
  const size_t end = tag.find('"', at + name.size() + 3);
  if (end == std::string::npos) return false;
  tag.erase(at, end + 1 - at);
  return true;
}

// dot's complaint, short and plain ASCII (it goes into a JSON error).
std::string plain(std::string s) {
  if (s.size() > 500) s.resize(500);
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = ' ';
  return s;
}

}  // namespace

std::string fit_svg_to_width(std::string svg, double min_width) {
  const size_t start = svg.find("<svg");
  const size_t end = start == std::string::npos ? start : svg.find('>', start);
  if (end == std::string::npos) return svg;
  std::string tag = svg.substr(start, end - start);
  drop_attribute(tag, "width");
  drop_attribute(tag, "height");
  const size_t box = tag.find(" viewBox=\"");
  double x = 0, y = 0, w = 0, h = 0;
  if (box != std::string::npos && std::sscanf(tag.c_str() + box, " viewBox=\"%lf %lf %lf %lf\"", &x, &y, &w, &h) == 4 &&
      w < min_width) {
    drop_attribute(tag, "viewBox");
    x -= (min_width - w) / 2;
    tag.insert(4, fmt::format(" viewBox=\"{:.2f} {:.2f} {:.2f} {:.2f}\"", x, y, min_width, h));
  }
  tag.insert(4, " width=\"100%\"");
  return svg.replace(start, end - start, tag);
}

std::string network_svg(const std::string& net_file, const std::string& dot_program) {
  NetLoad nl = load_net_file(net_file);
  // TRAIN: the net that learns, with the batch the user chose (the TEST net's differs).
  Graph g = build_caffe_graph(nl, net_state(nl, proto::TRAIN, {}));
  infer_shapes(g, proto::TRAIN);
  const FilterResult r = run_filter({dot_program, "-Tsvg"}, network_dot(g), kDrawTimeoutS, kMaxDrawingBytes);
  using End = FilterResult::End;
  if (r.end == End::not_found)
    throw ApiError(503, "",
                   fmt::format("cannot draw the network: no '{}' program (install Debian's graphviz "
                               "package: scripts/install_deps.sh does)",
                               dot_program));
  if (r.end == End::timed_out)
    throw ApiError(503, "",
                   fmt::format("cannot draw the network: its {} layers took Graphviz longer than {:g} s",
                               g.nodes.size(), kDrawTimeoutS));
  if (r.end == End::too_large)
    throw ApiError(500, "",
                   fmt::format("cannot draw the network: its drawing of {} layers is larger than {} MiB",
                               g.nodes.size(), kMaxDrawingBytes >> 20));
  if (r.code != 0 || r.output.find("<svg") == std::string::npos)
    throw ApiError(
        500, "",
        fmt::format("cannot draw the network: {} failed (exit code {}): {}", dot_program, r.code, plain(r.errors)));
  return fit_svg_to_width(r.output);
}

}  // namespace bks::server
