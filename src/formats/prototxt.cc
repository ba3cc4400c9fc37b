#include "formats/prototxt.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include "core/error.h"

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

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) input_error("{}: cannot open {} ({})", path, what, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void parse_prototxt_string(const std::string& text, const std::string& name,
                           google::protobuf::Message& msg, std::vector<int>* layer_lines) {
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

void read_binary_proto(const std::string& path, google::protobuf::Message& msg) {
  std::string bytes = read_file(path, "binary proto file");
  if (!msg.ParseFromString(bytes)) input_error("{}: not a valid binary {}", path, msg.GetTypeName());
}

void write_file_atomic(const std::string& path, const std::string& data) {
  write_file_atomic(path, std::vector<std::string_view>{data});
}

void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) runtime_error("{}: cannot write ({})", tmp, std::strerror(errno));
  for (std::string_view data : pieces) {
    size_t done = 0;
    while (done < data.size()) {
      ssize_t w = ::write(fd, data.data() + done, data.size() - done);
      if (w < 0) {
        if (errno == EINTR) continue;
        int e = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        runtime_error("{}: write failed ({})", tmp, std::strerror(e));
      }
      done += static_cast<size_t>(w);
    }
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    runtime_error("{}: cannot flush to disk ({})", tmp, std::strerror(errno));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    ::unlink(tmp.c_str());
    runtime_error("{}: cannot rename into place ({})", path, std::strerror(errno));
  }
}

}  // namespace bks
