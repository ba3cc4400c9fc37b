#include "formats/prototxt.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/io/tokenizer.h>
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
    if (!fork.empty()) input_error("{}", fork);
    input_error("{}:{}", name, errors.first().empty() ? std::string(" cannot parse") : errors.first());
  }
  if (layer_lines) {
    layer_lines->clear();
    const auto* field = msg.GetDescriptor()->FindFieldByName("layer");
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
