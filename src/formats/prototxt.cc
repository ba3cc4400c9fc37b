#include "formats/prototxt.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include "core/error.h"
#include "core/file_io.h"

namespace bks {
namespace {

class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber col, const std::string& msg) override {
    if (first_.empty()) first_ = fmt::format("{}:{}: {}", line + 1, col + 1, msg);
  }
  void AddWarning(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

}  // namespace

void parse_prototxt_string(const std::string& text, const std::string& name, google::protobuf::Message& msg,
                           std::vector<int>* layer_lines) {
  google::protobuf::TextFormat::Parser parser;
  FirstErrorCollector errors;
  parser.RecordErrorsTo(&errors);
  google::protobuf::TextFormat::ParseInfoTree tree;
  parser.WriteLocationsTo(&tree);
  if (!parser.ParseFromString(text, &msg)) {
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
