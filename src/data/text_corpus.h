// Text for character-level models: UTF-8 files read as Unicode code points, each mapped to
// its index in a vocabulary (the distinct characters, sorted by code point). TextData reads
// batches from it; `bakusoku sample` maps characters to indices and back with it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace bks {

// The most text one source may hold: ids are 4 bytes per character, so this bounds the
// memory a source costs to 4 GiB.
constexpr int64_t kMaxTextBytes = int64_t{1} << 30;

struct TextCorpus {
  std::string source;
  std::vector<std::string> files;    // what `source` named, in the order read
  std::vector<char32_t> vocabulary;  // sorted by code point
  std::vector<uint32_t> ids;         // the text, as indices into `vocabulary`
  // The index of `c`, or -1 when it is not in the vocabulary.
  int64_t index_of(char32_t c) const;
};

// The index of `c` in a sorted vocabulary, or -1 when it is not there.
int64_t vocabulary_index(const std::vector<char32_t>& vocabulary, char32_t c);

// UTF-8 bytes as code points. InputError naming `name` and the byte offset (and line) of the
// first sequence that is not UTF-8 (overlong forms, surrogates and code points past
// U+10FFFF included). A byte-order mark at the start is dropped.
std::vector<char32_t> decode_utf8(std::string_view bytes, const std::string& name);
std::string encode_utf8(char32_t c);
// How a character is shown in a message: itself when printable ASCII, then its code point
// ('a' U+0061, U+000A).
std::string describe_char(char32_t c);

// The files `source` names: itself, or with a wildcard (* ? [) the files matching, in name
// order. InputError when it names none.
std::vector<std::string> text_source_files(const std::string& source);

// Opens (or returns the cached) corpus of `source`, with the vocabulary of the file
// `vocabulary_file` (its distinct characters), or of the source itself when that is empty.
// InputError naming the file for text that is not UTF-8, an empty source, more than
// kMaxTextBytes, or a character missing from a given vocabulary.
std::shared_ptr<const TextCorpus> open_text_corpus(const std::string& source, const std::string& vocabulary_file);
// The vocabulary alone, as open_text_corpus makes it (reading only `vocabulary_file` when
// one is given).
std::vector<char32_t> text_vocabulary(const std::string& source, const std::string& vocabulary_file);

}  // namespace bks
