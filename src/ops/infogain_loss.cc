// InfogainLoss: softmax over `axis`, then -sum_l H[label][l] log p_l per item, with a K x K
// matrix H read from infogain_loss_param.source (a BlobProto) or given as a third bottom.
// ignore_label and Caffe's normalisation modes as SoftmaxWithLoss (H = I is that loss).
#include <cfloat>
#include <cmath>
#include <filesystem>

#include "core/file_io.h"
#include "ops/loss_util.h"
#include "ops/op.h"

namespace bks {
namespace {

constexpr float kLogThreshold = 1e-20f;  // Caffe's kLOG_THRESHOLD

struct InfogainLossAttrs final : AttrsOf<InfogainLossAttrs> {
  std::string source;  // empty: H is bottom 2
  int64_t axis = 1;
  LossSpec loss;
  void visit(AttrVisitor& v) override {
    v.field("source", source);
    v.field("axis", axis);
    v.field("loss", loss);
  }
};

void infogain_from_caffe(const proto::LayerParameter& l, InfogainLossAttrs& a, const std::string& where) {
  // Caffe refuses the deprecated flag for this loss rather than translating it.
  if (l.loss_param().has_normalize())
    input_error("{}: loss_param.normalize is deprecated for InfogainLoss; use loss_param.normalization", where);
  a.source = l.infogain_loss_param().source();
  a.axis = l.infogain_loss_param().axis();
  a.loss = loss_from_caffe(l, LossSpec::valid);
}
void infogain_to_caffe(const InfogainLossAttrs& a, proto::LayerParameter& l) {
  proto::InfogainLossParameter* p = l.mutable_infogain_loss_param();
  p->clear_source();
  if (!a.source.empty()) p->set_source(a.source);
  p->set_axis(static_cast<int32_t>(a.axis));
  loss_to_caffe(a.loss, l);
}
BKS_REGISTER_ATTRS("InfogainLoss", InfogainLossAttrs, infogain_from_caffe, infogain_to_caffe);

// The prediction viewed as (outer, K, inner) around the axis, checked against the labels
// (and against H when it is a bottom).
struct InfogainSplit {
  int64_t outer = 1, k = 1, inner = 1;
};
InfogainSplit infogain_split(const OpContext& c, const std::vector<Shape>& in) {
  const Shape& s = in[0];
  int axis =
      canonical_axis(c.node.attrs.as<InfogainLossAttrs>().axis, static_cast<int>(s.size()), "infogain_loss_param.axis");
  InfogainSplit g{shape_count(s, 0, axis), s[axis], shape_count(s, axis + 1, static_cast<int>(s.size()))};
  if (shape_numel(in[1]) != g.outer * g.inner)
    c.fail("label count {} must equal the prediction count {} (shapes {} and {})", shape_numel(in[1]),
           g.outer * g.inner, shape_str(s), shape_str(in[1]));
  if (in.size() > 2 && shape_numel(in[2]) != g.k * g.k)
    c.fail("bottom 2 (H) has {} values; a {}-class prediction needs {}x{}", shape_numel(in[2]), g.k, g.k, g.k);
  return g;
}

// Reads H from a BlobProto file, checking its size against K x K before reading it whole.
std::vector<float> read_infogain(const std::string& where, const std::string& path, int64_t k) {
  auto fail = [&](const std::string& m) { input_error("{}: infogain_loss_param.source {}: {}", where, path, m); };
  std::error_code ec;
  auto bytes = std::filesystem::file_size(path, ec);
  if (ec) fail(fmt::format("cannot read it ({})", ec.message()));
  // At most a double (plus its tag) per entry and a small header; anything larger is not H.
  auto limit = static_cast<uintmax_t>(k) * static_cast<uintmax_t>(k) * 10u + 4096u;
  if (bytes > limit) fail(fmt::format("{} bytes is too large for a {}x{} matrix", bytes, k, k));
  proto::BlobProto blob;
  try {
    read_binary_proto(path, blob);
  } catch (const InputError& e) {
    fail(e.what());
  }
  std::vector<int64_t> dims(blob.shape().dim().begin(), blob.shape().dim().end());
  if (!blob.has_shape()) dims = {blob.num(), blob.channels(), blob.height(), blob.width()};
  int64_t count = 0;
  if (!checked_product(dims, k * k, count))
    fail(fmt::format("its shape {} is not a {}x{} matrix", shape_str(dims), k, k));
  std::vector<float> h;
  if (blob.data_size() > 0)
    h.assign(blob.data().begin(), blob.data().end());
  else
    for (double v : blob.double_data()) h.push_back(static_cast<float>(v));
  if (static_cast<int64_t>(h.size()) != count)
    fail(fmt::format("its shape holds {} values but it has {}", count, h.size()));
  if (count != k * k) fail(fmt::format("it holds {} values; a {}-class prediction needs {}x{}", count, k, k, k));
  return h;
}

class InfogainLossDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 2; }
  int max_inputs(const OpContext&) const override { return 3; }
  int max_outputs(const OpContext&) const override { return 2; }
  void check(const OpContext& c) const override {
    if (c.node.inputs.size() < 3 && c.node.attrs.as<InfogainLossAttrs>().source.empty())
      c.fail("infogain_loss_param.source is required when H is not given as a third bottom");
  }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    infogain_split(c, in);
    out[0] = {};
    if (out.size() > 1) out[1] = in[0];
  }
  // A gradient for the prediction only (not the labels, not H).
  OpFacts facts(const OpContext&, const std::vector<Shape>& in) const override { return loss_facts(in.size()); }
  OpTraits traits(const Node&) const override {
    OpTraits t;
    t.loss = true;
    t.inference_form = "Softmax";
    return t;
  }
  // Softmax over the same axis; its attributes belong to softmax.cc, so they are made from
  // the softmax_param Caffe would give it.
  void to_inference_form(Node& n) const override {
    proto::LayerParameter l;
    l.set_type("Softmax");
    l.mutable_softmax_param()->set_axis(static_cast<int32_t>(n.attrs.as<InfogainLossAttrs>().axis));
    n.type = "Softmax";
    n.attrs = attrs_from_caffe(l, n.name);
    n.attrs = attrs_from_caffe(l, n.where);
  }
};

// p = softmax(x); loss = sum over items of -sum_l H[y][l] log max(p_l, 1e-20), over the
// normaliser; gradient (p_l * sum_m H[y][m] - H[y][l]) per item.
class InfogainLossKernel final : public Kernel {
 public:
  explicit InfogainLossKernel(const OpInit& i)
      : Kernel(i),
        a_(i.node.attrs.as<InfogainLossAttrs>()),
        ignore_(IgnoreLabel::from(a_.loss)),
        h_from_file_(i.node.inputs.size() < 3) {}

  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    sp_ = infogain_split(context(), in);
    prob_.reshape(in[0]);
    row_sums_.assign(static_cast<size_t>(sp_.k), 0.f);
    if (h_from_file_ && static_cast<int64_t>(file_h_.size()) != sp_.k * sp_.k)
      file_h_ = read_infogain(where_, a_.source, sp_.k);
  }

  void forward(OpCall& c) override {
    softmax(c.in[0]->f32());
    const float* h = matrix(c);
    const float* p = prob_.f32();
    const float* label = c.in[1]->f32();
    double loss = 0;
    int64_t valid = 0;
    for (int64_t o = 0; o < sp_.outer; ++o)
      for (int64_t i = 0; i < sp_.inner; ++i) {
        int64_t y = label_at(label, o, i);
        if (y < 0) continue;
        for (int64_t l = 0; l < sp_.k; ++l)
          loss -= static_cast<double>(h[y * sp_.k + l]) * std::log(std::max(p[at(o, l, i)], kLogThreshold));
        ++valid;
      }
    valid_ = valid;
    c.out[0]->f32()[0] = static_cast<float>(loss / loss_normalizer(a_.loss.normalization, sp_.outer, sp_.inner, valid));
    if (c.out.size() > 1) c.out[1]->copy_from(prob_);
  }

  void backward(OpCall& c) override {
    if (!c.in_grad[0]) return;
    const float* h = matrix(c);
    for (int64_t r = 0; r < sp_.k; ++r) {
      float s = 0.f;
      for (int64_t l = 0; l < sp_.k; ++l) s += h[r * sp_.k + l];
      row_sums_[r] = s;
    }
    const float* p = prob_.f32();
    const float* label = c.in[1]->f32();
    float* dx = c.in_grad[0]->f32();
    float scale = c.out_grad[0]->f32()[0] / loss_normalizer(a_.loss.normalization, sp_.outer, sp_.inner, valid_);
    for (int64_t o = 0; o < sp_.outer; ++o)
      for (int64_t i = 0; i < sp_.inner; ++i) {
        int64_t y = label_at(label, o, i);
        for (int64_t l = 0; l < sp_.k; ++l)
          dx[at(o, l, i)] = y < 0 ? 0.f : scale * (p[at(o, l, i)] * row_sums_[y] - h[y * sp_.k + l]);
      }
  }

 private:
  int64_t at(int64_t o, int64_t l, int64_t i) const { return (o * sp_.k + l) * sp_.inner + i; }
  const float* matrix(const OpCall& c) const { return h_from_file_ ? file_h_.data() : c.in[2]->f32(); }
  // The item's label, or -1 when it is ignored.
  int64_t label_at(const float* label, int64_t o, int64_t i) const {
    float v = label[o * sp_.inner + i];
    if (ignore_.skips(v)) return -1;
    auto y = static_cast<int64_t>(v);
    if (y < 0 || y >= sp_.k)
      runtime_error("{}: label {} is outside [0, {}) at item {}", where_, v, sp_.k, o * sp_.inner + i);
    return y;
  }
  void softmax(const float* x) {
    float* p = prob_.f32();
    for (int64_t o = 0; o < sp_.outer; ++o)
      for (int64_t i = 0; i < sp_.inner; ++i) {
        float m = -FLT_MAX;
        for (int64_t l = 0; l < sp_.k; ++l) m = std::max(m, x[at(o, l, i)]);
        float s = 0.f;
        for (int64_t l = 0; l < sp_.k; ++l) s += p[at(o, l, i)] = std::exp(x[at(o, l, i)] - m);
        for (int64_t l = 0; l < sp_.k; ++l) p[at(o, l, i)] /= s;
      }
  }

  InfogainLossAttrs a_;
  IgnoreLabel ignore_;
  bool h_from_file_;
  InfogainSplit sp_;
  Tensor prob_;
  std::vector<float> file_h_, row_sums_;
  int64_t valid_ = 0;
};

}  // namespace

BKS_REGISTER_OP_DEF("InfogainLoss", InfogainLossDef);
BKS_REGISTER_KERNEL("InfogainLoss", ::bks::DeviceKind::cpu, InfogainLossKernel, "loops", kReferencePriority, nullptr);

}  // namespace bks
