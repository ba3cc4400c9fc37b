// Runs a third-party parser (libhdf5) on an untrusted file in a forked child, so that a crash
// inside that library on a crafted file becomes an InputError instead of killing bakusoku or
// the server. The child writes its result into an anonymous memory file that the parent maps
// once the child has exited cleanly.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

namespace bks {

// What the child wrote, mapped read-only; unmapped when destroyed.
class ChildOutput {
 public:
  ChildOutput() = default;
  ChildOutput(void* map, size_t map_size, size_t offset, size_t size);
  ~ChildOutput();
  ChildOutput(ChildOutput&& o) noexcept;
  ChildOutput& operator=(ChildOutput&&) = delete;
  ChildOutput(const ChildOutput&) = delete;
  const uint8_t* data() const { return static_cast<const uint8_t*>(map_) + offset_; }
  size_t size() const { return size_; }

 private:
  void* map_ = nullptr;
  size_t map_size_ = 0, offset_ = 0, size_ = 0;
};

// Appends bytes to the child's output (for `work` below).
class ChildWriter {
 public:
  explicit ChildWriter(int fd) : fd_(fd) {}
  void write(const void* data, size_t n);
  template <class T>
  void value(const T& v) {
    write(&v, sizeof v);
  }

 private:
  int fd_;
};

// Runs `work` in a child process and returns what it wrote. An InputError or RuntimeError that
// `work` throws is thrown again here with the same message. A child that dies instead (a
// signal, a sanitizer report, an abort, the kernel's OOM killer, which prefers the child) gives
// InputError "<subject>: <library> crashed while reading it (...)". Whatever `work` needs
// loaded (shared libraries) should be loaded before the call: the child of a threaded process
// must not depend on locks other threads held at the fork.
//
// The child may map kChildMemoryHeadroom bytes beyond the address space it inherits; past
// that, allocations fail there (and the library answers with an error or crashes, contained
// either way). `work` raises the limit with allow_child_memory() for what it has checked.
ChildOutput run_isolated(const std::string& subject, const char* library,
                         const std::function<void(ChildWriter&)>& work);

constexpr uint64_t kChildMemoryHeadroom = uint64_t{1} << 30;

// In the work of run_isolated: lets the child map `bytes` more. Does nothing elsewhere.
void allow_child_memory(uint64_t bytes);

// For coverage-guided fuzzing only (tests/fuzz/fuzz_hdf5_in_process.cc): `work` runs in this
// process, so the fuzzer sees its coverage and the library's crashes; the result still takes
// the same way through the memory file. Never in bakusoku itself.
void run_isolated_calls_in_process(bool on);

// Reads fixed-size values and byte runs from a ChildOutput, refusing to read past its end
// (the child is our code, but it ran a library that may have corrupted its memory).
class ChildReader {
 public:
  ChildReader(const ChildOutput& out, std::string subject) : out_(out), subject_(std::move(subject)) {}
  const uint8_t* bytes(size_t n);
  template <class T>
  T value() {
    T v;
    const uint8_t* p = bytes(sizeof v);
    std::copy(p, p + sizeof v, reinterpret_cast<uint8_t*>(&v));
    return v;
  }
  size_t left() const { return out_.size() - pos_; }

 private:
  const ChildOutput& out_;
  std::string subject_;
  size_t pos_ = 0;
};

}  // namespace bks
