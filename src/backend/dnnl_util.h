// Small helpers for calling oneDNN primitives on bakusoku tensors.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"

namespace bks {

using dnnl::memory;

memory::dims to_dims(const Shape& s);
// Plain row-major (NCHW-style) descriptor for a shape.
memory::desc plain_md(const Shape& s, memory::data_type dt = memory::data_type::f32);
memory::format_tag plain_tag(int ndim);
// oneDNN's channel-blocked f32 layout nChw8c / nChw16c for a 4-d shape (block 8 or 16).
memory::desc channel_blocked_md(const Shape& s, int64_t block);
// 8 or 16 when `d` is the f32 nChw8c / nChw16c layout of 4-d shape `s`, else 0.
int64_t channel_block(const memory::desc& d, const Shape& s);
bool is_int8(const memory::desc& md);
// A layout holding bf16 values (an empty desc holds none).
bool is_bf16(const memory::desc& md);
// Symmetric quantization: the level |x| = threshold maps to. s8 (and f32 quantized to s8):
// 127; u8 (non-negative values, after a ReLU): 255.
float int8_levels(memory::data_type t);
// The level |w| = max(|w|) of a weight row maps to: 127 where the CPU multiplies u8 x s8
// with VNNI (or AMX); 63 elsewhere, since AVX2 and plain AVX-512 add pairs of u8 x s8
// products in 16 bits (vpmaddubsw), which saturate past 2 x 255 x 63 (oneDNN's advice).
float int8_weight_levels();
// The type an INT8 layer writes: f32 without an int8 output threshold; u8 when its values
// are non-negative (a fused ReLU of slope 0); s8 otherwise.
memory::data_type int8_output_type(bool non_negative, float out_threshold);

// Scratchpads. oneDNN's default ("library") scratchpad lives with the thread that created
// a primitive, so a primitive built in one thread and run in another (an embedding's
// session pool) reads memory that is not there: Winograd convolutions crash. Every
// primitive bakusoku builds therefore asks for scratchpad_mode::user and runs through
// DnnlPrimitive, which hands it a scratchpad owned by the calling thread.
dnnl::primitive_attr user_scratchpad(dnnl::primitive_attr attr = {});

// Whether a oneDNN implementation name (primitive_desc::impl_info_str()) is one of its
// reference implementations ("ref:any", "gemm:ref", ...): plain loops oneDNN picks,
// silently, when it has no optimised kernel for a shape; they can be 1000x slower.
bool is_reference_impl(const std::string& impl);
// Whether oneDNN dispatches AVX-512 (core) kernels on this CPU (DNNL_MAX_CPU_ISA included).
bool onednn_has_avx512();

// Collects the reference implementations among the primitives built on this thread while
// it lives (nested watches each see them). The runtime watches every kernel's prepare(),
// so a slow path is named in `time` and at --verbose whichever op built it; this is the
// one place that knows, not each op.
class DnnlReferenceWatch {
 public:
  // isolated: what this watch sees is not passed to the watches around it (a kernel
  // probing what oneDNN would pick, to run something else where that is a reference).
  explicit DnnlReferenceWatch(bool isolated = false);
  ~DnnlReferenceWatch();
  DnnlReferenceWatch(const DnnlReferenceWatch&) = delete;
  DnnlReferenceWatch& operator=(const DnnlReferenceWatch&) = delete;
  // "<primitive kind> <implementation>" for each reference primitive built, in order.
  const std::vector<std::string>& found() const { return found_; }
  // Called by DnnlPrimitive for every primitive it wraps.
  static void note(const dnnl::primitive_desc_base& pd);

 private:
  std::vector<std::string> found_;
  DnnlReferenceWatch* outer_;
  bool isolated_;
};

class DnnlPrimitive {
 public:
  DnnlPrimitive() = default;
  // `p` was made from a primitive_desc `pd` whose attributes came from user_scratchpad().
  template <class PD>
  DnnlPrimitive(const dnnl::primitive& p, const PD& pd) : prim_(p), scratchpad_(pd.scratchpad_desc()) {
    DnnlReferenceWatch::note(pd);
  }
  explicit operator bool() const { return static_cast<bool>(prim_); }
  // Adds the scratchpad to `args` and runs. One primitive runs in one thread at a time.
  void execute(dnnl::stream& s, std::unordered_map<int, memory>& args);
  void execute(dnnl::stream& s, std::unordered_map<int, memory>&& args) { execute(s, args); }

 private:
  dnnl::primitive prim_;
  memory::desc scratchpad_;
  memory scratch_mem_;  // bound to the last running thread's scratchpad
};

// A reorder (user scratchpad) from src to dst, with `attr` (e.g. output scales).
DnnlPrimitive make_reorder(const memory& src, const memory& dst, dnnl::primitive_attr attr = {});

// One operand of a primitive: the user's buffer is plain; the kernel may prefer a blocked
// layout, in which case a reorder (built once, at prepare time) runs on each call.
class DnnlOperand {
 public:
  // scale != 1: the kernel's values are the user's times `scale` (int8 quantization, where
  // the kernel's type is s8/u8 and the user's f32; rounded and saturated by oneDNN).
  // always_copy: the kernel reads its own copy even in the user's layout (the user's buffer
  // is overwritten while the kernel still reads).
  void init(const dnnl::engine& eng, const memory::desc& user, const memory::desc& kernel, float scale = 1.f,
            bool always_copy = false);
  bool reorders() const { return converts_; }
  // Input: memory holding the data in the kernel's layout (reordered from `user` if needed).
  memory& read(dnnl::stream& s, const void* user);
  // read() for data that never changes: converts on the first call only.
  memory& read_constant(dnnl::stream& s, const void* user);
  // Output: memory the kernel writes into; call commit() after the primitive ran.
  memory& write(void* user);
  void commit(dnnl::stream& s);

 private:
  memory user_, kernel_;
  DnnlPrimitive reorder_, back_;
  const void* converted_ = nullptr;  // read_constant: the buffer last converted
  bool converts_ = false;            // user and kernel layouts differ
};

}  // namespace bks
