// /api/datasets: create (packing runs as a job), list, show (classes, counts, thumbnails),
// delete.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include "server/datasets.h"
#include "server/http.h"
#include "server/models.h"

namespace bks::server {

namespace fs = std::filesystem;

namespace {

fs::path dataset_dir(Context& c, int64_t id) { return fs::path(c.data_dir) / "datasets" / std::to_string(id); }

// The dataset with its packing job's state and, once packed, its info.json.
json describe(Context& c, json d) {
  auto job = c.store.get("jobs", d.value("job_id", int64_t{-1}));
  d["status"] = job ? job->value("state", "queued") : "failed";
  if (job) {
    d["progress"] = job->value("progress", 0.0);
    if (job->contains("reason")) d["reason"] = (*job)["reason"];
  }
  std::ifstream in(dataset_dir(c, d["id"]) / "info.json");
  if (in) d["info"] = parse_bounded_json(std::string(std::istreambuf_iterator<char>(in), {}));
  return d;
}

// A dataset of that name already there: the names are how the model form and the job list
// tell datasets apart. A failed one keeps its name (resuming its job packs it again); delete
// it to use the name.
void check_name_free(Context& c, const std::string& name) {
  for (const json& d : c.store.list("datasets"))
    if (d.value("name", "") == name)
      throw ApiError(400, "name",
                     fmt::format("a dataset named '{}' already exists (dataset {}); pick another name or delete it",
                                 name, d.value("id", int64_t{0})));
}

}  // namespace

DatasetView dataset_view(Context& c, int64_t id, const std::string& field) {
  auto d = c.store.get("datasets", id);
  if (!d) throw ApiError(400, field, fmt::format("no dataset {}", id));
  json full = describe(c, *d);
  if (full["status"] != "done" || !full.contains("info"))
    throw ApiError(
        409, field,
        fmt::format("dataset {} is {}; models need a packed dataset", id, full["status"].get<std::string>()));
  const json& info = full["info"];
  DatasetView v;
  v.dir = dataset_dir(c, id).string();
  v.text = info.value("kind", "") == "text";
  v.holdout = info.value("holdout", -1.0);
  if (!v.text) v.shape = info["shape"].get<std::vector<int64_t>>();
  v.class_names = info["classes"].get<std::vector<std::string>>();
  v.classes = static_cast<int64_t>(v.class_names.size());
  v.train_count = info["train_count"];
  v.val_count = info["val_count"];
  return v;
}

void add_dataset_routes(httplib::Server& s, Context& c) {
  s.Post("/api/datasets", [&c](const httplib::Request& req, httplib::Response& res) {
    handle(
        res,
        [&] {
          json spec = validate_dataset_spec(body_object(req), c.import_roots);
          json d{{"name", spec["name"]}, {"spec", spec}, {"created", now_seconds()}};
          // Two requests with one name at once: one gets it.
          static std::mutex naming;
          std::unique_lock<std::mutex> lock(naming);
          check_name_free(c, spec["name"]);
          int64_t id = c.store.insert("datasets", d);
          lock.unlock();
          json job{{"kind", "dataset"}, {"name", "dataset: " + spec["name"].get<std::string>()}, {"dataset_id", id}};
          d["job_id"] = c.scheduler.submit(job);
          c.store.put("datasets", d);
          return describe(c, d);
        },
        201);
  });
  s.Get("/api/datasets", [&c](const httplib::Request&, httplib::Response& res) {
    handle(res, [&] {
      json out = json::array();
      for (json& d : c.store.list("datasets")) out.push_back(describe(c, d));
      return out;
    });
  });
  s.Get(R"(/api/datasets/(\d+))", [&c](const httplib::Request& req, httplib::Response& res) {
    handle(res, [&] { return describe(c, row(c, "datasets", req)); });
  });
  s.Get(R"(/api/datasets/(\d+)/images/(mean\.png|[0-9]+_[0-9]+\.png))",
        [&c](const httplib::Request& req, httplib::Response& res) {
          handle_raw(res, [&] {
            json d = row(c, "datasets", req);
            std::string name = req.matches[2];
            fs::path p = dataset_dir(c, d["id"]) / (name == "mean.png" ? fs::path(name) : fs::path("thumbs") / name);
            std::ifstream in(p, std::ios::binary);
            if (!in) throw ApiError(404, "", "no image " + name);
            res.set_content(std::string(std::istreambuf_iterator<char>(in), {}), "image/png");
          });
        });
  s.Delete(R"(/api/datasets/(\d+))", [&c](const httplib::Request& req, httplib::Response& res) {
    handle(res, [&] {
      json d = row(c, "datasets", req);
      for (const json& m : c.store.list("models"))
        if (m.value("dataset_id", int64_t{-1}) == d["id"].get<int64_t>())
          throw ApiError(409, "",
                         fmt::format("model {} ('{}') uses this dataset; delete it first", m["id"].get<int64_t>(),
                                     m.value("name", "")));
      if (auto job = c.store.get("jobs", d.value("job_id", int64_t{-1}))) {
        std::string st = job->value("state", "");
        if (st == "running" || st == "queued") c.scheduler.abort(d["job_id"]);
        c.scheduler.remove(d["job_id"]);
      }
      // A concurrent DELETE may have won since row() found it.
      if (!c.store.remove("datasets", d["id"]))
        throw ApiError(404, "", fmt::format("no dataset {}", d["id"].get<int64_t>()));
      std::error_code ec;
      fs::remove_all(dataset_dir(c, d["id"]), ec);
      return json{{"deleted", d["id"]}};
    });
  });
}

}  // namespace bks::server
