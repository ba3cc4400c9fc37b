#include "engine/low_rank.h"

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/error.h"
#include "engine/deploy.h"
#include "formats/caffe_net.h"

// LAPACK's divide-and-conquer SVD (OpenBLAS provides it); the last argument is gfortran's
// hidden length of `jobz`.
extern "C" void sgesdd_(const char* jobz, const int* m, const int* n, float* a, const int* lda, float* s, float* u,
                        const int* ldu, float* vt, const int* ldvt, float* work, const int* lwork, int* iwork,
                        int* info, size_t jobz_len);

namespace bks {

std::vector<float> singular_values(const float* a, int64_t m, int64_t n, std::vector<float>* u,
                                   std::vector<float>* vt) {
  // OpenBLAS's thread pool beside OpenMP's stalled a 500x800 SVD for 10 s on 2 cores (0.1 s
  // on one thread): one layer's matrix is small.
  using SetThreads = void (*)(int);
  if (auto one = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) one(1);
  // LAPACK is column-major: the row-major m x n matrix is its n x m transpose, whose SVD
  // V S U^T gives ours with the factors' roles (and layouts) swapped.
  const int rows = static_cast<int>(n), cols = static_cast<int>(m), k = static_cast<int>(std::min(m, n));
  std::vector<float> copy(a, a + m * n), s(static_cast<size_t>(k));
  std::vector<float> left(u ? static_cast<size_t>(n) * k : 1), right(vt ? static_cast<size_t>(k) * m : 1);
  const char job = u || vt ? 'S' : 'N';
  const int ldu = std::max(rows, 1), ldvt = std::max(k, 1);
  std::vector<int> iwork(8 * static_cast<size_t>(k));
  int info = 0, lwork = -1;
  float query = 0;
  sgesdd_(&job, &rows, &cols, copy.data(), &rows, s.data(), left.data(), &ldu, right.data(), &ldvt, &query, &lwork,
          iwork.data(), &info, 1);
  lwork = static_cast<int>(query);
  std::vector<float> work(static_cast<size_t>(std::max(lwork, 1)));
  sgesdd_(&job, &rows, &cols, copy.data(), &rows, s.data(), left.data(), &ldu, right.data(), &ldvt, work.data(), &lwork,
          iwork.data(), &info, 1);
  if (info != 0)
    runtime_error("the singular value decomposition of a {}x{} matrix failed (LAPACK info {})", m, n, info);
  // Column-major k x m of the transpose's V^T is row-major m x k U; n x k U is k x n V^T.
  if (u) *u = std::move(right);
  if (vt) *vt = std::move(left);
  return s;
}

namespace {

// The fraction of sum sigma^2 that ranks 1, 2, ... keep.
std::vector<double> energy_kept(const std::vector<float>& s) {
  std::vector<double> kept(s.size());
  double sum = 0;
  for (size_t r = 0; r < s.size(); ++r) kept[r] = sum += double{s[r]} * s[r];
  for (double& k : kept) k = sum > 0 ? k / sum : 1.0;
  return kept;
}

bool factorisable(const proto::LayerParameter& l) { return l.type() == "InnerProduct" || l.type() == "Convolution"; }

// The layer as "<name>/low_rank" (rank outputs, no bias: for a convolution, rank filters of
// its kernel, stride, pad and dilation) and "<name>" reading it (its outputs and bias: for a
// convolution, a 1x1 kernel).
std::pair<proto::LayerParameter, proto::LayerParameter> split_layer(const proto::LayerParameter& l, int64_t rank) {
  proto::LayerParameter first = l, second = l;
  first.set_name(l.name() + "/low_rank");
  first.clear_top();
  first.add_top(first.name());
  first.clear_param();
  if (l.param_size() > 0) {
    *first.add_param() = l.param(0);
    first.mutable_param(0)->clear_name();  // never shared with another layer's
  }
  second.clear_bottom();
  second.add_bottom(first.top(0));
  if (l.type() == "InnerProduct") {
    proto::InnerProductParameter* p = first.mutable_inner_product_param();
    p->set_num_output(static_cast<uint32_t>(rank));
    p->set_bias_term(false);
    p->clear_bias_filler();
    return {first, second};  // the second reads (..., rank) at the same axis
  }
  proto::ConvolutionParameter* p = first.mutable_convolution_param();
  p->set_num_output(static_cast<uint32_t>(rank));
  p->set_bias_term(false);
  p->clear_bias_filler();
  proto::ConvolutionParameter* q = second.mutable_convolution_param();
  for (auto clear : {&proto::ConvolutionParameter::clear_kernel_size, &proto::ConvolutionParameter::clear_kernel_h,
                     &proto::ConvolutionParameter::clear_kernel_w, &proto::ConvolutionParameter::clear_stride,
                     &proto::ConvolutionParameter::clear_stride_h, &proto::ConvolutionParameter::clear_stride_w,
                     &proto::ConvolutionParameter::clear_pad, &proto::ConvolutionParameter::clear_pad_h,
                     &proto::ConvolutionParameter::clear_pad_w, &proto::ConvolutionParameter::clear_dilation})
    (q->*clear)();
  q->add_kernel_size(1);
  return {first, second};
}

}  // namespace

LowRankResult factorize_low_rank(const std::string& model, const std::string& weights, const LowRankOptions& o) {
  if (o.rank < 0) input_error("--rank must be positive, got {}", o.rank);
  if (o.rank == 0 && !(o.energy > 0 && o.energy <= 1)) input_error("--energy must be in (0, 1], got {}", o.energy);
  DeployOptions d;
  d.model = model;
  d.weights = weights;
  const NetLoad nl = load_net_file(model);
  DeployModel m = load_deploy_model(d, nl);
  LowRankResult r;
  r.weights = weights_by_layer(m);
  const proto::NetParameter& in = nl.param;
  for (const std::string& name : o.layers) {
    const auto& ls = in.layer();
    if (std::none_of(ls.begin(), ls.end(), [&](const auto& l) { return l.name() == name && factorisable(l); }))
      input_error("--layers {}: {} has no InnerProduct or Convolution layer of that name", name, model);
  }
  r.net = in;
  r.net.clear_layer();
  for (const proto::LayerParameter& l : in.layer()) {
    const bool named = std::find(o.layers.begin(), o.layers.end(), l.name()) != o.layers.end();
    if (!factorisable(l) || (!o.layers.empty() && !named) ||
        std::any_of(r.layers.begin(), r.layers.end(), [&](const LowRankLayer& x) { return x.name == l.name(); })) {
      *r.net.add_layer() = l;  // (a layer in both phases is factorised once, as its first copy)
      continue;
    }
    const std::string where = model + ": layer '" + l.name() + "'";
    if (l.inner_product_param().transpose())
      input_error("{}: a transposed InnerProduct is not factorised; leave it out of --layers", where);
    if (l.type() == "Convolution" && l.convolution_param().group() != 1)
      input_error("{}: a grouped convolution is not factorised; leave it out of --layers", where);
    auto w = r.weights.find(l.name() + ".0");
    if (w == r.weights.end()) input_error("{}: {} holds no weights for it", where, weights);
    LowRankLayer x;
    x.name = l.name();
    x.outputs = w->second.dim(0);
    x.inputs = w->second.numel() / x.outputs;
    std::vector<float> u, vt;
    const std::vector<float> s = singular_values(w->second.f32(), x.outputs, x.inputs, &u, &vt);
    const auto k = static_cast<int64_t>(s.size());
    if (o.rank > k)
      input_error("--rank {}: {} is {}x{}, so its rank is at most {}", o.rank, where, x.outputs, x.inputs, k);
    const std::vector<double> kept = energy_kept(s);
    // By energy: the smallest rank keeping that fraction.
    x.rank = o.rank > 0 ? o.rank
                        : std::min<int64_t>(k, std::lower_bound(kept.begin(), kept.end(), o.energy) - kept.begin() + 1);
    x.energy = kept[static_cast<size_t>(x.rank - 1)];
    // A layer asked for by name is factorised even where that makes it larger (full rank
    // reproduces it); otherwise only where it saves weights.
    x.factorised = named || x.rank * (x.outputs + x.inputs) < x.outputs * x.inputs;
    r.layers.push_back(x);
    if (!x.factorised) {
      *r.net.add_layer() = l;
      continue;
    }
    auto [first, second] = split_layer(l, x.rank);
    *r.net.add_layer() = first;
    *r.net.add_layer() = second;
    // Each factor takes sqrt(sigma): both start at the same scale for fine-tuning.
    Shape a_shape = w->second.shape(), b_shape = w->second.shape();
    a_shape[0] = x.rank;  // rank filters of the layer's own inputs (and kernel)
    b_shape[1] = x.rank;  // its outputs from the rank values (a 1x1 kernel)
    for (size_t d = 2; d < b_shape.size(); ++d) b_shape[d] = 1;
    Tensor a(a_shape), b(b_shape);
    for (int64_t i = 0; i < x.rank; ++i) {
      const float root = std::sqrt(s[i]);
      for (int64_t j = 0; j < x.inputs; ++j) a.f32()[i * x.inputs + j] = root * vt[i * x.inputs + j];
      for (int64_t j = 0; j < x.outputs; ++j) b.f32()[j * x.rank + i] = root * u[j * k + i];
    }
    r.weights[first.name() + ".0"] = std::move(a);
    w->second = std::move(b);
  }
  return r;
}

}  // namespace bks
