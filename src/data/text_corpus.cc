#include "data/text_corpus.h"

#include <glob.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "core/file_io.h"
#include "data/weak_cache.h"

namespace bks {

int64_t vocabulary_index(const std::vector<char32_t>& vocabulary, char32_t c) {
  auto it = std::lower_bound(vocabulary.begin(), vocabulary.end(), c);
  return it != vocabulary.end() && *it == c ? it - vocabulary.begin() : -1;
}

int64_t TextCorpus::index_of(char32_t c) const { return vocabulary_index(vocabulary, c); }

namespace {

// The length of the sequence a lead byte starts (0: not a lead byte), and the smallest code
// point that length may encode (anything below is an overlong form).
struct Lead {
  int length;
  char32_t min;
};
Lead lead_of(unsigned char b) {
  if (b < 0x80) return {1, 0};
  if ((b & 0xE0) == 0xC0) return {2, 0x80};
  if ((b & 0xF0) == 0xE0) return {3, 0x800};
  if ((b & 0xF8) == 0xF0) return {4, 0x10000};
  return {0, 0};
}

[[noreturn]] void not_utf8(std::string_view bytes, size_t at, const std::string& name, const char* why) {
  const int64_t line = std::count(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(at), '\n') + 1;
  input_error("{}: not UTF-8 text: {} at byte {} (line {})", name, why, at, line);
}

}  // namespace

std::vector<char32_t> decode_utf8(std::string_view bytes, const std::string& name) {
  std::vector<char32_t> out;
  out.reserve(bytes.size());
  size_t i = bytes.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0;
  while (i < bytes.size()) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    const Lead lead = lead_of(b);
    if (lead.length == 0) not_utf8(bytes, i, name, "a byte that starts no character");
    if (i + static_cast<size_t>(lead.length) > bytes.size()) not_utf8(bytes, i, name, "a character cut short");
    char32_t c = lead.length == 1 ? b : b & (0x7F >> lead.length);
    for (int k = 1; k < lead.length; ++k) {
      const auto cont = static_cast<unsigned char>(bytes[i + static_cast<size_t>(k)]);
      if ((cont & 0xC0) != 0x80) not_utf8(bytes, i, name, "a character cut short");
      c = (c << 6) | (cont & 0x3F);
    }
    if (c < lead.min) not_utf8(bytes, i, name, "an overlong encoding");
    if (c >= 0xD800 && c <= 0xDFFF) not_utf8(bytes, i, name, "a surrogate code point");
    if (c > 0x10FFFF) not_utf8(bytes, i, name, "a code point past U+10FFFF");
    out.push_back(c);
    i += static_cast<size_t>(lead.length);
  }
  return out;
}

std::string encode_utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

std::string describe_char(char32_t c) {
  const std::string code = fmt::format("U+{:04X}", static_cast<uint32_t>(c));
  return c > 0x20 && c < 0x7F ? fmt::format("'{}' {}", static_cast<char>(c), code) : code;
}

std::vector<std::string> text_source_files(const std::string& source) {
  if (source.find_first_of("*?[") == std::string::npos) {
    if (std::filesystem::is_directory(source))
      input_error("{}: is a directory; name a text file, or its files with a pattern such as {}/*", source, source);
    // A device or a pipe has no size to check before reading (and /dev/zero no end).
    struct stat st {};
    if (::stat(source.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) input_error("{}: is not a regular file", source);
    return {source};
  }
  glob_t g{};
  const int rc = ::glob(source.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> files;
  for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) {
    struct stat st {};
    if (::stat(g.gl_pathv[i], &st) == 0 && S_ISREG(st.st_mode)) files.emplace_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
  if (files.empty()) input_error("{}: no file matches", source);
  return files;  // glob sorts them
}

namespace {

// The text of every file, checked as UTF-8, one after the other.
std::vector<char32_t> read_text(const std::vector<std::string>& files, const std::string& source) {
  int64_t total = 0;
  std::vector<char32_t> text;
  for (const std::string& f : files) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(f, ec);
    if (!ec && static_cast<int64_t>(size) > kMaxTextBytes - total)
      input_error("{}: more than {} MiB of text", source, kMaxTextBytes >> 20);
    const std::string bytes = read_file(f, "text");
    if (static_cast<int64_t>(bytes.size()) > kMaxTextBytes - total)
      input_error("{}: more than {} MiB of text", source, kMaxTextBytes >> 20);
    total += static_cast<int64_t>(bytes.size());
    std::vector<char32_t> part = decode_utf8(bytes, f);
    text.insert(text.end(), part.begin(), part.end());
  }
  if (text.empty()) input_error("{}: holds no text", source);
  return text;
}

// In code point order. One pass over a flag per code point (decode_utf8 keeps them at most
// U+10FFFF), not a sort of the whole text: sample and every training run start with this.
std::vector<char32_t> distinct(const std::vector<char32_t>& chars) {
  std::vector<bool> seen(0x110000, false);
  for (char32_t c : chars) seen[c] = true;
  std::vector<char32_t> out;
  for (char32_t c = 0; c < seen.size(); ++c)
    if (seen[c]) out.push_back(c);
  return out;
}

std::shared_ptr<const TextCorpus> read_corpus(const std::string& source, const std::string& vocabulary_file) {
  auto c = std::make_shared<TextCorpus>();
  c->source = source;
  c->files = text_source_files(source);
  std::vector<char32_t> text = read_text(c->files, source);
  c->vocabulary = vocabulary_file.empty() ? distinct(text) : text_vocabulary(source, vocabulary_file);
  c->ids.resize(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const int64_t id = c->index_of(text[i]);
    if (id < 0)
      input_error("{}: character {} (at character {} of the text) is not in the vocabulary of {}", source,
                  describe_char(text[i]), i, vocabulary_file);
    c->ids[i] = static_cast<uint32_t>(id);
  }
  return c;
}

WeakCache<TextCorpus>& corpus_cache() {
  static WeakCache<TextCorpus> cache;
  return cache;
}

}  // namespace

std::vector<char32_t> text_vocabulary(const std::string& source, const std::string& vocabulary_file) {
  if (!vocabulary_file.empty()) return distinct(read_text({vocabulary_file}, vocabulary_file));
  return distinct(read_text(text_source_files(source), source));
}

std::shared_ptr<const TextCorpus> open_text_corpus(const std::string& source, const std::string& vocabulary_file) {
  return corpus_cache().get(source + '\n' + vocabulary_file, [&] { return read_corpus(source, vocabulary_file); });
}

}  // namespace bks
