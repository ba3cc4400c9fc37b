#include "server/classify.h"

#include <stb_image.h>
#include <stb_image_resize.h>

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "engine/deploy.h"
#include "engine/session.h"
#include "server/api_error.h"

namespace bks::server {

struct Classifier::Entry {
  std::string key;
  std::unique_ptr<InferenceSession> session;
  std::mutex mu;  // one request at a time per session
};

namespace {
constexpr size_t kCached = 4;
constexpr float kScale = 0.00390625f;  // the Data layers bakusoku serve writes scale pixels so
}  // namespace

std::shared_ptr<Classifier::Entry> Classifier::session(const ClassifyInput& in) {
  const std::string key = in.net_file + "|" + in.weights_file;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& e : cache_)
    if (e->key == key) return e;
  DeployOptions o;
  o.model = in.net_file;
  o.weights = in.weights_file;
  o.batch = 1;
  o.threads = 1;
  auto e = std::make_shared<Entry>();
  e->key = key;
  e->session = std::make_unique<InferenceSession>(deploy(o).bundle, in.weights_file, 1);
  cache_.push_back(e);
  if (cache_.size() > kCached) cache_.erase(cache_.begin());
  return e;
}

json Classifier::classify_pixels(const ClassifyInput& in, const uint8_t* chw) {
  auto e = session(in);
  std::lock_guard<std::mutex> lock(e->mu);
  InferenceSession& s = *e->session;
  Tensor& x = s.value(s.inputs()[0]);
  const int64_t n = std::accumulate(in.shape.begin(), in.shape.end(), int64_t{1}, std::multiplies<>());
  if (x.numel() != n)
    throw ApiError(409, "", fmt::format("the network reads {} values per image, the dataset gives {}", x.numel(), n));
  for (int64_t i = 0; i < n; ++i) x.f32()[i] = chw[i] * kScale;
  s.run();
  const Tensor& prob = s.value(s.outputs()[0]);
  std::vector<int> order(static_cast<size_t>(prob.numel()));
  std::iota(order.begin(), order.end(), 0);
  const float* p = prob.f32();
  std::sort(order.begin(), order.end(), [&](int a, int b) { return p[a] > p[b]; });
  json top = json::array();
  for (size_t k = 0; k < std::min<size_t>(5, order.size()); ++k) {
    int c = order[k];
    std::string name = c < static_cast<int>(in.classes.size()) ? in.classes[static_cast<size_t>(c)] : std::to_string(c);
    top.push_back({{"class", c}, {"name", name}, {"probability", p[c]}});
  }
  return json{{"top", top}};
}

json Classifier::classify_image(const ClassifyInput& in, const std::string& bytes) {
  const int c = static_cast<int>(in.shape.at(0)), h = static_cast<int>(in.shape.at(1)), w = static_cast<int>(in.shape.at(2));
  int iw = 0, ih = 0, ic = 0;
  stbi_uc* px = stbi_load_from_memory(reinterpret_cast<const stbi_uc*>(bytes.data()), static_cast<int>(bytes.size()), &iw,
                                      &ih, &ic, c);
  if (!px) throw ApiError(400, "image", fmt::format("not a PNG or JPEG image ({})", stbi_failure_reason()));
  std::vector<uint8_t> hwc(static_cast<size_t>(w * h * c)), chw(hwc.size());
  int ok = stbir_resize_uint8(px, iw, ih, 0, hwc.data(), w, h, 0, c);
  stbi_image_free(px);
  if (!ok) throw ApiError(400, "image", "the image cannot be resized");
  for (int ch = 0; ch < c; ++ch)
    for (int i = 0; i < w * h; ++i) chw[static_cast<size_t>(ch * w * h + i)] = hwc[static_cast<size_t>(i * c + ch)];
  return classify_pixels(in, chw.data());
}

}  // namespace bks::server
