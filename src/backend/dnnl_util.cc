#include "backend/dnnl_util.h"

#include <algorithm>
#include <cstdlib>
#include <new>

#include <oneapi/dnnl/dnnl_debug.h>

#include "core/error.h"
#include "core/sysinfo.h"

namespace bks {

memory::dims to_dims(const Shape& s) { return memory::dims(s.begin(), s.end()); }

memory::format_tag plain_tag(int ndim) {
  using tag = memory::format_tag;
  switch (ndim) {
    case 1: return tag::a;
    case 2: return tag::ab;
    case 3: return tag::abc;
    case 4: return tag::abcd;
    case 5: return tag::abcde;
    case 6: return tag::abcdef;
  }
  BKS_CHECK(false, "no plain layout for {}-d tensors", ndim);
  return tag::undef;
}

memory::desc plain_md(const Shape& s, memory::data_type dt) {
  return memory::desc(to_dims(s), dt, plain_tag(static_cast<int>(s.size())));
}

memory::desc channel_blocked_md(const Shape& s, int64_t block) {
  return memory::desc(to_dims(s), memory::data_type::f32,
                      block == 16 ? memory::format_tag::nChw16c : memory::format_tag::nChw8c);
}

int64_t channel_block(const memory::desc& d, const Shape& s) {
  if (s.size() != 4 || d.data.ndims != 4) return 0;
  for (int64_t b : {8, 16})
    if (d == channel_blocked_md(s, b)) return b;
  return 0;
}

bool is_int8(const memory::desc& md) {
  return md.data.ndims > 0 && (md.data_type() == memory::data_type::s8 || md.data_type() == memory::data_type::u8);
}

bool is_bf16(const memory::desc& md) { return md.data.ndims > 0 && md.data_type() == memory::data_type::bf16; }

float int8_levels(memory::data_type t) { return t == memory::data_type::u8 ? 255.f : 127.f; }

float int8_weight_levels() {
  static const float levels = [] {
    SysInfo si = query_sysinfo();
    return si.has("avx512_vnni") || si.has("avx_vnni") || si.has("amx_int8") ? 127.f : 63.f;
  }();
  return levels;
}

memory::data_type int8_output_type(bool non_negative, float out_threshold) {
  if (!(out_threshold > 0.f)) return memory::data_type::f32;
  return non_negative ? memory::data_type::u8 : memory::data_type::s8;
}

bool is_reference_impl(const std::string& impl) { return impl.find("ref") != std::string::npos; }

namespace {
thread_local DnnlReferenceWatch* active_watch = nullptr;

std::string primitive_kind_name(const dnnl::primitive_desc_base& pd) {
  const char* kind = dnnl_prim_kind2str(static_cast<dnnl_primitive_kind_t>(pd.get_kind()));
  std::string s = kind ? kind : "primitive";
  // Convolutions and the like run three passes under one kind: say which from the operands.
  if (pd.diff_weights_desc(0).data.ndims > 0)
    s += " backward-weights";
  else if (pd.diff_src_desc(0).data.ndims > 0)
    s += pd.weights_desc(0).data.ndims > 0 ? " backward-data" : " backward";
  return s;
}
}  // namespace

DnnlReferenceWatch::DnnlReferenceWatch(bool isolated) : outer_(active_watch), isolated_(isolated) {
  active_watch = this;
}

DnnlReferenceWatch::~DnnlReferenceWatch() { active_watch = outer_; }

void DnnlReferenceWatch::note(const dnnl::primitive_desc_base& pd) {
  if (!active_watch) return;
  // oneDNN's CPU RNN is named "ref" but runs its GEMMs optimised: measured faster than our
  // own matmul LSTM and GRU on one segment (docs/sequences.md), so not a slow path.
  if (pd.get_kind() == dnnl::primitive::kind::rnn) return;
  std::string impl = pd.impl_info_str();
  if (!is_reference_impl(impl)) return;
  std::string what = primitive_kind_name(pd) + " " + impl;
  for (DnnlReferenceWatch* w = active_watch; w; w = w->isolated_ ? nullptr : w->outer_)
    if (std::find(w->found_.begin(), w->found_.end(), what) == w->found_.end()) w->found_.push_back(what);
}

dnnl::primitive_attr user_scratchpad(dnnl::primitive_attr attr) {
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

namespace {

// This thread's scratchpad: grows to the largest any primitive asked for, never shrinks.
void* thread_scratchpad(size_t bytes) {
  struct Buffer {
    void* p = nullptr;
    size_t size = 0;
    ~Buffer() { std::free(p); }
  };
  thread_local Buffer b;
  if (bytes > b.size) {
    std::free(b.p);
    b.size = (bytes + 4095) / 4096 * 4096;
    b.p = std::aligned_alloc(64, b.size);
    if (!b.p) throw std::bad_alloc();
  }
  return b.p;
}

}  // namespace

void DnnlPrimitive::execute(dnnl::stream& s, std::unordered_map<int, memory>& args) {
  size_t bytes = scratchpad_.get_size();
  if (bytes > 0) {
    void* p = thread_scratchpad(bytes);
    if (!scratch_mem_)
      scratch_mem_ = memory(scratchpad_, s.get_engine(), p);
    else if (scratch_mem_.get_data_handle() != p)
      scratch_mem_.set_data_handle(p);
    args[DNNL_ARG_SCRATCHPAD] = scratch_mem_;
  }
  prim_.execute(s, args);
}

DnnlPrimitive make_reorder(const memory& src, const memory& dst, dnnl::primitive_attr attr) {
  dnnl::reorder::primitive_desc pd(src, dst, user_scratchpad(std::move(attr)));
  return DnnlPrimitive(dnnl::reorder(pd), pd);
}

void DnnlOperand::init(const dnnl::engine& eng, const memory::desc& user, const memory::desc& kernel, float scale,
                       bool always_copy) {
  user_ = memory(user, eng, nullptr);
  reorder_ = {};
  back_ = {};
  converts_ = false;
  converted_ = nullptr;
  if (user == kernel && scale == 1.f && !always_copy) {
    kernel_ = user_;
    return;
  }
  kernel_ = memory(kernel, eng);
  converts_ = true;
  auto scaled = [](float f) {
    dnnl::primitive_attr a;
    if (f != 1.f) a.set_output_scales(0, {f});
    return a;
  };
  // Some kernel layouts convert one way only (Winograd weights are never read back); a
  // direction oneDNN cannot do fails when it is used, not here.
  try {
    reorder_ = make_reorder(user_, kernel_, scaled(scale));
  } catch (const dnnl::error&) {
  }
  try {
    back_ = make_reorder(kernel_, user_, scaled(1.f / scale));
  } catch (const dnnl::error&) {
  }
  if (!reorder_ && !back_) throw dnnl::error(dnnl_unimplemented, "no reorder between the two layouts");
}

memory& DnnlOperand::read(dnnl::stream& s, const void* user) {
  user_.set_data_handle(const_cast<void*>(user));
  if (converts_) {
    BKS_CHECK(static_cast<bool>(reorder_), "no reorder into the kernel's layout");
    reorder_.execute(s, {{DNNL_ARG_FROM, user_}, {DNNL_ARG_TO, kernel_}});
  }
  return kernel_;
}

memory& DnnlOperand::read_constant(dnnl::stream& s, const void* user) {
  if (!converts_ || converted_ != user) {
    read(s, user);
    converted_ = user;
  }
  return kernel_;
}

memory& DnnlOperand::write(void* user) {
  user_.set_data_handle(user);
  return kernel_;
}

void DnnlOperand::commit(dnnl::stream& s) {
  if (!converts_) return;
  BKS_CHECK(static_cast<bool>(back_), "no reorder out of the kernel's layout");
  back_.execute(s, {{DNNL_ARG_FROM, kernel_}, {DNNL_ARG_TO, user_}});
}

bool onednn_has_avx512() {
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto core = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
  return (isa & core) == core;
}

}  // namespace bks
