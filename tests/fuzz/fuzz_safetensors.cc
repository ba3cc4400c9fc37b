// A safetensors weights file as `--weights x.safetensors` reads it: the header and tensors,
// then copied into a small net's parameter store (names, dtypes and shapes checked).
#include "formats/safetensors.h"
#include "formats/weights.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bks;
  std::string path = fuzz::write_scratch("weights.safetensors", data, size);
  fuzz::expect_input_errors([&] {
    TensorFile tf = load_safetensors(path);
    for (const auto& [name, t] : tf.tensors) (void)tf.find(name);
    // The blobs of the seed (tests/fuzz/make_corpus.sh): an InnerProduct 3 -> 2.
    ParamStore store;
    store.add("ip.0", "", {2, 3}, true);
    store.add("ip.1", "", {2}, true);
    load_weights(path, store);
  });
  return 0;
}
