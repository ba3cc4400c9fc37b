// A binary .caffemodel (NetParameter with blobs) as `--weights x.caffemodel` reads it,
// copied into a small net's parameter store.
#include "formats/weights.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bks;
  std::string path = fuzz::write_scratch("model.caffemodel", data, size);
  fuzz::expect_input_errors([&] {
    // The blobs of the seed (tests/fuzz/make_corpus.sh): an InnerProduct 3 -> 2.
    ParamStore store;
    store.add("ip.0", "", {2, 3}, true);
    store.add("ip.1", "", {2}, true);
    load_weights(path, store);
  });
  return 0;
}
