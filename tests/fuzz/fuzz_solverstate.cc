// A .solverstate (`bakusoku train --snapshot`): the safetensors container with its
// metadata, then the history blobs restored into SGD's and Adam's state for a small net.
#include "formats/safetensors.h"
#include "fuzz_util.h"
#include "train/solver.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bks;
  std::string path = fuzz::write_scratch("iter_1.solverstate", data, size);
  fuzz::expect_input_errors([&] {
    TensorFile state = load_safetensors(path);
    if (!state.metadata.count("iter") || !state.metadata.count("weights"))
      input_error("{}: not a bakusoku solver state (missing iter/weights metadata)", path);
    // The blobs of the seed (tests/fuzz/make_corpus.sh): an InnerProduct 3 -> 2.
    ParamStore store;
    store.add("ip.0", "", {2, 3}, true);
    store.add("ip.1", "", {2}, true);
    for (const char* type : {"SGD", "Adam"}) {
      proto::SolverParameter sp;
      sp.set_type(type);
      sp.set_base_lr(0.01f);
      sp.set_max_iter(1);
      Solver::create(sp, path)->load_state(state, store, path);
    }
  });
  return 0;
}
