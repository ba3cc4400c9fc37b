// Deploying a trained job from the dashboard: `bakusoku deploy` and then `bakusoku bench` on
// the bundle, as a job of its own (kind "deploy"), and what the bundle ships with:
//   POST /api/jobs/<id>/deploy   {"precision": "fp32" | "bf16" | "int8", "iter": N?}: queues
//                                it on that snapshot (default the latest) and returns it (201)
//   GET  /api/jobs/<id>/deploy/model.bks        the bundle
//   GET  /api/jobs/<id>/deploy/bench.json       bakusoku bench --report: batch 1 and 64
//   GET  /api/jobs/<id>/deploy/deploy.prototxt  the net as Caffe deploys it
//   GET  /api/jobs/<id>/deploy/labels.txt       the dataset's class names, one per line
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "engine/deploy.h"
#include "server/deploy_files.h"
#include "server/http.h"
#include "server/job_files.h"
#include "server/models.h"

namespace bks::server {

namespace fs = std::filesystem;

namespace {

// The deploy job the route names (404 for any other kind).
json deploy_job(Context& c, const httplib::Request& req) {
  json job = row(c, "jobs", req);
  if (job.value("kind", "") != "deploy") throw ApiError(404, "", "this is not a deploy job");
  return job;
}

// A finished deploy job's directory, or 404 saying why there is nothing yet.
fs::path deploy_dir(Context& c, const httplib::Request& req, bool needs_done) {
  const json job = deploy_job(c, req);
  if (needs_done && job.value("state", "") != "done")
    throw ApiError(404, "", "the bundle is not ready: the job has not finished");
  return c.scheduler.job_dir(job["id"]);
}

}  // namespace

void add_deploy_routes(httplib::Server& s, Context& c) {
  s.Post(R"(/api/jobs/(\d+)/deploy)", [&c](const httplib::Request& req, httplib::Response& res) {
    handle(
        res,
        [&] {
          const json source = row(c, "jobs", req);
          if (source.value("kind", "") != "train") throw ApiError(409, "", "only training jobs can be deployed");
          const json body = body_object(req);
          const std::string precision = body.value("precision", json("fp32")).is_string()
                                            ? body.value("precision", std::string("fp32"))
                                            : std::string();
          if (precision != "fp32" && precision != "bf16" && precision != "int8")
            throw ApiError(400, "precision", "'precision' must be \"fp32\", \"bf16\" or \"int8\"");
          if (precision == "bf16" && !cpu_has_bf16())
            throw ApiError(400, "precision",
                           "this server's CPU has neither AVX-512 BF16 nor AMX-BF16 instructions: deploy in fp32 or "
                           "int8");
          const int64_t id = source["id"];
          const fs::path dir = c.scheduler.job_dir(id);
          const auto snaps = snapshot_files((dir / "run").string(), "safetensors");
          if (snaps.empty()) throw ApiError(409, "", "the job has no snapshot to deploy yet");
          auto chosen = snaps.end() - 1;
          if (body.contains("iter")) {
            const int64_t iter = integer_field(body, "iter", 0, INT64_MAX, 0);
            chosen = std::find_if(snaps.begin(), snaps.end(), [&](const auto& s) { return s.first == iter; });
            if (chosen == snaps.end())
              throw ApiError(400, "iter", fmt::format("the job has no snapshot at iteration {}", iter));
          }
          json job{{"kind", "deploy"},
                   {"name", fmt::format("{} · deploy {}", source.value("name", "job"), precision)},
                   {"source_job", id},
                   {"source_iter", chosen->first},
                   {"spec", {{"precision", precision}}},
                   {"files", {{"net.prototxt", read_job_file(dir, "net.prototxt")}}}};
          if (source.contains("dataset_id")) job["dataset_id"] = source["dataset_id"];
          const fs::path weights = chosen->second;
          const int64_t nid = c.scheduler.submit(job, [weights](const std::string& job_dir) {
            link_or_copy(weights, fs::path(job_dir) / "weights.safetensors");
          });
          return *c.store.get("jobs", nid);
        },
        201);
  });
  s.Get(R"(/api/jobs/(\d+)/deploy/model\.bks)", [&c](const httplib::Request& req, httplib::Response& res) {
    handle_raw(res, [&] {
      send_file(res, deploy_dir(c, req, true) / "model.bks", "application/octet-stream",
                fmt::format("job{}.bks", req.matches[1].str()));
    });
  });
  s.Get(R"(/api/jobs/(\d+)/deploy/bench\.json)", [&c](const httplib::Request& req, httplib::Response& res) {
    handle_raw(res, [&] { send_file(res, deploy_dir(c, req, true) / "bench.json", "application/json"); });
  });
  s.Get(R"(/api/jobs/(\d+)/deploy/deploy\.prototxt)", [&c](const httplib::Request& req, httplib::Response& res) {
    handle_raw(res, [&] {
      res.set_content(deploy_prototxt((deploy_dir(c, req, false) / "net.prototxt").string()), "text/plain");
      res.set_header("Content-Disposition", "attachment; filename=\"deploy.prototxt\"");
    });
  });
  s.Get(R"(/api/jobs/(\d+)/deploy/labels\.txt)", [&c](const httplib::Request& req, httplib::Response& res) {
    handle_raw(res, [&] {
      const json job = deploy_job(c, req);
      DatasetView d;
      try {
        d = dataset_view(c, job.value("dataset_id", int64_t{0}), "");
      } catch (const ApiError&) {
        throw ApiError(404, "", "the job's dataset is gone, and its labels with it");
      }
      res.set_content(labels_text(d.class_names), "text/plain");
      res.set_header("Content-Disposition", "attachment; filename=\"labels.txt\"");
    });
  });
}

}  // namespace bks::server
