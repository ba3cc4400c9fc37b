#include "backend/accelerator.h"

#include <dlfcn.h>

#include <filesystem>
#include <mutex>

#include "core/error.h"

namespace bks {

namespace {

const Accelerator* g_accelerator = nullptr;
std::string g_load_error;  // why the CUDA layer's library did not load

// The CUDA layer is a library of its own, loaded on first need from beside this one: a
// process that never asks for a GPU neither maps cuDNN and cuBLAS (tens of MB of relocated
// data per process) nor needs them installed.
void load_cuda_layer() {
#ifdef BKS_CUDA_LIBRARY
  Dl_info self{};
  if (!dladdr(reinterpret_cast<void*>(&load_cuda_layer), &self) || !self.dli_fname) {
    g_load_error = "cannot locate bakusoku's libraries";
    return;
  }
  const std::string path = (std::filesystem::path(self.dli_fname).parent_path() / BKS_CUDA_LIBRARY).string();
  if (!dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
    const char* e = dlerror();
    g_load_error = std::string("its CUDA backend did not load: ") + (e ? e : path);
  }
#endif
}

}  // namespace

void register_accelerator(const Accelerator* a) { g_accelerator = a; }

const Accelerator* accelerator() {
  static std::once_flag once;
  if (!g_accelerator) std::call_once(once, load_cuda_layer);
  return g_accelerator;
}

std::string gpu_problem(int index) {
  const Accelerator* a = accelerator();
  if (!a)
    return g_load_error.empty() ? "this build of bakusoku has no CUDA backend"
                                : "this build of bakusoku cannot use a GPU here: " + g_load_error;
  const int n = static_cast<int>(a->gpus().size());
  if (n == 0) return a->why_none();
  if (index < 0 || index >= n)
    return fmt::format("GPU {} does not exist: this machine has {} GPU{} (0 to {})", index, n, n == 1 ? "" : "s",
                       n - 1);
  return "";
}

std::unique_ptr<Backend> make_gpu_backend(int index, bool tf32) {
  if (std::string problem = gpu_problem(index); !problem.empty())
    runtime_error("GPU {} was asked for, but {} (--gpu -1 runs on the CPU)", index, problem);
  return accelerator()->make_backend(index, tf32);
}

}  // namespace bks
