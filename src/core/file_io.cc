#include "core/file_io.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include <fmt/format.h>
#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include "core/error.h"

namespace bks {

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) input_error("{}: cannot open {} ({})", path, what, std::strerror(errno));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

// What a binary protobuf file holds, in Caffe's words (its schema's type names are ours).
std::string binary_kind(const google::protobuf::Message& msg) {
  const std::string& type = msg.GetDescriptor()->name();
  if (type == "NetParameter") return "Caffe weights file (.caffemodel)";
  if (type == "BlobProto") return "Caffe blob file (.binaryproto)";
  return "binary protobuf file";
}

}  // namespace

void read_binary_proto(const std::string& path, google::protobuf::Message& msg) {
  std::string bytes = read_file(path, "binary proto file");
  // Partial first: protobuf's own check would log and name its message type.
  if (!msg.ParsePartialFromString(bytes)) input_error("{}: not a valid {}", path, binary_kind(msg));
  if (!msg.IsInitialized())
    input_error("{}: the {} lacks required fields ({})", path, binary_kind(msg), msg.InitializationErrorString());
}

void write_file_atomic(const std::string& path, const std::string& data) {
  write_file_atomic(path, std::vector<std::string_view>{data});
}

namespace {

constexpr std::string_view kTempMarker = ".tmp-";

// Makes the rename itself durable: without it a crash can lose the new directory entry.
void sync_directory(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

// Unique per writer, so two writers of one file never share a temporary, and a later start
// can tell whose it was (remove_stale_temporaries).
std::string temporary_path(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return fmt::format("{}{}{}-{}", path, kTempMarker, ::getpid(), counter++);
}

void write_file_atomic(const std::string& path, const std::vector<std::string_view>& pieces) {
  const std::string tmp = temporary_path(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
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
  sync_directory(path);
}

int remove_stale_temporaries(const std::string& dir) {
  int removed = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    size_t at = name.rfind(kTempMarker);
    if (at == std::string::npos || !e.is_regular_file(ec)) continue;
    // The writer's pid: a temporary of a live process is still being written.
    long pid = std::strtol(name.c_str() + at + kTempMarker.size(), nullptr, 10);
    if (pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM)) continue;
    if (std::filesystem::remove(e.path(), ec)) ++removed;
  }
  return removed;
}

FileKind detect_file_kind(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return FileKind::missing;
  if (std::filesystem::is_directory(path, ec)) return FileKind::directory;
  std::ifstream in(path, std::ios::binary);
  unsigned char h[8] = {0};
  in.read(reinterpret_cast<char*>(h), 8);
  auto got = in.gcount();
  if (got >= 2 && h[0] == 0x1f && h[1] == 0x8b) return FileKind::gzip;
  if (got >= 8 && h[0] == 0x89 && h[1] == 'H' && h[2] == 'D' && h[3] == 'F') return FileKind::hdf5;
  if (got >= 4 && h[0] == 0 && h[1] == 0 && h[2] == 0x08 && h[3] >= 1 && h[3] <= 4) return FileKind::idx;
  bool printable = got > 0;
  for (int i = 0; i < got; ++i)
    printable = printable && (h[i] == '\n' || h[i] == '\r' || h[i] == '\t' || (h[i] >= 32 && h[i] < 127));
  return printable ? FileKind::text : FileKind::unknown;
}

std::string find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  const std::string dirs = path ? path : "/usr/bin:/bin";
  for (size_t start = 0; start <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', start), dirs.size());
    std::string candidate = end > start ? dirs.substr(start, end - start) : std::string(".");
    candidate.append("/").append(name);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return "";
}

std::string self_executable() {
  std::error_code ec;
  std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  if (ec || self.empty()) return "bakusoku";
  // The link of a file replaced since start reads "<path> (deleted)": run what is there now.
  constexpr std::string_view kDeleted = " (deleted)";
  if (self.ends_with(kDeleted)) self.resize(self.size() - kDeleted.size());
  return self;
}

std::string shell_word(const std::string& w) {
  if (!w.empty() && w.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=/.,:@%") ==
                        std::string::npos)
    return w;
  std::string q = "'";
  for (char c : w) {
    if (c == '\'')
      q.append("'\\''");
    else
      q.push_back(c);
  }
  q.push_back('\'');
  return q;
}

}  // namespace bks
