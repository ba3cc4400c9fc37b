#include "formats/prototxt.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/text_format.h>

#include <memory>
#include <regex>

#include "core/error.h"
#include "core/file_io.h"

namespace bks {
namespace {

class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber col, const std::string& msg) override {
    if (!first_.empty()) return;
    first_ = fmt::format("{}:{}: {}", line + 1, col + 1, msg);
    line_ = line + 1;
    msg_ = msg;
  }
  void AddWarning(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
  const std::string& first() const { return first_; }
  int line() const { return line_; }
  const std::string& message() const { return msg_; }

 private:
  std::string first_, msg_;
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

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// Where a message type sits below `root`: "pooling_param" for PoolingParameter inside a
// LayerParameter; empty when `type` is `root` itself or is not one of its direct fields.
std::string field_path_to(const Descriptor* root, const std::string& type) {
  if (!root || root->full_name() == type) return {};
  for (int i = 0; i < root->field_count(); ++i) {
    const FieldDescriptor* f = root->field(i);
    if (f->message_type() && f->message_type()->full_name() == type) return f->name() + ".";
  }
  return {};
}

std::string string_field(const Message& m, const char* name) {
  const FieldDescriptor* f = m.GetDescriptor()->FindFieldByName(name);
  return f && f->type() == FieldDescriptor::TYPE_STRING ? m.GetReflection()->GetString(m, f) : std::string();
}

// A field the schema lacks is one only some Caffe fork knows (or a typo). Protobuf names its
// internal message type; the user needs the layer (name and type) and the field instead.
// Empty when the error is of another kind.
std::string unknown_field_message(const std::string& text, const std::string& name, const Message& prototype,
                                  const FirstErrorCollector& errors) {
  static const std::regex kUnknown(R"re(Message type "([^"]+)" has no field named "([^"]+)")re");
  std::smatch m;
  if (!std::regex_search(errors.message(), m, kUnknown)) return {};
  const std::string type = m[1], field = m[2];
  std::string where = fmt::format("{}:{}: ", name, errors.line());
  const Descriptor* net = prototype.GetDescriptor();
  const FieldDescriptor* layers = net->FindFieldByName("layer");
  std::string path = field_path_to(net, type);

  // Parse again skipping unknown fields, to learn which layer holds the error's line.
  if (layers && layers->message_type() && type != net->full_name()) {
    std::unique_ptr<Message> copy(prototype.New());
    google::protobuf::TextFormat::Parser lenient;
    lenient.AllowUnknownField(true);
    FirstErrorCollector ignored;
    lenient.RecordErrorsTo(&ignored);
    google::protobuf::TextFormat::ParseInfoTree tree;
    lenient.WriteLocationsTo(&tree);
    if (lenient.ParseFromString(text, copy.get())) {
      int n = copy->GetReflection()->FieldSize(*copy, layers), hit = -1;
      for (int i = 0; i < n; ++i)
        if (tree.GetLocation(layers, i).line + 1 <= errors.line()) hit = i;
      if (hit >= 0) {
        const Message& l = copy->GetReflection()->GetRepeatedMessage(*copy, layers, hit);
        where += fmt::format("layer '{}' ({}): ", string_field(l, "name"), string_field(l, "type"));
        path = field_path_to(layers->message_type(), type);
        if (path.empty() && type != layers->message_type()->full_name())
          path = type.substr(type.rfind('.') + 1) + ".";  // deeper (a filler): name its message
      }
    }
  }
  return fmt::format("{}field '{}{}' is not part of BVLC Caffe or the forks bakusoku supports", where, path, field);
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
    std::string fork = unknown_field_message(text, name, msg, errors);
    if (!fork.empty()) input_error("{}{}", fork, ssd_training_hint(errors.first()));
    if (errors.first().empty()) input_error("{}: cannot parse", name);
    input_error("{}:{}{}", name, errors.first(), enclosing_layer(text, errors.line()));
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
