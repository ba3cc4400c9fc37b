// Testing a trained job from the dashboard, through its latest snapshot (or ?iter=N):
//   POST /api/jobs/<id>/classify   an uploaded image (multipart field "image") or a dataset
//                                  sample ({"split": "train"|"val", "index": N}): top-5
//   POST /api/jobs/<id>/visualize  the same input: every layer's activations and weights
//   POST /api/jobs/<id>/evaluate   {"split": "val"}: accuracy, per class, confusion matrix
//   POST /api/jobs/<id>/classify_many  many uploads (multipart fields "images", a folder
//                                  picked in the page): each one's top-5, and per predicted
//                                  class the images it is surest of
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <filesystem>

#include "data/dataset.h"
#include "server/http.h"
#include "server/images.h"

namespace bks::server {

namespace fs = std::filesystem;

namespace {

// The job's snapshot, network and dataset as the classifier needs them.
ClassifyInput resolve(Context& c, const httplib::Request& req, json& out) {
  json job = row(c, "jobs", req);
  if (job.value("kind", "") != "train") throw ApiError(409, "", "only training jobs classify");
  const fs::path dir = c.scheduler.job_dir(job["id"]);
  const fs::path weights = snapshot_weights(c, job, req, out);
  DatasetView d = dataset_view(c, job.value("dataset_id", int64_t{-1}), "dataset_id");
  if (d.text) throw ApiError(409, "", "this job learned text: ask it for a sample (POST /api/jobs/<id>/sample)");
  return {(dir / "net.prototxt").string(), weights.string(), d.shape, d.class_names, d.dir};
}

}  // namespace

fs::path snapshot_weights(Context& c, const json& job, const httplib::Request& req, json& out) {
  const fs::path dir = c.scheduler.job_dir(job["id"]);
  int64_t iter = -1;
  if (req.has_param("iter")) {
    // All of it a number ("12abc" is not iteration 12), and one that fits.
    const std::string text = req.get_param_value("iter");
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), iter);
    if (ec != std::errc() || end != text.data() + text.size() || iter < 0)
      throw ApiError(400, "iter", "'iter' must be a non-negative integer");
  } else {
    auto snaps = snapshot_files((dir / "run").string(), "safetensors");
    if (!snaps.empty()) iter = snaps.back().first;
  }
  fs::path weights = dir / "run" / "snapshots" / fmt::format("iter_{}.safetensors", iter);
  if (iter < 0) throw ApiError(409, "", "this job has no snapshot yet");
  if (!fs::exists(weights)) throw ApiError(400, "iter", fmt::format("no snapshot at iteration {}", iter));
  out["iter"] = iter;
  return weights;
}

namespace {

std::shared_ptr<const Dataset> split_of(const ClassifyInput& in, const std::string& split) {
  if (split != "train" && split != "val") throw ApiError(400, "split", "'split' must be \"train\" or \"val\"");
  auto ds = open_dataset((fs::path(in.dataset_dir) / (split + ".h5")).string());
  if (ds->size == 0) throw ApiError(409, "split", "that split is empty");
  return ds;
}

// The image a request names: an upload, or a dataset sample (then `out` gets its label).
std::vector<uint8_t> request_image(const httplib::Request& req, const ClassifyInput& in, json& out) {
  if (req.is_multipart_form_data()) {
    if (!req.has_file("image")) throw ApiError(400, "image", "upload the image as multipart field 'image'");
    std::vector<uint8_t> chw;
    std::string why;
    switch (decode_chw(req.get_file_value("image").content, static_cast<int>(in.shape.at(0)),
                       static_cast<int>(in.shape.at(1)), static_cast<int>(in.shape.at(2)), chw, why)) {
      case Decoded::ok: return chw;
      case Decoded::too_large: throw ApiError(413, "image", fmt::format("the image is too large: {}", why));
      case Decoded::not_an_image: break;
    }
    throw ApiError(400, "image", fmt::format("not a PNG or JPEG image ({})", why));
  }
  json body = body_object(req);
  std::string split = string_field(body, "split", false, 10);
  auto ds = split_of(in, split.empty() ? "val" : split);
  const int64_t index = integer_field(body, "index", 0, ds->size - 1, 0);
  const uint8_t* px = ds->field("data")->u8(index);
  const auto label = static_cast<int64_t>(ds->field("label")->f32(index)[0]);
  out["index"] = index;
  out["label"] = label;
  if (label >= 0 && label < static_cast<int64_t>(in.classes.size()))
    out["label_name"] = in.classes[static_cast<size_t>(label)];
  return std::vector<uint8_t>(px, px + ds->field("data")->sample_numel());
}

// Images one request may classify (the request's size is bounded too: 16 MiB in all).
constexpr size_t kMaxManyImages = 1000;
// Images decoded and classified at a time (a batch of the classifier's batched session).
constexpr size_t kDecodedAtOnce = 100;
// Images listed under each predicted class, the surest first.
constexpr size_t kBestPerClass = 8;

json classify_many(Context& c, const httplib::Request& req, const ClassifyInput& in) {
  if (!req.is_multipart_form_data() || !req.has_file("images"))
    throw ApiError(400, "images", "upload the images as multipart fields 'images'");
  std::vector<const httplib::MultipartFormData*> files;
  for (auto [it, end] = req.files.equal_range("images"); it != end; ++it) files.push_back(&it->second);
  if (files.size() > kMaxManyImages)
    throw ApiError(413, "images", fmt::format("{} images; at most {} at once", files.size(), kMaxManyImages));
  json results = json::array();
  std::vector<std::vector<std::pair<double, size_t>>> by_class(in.classes.size());
  // A group of files decoded (one bad file does not spoil the rest), then its good ones
  // classified together; groups bound the decoded pixels held at once.
  for (size_t from = 0; from < files.size(); from += kDecodedAtOnce) {
    const size_t to = std::min(files.size(), from + kDecodedAtOnce);
    std::vector<std::vector<uint8_t>> pixels(to - from);
    std::vector<const uint8_t*> good;
    for (size_t k = from; k < to; ++k) {
      const httplib::MultipartFormData& f = *files[k];
      std::string why;
      const Decoded d = decode_chw(f.content, static_cast<int>(in.shape.at(0)), static_cast<int>(in.shape.at(1)),
                                   static_cast<int>(in.shape.at(2)), pixels[k - from], why);
      results.push_back({{"name", f.filename}});
      if (d != Decoded::ok)
        results.back()["error"] = d == Decoded::too_large ? "too large: " + why : why;
      else
        good.push_back(pixels[k - from].data());
    }
    const std::vector<json> tops = good.empty() ? std::vector<json>{} : c.classifier.classify_many(in, good);
    for (size_t k = from, g = 0; k < to; ++k) {
      if (results[k].contains("error")) continue;
      const json& top = tops.at(g++);
      const size_t cls = top[0]["class"].get<size_t>();
      if (cls < by_class.size()) by_class[cls].emplace_back(top[0]["probability"].get<double>(), k);
      results[k]["top"] = top;
    }
  }
  json per_class = json::array();
  for (size_t cls = 0; cls < by_class.size(); ++cls) {
    auto& v = by_class[cls];
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    json best = json::array();
    for (size_t k = 0; k < std::min(v.size(), kBestPerClass); ++k) best.push_back(v[k].second);
    per_class.push_back(json{{"class", cls}, {"name", in.classes[cls]}, {"count", v.size()}, {"best", best}});
  }
  return json{{"count", files.size()}, {"results", results}, {"per_class", per_class}};
}

}  // namespace

void add_classify_routes(httplib::Server& s, Context& c) {
  s.Post(R"(/api/jobs/(\d+)/classify_many)", [&c](const httplib::Request& req, httplib::Response& res) {
    handle(res, [&] {
      json out;
      ClassifyInput in = resolve(c, req, out);
      out.update(classify_many(c, req, in));
      return out;
    });
  });
  // One image in, through the top-5 or through every layer.
  for (auto [verb, look] :
       {std::pair{"classify", &Classifier::classify_pixels}, std::pair{"visualize", &Classifier::visualize}})
    s.Post(std::string(R"(/api/jobs/(\d+)/)") + verb,
           [&c, look = look](const httplib::Request& req, httplib::Response& res) {
             handle(res, [&] {
               json out;
               ClassifyInput in = resolve(c, req, out);
               std::vector<uint8_t> img = request_image(req, in, out);
               out.update((c.classifier.*look)(in, img.data()));
               return out;
             });
           });
  s.Post(R"(/api/jobs/(\d+)/evaluate)", [&c](const httplib::Request& req, httplib::Response& res) {
    handle(res, [&] {
      json out;
      ClassifyInput in = resolve(c, req, out);
      json body = body_object(req);
      std::string split = string_field(body, "split", false, 10);
      if (split.empty()) split = "val";
      auto ds = split_of(in, split);
      out["split"] = split;
      out.update(c.classifier.evaluate(in, ds->field("data")->u8(0), ds->field("label")->f32(0), ds->size));
      return out;
    });
  });
}

}  // namespace bks::server
