// Text for character-level models: UTF-8 decoding, the corpus and its vocabulary, and the
// TextData layer's batches (streams, cont, labels, the held-out part, wrapping).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "core/error.h"
#include "data/text_corpus.h"
#include "op_harness.h"

namespace bks {
namespace {
namespace fs = std::filesystem;
using test::input_error_of;

std::string write_text(const std::string& name, const std::string& bytes) {
  const fs::path dir = fs::temp_directory_path() / "bks_text";
  fs::create_directories(dir);
  const fs::path p = dir / name;
  std::ofstream(p, std::ios::binary) << bytes;
  return p.string();
}

TEST(Utf8, DecodesEveryLengthAndDropsALeadingByteOrderMark) {
  const std::string text =
      "\xEF\xBB\xBF"
      "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";  // BOM, a, é, €, 😀
  EXPECT_EQ(decode_utf8(text, "t"), (std::vector<char32_t>{U'a', 0xE9, 0x20AC, 0x1F600}));
  for (char32_t c : {char32_t{0x41}, char32_t{0x7FF}, char32_t{0xFFFD}, char32_t{0x10FFFF}})
    EXPECT_EQ(decode_utf8(encode_utf8(c), "t"), std::vector<char32_t>{c});
}

TEST(Utf8, RejectsWhatIsNotUtf8NamingTheByteAndLine) {
  const std::pair<const char*, const char*> bad[] = {
      {"ok\n\x80", "a byte that starts no character at byte 3 (line 2)"},
      {"\xC3", "a character cut short at byte 0"},
      {"\xC3(", "a character cut short at byte 0"},
      {"\xC0\x80", "an overlong encoding"},
      {"\xE0\x80\x80", "an overlong encoding"},
      {"\xED\xA0\x80", "a surrogate code point"},
      {"\xF4\x90\x80\x80", "a code point past U+10FFFF"},
      {"\xFF", "a byte that starts no character"},
  };
  for (const auto& b : bad) {  // (clang before 16 cannot capture a structured binding)
    const std::string msg = input_error_of([&] { decode_utf8(b.first, "f.txt"); });
    EXPECT_NE(msg.find("f.txt: not UTF-8 text: "), std::string::npos) << msg;
    EXPECT_NE(msg.find(b.second), std::string::npos) << msg;
  }
}

TEST(TextCorpus, VocabularyIsTheSortedDistinctCharactersOfEveryMatchingFile) {
  write_text("part_b.txt", "cab\xC3\xA9");
  write_text("part_a.txt", "zz");
  const std::string pattern = (fs::temp_directory_path() / "bks_text" / "part_*.txt").string();
  auto c = open_text_corpus(pattern, "");
  ASSERT_EQ(c->files.size(), 2u);
  EXPECT_NE(c->files[0].find("part_a"), std::string::npos) << "files are read in name order";
  EXPECT_EQ(c->vocabulary, (std::vector<char32_t>{U'a', U'b', U'c', U'z', 0xE9}));
  EXPECT_EQ(c->ids, (std::vector<uint32_t>{3, 3, 2, 0, 1, 4}));
  EXPECT_EQ(c->index_of(U'q'), -1);
  EXPECT_EQ(text_vocabulary(pattern, ""), c->vocabulary);

  // A vocabulary file fixes the characters; text outside them is an error naming one.
  const std::string vocab = write_text("vocab.txt", "abcdz\xC3\xA9xy");
  auto v = open_text_corpus(pattern, vocab);
  EXPECT_EQ(v->vocabulary.size(), 8u);
  EXPECT_EQ(v->ids[0], 6u) << "'z' is index 6 of a b c d x y z e-acute";
  const std::string small = write_text("small_vocab.txt", "abc");
  EXPECT_NE(input_error_of([&] { open_text_corpus(pattern, small); }).find("character 'z' U+007A"), std::string::npos);
  EXPECT_NE(input_error_of([&] { open_text_corpus(pattern + ".none", ""); }).find("no file matches"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] { open_text_corpus(write_text("empty.txt", ""), ""); }).find("holds no text"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] { open_text_corpus("/dev/zero", ""); }).find("is not a regular file"),
            std::string::npos);
}

// A TextData layer over `text` (in a file of its own: ctest runs these tests side by side),
// with its three tops, run at `step`.
struct TextLayer {
  TextLayer(const std::string& text, const std::string& fields, Phase phase = proto::TRAIN)
      : h("name: 'text' type: 'TextData' text_data_param { source: '" +
              write_text("layer_" + std::to_string(std::hash<std::string>{}(text)) + ".txt", text) + "' " + fields +
              " }",
          {}, phase, 3) {}
  void run(int64_t step) {
    OpCall c;
    c.step = step;
    for (Tensor& t : h.out) c.out.push_back(&t);
    h.op().forward(c);
  }
  std::string chars(int top, int64_t t_len, int64_t n_len, const std::string& text) const {
    std::string s;
    for (int64_t t = 0; t < t_len; ++t)
      for (int64_t n = 0; n < n_len; ++n) s += text[static_cast<size_t>(h.out[top].f32()[t * n_len + n])];
    return s;
  }
  test::OpHarness h;
};

TEST(TextData, StreamsRunOnAcrossBatchesAndStartOverWithContZero) {
  // 26 characters, 2 streams: 25 transitions give streams of 12, so 4 batches of 3 each.
  const std::string text = "abcdefghijklmnopqrstuvwxyz";
  TextLayer l(text, "batch_size: 2 seq_len: 3");
  ASSERT_EQ(l.h.out[0].shape(), (Shape{3, 2}));
  const std::string vocab = text;  // sorted already: index i is text[i]
  l.run(0);
  EXPECT_EQ(l.chars(0, 3, 2, vocab), "ambnco") << "stream 0 starts at 'a', stream 1 at 'm'";
  EXPECT_EQ(l.chars(2, 3, 2, vocab), "bncodp") << "labels are the next characters";
  EXPECT_EQ(l.h.out[1].f32()[0], 0.f);
  EXPECT_EQ(l.h.out[1].f32()[1], 0.f);
  for (int k = 2; k < 6; ++k) EXPECT_EQ(l.h.out[1].f32()[k], 1.f);
  l.run(1);
  EXPECT_EQ(l.chars(0, 3, 2, vocab), "dpeqfr") << "batch 1 goes on where batch 0 stopped";
  for (int k = 0; k < 6; ++k) EXPECT_EQ(l.h.out[1].f32()[k], 1.f);
  l.run(3);
  EXPECT_EQ(l.chars(2, 3, 2, vocab), "kwlxmy");
  l.run(4);
  EXPECT_EQ(l.chars(0, 3, 2, vocab), "ambnco") << "after 4 batches the epoch starts over";
  EXPECT_EQ(l.h.out[1].f32()[0], 0.f);
  EXPECT_EQ(l.h.op().items_per_batch(), 6);
  EXPECT_EQ(l.h.op().dataset_size(), 24) << "the characters of an epoch's 4 batches";
}

TEST(TextData, HoldoutSplitsTheTextsTail) {
  const std::string text = "abcdefghijklmnopqrst";  // 20 characters, the last 5 held out
  TextLayer train(text, "batch_size: 1 seq_len: 8 holdout: 0.25");
  train.run(0);
  EXPECT_EQ(train.chars(0, 8, 1, text), "abcdefgh");
  train.run(1);
  EXPECT_EQ(train.chars(0, 8, 1, text), "abcdefgh") << "15 characters: one batch of 8, then over again";
  TextLayer held(text, "batch_size: 1 seq_len: 4 holdout: 0.25 read_holdout: true", proto::TEST);
  held.run(0);
  EXPECT_EQ(held.chars(0, 4, 1, text), "pqrs");
  EXPECT_EQ(held.chars(2, 4, 1, text), "qrst");
}

TEST(TextData, BadFieldsAndTextAreClearErrors) {
  auto error = [](const std::string& text, const std::string& fields) {
    return input_error_of([&] { TextLayer(text, fields); });
  };
  EXPECT_NE(error("abcdefghij", "batch_size: 2 seq_len: 5").find("too few for 2 streams of seq_len 5: at least 11"),
            std::string::npos);
  EXPECT_NE(error("abcabc", "batch_size: 1 seq_len: 2 vocabulary_size: 2")
                .find("3 distinct characters, more than text_data_param.vocabulary_size 2"),
            std::string::npos);
  EXPECT_NE(error("abc\xFF", "batch_size: 1 seq_len: 1").find("not UTF-8 text"), std::string::npos);
  EXPECT_NE(error("abcdef", "batch_size: 0").find("batch_size must be positive"), std::string::npos);
  EXPECT_NE(error("abcdef", "batch_size: 1 holdout: 1").find("holdout must be in [0, 1)"), std::string::npos);
  EXPECT_NE(error("abcdef", "batch_size: 1 seq_len: 1 holdout: 0.01 read_holdout: true").find("holds none"),
            std::string::npos);
  EXPECT_NE(input_error_of([] {
              test::OpHarness(
                  "name: 't' type: 'TextData' text_data_param { source: '/nonexistent/x.txt' batch_size: 1 }", {},
                  proto::TRAIN, 3);
            }).find("cannot open"),
            std::string::npos);
}

}  // namespace
}  // namespace bks
