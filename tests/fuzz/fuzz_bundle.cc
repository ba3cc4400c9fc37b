// A deployment bundle (.bks) as `bakusoku bench`/`test` and Engine::load read it, up to
// building kernels: the safetensors container, format version, graph JSON, shape inference,
// parameter binding and the check that every blob the graph needs is in the file.
#include "engine/bundle.h"
#include "engine/session.h"
#include "fuzz_util.h"
#include "net_check.h"
#include "runtime/param_binding.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bks;
  std::string path = fuzz::write_scratch("model.bks", data, size);
  fuzz::expect_input_errors([&] {
    if (!is_bundle_file(path)) return;  // `test` and `bench` read it as a prototxt then
    Bundle b = load_bundle(path);
    (void)bundle_precision(b);
    Graph g = b.graph;
    fuzz::check_graph(g, proto::TEST);
    ParamStore store;
    bind_parameters(g, store, 1, declared_params(g, proto::TEST), /*fill=*/false);
    copy_bundle_weights(b, path, store);
  });
  return 0;
}
