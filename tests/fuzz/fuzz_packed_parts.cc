// The packed part of a format-4 bundle (formats/packed_parts.h, `deploy --compress`):
// the index stream (inflate, counts, names, shapes), its checksum and the blobs' lengths.
// load_bundle then checks the shapes and decodes each blob (fuzz_weight_coding).
#include "formats/packed_parts.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bks;
  fuzz::expect_input_errors([&] {
    PackedParts p = unpack_parts(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    (void)p;
  });
  return 0;
}
