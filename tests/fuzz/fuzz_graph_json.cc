// A bundle's graph JSON on its own (mutating it inside a bundle would break the
// safetensors header length): parse, shape inference, parameter declarations, and the
// writer's output must read back.
#include <cstdio>
#include <cstdlib>

#include "formats/graph_json.h"
#include "fuzz_util.h"
#include "net_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bks;
  std::string text(reinterpret_cast<const char*>(data), size);
  Graph g;
  bool parsed = false;
  fuzz::expect_input_errors([&] {
    g = graph_from_json(text, "graph.json");
    parsed = true;
    Graph inferred = g;
    fuzz::check_graph(inferred, proto::TEST);
  });
  if (!parsed) return 0;
  // What bakusoku writes it must read: a bundle that cannot be loaded again is a bug.
  try {
    (void)graph_from_json(graph_to_json(g), "graph.json (written again)");
  } catch (const InputError& e) {
    std::fprintf(stderr, "fuzz: the graph's own JSON does not read back: %s\n", e.what());
    std::abort();
  }
  return 0;
}
