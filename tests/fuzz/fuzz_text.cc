// Text for TextData and `bakusoku sample`: a vocabulary file and a text file, read as the
// layer reads them. The first byte of the input says where the vocabulary ends and the text
// begins (as a 1/256 fraction of the rest; 0: no vocabulary file, the text's own).
#include "data/text_corpus.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bks;
  if (size < 1) return 0;
  size_t rest = size - 1, split = rest * data[0] / 256;
  std::string vocabulary = data[0] == 0 ? "" : fuzz::write_scratch("vocabulary.txt", data + 1, split);
  std::string text = fuzz::write_scratch("text.txt", data + 1 + split, rest - split);
  fuzz::expect_input_errors([&] {
    auto corpus = open_text_corpus(text, vocabulary);
    for (uint32_t id : corpus->ids)
      if (id >= corpus->vocabulary.size()) __builtin_trap();  // every index names a character
  });
  return 0;
}
