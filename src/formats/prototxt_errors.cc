#include "formats/prototxt_errors.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include <fmt/format.h>

#include <cctype>
#include <regex>
#include <vector>

namespace bks {

namespace {

namespace io = google::protobuf::io;
using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using Token = io::Tokenizer::Token;

class NoErrors : public io::ErrorCollector {
 public:
  void AddError(int, io::ColumnNumber, const std::string&) override {}
};

// The file's tokens, as protobuf's parser reads them ('#' comments skipped). The text may
// not parse: the tokenizer carries on past what it cannot read.
std::vector<Token> tokenize(const std::string& text) {
  io::ArrayInputStream in(text.data(), static_cast<int>(text.size()));
  NoErrors quiet;
  io::Tokenizer tok(&in, &quiet);
  tok.set_comment_style(io::Tokenizer::SH_COMMENT_STYLE);
  std::vector<Token> out;
  while (tok.Next()) out.push_back(tok.current());
  return out;
}

bool is(const Token& t, const char* text) { return t.type == io::Tokenizer::TYPE_SYMBOL && t.text == text; }
bool opens(const Token& t) { return is(t, "{") || is(t, "<"); }
bool closes(const Token& t) { return is(t, "}") || is(t, ">"); }

// Where an error lies: the fields whose braces enclose it and the field named last in the
// innermost of them, with the top-level layer block holding it.
struct Spot {
  std::vector<std::string> blocks;  // outermost first: "layer", "inner_product_param", "weight_filler"
  std::string field;                // the field named last in the innermost block
  int field_token = -1;             // its name's token
  bool in_layer = false;            // blocks[0] is a top-level `layer` (or V1/V0 `layers`) block
  std::string layer_name, layer_type;
};

// The spot before token `k` (tokens.size(): the end of the file). The rest of the layer
// block is read too, as its name and type may come after the error.
Spot locate(const std::vector<Token>& tokens, size_t k) {
  struct Frame {
    std::string name, pending;  // the block's field; the field named last inside it
    int pending_at = -1;
  };
  std::vector<Frame> stack(1);
  Spot s;
  bool snapped = false, layer_block = false;
  std::string name, type;  // of the current top-level layer block
  for (size_t i = 0; i <= tokens.size(); ++i) {
    if (i == k) {
      for (size_t d = 1; d < stack.size(); ++d) s.blocks.push_back(stack[d].name);
      s.field = stack.back().pending;
      s.field_token = stack.back().pending_at;
      s.in_layer = layer_block && stack.size() > 1;
      snapped = true;
      if (!s.in_layer) break;
    }
    if (i == tokens.size()) break;
    const Token& t = tokens[i];
    const bool named = i + 1 < tokens.size() && (is(tokens[i + 1], ":") || opens(tokens[i + 1]));
    if (t.type == io::Tokenizer::TYPE_IDENTIFIER && named) {
      stack.back().pending = t.text;
      stack.back().pending_at = static_cast<int>(i);
    } else if (opens(t)) {
      if (stack.size() == 1) {
        layer_block = stack.back().pending == "layer" || stack.back().pending == "layers";
        name.clear();
        type.clear();
      }
      stack.push_back({stack.back().pending, "", -1});
    } else if (closes(t)) {
      if (stack.size() == 1) break;  // unbalanced: nothing more can be learnt
      stack.pop_back();
      if (stack.size() == 1 && snapped) break;  // the layer holding the error ends here
    } else if (layer_block && i >= 2 && is(tokens[i - 1], ":")) {
      // A layer's name and type sit in its block (V0: one level deeper, in `layers { layer { } }`).
      const size_t depth = stack.size() - 1;
      const bool v0 = depth == 2 && stack[2].name == "layer";
      std::string value = t.text;  // an identifier: a V1 type (an enum)
      if (t.type == io::Tokenizer::TYPE_STRING) io::Tokenizer::ParseString(t.text, &value);
      const bool text_value = t.type == io::Tokenizer::TYPE_STRING || t.type == io::Tokenizer::TYPE_IDENTIFIER;
      if (text_value && tokens[i - 2].text == "name" && (depth == 1 || (v0 && name.empty()))) name = value;
      if (text_value && tokens[i - 2].text == "type" && (depth == 1 || (v0 && type.empty()))) type = value;
    }
  }
  s.layer_name = name;
  s.layer_type = type;
  return s;
}

// The first token at or after 0-based (line, column).
size_t token_at(const std::vector<Token>& tokens, int line, int column) {
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i].line > line || (tokens[i].line == line && tokens[i].column >= column)) return i;
  return tokens.size();
}

// "layer 'ip' (InnerProduct): "; the type left out where the error is about it.
std::string layer_words(const std::string& name, const std::string& type, bool with_type = true) {
  std::string s = name.empty() ? std::string("layer without a name") : "layer '" + name + "'";
  if (with_type) s += " (" + (type.empty() ? std::string("no type") : type) + ")";
  return s + ": ";
}

// "inner_product_param.weight_filler.typ": the blocks inside the layer, then `field`.
std::string path_of(const Spot& s, const std::string& field) {
  std::string path;
  for (size_t d = s.in_layer ? 1 : 0; d < s.blocks.size(); ++d) path += s.blocks[d] + ".";
  return path + field;
}

// The values of the enum `field` inside `blocks` below `root` ("MAX, AVE or STOCHASTIC");
// empty when the schema has no such field or it has too many values to list.
std::string enum_values(const Descriptor* root, const std::vector<std::string>& blocks, const std::string& field) {
  const Descriptor* d = root;
  for (const auto& b : blocks) {
    const FieldDescriptor* f = d ? d->FindFieldByName(b) : nullptr;
    d = f ? f->message_type() : nullptr;
  }
  const FieldDescriptor* f = d ? d->FindFieldByName(field) : nullptr;
  if (!f || !f->enum_type() || f->enum_type()->value_count() > 12) return {};
  std::string list;
  const int n = f->enum_type()->value_count();
  for (int i = 0; i < n; ++i) list += (i == 0 ? "" : i + 1 == n ? " or " : ", ") + f->enum_type()->value(i)->name();
  return list;
}

// Fields only the SSD fork's training and evaluation files have (AnnotatedData,
// MultiBoxLoss, DetectionEvaluate and their transforms): the error says what they are.
std::string ssd_training_hint(const std::string& field) {
  for (const char* f : {"annotated_data_param", "multibox_loss_param", "detection_evaluate_param", "resize_param",
                        "noise_param", "distort_param", "expand_param", "emit_constraint", "batch_sampler"})
    if (field == f)
      return " (a field of the SSD fork's training schema: AnnotatedData, MultiBoxLoss and DetectionEvaluate are "
             "not supported; the net's deploy prototxt runs)";
  return "";
}

// Protobuf's sentence after "field 'x': ", starting in lower case ("expected integer, got: x").
std::string lowered(std::string s) {
  if (s.size() > 1 && std::isupper(static_cast<unsigned char>(s[0])) && std::islower(static_cast<unsigned char>(s[1])))
    s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
  return s;
}

}  // namespace

std::string describe_parse_error(const std::string& text, const std::string& name, const Descriptor* root,
                                 const TextParseError& e) {
  static const std::regex kUnknown(R"re(^Message type "[^"]+" has no field named "([^"]+)"\.)re");
  static const std::regex kExtension(R"re(^Extension "([^"]+)" is not defined or is not an extension of)re");
  static const std::regex kEnum(R"re(^Unknown enumeration value of "([^"]*)" for field "([^"]+)"\.)re");
  static const std::regex kBool(R"re(^Invalid value for boolean field "([^"]+)"\. Value: "([^"]*)"\.)re");
  static const std::regex kTwice(R"re(^Non-repeated field "([^"]+)" is specified multiple times\.)re");
  const std::vector<Token> tokens = tokenize(text);
  const size_t k = token_at(tokens, e.line, e.column);
  const Spot s = locate(tokens, k);
  const Token* before = k > 0 ? &tokens[k - 1] : nullptr;  // a value protobuf read before it complained
  const auto at = [&](const Token* t, bool column) {
    const int line = t ? t->line : e.line, col = t ? t->column : e.column;
    return column ? fmt::format("{}:{}:{}: ", name, line + 1, col + 1) : fmt::format("{}:{}: ", name, line + 1);
  };
  // The token naming `field`: the one before the error or the field named last.
  const auto name_token = [&](const std::string& field) -> const Token* {
    if (before && before->text == field) return before;
    return s.field == field && s.field_token >= 0 ? &tokens[s.field_token] : nullptr;
  };
  // Protobuf's message quotes what was typed (a field name, an enum value). libstdc++'s
  // regex matcher recurses once per character it matches, so a crafted name of 500 KB
  // would exhaust the stack. No Caffe name or value is that long: such a message is not
  // matched, and replaced by one saying so.
  constexpr size_t kMaxMessage = 1024;
  const std::string message =
      e.message.size() > kMaxMessage
          ? fmt::format("a name or value of about {} bytes, longer than any Caffe name", e.message.size())
          : e.message;
  std::smatch m;
  std::string field;
  if (std::regex_search(message, m, kUnknown))
    field = m[1];
  else if (std::regex_search(message, m, kExtension))
    field = "[" + m[1].str() + "]";
  if (!field.empty())
    return fmt::format("{}{}field '{}' is not part of BVLC Caffe or the forks bakusoku supports{}",
                       at(name_token(field), false), s.in_layer ? layer_words(s.layer_name, s.layer_type) : "",
                       path_of(s, field), ssd_training_hint(field));
  std::string what, place;
  if (std::regex_search(message, m, kEnum)) {
    field = m[2];
    const std::string values = enum_values(root, s.blocks, field);
    what = fmt::format(": unknown value {}{}", m[1].str(), values.empty() ? "" : "; it takes " + values);
    place = at(before, true);
  } else if (std::regex_search(message, m, kBool)) {
    field = m[1];
    what = fmt::format(": expected true or false, got: {}", m[2].str());
    place = at(before, true);
  } else if (std::regex_search(message, m, kTwice)) {
    field = m[1];
    what = " is given more than once; it takes one value";
    place = at(name_token(field), true);
  } else {
    // A value protobuf could not read ("Expected integer, got: x") lies after its field's
    // ':' (and a minus sign); any other error is about the block it is in.
    const bool in_value =
        s.field_token >= 0 && before &&
        ((is(*before, ":") && s.field_token + 2 == static_cast<int>(k)) ||
         (is(*before, "-") && k >= 2 && is(tokens[k - 2], ":") && s.field_token + 3 == static_cast<int>(k)));
    if (in_value) field = s.field;
    what = message;
    // At the end of the file protobuf names an empty token.
    if (k == tokens.size() && what.size() >= 5 && what.compare(what.size() - 5, 5, "got: ") == 0)
      what += "the end of the file";
    if (!field.empty()) what = ": " + lowered(what);
    place = at(nullptr, true);
  }
  // A layer whose type is what is wrong is named without it.
  const std::string where = s.in_layer ? layer_words(s.layer_name, s.layer_type, path_of(s, field) != "type") : "";
  if (!field.empty()) return fmt::format("{}{}field '{}'{}", place, where, path_of(s, field), what);
  const std::string inside = path_of(s, "");
  if (!where.empty() || !inside.empty()) what = lowered(what);
  return fmt::format("{}{}{}{}", place, where,
                     inside.empty() ? "" : "in '" + inside.substr(0, inside.size() - 1) + "': ", what);
}

std::string describe_missing_fields(const std::string& name, const Message& parsed,
                                    const google::protobuf::TextFormat::ParseInfoTree& tree) {
  std::vector<std::string> missing;
  parsed.FindInitializationErrors(&missing);
  if (missing.empty()) return {};
  // Protobuf's path: "layer[1].clip_param.max". Its first part names a field of `parsed`.
  static const std::regex kHead(R"(^(\w+)(?:\[(\d{1,9})\])?\.(.+)$)");
  std::smatch m;
  const std::string& path = missing.front();
  if (std::regex_match(path, m, kHead)) {
    const FieldDescriptor* f = parsed.GetDescriptor()->FindFieldByName(m[1]);
    const int index = m[2].matched ? std::stoi(m[2]) : -1;
    if (f && (f->is_repeated() == (index >= 0))) {
      const int line = tree.GetLocation(f, index).line + 1;  // 0: no location
      const std::string place = line > 0 ? fmt::format("{}:{}", name, line) : name;
      const bool layer = f->message_type() && index >= 0 && (f->name() == "layer" || f->name() == "layers");
      if (!layer) return fmt::format("{}: field '{}' is required", place, path);
      const Message& l = parsed.GetReflection()->GetRepeatedMessage(parsed, f, index);
      const auto text_of = [&](const char* field) -> std::string {
        const FieldDescriptor* d = l.GetDescriptor()->FindFieldByName(field);
        if (!d || !l.GetReflection()->HasField(l, d)) return {};
        if (d->type() == FieldDescriptor::TYPE_STRING) return l.GetReflection()->GetString(l, d);
        return d->enum_type() ? l.GetReflection()->GetEnum(l, d)->name() : std::string();
      };
      return fmt::format("{}: {}field '{}' is required", place, layer_words(text_of("name"), text_of("type")),
                         m[3].str());
    }
  }
  return fmt::format("{}: field '{}' is required", name, path);
}

}  // namespace bks
