#include "formats/prototxt.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/text_format.h>

#include "core/error.h"
#include "core/file_io.h"

namespace bks {
namespace {

class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber col, const std::string& msg) override {
    if (first_.empty()) {
      first_ = fmt::format("{}:{}: {}", line + 1, col + 1, msg);
      line_ = line + 1;
    }
  }
  void AddWarning(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
  const std::string& first() const { return first_; }
  int line() const { return line_; }

 private:
  std::string first_;
  int line_ = 0;
};

class NoErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
};

// " (in layer 'conv1')" when 1-based `line` lies inside a top-level `layer` or `layers`
// block (V0's name sits one level deeper, in `layers { layer { name: ... } }`), so an error
// such as an unknown V1 type enum names its layer; empty otherwise. Tokens only: the text
// does not parse.
std::string enclosing_layer(const std::string& text, int line) {
  namespace io = google::protobuf::io;
  io::ArrayInputStream in(text.data(), static_cast<int>(text.size()));
  NoErrors quiet;
  io::Tokenizer tok(&in, &quiet);
  tok.set_comment_style(io::Tokenizer::SH_COMMENT_STYLE);
  int depth = 0, start = 0;
  std::string last_ident, block, inner, name, prev, prev2;
  auto describe = [&] { return name.empty() ? std::string() : fmt::format(" (in layer '{}')", name); };
  while (tok.Next()) {
    const io::Tokenizer::Token& t = tok.current();
    const int at = t.line + 1;
    if (t.type == io::Tokenizer::TYPE_SYMBOL && (t.text == "{" || t.text == "<")) {
      if (depth == 0) {
        block = last_ident;
        name.clear();
        start = at;
      } else if (depth == 1) {
        inner = last_ident;
      }
      ++depth;
    } else if (t.type == io::Tokenizer::TYPE_SYMBOL && (t.text == "}" || t.text == ">")) {
      if (--depth < 0) return "";
      if (depth == 0 && (block == "layer" || block == "layers") && line >= start && line <= at) return describe();
    } else if (t.type == io::Tokenizer::TYPE_STRING && prev == ":" && prev2 == "name" &&
               (depth == 1 || (depth == 2 && inner == "layer" && name.empty()))) {
      io::Tokenizer::ParseString(t.text, &name);
    }
    if (t.type == io::Tokenizer::TYPE_IDENTIFIER) last_ident = t.text;
    prev2 = prev;
    prev = t.text;
  }
  return depth > 0 && (block == "layer" || block == "layers") && line >= start ? describe() : "";
}

// Fields only the SSD fork's training and evaluation files have (AnnotatedData,
// MultiBoxLoss, DetectionEvaluate and their transforms): the error says what they are.
std::string ssd_training_hint(const std::string& error) {
  for (const char* f : {"annotated_data_param", "multibox_loss_param", "detection_evaluate_param", "resize_param",
                        "noise_param", "distort_param", "expand_param", "emit_constraint", "batch_sampler"})
    if (error.find(std::string("no field named \"") + f + "\"") != std::string::npos)
      return " (a field of the SSD fork's training schema: AnnotatedData, MultiBoxLoss and DetectionEvaluate are "
             "not supported; the net's deploy prototxt runs)";
  return "";
}

}  // namespace

void parse_prototxt_string(const std::string& text, const std::string& name, google::protobuf::Message& msg,
                           std::vector<int>* layer_lines) {
  google::protobuf::TextFormat::Parser parser;
  FirstErrorCollector errors;
  parser.RecordErrorsTo(&errors);
  google::protobuf::TextFormat::ParseInfoTree tree;
  parser.WriteLocationsTo(&tree);
  if (!parser.ParseFromString(text, &msg)) {
    if (errors.first().empty()) input_error("{}: cannot parse", name);
    input_error("{}:{}{}{}", name, errors.first(), enclosing_layer(text, errors.line()),
                ssd_training_hint(errors.first()));
  }
  if (layer_lines) {
    layer_lines->clear();
    const auto* field = msg.GetDescriptor()->FindFieldByName("layer");
    // A V1/V0 net (caffe_upgrade.h) has its layers in `layers` instead.
    const auto* v1 = msg.GetDescriptor()->FindFieldByName("layers");
    if (field && v1 && msg.GetReflection()->FieldSize(msg, field) == 0) field = v1;
    if (field) {
      int n = msg.GetReflection()->FieldSize(msg, field);
      for (int i = 0; i < n; ++i) layer_lines->push_back(tree.GetLocation(field, i).line + 1);
    }
  }
}

void read_prototxt(const std::string& path, google::protobuf::Message& msg, std::vector<int>* layer_lines) {
  parse_prototxt_string(read_file(path, "prototxt file"), path, msg, layer_lines);
}

}  // namespace bks
