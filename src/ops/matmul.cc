#include "ops/matmul.h"

namespace bks {

using dnnl::memory;

void MatMul::prepare(const dnnl::engine& eng, char ta, char tb, int64_t m, int64_t n, int64_t k, bool bias, bool relu,
                     float relu_slope, bool constant_b, bool bf16) {
  relu_ = relu;
  slope_ = relu_slope;
  ta_ = ta;
  tb_ = tb;
  m_ = m;
  n_ = n;
  k_ = k;
  has_bias_ = bias;
  auto f32 = memory::data_type::f32;
  memory::desc a({m, k}, f32, ta == 'N' ? memory::dims{k, 1} : memory::dims{1, m});
  memory::desc b({k, n}, f32, tb == 'N' ? memory::dims{n, 1} : memory::dims{1, k});
  memory::desc c({m, n}, f32, memory::dims{n, 1});
  memory::desc bd({1, n}, f32, memory::dims{n, 1});
  bf16 = bf16 && constant_b;
  const auto kt = bf16 ? memory::data_type::bf16 : f32;
  memory::desc b_kernel = constant_b ? memory::desc({k, n}, kt, memory::format_tag::any) : b;
  memory::desc a_kernel = bf16 ? memory::desc({m, k}, kt, memory::format_tag::ab) : a;
  memory::desc c_kernel = bf16 ? memory::desc({m, n}, kt, memory::format_tag::ab) : c;
  auto desc =
      bias ? dnnl::matmul::desc(a_kernel, b_kernel, bd, c_kernel) : dnnl::matmul::desc(a_kernel, b_kernel, c_kernel);
  dnnl::primitive_attr attr;
  if (relu) {
    dnnl::post_ops po;
    po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, relu_slope, 0.f);
    attr.set_post_ops(po);
  }
  dnnl::matmul::primitive_desc pd(desc, user_scratchpad(attr), eng);
  name_ = pd.impl_info_str();
  fallback_ = name_.find("ref") != std::string::npos;
  if (fallback_) {
    name_ = "sgemm";
    return;
  }
  if (relu) name_ += " (fused +relu)";
  prim_ = DnnlPrimitive(dnnl::matmul(pd), pd);
  a_ = memory(a, eng, nullptr);
  b_ = memory(b, eng, nullptr);
  if (constant_b && pd.weights_desc() != b) {
    b_packed_ = memory(pd.weights_desc(), eng);
    pack_ = make_reorder(b_, b_packed_);
  }
  c_ = memory(c, eng, nullptr);
  if (bias) bias_ = memory(bd, eng, nullptr);
  if (bf16) {
    a_k_ = memory(a_kernel, eng);
    c_k_ = memory(c_kernel, eng);
    a_in_ = make_reorder(a_, a_k_);
    c_out_ = make_reorder(c_k_, c_);
    name_ += " bf16";
  }
}

void MatMul::run(dnnl::stream& s, const float* a, const float* b, float* c, const float* bias) {
  if (fallback_) {
    dnnl::sgemm(ta_, tb_, m_, n_, k_, 1.f, a, ta_ == 'N' ? k_ : m_, b, tb_ == 'N' ? n_ : k_, 0.f, c, n_);
    const float* b = has_bias_ ? bias : nullptr;
    const float slope = relu_ ? slope_ : 1.f;
    for (int64_t i = 0; i < m_; ++i) {
      float* row = c + i * n_;
#pragma omp simd
      for (int64_t j = 0; j < n_; ++j) {
        float v = row[j] + (b ? b[j] : 0.f);
        row[j] = v > 0.f ? v : v * slope;
      }
    }
    return;
  }
  a_.set_data_handle(const_cast<float*>(a));
  b_.set_data_handle(const_cast<float*>(b));
  if (pack_ && packed_from_ != b) {
    pack_.execute(s, {{DNNL_ARG_FROM, b_}, {DNNL_ARG_TO, b_packed_}});
    packed_from_ = b;
  }
  dnnl::memory& weights = pack_ ? b_packed_ : b_;
  if (a_in_) a_in_.execute(s, {{DNNL_ARG_FROM, a_}, {DNNL_ARG_TO, a_k_}});
  dnnl::memory& src = a_in_ ? a_k_ : a_;
  dnnl::memory& dst = c_out_ ? c_k_ : c_;
  c_.set_data_handle(c);
  if (has_bias_) {
    bias_.set_data_handle(const_cast<float*>(bias));
    prim_.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_BIAS, bias_}, {DNNL_ARG_DST, dst}});
  } else {
    prim_.execute(s, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
  }
  if (c_out_) c_out_.execute(s, {{DNNL_ARG_FROM, c_k_}, {DNNL_ARG_TO, c_}});
  s.wait();
}

}  // namespace bks
