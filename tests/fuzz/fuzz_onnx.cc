// An ONNX model as `bakusoku deploy --model m.onnx` reads it: the protobuf, the opset check,
// each initializer's dims against its data, every node's translation and shape tracking,
// then the imported graph's shape inference and parameter declarations.
#include "formats/onnx_import.h"
#include "fuzz_util.h"
#include "net_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bks;
  std::string path = fuzz::write_scratch("model.onnx", data, size);
  fuzz::expect_input_errors([&] {
    NetLoad net = import_onnx(path);
    fuzz::check_net_phases(net);
  });
  return 0;
}
