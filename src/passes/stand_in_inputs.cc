#include "passes/stand_in_inputs.h"

#include <fmt/format.h>

#include <cstdlib>

#include "core/error.h"
#include "ops/op_def.h"

namespace bks {

std::vector<std::string> stand_in_absent_data(Graph& g, Phase phase, const Shape& given) {
  std::vector<std::string> changes;
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    Node& node = g.nodes[n];
    if (!op_traits(node).data_layer) continue;
    const std::string where = g.describe(static_cast<int>(n));
    auto absent = op_def(g, static_cast<int>(n)).absent_source(OpContext{node, where, phase});
    if (!absent) continue;
    std::vector<Shape> shapes = absent->shapes;
    std::string assumed;
    if (!given.empty()) {
      shapes[0] = given;
      // Labels: one per item, or a label map of the data's size (DenseImageData's N x 1 x H x W).
      for (size_t j = 1; j < shapes.size(); ++j)
        shapes[j] = shapes[j].size() == 4 && given.size() == 4 ? Shape{given[0], shapes[j][1], given[2], given[3]}
                                                               : Shape{given[0]};
    } else if (shapes[0].size() == 4 && shapes[0][1] == 0 && shapes[0][2] > 0) {
      // An image net's crop without a mean that says its channels: colour, as nearly all are.
      shapes[0][1] = 3;
      assumed = " (3 channels assumed; --input-shape says otherwise)";
    }
    for (const Shape& s : shapes)
      for (int64_t d : s)
        if (d <= 0)
          input_error(
              "{}: data source {} not found, and the layer does not say its shape; give --input-shape N,C,H,W to "
              "time or deploy the net without its data",
              where, absent->path);
    make_external_input(node, shapes);
    changes.push_back(fmt::format("{}: data source {} not found; stands in as Input {}{}", where, absent->path,
                                  shape_str(shapes[0]), assumed));
  }
  return changes;
}

Shape parse_input_shape(const std::string& text) {
  Shape s;
  const char* p = text.c_str();
  while (*p) {
    char* end = nullptr;
    long long v = std::strtoll(p, &end, 10);
    if (end == p || v <= 0 || v > (1LL << 31))
      input_error("--input-shape '{}': expected positive integers separated by commas, e.g. 1,3,224,224", text);
    s.push_back(v);
    p = end;
    if (*p == ',' || *p == 'x')
      ++p;
    else if (*p)
      input_error("--input-shape '{}': expected positive integers separated by commas, e.g. 1,3,224,224", text);
  }
  if (s.empty()) input_error("--input-shape is empty; e.g. 1,3,224,224");
  return s;
}

}  // namespace bks
