// POST /api/jobs/<id>/classify: an uploaded image (multipart field "image") or a dataset
// sample ({"split": "train"|"val", "index": N}) through the job's latest snapshot (or
// ?iter=N): top-5 classes with probabilities.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "data/dataset.h"
#include "server/http.h"

namespace bks::server {

namespace fs = std::filesystem;

void add_classify_routes(httplib::Server& s, Context& c) {
  s.Post(R"(/api/jobs/(\d+)/classify)", [&c](const httplib::Request& req, httplib::Response& res) {
    handle(res, [&] {
      json job = row(c, "jobs", req);
      if (job.value("kind", "") != "train") throw ApiError(409, "", "only training jobs classify");
      const fs::path dir = c.scheduler.job_dir(job["id"]);
      // The snapshot: ?iter=N, else the newest.
      int64_t iter = -1;
      if (req.has_param("iter")) {
        try {
          iter = std::stoll(req.get_param_value("iter"));
        } catch (const std::exception&) {
          throw ApiError(400, "iter", "'iter' must be an integer");
        }
      } else {
        static const std::regex name(R"(iter_(\d+)\.safetensors)");
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(dir / "run" / "snapshots", ec)) {
          std::smatch m;
          std::string f = e.path().filename().string();
          if (std::regex_match(f, m, name)) iter = std::max<int64_t>(iter, std::stoll(m[1]));
        }
      }
      fs::path weights = dir / "run" / "snapshots" / fmt::format("iter_{}.safetensors", iter);
      if (iter < 0 || !fs::exists(weights))
        throw ApiError(409, iter < 0 ? "" : "iter", iter < 0 ? "this job has no snapshot yet" : fmt::format("no snapshot at iteration {}", iter));
      DatasetView d = dataset_view(c, job.value("dataset_id", int64_t{-1}), "dataset_id");
      std::ifstream info_in(fs::path(d.dir) / "info.json");
      json info = json::parse(info_in, nullptr, false);
      ClassifyInput in{(dir / "net.prototxt").string(), weights.string(), d.shape,
                       info.is_object() ? info["classes"].get<std::vector<std::string>>() : std::vector<std::string>()};
      json out;
      if (req.is_multipart_form_data()) {
        if (!req.has_file("image")) throw ApiError(400, "image", "upload the image as multipart field 'image'");
        out = c.classifier.classify_image(in, req.get_file_value("image").content);
      } else {
        json body = body_object(req);
        std::string split = string_field(body, "split", false, 10);
        if (split.empty()) split = "val";
        if (split != "train" && split != "val") throw ApiError(400, "split", "'split' must be \"train\" or \"val\"");
        auto ds = open_dataset((fs::path(d.dir) / (split + ".h5")).string());
        int64_t index = integer_field(body, "index", 0, std::max<int64_t>(0, ds->size - 1), 0);
        if (ds->size == 0) throw ApiError(409, "split", "that split is empty");
        out = c.classifier.classify_pixels(in, ds->field("data")->u8(index));
        const auto label = static_cast<int64_t>(ds->field("label")->f32(index)[0]);
        out["label"] = label;
        if (label >= 0 && label < static_cast<int64_t>(in.classes.size())) out["label_name"] = in.classes[static_cast<size_t>(label)];
        out["index"] = index;
      }
      out["iter"] = iter;
      return out;
    });
  });
}

}  // namespace bks::server
