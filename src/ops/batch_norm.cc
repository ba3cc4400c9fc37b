// Caffe's BatchNorm: normalises each channel to zero mean and unit variance (no affine;
// Caffe follows it with a Scale layer). Blobs: running mean sum, running variance sum and
// the moving-average normaliser, which the layer updates itself.
#include <cmath>
#include <cstring>

#include "ops/op.h"

namespace bks {
namespace {

constexpr const char* kGlobalStats[] = {"BY_PHASE", "ALWAYS", "NEVER"};

struct BatchNormAttrs final : AttrsOf<BatchNormAttrs> {
  // Normalise with the stored statistics: by_phase does in TEST, not in TRAIN.
  enum GlobalStats { by_phase, always, never };
  int global_stats = by_phase;
  float eps = 1e-5f;
  float moving_average_fraction = 0.999f;
  void visit(AttrVisitor& v) override {
    v.field("global_stats", global_stats, kGlobalStats);
    v.field("eps", eps);
    v.field("moving_average_fraction", moving_average_fraction);
  }
};

void batch_norm_from_caffe(const proto::LayerParameter& l, BatchNormAttrs& a, const std::string&) {
  const proto::BatchNormParameter& p = l.batch_norm_param();
  if (p.has_use_global_stats()) a.global_stats = p.use_global_stats() ? a.always : a.never;
  a.eps = p.eps();
  a.moving_average_fraction = p.moving_average_fraction();
}
void batch_norm_to_caffe(const BatchNormAttrs& a, proto::LayerParameter& l) {
  proto::BatchNormParameter* p = l.mutable_batch_norm_param();
  p->clear_use_global_stats();
  if (a.global_stats != a.by_phase) p->set_use_global_stats(a.global_stats == a.always);
  p->set_eps(a.eps);
  p->set_moving_average_fraction(a.moving_average_fraction);
}
BKS_REGISTER_ATTRS("BatchNorm", BatchNormAttrs, batch_norm_from_caffe, batch_norm_to_caffe);

// The attributes, checked.
const BatchNormAttrs& batch_norm_attrs(const OpContext& c) {
  const BatchNormAttrs& a = c.node.attrs.as<BatchNormAttrs>();
  if (!(a.eps > 0.f)) c.fail("batch_norm_param.eps must be positive");
  return a;
}
bool uses_global_stats(const BatchNormAttrs& a, Phase phase) {
  return a.global_stats == a.by_phase ? phase == proto::TEST : a.global_stats == a.always;
}

class BatchNormDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 1; }
  void check(const OpContext& c) const override { batch_norm_attrs(c); }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    c.split_channels(in[0]);
    out[0] = in[0];
  }
  std::vector<ParamDecl> params(const OpContext& c, const std::vector<Shape>& in) const override {
    int64_t channels = c.split_channels(in[0]).c;
    FillerSpec zero;
    return {{{channels}, zero, false}, {{channels}, zero, false}, {{1}, zero, false}};
  }
  // The normalised values are kept internally, so the layer may run in place and later
  // in-place layers may overwrite its output.
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override {
    OpFacts f;
    f.allows_inplace = true;
    f.backward_reads_input = false;
    return f;
  }
  OpTraits traits(const Node&) const override { return traits_with({&OpTraits::per_channel_affine}); }
  ChannelFlow channel_flow(const Node&, const std::vector<Shape>&) const override { return ChannelFlow::per_channel; }
  // With stored statistics: y = (x - mean * f) / sqrt(var * f + eps), f = 1 / factor
  // (Caffe's moving-average normaliser).
  bool channel_affine(const Node& n, const std::vector<const Tensor*>& blobs, int64_t channels, std::vector<double>& a,
                      std::vector<double>& b) const override {
    const BatchNormAttrs& bn = n.attrs.as<BatchNormAttrs>();
    if (bn.global_stats == bn.never || blobs.size() != 3) return false;
    const Tensor &mean = *blobs[0], &var = *blobs[1], &factor = *blobs[2];
    if (mean.numel() != channels) return false;
    double f = factor.f32()[0] == 0.f ? 0.0 : 1.0 / factor.f32()[0];
    a.assign(channels, 1.0);
    b.assign(channels, 0.0);
    for (int64_t c = 0; c < channels; ++c) {
      double inv_std = 1.0 / std::sqrt(var.f32()[c] * f + bn.eps);
      a[c] = inv_std;
      b[c] = -mean.f32()[c] * f * inv_std;
    }
    return true;
  }
};

class BatchNormKernel final : public Kernel {
 public:
  explicit BatchNormKernel(const OpInit& i) : Kernel(i) {
    const BatchNormAttrs& a = batch_norm_attrs(context());
    global_ = uses_global_stats(a, phase_);
    eps_ = a.eps;
    maf_ = a.moving_average_fraction;
    if (i.batch_stats_sum && !global_) sum_over_ranks_ = *i.batch_stats_sum;
  }

  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    auto [n, c, sp] = split_channels(in[0]);
    n_ = n;
    c_ = c;
    sp_ = sp;
    if (!global_) xhat_.reshape(in[0]);
    mean_.assign(c_, 0.f);
    inv_std_.assign(c_, 0.f);
  }

  void forward(OpCall& c) override {
    const float* x = c.in[0]->f32();
    float* y = c.out[0]->f32();
    float* run_mean = c.params[0]->f32();
    float* run_var = c.params[1]->f32();
    float* factor = c.params[2]->f32();
    if (global_) {
      float f = factor[0] == 0.f ? 0.f : 1.f / factor[0];
      for (int64_t k = 0; k < c_; ++k) {
        mean_[k] = run_mean[k] * f;
        inv_std_[k] = 1.f / std::sqrt(run_var[k] * f + eps_);
      }
    } else {
      // Per channel: the sum, then the squared deviations from the mean (two passes, as
      // stable as Caffe's). With SyncBatchNorm both sums, and the count, are over all ranks.
      std::vector<double> sums(static_cast<size_t>(c_) + 1), mus(static_cast<size_t>(c_));
      sums[static_cast<size_t>(c_)] = static_cast<double>(n_ * sp_);
#pragma omp parallel for
      for (int64_t k = 0; k < c_; ++k) {
        double s = 0;
        for (int64_t b = 0; b < n_; ++b) {
          const float* p = x + (b * c_ + k) * sp_;
          for (int64_t i = 0; i < sp_; ++i) s += p[i];
        }
        sums[static_cast<size_t>(k)] = s;
      }
      if (sum_over_ranks_) sum_over_ranks_(sums.data(), sums.size());
      const double m = sums[static_cast<size_t>(c_)];
      for (int64_t k = 0; k < c_; ++k) mus[static_cast<size_t>(k)] = sums[static_cast<size_t>(k)] / m;
#pragma omp parallel for
      for (int64_t k = 0; k < c_; ++k) {
        double sq = 0, mu = mus[static_cast<size_t>(k)];
        for (int64_t b = 0; b < n_; ++b) {
          const float* p = x + (b * c_ + k) * sp_;
          for (int64_t i = 0; i < sp_; ++i) sq += (p[i] - mu) * (p[i] - mu);
        }
        sums[static_cast<size_t>(k)] = sq;
      }
      if (sum_over_ranks_) sum_over_ranks_(sums.data(), static_cast<size_t>(c_));
      for (int64_t k = 0; k < c_; ++k) {
        double mu = mus[static_cast<size_t>(k)];
        double var = sums[static_cast<size_t>(k)] / m;
        mean_[k] = static_cast<float>(mu);
        inv_std_[k] = static_cast<float>(1.0 / std::sqrt(var + eps_));
        if (phase_ == proto::TRAIN) {
          // Caffe keeps sums weighted by the normaliser, and the unbiased variance.
          double unbias = m > 1 ? m / (m - 1) : 1.0;
          run_mean[k] = run_mean[k] * maf_ + static_cast<float>(mu);
          run_var[k] = run_var[k] * maf_ + static_cast<float>(var * unbias);
        }
      }
      if (phase_ == proto::TRAIN) factor[0] = factor[0] * maf_ + 1.f;
    }
#pragma omp parallel for collapse(2)
    for (int64_t b = 0; b < n_; ++b)
      for (int64_t k = 0; k < c_; ++k) {
        const float* p = x + (b * c_ + k) * sp_;
        float* q = y + (b * c_ + k) * sp_;
        float mu = mean_[k], is = inv_std_[k];
        for (int64_t i = 0; i < sp_; ++i) q[i] = (p[i] - mu) * is;
      }
    if (!global_) std::memcpy(xhat_.f32(), y, xhat_.bytes());
  }

  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float* dy = c.out_grad[0]->f32();
    float* dx = c.in_grad[0]->f32();
    if (global_) {
#pragma omp parallel for collapse(2)
      for (int64_t b = 0; b < n_; ++b)
        for (int64_t k = 0; k < c_; ++k) {
          int64_t o = (b * c_ + k) * sp_;
          for (int64_t i = 0; i < sp_; ++i) dx[o + i] = dy[o + i] * inv_std_[k];
        }
      return;
    }
    const float* xh = xhat_.f32();
    // Per channel: sum(dy) and sum(dy * xhat), then the count (over all ranks with SyncBN).
    std::vector<double> sums(2 * static_cast<size_t>(c_) + 1);
    sums.back() = static_cast<double>(n_ * sp_);
#pragma omp parallel for
    for (int64_t k = 0; k < c_; ++k) {
      double sdy = 0, sdyx = 0;
      for (int64_t b = 0; b < n_; ++b) {
        int64_t o = (b * c_ + k) * sp_;
        for (int64_t i = 0; i < sp_; ++i) {
          sdy += dy[o + i];
          sdyx += dy[o + i] * xh[o + i];
        }
      }
      sums[2 * static_cast<size_t>(k)] = sdy;
      sums[2 * static_cast<size_t>(k) + 1] = sdyx;
    }
    if (sum_over_ranks_) sum_over_ranks_(sums.data(), sums.size());
    const double m = sums.back();
#pragma omp parallel for
    for (int64_t k = 0; k < c_; ++k) {
      float mdy = static_cast<float>(sums[2 * static_cast<size_t>(k)] / m);
      float mdyx = static_cast<float>(sums[2 * static_cast<size_t>(k) + 1] / m), is = inv_std_[k];
      for (int64_t b = 0; b < n_; ++b) {
        int64_t o = (b * c_ + k) * sp_;
        for (int64_t i = 0; i < sp_; ++i) dx[o + i] = (dy[o + i] - mdy - xh[o + i] * mdyx) * is;
      }
    }
  }

 private:
  bool global_;
  float eps_, maf_;
  int64_t n_ = 0, c_ = 0, sp_ = 0;
  Tensor xhat_;
  std::vector<float> mean_, inv_std_;
  CrossRankSum sum_over_ranks_;  // SyncBatchNorm (--sync-bn); empty: this batch's statistics
};

}  // namespace

BKS_REGISTER_OP_DEF("BatchNorm", BatchNormDef);
BKS_REGISTER_KERNEL("BatchNorm", ::bks::DeviceKind::cpu, BatchNormKernel, "loops", ::bks::kReferencePriority, nullptr);

}  // namespace bks
