#include "fuzz_util.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <typeinfo>

#include "core/error.h"
#include "server/api_error.h"

namespace bks::fuzz {

void expect_input_errors(const std::function<void()>& body) {
  try {
    body();
  } catch (const InputError& e) {
    if (std::getenv("BKS_FUZZ_VERBOSE")) std::fprintf(stderr, "fuzz: InputError: %s\n", e.what());
  } catch (const server::ApiError& e) {
    if (std::getenv("BKS_FUZZ_VERBOSE")) std::fprintf(stderr, "fuzz: ApiError (%s): %s\n", e.field.c_str(), e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: unexpected %s: %s\n", typeid(e).name(), e.what());
    std::abort();
  } catch (...) {
    std::fprintf(stderr, "fuzz: unexpected non-std exception\n");
    std::abort();
  }
}

namespace {

// Never destroyed: the exit handler below uses it after static destructors may have run.
const std::string* const g_scratch_dir = [] {
  auto* d = new std::string("/tmp/bks-fuzz-" + std::to_string(::getpid()));
  std::filesystem::create_directories(*d);
  std::atexit([] {
    std::error_code ec;
    std::filesystem::remove_all(*g_scratch_dir, ec);
  });
  return d;
}();

}  // namespace

const std::string& scratch_dir() { return *g_scratch_dir; }

std::string write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  std::string path = scratch_dir() + "/" + name;
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!f) {
    std::fprintf(stderr, "fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

std::string write_scratch(const std::string& name, const std::string& bytes) {
  return write_scratch(name, reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace bks::fuzz
