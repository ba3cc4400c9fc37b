#include "detection_oracle.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace bks::test {

std::string prior_box_layer(const PriorSpec& s) {
  std::string t = "type: 'PriorBox' prior_box_param {";
  for (double v : s.min_size) t += fmt::format(" min_size: {}", v);
  for (double v : s.max_size) t += fmt::format(" max_size: {}", v);
  for (double v : s.aspect_ratio) t += fmt::format(" aspect_ratio: {}", v);
  for (double v : s.variance) t += fmt::format(" variance: {}", v);
  t += fmt::format(" flip: {} clip: {} offset: {}", s.flip, s.clip, s.offset);
  if (s.img_h > 0) t += fmt::format(" img_h: {} img_w: {}", s.img_h, s.img_w);
  if (s.step_h > 0) t += fmt::format(" step_h: {} step_w: {}", s.step_h, s.step_w);
  return t + " }";
}

Tensor naive_prior_box(const PriorSpec& s, int64_t fh, int64_t fw, int64_t img_h, int64_t img_w) {
  const double ih = s.img_h > 0 ? s.img_h : img_h, iw = s.img_w > 0 ? s.img_w : img_w;
  const double sh = s.step_h > 0 ? s.step_h : ih / fh, sw = s.step_w > 0 ? s.step_w : iw / fw;
  std::vector<double> ratios{1};
  for (double r : s.aspect_ratio) {
    if (std::any_of(ratios.begin(), ratios.end(), [&](double e) { return std::fabs(e - r) < 1e-6; })) continue;
    ratios.push_back(r);
    if (s.flip) ratios.push_back(1 / r);
  }
  std::vector<double> box;  // xmin, ymin, xmax, ymax per prior
  for (int64_t y = 0; y < fh; ++y)
    for (int64_t x = 0; x < fw; ++x) {
      const double cx = (x + s.offset) * sw, cy = (y + s.offset) * sh;
      auto add = [&](double bw, double bh) {
        for (double v : {(cx - bw / 2) / iw, (cy - bh / 2) / ih, (cx + bw / 2) / iw, (cy + bh / 2) / ih})
          box.push_back(s.clip ? std::clamp(v, 0.0, 1.0) : v);
      };
      for (size_t k = 0; k < s.min_size.size(); ++k) {
        const double m = std::trunc(s.min_size[k]);
        add(m, m);
        if (!s.max_size.empty())
          add(std::sqrt(m * std::trunc(s.max_size[k])), std::sqrt(m * std::trunc(s.max_size[k])));
        for (double r : ratios)
          if (r != 1) add(m * std::sqrt(r), m / std::sqrt(r));
      }
    }
  const int64_t n = static_cast<int64_t>(box.size());
  Tensor t({1, 2, n});
  for (int64_t i = 0; i < n; ++i) {
    t.f32()[i] = static_cast<float>(box[i]);
    const double v = s.variance.empty() ? 0.1 : s.variance.size() == 1 ? s.variance[0] : s.variance[i % 4];
    t.f32()[n + i] = static_cast<float>(v);
  }
  return t;
}

std::string detection_output_layer(const DetSpec& s) {
  std::string t = fmt::format(
      "type: 'DetectionOutput' detection_output_param {{ num_classes: {} share_location: {} background_label_id: {} "
      "nms_param {{ nms_threshold: {} eta: {}{} }} keep_top_k: {} code_type: {} variance_encoded_in_target: {}",
      s.num_classes, s.share_location, s.background_label_id, s.nms_threshold, s.eta,
      s.top_k >= 0 ? fmt::format(" top_k: {}", s.top_k) : "", s.keep_top_k, s.code_type, s.variance_encoded_in_target);
  if (s.has_confidence_threshold) t += fmt::format(" confidence_threshold: {}", s.confidence_threshold);
  return t + " }";
}

namespace {

struct B {
  double x0, y0, x1, y1;
};

double area(const B& b) { return b.x1 < b.x0 || b.y1 < b.y0 ? 0 : (b.x1 - b.x0) * (b.y1 - b.y0); }

double overlap(const B& a, const B& b) {
  const double w = std::min(a.x1, b.x1) - std::max(a.x0, b.x0), h = std::min(a.y1, b.y1) - std::max(a.y0, b.y0);
  if (w <= 0 || h <= 0) return 0;
  return w * h / (area(a) + area(b) - w * h);
}

B decode(const std::string& code, bool in_target, const float* p, const float* var, const float* l) {
  double v[4];
  for (int k = 0; k < 4; ++k) v[k] = in_target ? 1.0 : var[k];
  const double pw = p[2] - p[0], ph = p[3] - p[1];
  if (code == "CORNER") return {p[0] + v[0] * l[0], p[1] + v[1] * l[1], p[2] + v[2] * l[2], p[3] + v[3] * l[3]};
  if (code == "CORNER_SIZE")
    return {p[0] + v[0] * l[0] * pw, p[1] + v[1] * l[1] * ph, p[2] + v[2] * l[2] * pw, p[3] + v[3] * l[3] * ph};
  if (code != "CENTER_SIZE") throw std::invalid_argument(code);
  const double cx = (p[0] + p[2]) / 2 + v[0] * l[0] * pw, cy = (p[1] + p[3]) / 2 + v[1] * l[1] * ph;
  const double w = std::exp(v[2] * l[2]) * pw, h = std::exp(v[3] * l[3]) * ph;
  return {cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2};
}

}  // namespace

std::vector<DetRow> naive_detections(const Tensor& loc, const Tensor& conf, const Tensor& prior, const DetSpec& s) {
  const int64_t num = loc.dim(0), P = prior.dim(2) / 4, C = s.num_classes;
  const int64_t L = s.share_location ? 1 : C;
  std::vector<DetRow> rows;
  for (int64_t i = 0; i < num; ++i) {
    // boxes[l][p]
    std::vector<std::vector<B>> boxes(L);
    for (int64_t l = 0; l < L; ++l)
      for (int64_t p = 0; p < P; ++p)
        boxes[l].push_back(decode(s.code_type, s.variance_encoded_in_target, prior.f32() + p * 4,
                                  prior.f32() + (P + p) * 4, loc.f32() + ((i * P + p) * L + l) * 4));
    struct Det {
      double score;
      int64_t label, p;
    };
    std::vector<Det> kept;  // by label, best first
    for (int64_t c = 0; c < C; ++c) {
      if (c == s.background_label_id) continue;
      std::vector<Det> cand;
      for (int64_t p = 0; p < P; ++p) {
        const double score = conf.f32()[(i * P + p) * C + c];
        if (!s.has_confidence_threshold || score > s.confidence_threshold) cand.push_back({score, c, p});
      }
      std::stable_sort(cand.begin(), cand.end(), [](const Det& a, const Det& b) { return a.score > b.score; });
      if (s.top_k >= 0 && static_cast<int64_t>(cand.size()) > s.top_k) cand.resize(s.top_k);
      const std::vector<B>& bx = boxes[s.share_location ? 0 : c];
      double threshold = s.nms_threshold;
      std::vector<int64_t> mine;
      for (const Det& d : cand) {
        bool keep =
            std::all_of(mine.begin(), mine.end(), [&](int64_t k) { return overlap(bx[d.p], bx[k]) <= threshold; });
        if (!keep) continue;
        mine.push_back(d.p);
        kept.push_back(d);
        if (s.eta < 1 && threshold > 0.5) threshold *= s.eta;
      }
    }
    if (s.keep_top_k >= 0 && static_cast<int64_t>(kept.size()) > s.keep_top_k) {
      std::stable_sort(kept.begin(), kept.end(), [](const Det& a, const Det& b) { return a.score > b.score; });
      kept.resize(s.keep_top_k);
      std::stable_sort(kept.begin(), kept.end(), [](const Det& a, const Det& b) { return a.label < b.label; });
    }
    for (const Det& d : kept) {
      const B& b = boxes[s.share_location ? 0 : d.label][d.p];
      rows.push_back({static_cast<double>(i), static_cast<double>(d.label), d.score, b.x0, b.y0, b.x1, b.y1});
    }
  }
  if (rows.empty())
    for (int64_t i = 0; i < num; ++i) rows.push_back({static_cast<double>(i), -1, -1, -1, -1, -1, -1});
  return rows;
}

Tensor padded_detections(const std::vector<DetRow>& rows, int64_t total) {
  if (static_cast<int64_t>(rows.size()) > total)
    throw std::invalid_argument(fmt::format("{} detections for {} rows", rows.size(), total));
  Tensor t({1, 1, total, 7});
  for (int64_t i = 0; i < total * 7; ++i) t.f32()[i] = -1.f;
  for (size_t r = 0; r < rows.size(); ++r)
    for (int k = 0; k < 7; ++k) t.f32()[r * 7 + k] = static_cast<float>(rows[r][k]);
  return t;
}

}  // namespace bks::test
