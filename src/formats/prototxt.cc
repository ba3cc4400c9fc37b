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
    input_error("{}:{}{}", name, errors.first().empty() ? std::string(" cannot parse") : errors.first(),
                ssd_training_hint(errors.first()));
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
