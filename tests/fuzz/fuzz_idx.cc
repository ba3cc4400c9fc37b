// An IDX images file and its labels file (raw or gzip), as a Data layer's source reads
// them. The first byte of the input says where the images end and the labels begin (as a
// 1/256 fraction of the rest), so one input mutates both files.
#include "data/dataset.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bks;
  if (size < 1) return 0;
  size_t rest = size - 1, split = rest * data[0] / 256;
  std::string images = fuzz::write_scratch("images-idx3-ubyte", data + 1, split);
  std::string labels = fuzz::write_scratch("labels-idx1-ubyte", data + 1 + split, rest - split);
  fuzz::expect_input_errors([&] { read_idx_pair(images, labels); });
  return 0;
}
