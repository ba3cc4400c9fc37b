// Error types shared by every layer of bakusoku.
//
// InputError: the user's input is wrong (file, field, shape). The CLI prints its message as
//   one line and exits with code 2.
// RuntimeError: the input was fine but the run failed (NaN loss, I/O error while writing).
//   Exit code 1.
// BKS_CHECK: an internal invariant; failing it is a bug in bakusoku, not in the input.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace bks {

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RuntimeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <class... Args>
[[noreturn]] void input_error(fmt::format_string<Args...> f, Args&&... args) {
  throw InputError(fmt::format(f, std::forward<Args>(args)...));
}

template <class... Args>
[[noreturn]] void runtime_error(fmt::format_string<Args...> f, Args&&... args) {
  throw RuntimeError(fmt::format(f, std::forward<Args>(args)...));
}

[[noreturn]] void check_failed(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace bks

#define BKS_CHECK(cond, ...)                                                                 \
  do {                                                                                       \
    if (!(cond)) ::bks::check_failed(#cond, __FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)
