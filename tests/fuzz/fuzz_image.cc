// An uploaded PNG or JPEG as the dashboard's classify page decodes it, for a grey 28x28
// network and a colour 32x32 one (the decoder refuses, never throws, on bad bytes).
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fuzz_util.h"
#include "server/images.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  bks::fuzz::expect_input_errors([&] {
    struct Geometry {
      int channels, height, width;
    };
    for (Geometry g : {Geometry{1, 28, 28}, Geometry{3, 32, 32}}) {
      std::vector<uint8_t> chw;
      std::string why;
      if (bks::server::decode_chw(bytes, g.channels, g.height, g.width, chw, why) == bks::server::Decoded::ok &&
          chw.size() != static_cast<size_t>(g.channels * g.height * g.width)) {
        std::fprintf(stderr, "fuzz: decode_chw gave %zu bytes for %dx%dx%d\n", chw.size(), g.channels, g.height,
                     g.width);
        std::abort();
      }
    }
  });
  return 0;
}
