#include "server/dot_text.h"

#include <fmt/format.h>

#include <algorithm>

namespace bks::server {

namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is not one.
size_t utf8_length(std::string_view s, size_t i) {
  const auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((b(k) & 0xc0) != 0x80) return 0;
  // Overlong forms, UTF-16 surrogates and code points past U+10FFFF.
  if ((c == 0xe0 && b(1) < 0xa0) || (c == 0xed && b(1) > 0x9f) || (c == 0xf0 && b(1) < 0x90) ||
      (c == 0xf4 && b(1) > 0x8f))
    return 0;
  return n;
}

// Repeated values said once: "5" for {5, 5}, "3×5" otherwise.
std::string axes_text(const std::vector<int64_t>& v, bool always_all = false) {
  if (!always_all && !v.empty() && std::all_of(v.begin(), v.end(), [&](int64_t x) { return x == v[0]; }))
    return std::to_string(v[0]);
  return shape_text(v);
}

// Picks the attributes worth showing on a box from any op's attribute struct, by name.
class KeyAttrs : public AttrVisitor {
 public:
  std::vector<std::string> parts;

  void field(const char* name, bool& v) override {
    if (is(name, "global") && v) parts.push_back("global");
  }
  void field(const char* name, int64_t& v) override {
    if (is(name, "num_output")) parts.push_back(fmt::format("num_output {}", v));
    if (is(name, "batch_size")) parts.push_back(fmt::format("batch {}", v));
    if (is(name, "group") && v != 1) parts.push_back(fmt::format("group {}", v));
    if (is(name, "top_k") && v != 1) parts.push_back(fmt::format("top_k {}", v));
  }
  void field(const char* name, float& v) override {
    if (is(name, "dropout_ratio")) parts.push_back(fmt::format("ratio {:g}", v));
    if (is(name, "negative_slope") && v != 0.f) parts.push_back(fmt::format("slope {:g}", v));
  }
  void field(const char*, std::string&) override {}
  void field(const char* name, std::vector<int64_t>& v) override {
    if (v.empty()) return;
    const bool all_zero = std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 0; });
    const bool all_one = std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 1; });
    if (is(name, "kernel")) parts.push_back("kernel " + axes_text(v, true));
    if (is(name, "stride")) parts.push_back("stride " + axes_text(v));
    if (is(name, "pad") && !all_zero) parts.push_back("pad " + axes_text(v));
    if (is(name, "dilation") && !all_one) parts.push_back("dilation " + axes_text(v));
  }
  void field(const char*, std::vector<float>&) override {}
  void field(const char*, std::vector<std::string>&) override {}
  void field(const char*, AttrStruct&) override {}  // nested settings (fillers, transforms)
  void field(const char* name, int& v, std::span<const char* const> names) override {
    if ((is(name, "method") || is(name, "operation")) && v >= 0 && static_cast<size_t>(v) < names.size())
      parts.push_back(names[v]);
  }

 private:
  static bool is(const char* a, const char* b) { return std::string_view(a) == b; }
};

}  // namespace

std::string dot_html_text(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t n = utf8_length(s, i);
      out += n ? std::string(s.substr(i, n)) : "?";
      i += n ? n : 1;
      continue;
    }
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c < 0x20 || c == 0x7f ? ' ' : static_cast<char>(c);
    }
    ++i;
  }
  return out;
}

std::string shape_text(const Shape& s) {
  if (s.empty()) return "scalar";
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "×" : "") + std::to_string(s[i]);
  return out;
}

std::string attrs_text(const Node& n) {
  if (!n.attrs) return "";
  KeyAttrs k;
  visit_const(*n.attrs.get(), k);
  std::string out;
  for (const auto& p : k.parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

std::vector<std::string> wrap(const std::string& text, size_t width) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(", ", start);
    std::string part = text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!lines.empty() && lines.back().size() + 2 + part.size() <= width)
      lines.back() += ", " + part;
    else
      lines.push_back(part);
    if (end == std::string::npos) break;
    start = end + 2;
  }
  return lines;
}

}  // namespace bks::server
