// DetectionOutput (the SSD fork's detection_output_param), inference only: decodes the
// location predictions against the priors, keeps per class the boxes that survive
// non-maximum suppression (score above confidence_threshold, the nms_param.top_k best,
// greedy IoU suppression), then the keep_top_k best of each image.
//
// Bottoms: loc [N, P * L * 4] (L = 1 with share_location, else num_classes), conf
// [N, P * num_classes] (probabilities, after the net's softmax), priors [1, 2, P * 4]
// (PriorBox: boxes, then variances). Top: [1, 1, R, 7] rows (image_id, label, score,
// xmin, ymin, xmax, ymax), ordered as the fork orders them: by image, then label, then
// score. The fork's top has one row per detection, a count that depends on the data;
// bakusoku's shapes are static, so R is the most there can be (N * keep_top_k, or the
// per-class bound when keep_top_k is -1) and the rows after the detections have every
// field -1 (image_id -1 marks the end). With no detection in the whole batch the fork's
// rows (i, -1, -1, -1, -1, -1, -1), one per image, come first, as there.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "core/log.h"
#include "ops/op.h"

namespace bks {
namespace {

constexpr const char* kCodeTypes[] = {"CORNER", "CENTER_SIZE", "CORNER_SIZE"};
enum CodeType { corner, center_size, corner_size };

struct DetectionOutputAttrs final : AttrsOf<DetectionOutputAttrs> {
  int64_t num_classes = 0;  // required
  bool share_location = true;
  int64_t background_label_id = 0;  // -1: none
  float nms_threshold = 0.3f;
  int64_t top_k = -1;  // per class before NMS; -1: all
  float eta = 1.f;     // adaptive NMS: the threshold shrinks by eta after each kept box while > 0.5
  int64_t keep_top_k = -1;
  float confidence_threshold = -FLT_MAX;  // the fork's "not given": every score counts
  int code_type = corner;
  bool variance_encoded_in_target = false;
  void visit(AttrVisitor& v) override {
    v.field("num_classes", num_classes);
    v.field("share_location", share_location);
    v.field("background_label_id", background_label_id);
    v.field("nms_threshold", nms_threshold);
    v.field("top_k", top_k);
    v.field("eta", eta);
    v.field("keep_top_k", keep_top_k);
    v.field("confidence_threshold", confidence_threshold);
    v.field("code_type", code_type, kCodeTypes);
    v.field("variance_encoded_in_target", variance_encoded_in_target);
  }
};
void detection_output_from_caffe(const proto::LayerParameter& l, DetectionOutputAttrs& a, const std::string& where) {
  const proto::DetectionOutputParameter& p = l.detection_output_param();
  a.num_classes = p.num_classes();
  a.share_location = p.share_location();
  a.background_label_id = p.background_label_id();
  a.nms_threshold = p.nms_param().nms_threshold();
  a.top_k = p.nms_param().has_top_k() ? p.nms_param().top_k() : -1;
  a.eta = p.nms_param().eta();
  a.keep_top_k = p.keep_top_k();
  a.confidence_threshold = p.has_confidence_threshold() ? p.confidence_threshold() : -FLT_MAX;
  a.code_type = static_cast<int>(p.code_type()) - 1;
  a.variance_encoded_in_target = p.variance_encoded_in_target();
  // What the fork does besides computing the top: files and pictures bakusoku does not make.
  if (!p.save_output_param().output_directory().empty())
    log::warn(
        "{}: detection_output_param.save_output_param is ignored (no result files are written; the "
        "detections are the layer's top)",
        where);
  if (p.visualize()) log::warn("{}: detection_output_param.visualize is ignored (nothing is drawn)", where);
}
void detection_output_to_caffe(const DetectionOutputAttrs& a, proto::LayerParameter& l) {
  proto::DetectionOutputParameter* p = l.mutable_detection_output_param();
  p->Clear();
  p->set_num_classes(static_cast<uint32_t>(a.num_classes));
  p->set_share_location(a.share_location);
  p->set_background_label_id(static_cast<int32_t>(a.background_label_id));
  p->mutable_nms_param()->set_nms_threshold(a.nms_threshold);
  if (a.top_k >= 0) p->mutable_nms_param()->set_top_k(static_cast<int32_t>(a.top_k));
  p->mutable_nms_param()->set_eta(a.eta);
  p->set_keep_top_k(static_cast<int32_t>(a.keep_top_k));
  if (a.confidence_threshold > -FLT_MAX) p->set_confidence_threshold(a.confidence_threshold);
  p->set_code_type(static_cast<proto::PriorBoxParameter::CodeType>(a.code_type + 1));
  p->set_variance_encoded_in_target(a.variance_encoded_in_target);
}
BKS_REGISTER_ATTRS("DetectionOutput", DetectionOutputAttrs, detection_output_from_caffe, detection_output_to_caffe);

struct Geometry {
  int64_t num = 0, priors = 0, loc_classes = 0, rows = 0;
};

// The classes that are not the background.
int64_t foreground_classes(const DetectionOutputAttrs& a) {
  const bool bg = a.background_label_id >= 0 && a.background_label_id < a.num_classes;
  return a.num_classes - (bg ? 1 : 0);
}

Geometry geometry(const OpContext& c, const std::vector<Shape>& in) {
  const DetectionOutputAttrs& a = c.node.attrs.as<DetectionOutputAttrs>();
  if (in[0].empty() || in[1].empty()) c.fail("loc and conf (bottoms 0 and 1) need a batch axis");
  c.expect_ndim(in[2], 3, 3, "the priors (bottom 2)");
  if (in[2][1] != 2 || in[2][2] % 4 != 0)
    c.fail("the priors (bottom 2) must be [1, 2, 4 * priors] as PriorBox makes them, got {}", shape_str(in[2]));
  Geometry g;
  g.num = in[0][0];
  g.priors = in[2][2] / 4;
  g.loc_classes = a.share_location ? 1 : a.num_classes;
  if (in[1][0] != g.num) c.fail("loc has {} images but conf has {}", g.num, in[1][0]);
  const int64_t loc = shape_numel(in[0]) / std::max<int64_t>(g.num, 1);
  const int64_t conf = shape_numel(in[1]) / std::max<int64_t>(g.num, 1);
  if (loc != g.priors * g.loc_classes * 4)
    c.fail("loc holds {} values per image; {} priors x {} location classes x 4 need {}", loc, g.priors, g.loc_classes,
           g.priors * g.loc_classes * 4);
  if (conf != g.priors * a.num_classes)
    c.fail("conf holds {} values per image; {} priors x detection_output_param.num_classes {} need {}", conf, g.priors,
           a.num_classes, g.priors * a.num_classes);
  const int64_t per_class = a.top_k >= 0 ? std::min(a.top_k, g.priors) : g.priors;
  int64_t per_image = foreground_classes(a) * per_class;
  if (a.keep_top_k >= 0) per_image = std::min(per_image, a.keep_top_k);
  g.rows = std::max(g.num * per_image, g.num);
  return g;
}

class DetectionOutputDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 3; }
  void check(const OpContext& c) const override {
    const DetectionOutputAttrs& a = c.node.attrs.as<DetectionOutputAttrs>();
    if (a.num_classes < 1) c.fail("detection_output_param.num_classes is required (at least 1)");
    if (!(a.nms_threshold >= 0.f))
      c.fail("detection_output_param.nms_param.nms_threshold must be non-negative, got {}", a.nms_threshold);
    if (!(a.eta > 0.f && a.eta <= 1.f)) c.fail("detection_output_param.nms_param.eta must be in (0, 1], got {}", a.eta);
    if (a.keep_top_k < -1) c.fail("detection_output_param.keep_top_k must be -1 or more, got {}", a.keep_top_k);
    if (a.top_k < -1) c.fail("detection_output_param.nms_param.top_k must be -1 or more, got {}", a.top_k);
  }
  void infer(const OpContext& c, const std::vector<Shape>& in, std::vector<Shape>& out) const override {
    out[0] = {1, 1, geometry(c, in).rows, 7};
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override { return no_backward_facts(); }
};

struct Box {
  float xmin, ymin, xmax, ymax, size;
};

// Width * height, 0 for an inverted box (normalised coordinates, as the fork's BBoxSize).
float box_size(float xmin, float ymin, float xmax, float ymax) {
  return xmax < xmin || ymax < ymin ? 0.f : (xmax - xmin) * (ymax - ymin);
}

float iou(const Box& a, const Box& b) {
  if (b.xmin > a.xmax || b.xmax < a.xmin || b.ymin > a.ymax || b.ymax < a.ymin) return 0.f;
  const float w = std::min(a.xmax, b.xmax) - std::max(a.xmin, b.xmin);
  const float h = std::min(a.ymax, b.ymax) - std::max(a.ymin, b.ymin);
  if (!(w > 0.f && h > 0.f)) return 0.f;
  const float inter = w * h;
  return inter / (a.size + b.size - inter);
}

// One prediction `l` (4 offsets) against prior `p` with variances `v`.
Box decode(int code, bool in_target, const float* p, const float* v, const float* l) {
  static constexpr float one[4] = {1.f, 1.f, 1.f, 1.f};
  if (in_target) v = one;
  Box b{};
  if (code == corner) {
    b = {p[0] + v[0] * l[0], p[1] + v[1] * l[1], p[2] + v[2] * l[2], p[3] + v[3] * l[3], 0.f};
  } else if (code == center_size) {
    const float pw = p[2] - p[0], ph = p[3] - p[1];
    const float pcx = (p[0] + p[2]) / 2.f, pcy = (p[1] + p[3]) / 2.f;
    const float cx = v[0] * l[0] * pw + pcx, cy = v[1] * l[1] * ph + pcy;
    const float w = std::exp(v[2] * l[2]) * pw, h = std::exp(v[3] * l[3]) * ph;
    b = {cx - w / 2.f, cy - h / 2.f, cx + w / 2.f, cy + h / 2.f, 0.f};
  } else {  // corner_size: offsets in units of the prior's size
    const float pw = p[2] - p[0], ph = p[3] - p[1];
    b = {p[0] + v[0] * l[0] * pw, p[1] + v[1] * l[1] * ph, p[2] + v[2] * l[2] * pw, p[3] + v[3] * l[3] * ph, 0.f};
  }
  b.size = box_size(b.xmin, b.ymin, b.xmax, b.ymax);
  return b;
}

struct Detection {
  float score;
  int64_t label, prior;
};
// Best first; ties in label, then prior order. A total order, so a partial sort keeps the
// same boxes, in the same order, as the fork's stable sorts of the lists it builds.
bool better(const Detection& x, const Detection& y) {
  if (x.score != y.score) return x.score > y.score;
  return x.label != y.label ? x.label < y.label : x.prior < y.prior;
}

class DetectionOutputKernel final : public Kernel {
 public:
  explicit DetectionOutputKernel(const OpInit& i) : Kernel(i), a_(i.node.attrs.as<DetectionOutputAttrs>()) {}
  void reshape(const std::vector<Shape>& in, const std::vector<Shape>&) override {
    g_ = geometry(context(), in);
    // Working space for one image, sized once (forward does not allocate).
    boxes_.resize(static_cast<size_t>(g_.loc_classes * g_.priors));
    candidates_.reserve(static_cast<size_t>(g_.priors));
    kept_.reserve(static_cast<size_t>(g_.priors));
    image_.reserve(static_cast<size_t>(a_.num_classes * g_.priors));
  }

  // Greedy NMS over class `label`'s scores (the fork's ApplyNMSFast): appends the kept
  // priors to image_, best first.
  void nms(const float* conf, const Box* boxes, int64_t label) {
    candidates_.clear();
    for (int64_t p = 0; p < g_.priors; ++p) {
      const float s = conf[p * a_.num_classes + label];
      if (s > a_.confidence_threshold) candidates_.push_back({s, label, p});
    }
    const int64_t n = static_cast<int64_t>(candidates_.size());
    const int64_t keep = a_.top_k >= 0 ? std::min(a_.top_k, n) : n;
    std::partial_sort(candidates_.begin(), candidates_.begin() + keep, candidates_.end(), better);
    candidates_.resize(keep);
    kept_.clear();
    float threshold = a_.nms_threshold;
    for (const Detection& d : candidates_) {
      bool keep = true;
      for (int64_t k : kept_) {
        if (!(iou(boxes[d.prior], boxes[k]) <= threshold)) {
          keep = false;
          break;
        }
      }
      if (!keep) continue;
      kept_.push_back(d.prior);
      image_.push_back(d);
      if (a_.eta < 1.f && threshold > 0.5f) threshold *= a_.eta;
    }
  }

  void forward(OpCall& c) override {
    const float* loc = c.in[0]->f32();
    const float* conf = c.in[1]->f32();
    const float* prior = c.in[2]->f32();
    const float* var = prior + g_.priors * 4;
    float* out = c.out[0]->f32();
    std::fill(out, out + g_.rows * 7, -1.f);
    int64_t row = 0;
    for (int64_t i = 0; i < g_.num; ++i) {
      const float* li = loc + i * g_.priors * g_.loc_classes * 4;
      const float* ci = conf + i * g_.priors * a_.num_classes;
      for (int64_t l = 0; l < g_.loc_classes; ++l) {
        if (!a_.share_location && l == a_.background_label_id) continue;  // never read
        for (int64_t p = 0; p < g_.priors; ++p)
          boxes_[l * g_.priors + p] = decode(a_.code_type, a_.variance_encoded_in_target, prior + p * 4, var + p * 4,
                                             li + (p * g_.loc_classes + l) * 4);
      }
      image_.clear();
      for (int64_t label = 0; label < a_.num_classes; ++label) {
        if (label == a_.background_label_id) continue;
        nms(ci, boxes_.data() + (a_.share_location ? 0 : label) * g_.priors, label);
      }
      if (a_.keep_top_k >= 0 && static_cast<int64_t>(image_.size()) > a_.keep_top_k) {
        // The best keep_top_k over all classes, then back in label order (best first within each).
        std::partial_sort(image_.begin(), image_.begin() + a_.keep_top_k, image_.end(), better);
        image_.resize(a_.keep_top_k);
        std::stable_sort(image_.begin(), image_.end(),
                         [](const Detection& x, const Detection& y) { return x.label < y.label; });
      }
      for (const Detection& d : image_) {
        const Box& b = boxes_[(a_.share_location ? 0 : d.label) * g_.priors + d.prior];
        float* r = out + row++ * 7;
        r[0] = static_cast<float>(i);
        r[1] = static_cast<float>(d.label);
        r[2] = d.score;
        r[3] = b.xmin;
        r[4] = b.ymin;
        r[5] = b.xmax;
        r[6] = b.ymax;
      }
    }
    if (row == 0)  // nothing found anywhere: one (i, -1, ...) row per image, as the fork writes
      for (int64_t i = 0; i < g_.num; ++i) out[i * 7] = static_cast<float>(i);
  }

 private:
  DetectionOutputAttrs a_;
  Geometry g_;
  std::vector<Box> boxes_;                     // decoded, [location class][prior]
  std::vector<Detection> candidates_, image_;  // one class's before NMS; the image's kept
  std::vector<int64_t> kept_;                  // one class's kept priors
};

}  // namespace

BKS_REGISTER_OP_DEF("DetectionOutput", DetectionOutputDef);
BKS_REGISTER_KERNEL("DetectionOutput", ::bks::DeviceKind::cpu, DetectionOutputKernel, "loops",
                    ::bks::kReferencePriority, nullptr);

}  // namespace bks
