#include "train/solver.h"

#include <cmath>

#include "core/log.h"
#include "core/parallel.h"

namespace bks {
namespace {

inline float regularized(float g, float w, float gscale, float decay, bool l1) {
  float r = l1 ? decay * static_cast<float>((w > 0.f) - (w < 0.f)) : decay * w;
  return g * gscale + r;
}

constexpr int64_t kParallelMin = 1 << 16;

class SgdSolver final : public Solver {
 public:
  using Solver::Solver;
  const char* type() const override { return "SGD"; }
  int history_size() const override { return 1; }
  void update(const Blob& b, float lr, float gs, float decay, bool l1, int64_t) override {
    float mom = p_.momentum();
    float* h = b.h[0];
    parallel_ranges(
        b.n,
        [=](int64_t lo, int64_t hi) {
#pragma omp simd
          for (int64_t i = lo; i < hi; ++i) {
            float v = mom * h[i] + lr * regularized(b.g[i], b.w[i], gs, decay, l1);
            h[i] = v;
            b.w[i] -= v;
          }
        },
        kParallelMin);
  }
};

class NesterovSolver final : public Solver {
 public:
  using Solver::Solver;
  const char* type() const override { return "Nesterov"; }
  int history_size() const override { return 1; }
  void update(const Blob& b, float lr, float gs, float decay, bool l1, int64_t) override {
    float mom = p_.momentum();
    float* h = b.h[0];
    parallel_ranges(
        b.n,
        [=](int64_t lo, int64_t hi) {
#pragma omp simd
          for (int64_t i = lo; i < hi; ++i) {
            float prev = h[i];
            float v = mom * prev + lr * regularized(b.g[i], b.w[i], gs, decay, l1);
            h[i] = v;
            b.w[i] -= (1.f + mom) * v - mom * prev;
          }
        },
        kParallelMin);
  }
};

class AdaGradSolver final : public Solver {
 public:
  using Solver::Solver;
  const char* type() const override { return "AdaGrad"; }
  int history_size() const override { return 1; }
  void update(const Blob& b, float lr, float gs, float decay, bool l1, int64_t) override {
    float delta = p_.delta();
    float* h = b.h[0];
    parallel_ranges(
        b.n,
        [=](int64_t lo, int64_t hi) {
#pragma omp simd
          for (int64_t i = lo; i < hi; ++i) {
            float g = regularized(b.g[i], b.w[i], gs, decay, l1);
            h[i] += g * g;
            b.w[i] -= lr * g / (std::sqrt(h[i]) + delta);
          }
        },
        kParallelMin);
  }
};

class RMSPropSolver final : public Solver {
 public:
  using Solver::Solver;
  const char* type() const override { return "RMSProp"; }
  int history_size() const override { return 1; }
  void update(const Blob& b, float lr, float gs, float decay, bool l1, int64_t) override {
    float delta = p_.delta(), rd = p_.rms_decay();
    float* h = b.h[0];
    parallel_ranges(
        b.n,
        [=](int64_t lo, int64_t hi) {
#pragma omp simd
          for (int64_t i = lo; i < hi; ++i) {
            float g = regularized(b.g[i], b.w[i], gs, decay, l1);
            h[i] = rd * h[i] + (1.f - rd) * g * g;
            b.w[i] -= lr * g / (std::sqrt(h[i]) + delta);
          }
        },
        kParallelMin);
  }
};

class AdaDeltaSolver final : public Solver {
 public:
  using Solver::Solver;
  const char* type() const override { return "AdaDelta"; }
  int history_size() const override { return 2; }
  void update(const Blob& b, float lr, float gs, float decay, bool l1, int64_t) override {
    float delta = p_.delta(), mom = p_.momentum();
    float *hg = b.h[0], *hu = b.h[1];
    parallel_ranges(
        b.n,
        [=](int64_t lo, int64_t hi) {
#pragma omp simd
          for (int64_t i = lo; i < hi; ++i) {
            float g = regularized(b.g[i], b.w[i], gs, decay, l1);
            hg[i] = mom * hg[i] + (1.f - mom) * g * g;
            float u = g * std::sqrt((hu[i] + delta) / (hg[i] + delta));
            hu[i] = mom * hu[i] + (1.f - mom) * u * u;
            b.w[i] -= lr * u;
          }
        },
        kParallelMin);
  }
};

class AdamSolver final : public Solver {
 public:
  using Solver::Solver;
  const char* type() const override { return "Adam"; }
  int history_size() const override { return 2; }
  void update(const Blob& b, float lr, float gs, float decay, bool l1, int64_t iter) override {
    float b1 = p_.momentum(), b2 = p_.momentum2(), eps = p_.delta();
    double t = static_cast<double>(iter + 1);
    float step = lr * static_cast<float>(std::sqrt(1.0 - std::pow(b2, t)) / (1.0 - std::pow(b1, t)));
    float *m = b.h[0], *v = b.h[1];
    parallel_ranges(
        b.n,
        [=](int64_t lo, int64_t hi) {
#pragma omp simd
          for (int64_t i = lo; i < hi; ++i) {
            float g = regularized(b.g[i], b.w[i], gs, decay, l1);
            m[i] = b1 * m[i] + (1.f - b1) * g;
            v[i] = b2 * v[i] + (1.f - b2) * g * g;
            b.w[i] -= step * m[i] / (std::sqrt(v[i]) + eps);
          }
        },
        kParallelMin);
  }
};

}  // namespace

std::unique_ptr<Solver> Solver::create(const proto::SolverParameter& p, const std::string& where) {
  std::string type = p.type();
  if (!p.has_type() && p.has_solver_type()) {
    static const char* names[] = {"SGD", "Nesterov", "AdaGrad", "RMSProp", "AdaDelta", "Adam"};
    type = names[p.solver_type()];
  }
  if (p.regularization_type() != "L1" && p.regularization_type() != "L2")
    input_error("{}: regularization_type must be L1 or L2, got \"{}\"", where, p.regularization_type());
  if (p.iter_size() < 1) input_error("{}: iter_size must be at least 1", where);
  if (type == "SGD") return std::unique_ptr<Solver>(new SgdSolver(p));
  if (type == "Nesterov") return std::unique_ptr<Solver>(new NesterovSolver(p));
  if (type == "AdaGrad") {
    if (p.momentum() != 0.f) input_error("{}: AdaGrad takes no momentum", where);
    return std::unique_ptr<Solver>(new AdaGradSolver(p));
  }
  if (type == "RMSProp") {
    if (p.momentum() != 0.f) input_error("{}: RMSProp takes no momentum (use rms_decay)", where);
    if (!(p.rms_decay() >= 0.f && p.rms_decay() < 1.f)) input_error("{}: rms_decay must be in [0, 1)", where);
    return std::unique_ptr<Solver>(new RMSPropSolver(p));
  }
  if (type == "AdaDelta") return std::unique_ptr<Solver>(new AdaDeltaSolver(p));
  if (type == "Adam") return std::unique_ptr<Solver>(new AdamSolver(p));
  input_error("{}: unknown solver type \"{}\" (SGD, Nesterov, AdaGrad, RMSProp, AdaDelta, Adam)", where, type);
}

std::vector<Tensor>& Solver::history_for(const Param& p) {
  for (auto& [k, h] : history_)
    if (k == p.key) return h;
  history_.emplace_back(p.key, std::vector<Tensor>());
  auto& h = history_.back().second;
  for (int i = 0; i < history_size(); ++i) h.emplace_back(p.data.shape());
  return h;
}

void Solver::step(ParamStore& store, const std::vector<int>& indices, float rate, int64_t iter) {
  float gscale = 1.f / static_cast<float>(p_.iter_size());
  if (p_.clip_gradients() >= 0.f) {
    double sq = 0;
    for (int idx : indices) {
      const Param& p = store.at(idx);
      if (!p.learnable || p.lr_mult == 0.f) continue;
      const float* g = p.grad.f32();
      for (int64_t i = 0; i < p.grad.numel(); ++i) sq += static_cast<double>(g[i]) * g[i];
    }
    // As Caffe: the gradient summed over iter_size micro-batches is clipped, then averaged.
    const double norm = std::sqrt(sq);
    if (norm > p_.clip_gradients()) {
      gscale *= static_cast<float>(p_.clip_gradients() / norm);
      log::debug("gradient L2 norm {:.4g} clipped to {}", norm, p_.clip_gradients());
    }
  }
  bool l1 = p_.regularization_type() == "L1";
  for (int idx : indices) {
    Param& p = store.at(idx);
    if (!p.learnable || p.lr_mult == 0.f) continue;
    auto& h = history_for(p);
    Blob b{p.data.f32(), p.grad.f32(), {h[0].f32(), h.size() > 1 ? h[1].f32() : nullptr}, p.data.numel()};
    update(b, rate * p.lr_mult, gscale, p_.weight_decay() * p.decay_mult, l1, iter);
  }
}

std::vector<std::pair<std::string, const Tensor*>> Solver::state() const {
  std::vector<std::pair<std::string, const Tensor*>> out;
  for (auto& [k, h] : history_)
    for (size_t i = 0; i < h.size(); ++i) out.emplace_back(fmt::format("{}.h{}", k, i), &h[i]);
  return out;
}

void Solver::load_state(const TensorFile& f, const ParamStore& store, const std::string& path) {
  history_.clear();
  for (auto& [name, t] : f.tensors) {
    auto dot = name.rfind(".h");
    if (dot == std::string::npos) input_error("{}: unexpected tensor '{}' in a solver state", path, name);
    std::string key = name.substr(0, dot);
    int k = std::atoi(name.c_str() + dot + 2);
    int idx = store.find(key);
    if (idx < 0) input_error("{}: solver state for '{}', which the net does not have", path, key);
    if (store.at(idx).data.shape() != t.shape() || t.dtype() != DType::f32)
      input_error("{}: solver state '{}' has shape {} but the parameter has {}", path, name, shape_str(t.shape()),
                  shape_str(store.at(idx).data.shape()));
    if (k < 0 || k >= history_size())
      input_error("{}: tensor '{}' does not fit a {} solver ({} history blobs)", path, name, type(), history_size());
    std::vector<Tensor>* h = nullptr;
    for (auto& [hk, hv] : history_)
      if (hk == key) h = &hv;
    if (!h) {
      history_.emplace_back(key, std::vector<Tensor>(history_size()));
      h = &history_.back().second;
    }
    (*h)[k] = t.clone();
  }
}

}  // namespace bks
