#include "formats/prototxt.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include "core/error.h"
#include "core/file_io.h"
#include "formats/prototxt_errors.h"

namespace bks {
namespace {

class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber col, const std::string& msg) override {
    if (first_.message.empty()) first_ = {line, col, msg};
  }
  void AddWarning(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
  const TextParseError& first() const { return first_; }

 private:
  TextParseError first_;
};

}  // namespace

void parse_prototxt_string(const std::string& text, const std::string& name, google::protobuf::Message& msg,
                           std::vector<int>* layer_lines) {
  google::protobuf::TextFormat::Parser parser;
  FirstErrorCollector errors;
  parser.RecordErrorsTo(&errors);
  google::protobuf::TextFormat::ParseInfoTree tree;
  parser.WriteLocationsTo(&tree);
  // Required fields are checked below, where the parsed layers can be named.
  parser.AllowPartialMessage(true);
  if (!parser.ParseFromString(text, &msg)) {
    if (errors.first().message.empty()) input_error("{}: cannot parse", name);
    throw InputError(describe_parse_error(text, name, msg.GetDescriptor(), errors.first()));
  }
  if (std::string missing = describe_missing_fields(name, msg, tree); !missing.empty()) throw InputError(missing);
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
