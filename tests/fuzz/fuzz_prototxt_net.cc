// A net prototxt as `bakusoku deploy`/`time` read it: parse, then each phase's graph, shape
// inference and parameter declarations (where crafted shapes and attributes would crash).
#include "formats/caffe_net.h"
#include "fuzz_util.h"
#include "net_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bks;
  fuzz::write_data_fixtures();
  std::string path = fuzz::write_scratch("net.prototxt", data, size);
  fuzz::expect_input_errors([&] {
    NetLoad net = load_net_file(path);
    if (!fuzz::sources_stay_local(net.param)) return;
    fuzz::check_net_phases(net);
  });
  return 0;
}
