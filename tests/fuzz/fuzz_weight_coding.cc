// A coded weight tensor (formats/weight_coding.h, bundles written by `deploy --compress`) as
// load_bundle decodes it. The first byte picks the shape the bundle's metadata would give
// (the seeds' own, tests/fuzz/make_corpus.sh); the rest is the coded bytes.
#include "formats/weight_coding.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bks;
  if (size == 0) return 0;
  static const Shape shapes[] = {{2, 3}, {2}, {6, 5, 3, 3}, {1000}};
  const Shape& shape = shapes[data[0] % 4];
  fuzz::expect_input_errors([&] {
    Tensor t = decode_weights(std::string_view(reinterpret_cast<const char*>(data) + 1, size - 1), shape, DType::f32,
                              "fuzz");
    (void)t;
  });
  return 0;
}
