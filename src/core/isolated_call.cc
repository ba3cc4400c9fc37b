#include "core/isolated_call.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>

#include "core/error.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/common_interface_defs.h>
#define BKS_HAS_SANITIZER_CALLBACKS 1
#endif
#endif

namespace bks {
namespace {

// The output file starts with this header; the child writes it last, so a child that dies
// half-way leaves no valid header behind.
struct Header {
  char magic[8];
  uint32_t status;  // kOk, kInputError, kRuntimeError
  uint32_t unused;
  uint64_t size;  // bytes after the header: the result, or the error message
};
constexpr char kMagic[8] = {'b', 'k', 's', 'c', 'h', 'i', 'l', 'd'};
enum : uint32_t { kOk = 0, kInputError = 1, kRuntimeError = 2 };

bool pwrite_all(int fd, const void* data, size_t n, off_t at) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::pwrite(fd, p, n, at);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w, n -= static_cast<size_t>(w), at += w;
  }
  return true;
}

// Runs `work` after the header's place in `fd`, then writes the header. Returns false when
// the output could not be written (the result is then no valid file).
bool write_result(int fd, const std::function<void(ChildWriter&)>& work) {
  uint32_t status = kOk;
  std::string message;
  try {
    if (::lseek(fd, sizeof(Header), SEEK_SET) < 0) runtime_error("cannot seek in the result file");
    ChildWriter out(fd);
    work(out);
  } catch (const InputError& e) {
    status = kInputError, message = e.what();
  } catch (const std::exception& e) {
    status = kRuntimeError, message = e.what();
  }
  off_t end = ::lseek(fd, 0, SEEK_CUR);
  if (status != kOk) {
    end = static_cast<off_t>(sizeof(Header) + message.size());
    // The message replaces whatever result the work had written before it failed.
    if (::ftruncate(fd, end) != 0 || !pwrite_all(fd, message.data(), message.size(), sizeof(Header))) return false;
  }
  if (end < static_cast<off_t>(sizeof(Header))) return false;
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.status = status;
  h.size = static_cast<uint64_t>(end) - sizeof(Header);
  return pwrite_all(fd, &h, sizeof h, 0);
}

// The child: writes the result and exits. Never returns.
[[noreturn]] void child_main(int fd, const std::function<void(ChildWriter&)>& work) {
#ifdef BKS_HAS_SANITIZER_CALLBACKS
  // Under a fuzzer, its death callback would file the child's contained crash as a finding.
  __sanitizer_set_death_callback(nullptr);
#endif
  // If memory runs out, the kernel kills the child, not the parent (a server, a trainer).
  int adj = ::open("/proc/self/oom_score_adj", O_WRONLY);
  if (adj >= 0) {
    [[maybe_unused]] ssize_t w = ::write(adj, "1000", 4);
    ::close(adj);
  }
  // And the library gets kChildMemoryHeadroom beyond the address space the child inherits
  // (on a crafted 2 KB file, libhdf5 asks for gigabytes while looking up a dataset); the work
  // allows more once it knows what it reads (allow_child_memory).
  long pages = 0;
  if (FILE* statm = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(statm, "%ld", &pages) != 1) pages = 0;
    std::fclose(statm);
  }
  if (pages > 0) {
    rlimit lim{};
    ::getrlimit(RLIMIT_AS, &lim);
    const rlim_t want =
        static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE)) + kChildMemoryHeadroom;
    if (lim.rlim_cur == RLIM_INFINITY || want < lim.rlim_cur) {
      lim.rlim_cur = want;
      ::setrlimit(RLIMIT_AS, &lim);
    }
  }
  // _exit: the parent's atexit handlers and stdio buffers are not the child's to run.
  ::_exit(write_result(fd, work) ? 0 : 3);
}

bool g_in_process = false;

std::string describe_status(int st) {
  if (WIFSIGNALED(st)) return fmt::format("killed by signal {}, {}", WTERMSIG(st), strsignal(WTERMSIG(st)));
  return fmt::format("exit status {}", WEXITSTATUS(st));
}

}  // namespace

ChildOutput::ChildOutput(void* map, size_t map_size, size_t offset, size_t size)
    : map_(map), map_size_(map_size), offset_(offset), size_(size) {}

ChildOutput::~ChildOutput() {
  if (map_) ::munmap(map_, map_size_);
}

ChildOutput::ChildOutput(ChildOutput&& o) noexcept
    : map_(o.map_), map_size_(o.map_size_), offset_(o.offset_), size_(o.size_) {
  o.map_ = nullptr;
}

void ChildWriter::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd_, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) runtime_error("cannot pass the result to the parent process: {}", std::strerror(errno));
    p += w, n -= static_cast<size_t>(w);
  }
}

const uint8_t* ChildReader::bytes(size_t n) {
  if (n > left()) input_error("{}: the reading process returned a truncated result", subject_);
  const uint8_t* p = out_.data() + pos_;
  pos_ += n;
  return p;
}

void run_isolated_calls_in_process(bool on) { g_in_process = on; }

void allow_child_memory(uint64_t bytes) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_AS, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return;
  lim.rlim_cur =
      lim.rlim_max != RLIM_INFINITY && lim.rlim_max - lim.rlim_cur < bytes ? lim.rlim_max : lim.rlim_cur + bytes;
  ::setrlimit(RLIMIT_AS, &lim);
}

ChildOutput run_isolated(const std::string& subject, const char* library,
                         const std::function<void(ChildWriter&)>& work) {
  int fd = ::memfd_create("bakusoku-child-result", MFD_CLOEXEC);
  if (fd < 0)
    runtime_error("{}: cannot create a result file for the reading process: {}", subject, std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (g_in_process) {
    if (!write_result(fd, work)) runtime_error("{}: cannot write the result of reading it", subject);
  } else {
    const pid_t pid = ::fork();
    if (pid < 0) runtime_error("{}: cannot start a process to read it: {}", subject, std::strerror(errno));
    if (pid == 0) child_main(fd, work);
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0) {
      if (errno != EINTR) runtime_error("{}: lost the reading process: {}", subject, std::strerror(errno));
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      input_error("{}: {} crashed while reading it ({}); the file is damaged or crafted", subject, library,
                  describe_status(st));
  }
  struct stat sb {};
  Header h{};
  if (::fstat(fd, &sb) != 0 || static_cast<size_t>(sb.st_size) < sizeof h || ::pread(fd, &h, sizeof h, 0) != sizeof h ||
      std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.size != static_cast<uint64_t>(sb.st_size) - sizeof h)
    input_error("{}: the process reading it with {} returned no valid result", subject, library);
  const size_t total = static_cast<size_t>(sb.st_size);
  void* map = ::mmap(nullptr, total, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED)
    runtime_error("{}: cannot map the reading process's result: {}", subject, std::strerror(errno));
  ChildOutput out(map, total, sizeof h, static_cast<size_t>(h.size));
  if (h.status == kOk) return out;
  std::string message(reinterpret_cast<const char*>(out.data()), out.size());
  if (h.status == kInputError) throw InputError(message);
  throw RuntimeError(message);
}

}  // namespace bks
