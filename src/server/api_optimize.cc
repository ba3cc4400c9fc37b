// `bakusoku optimize` from the dashboard, on a trained job's net and latest snapshot:
//   POST /api/jobs/<id>/optimize   {"objective", "max_accuracy_drop", "budget_minutes",
//                                   "allow_training", "fine_tune_iterations"}: queues an
//                                   optimize job (201) and returns it
//   GET  /api/jobs/<id>/optimize/report.json   the finished search (candidates, front, choice)
//   GET  /api/jobs/<id>/optimize/plot.svg      its plot
//   GET  /api/jobs/<id>/optimize/best.bks      the chosen bundle
#include <fmt/format.h>

#include <filesystem>

#include "server/http.h"
#include "server/job_files.h"

namespace bks::server {

namespace fs = std::filesystem;

namespace {

constexpr double kMaxBudgetMinutes = 24 * 60;
constexpr int64_t kMaxFineTuneIterations = 1000000;

// What the optimize job runs with: the request's fields, checked, with the CLI's defaults.
json optimize_spec(const json& body) {
  json spec;
  const json objective = body.value("objective", json("latency"));
  if (objective != "latency" && objective != "throughput" && objective != "size")
    throw ApiError(400, "objective", "'objective' must be \"latency\", \"throughput\" or \"size\"");
  spec["objective"] = objective;
  spec["max_accuracy_drop"] = number_field(body, "max_accuracy_drop", 0, 100, 0.5);
  spec["budget_minutes"] = number_field(body, "budget_minutes", 0.1, kMaxBudgetMinutes, 15);
  const json allow = body.value("allow_training", json(false));
  if (!allow.is_boolean()) throw ApiError(400, "allow_training", "'allow_training' must be true or false");
  spec["allow_training"] = allow.get<bool>();
  spec["fine_tune_iterations"] = integer_field(body, "fine_tune_iterations", 1, kMaxFineTuneIterations, 1000);
  return spec;
}

// A file the finished search wrote, or 404 saying why it is not there.
fs::path search_output(Context& c, const httplib::Request& req, const std::string& name) {
  const json job = row(c, "jobs", req);
  if (job.value("kind", "") != "optimize") throw ApiError(404, "", "this is not an optimize job");
  // Only a finished search's (a resumed one would still show its last attempt's).
  if (job.value("state", "") != "done") throw ApiError(404, "", "the search has not finished");
  const fs::path p = fs::path(c.scheduler.job_dir(job["id"])) / name;
  if (fs::exists(p)) return p;
  throw ApiError(404, "", name == "best.bks" ? "no candidate kept the accuracy budget" : "the search wrote no " + name);
}

}  // namespace

void add_optimize_routes(httplib::Server& s, Context& c) {
  s.Post(R"(/api/jobs/(\d+)/optimize)", [&c](const httplib::Request& req, httplib::Response& res) {
    handle(
        res,
        [&] {
          const json source = row(c, "jobs", req);
          if (source.value("kind", "") != "train") throw ApiError(409, "", "only training jobs can be optimized");
          const std::string state = source.value("state", "");
          if (state == "queued" || state == "running" || state == "new")
            throw ApiError(409, "", "the job is still training; optimize it when it has finished");
          const json spec = optimize_spec(body_object(req));
          const int64_t id = source["id"];
          const fs::path dir = c.scheduler.job_dir(id);
          const auto snaps = snapshot_files((dir / "run").string(), "safetensors");
          if (snaps.empty()) throw ApiError(409, "", "the job has no snapshot to optimize");
          json job{{"kind", "optimize"},
                   {"name",
                    fmt::format("{} · optimize {}", source.value("name", "job"), spec["objective"].get<std::string>())},
                   {"source_job", id},
                   {"source_iter", snaps.back().first},
                   {"spec", spec},
                   {"files",
                    {{"net.prototxt", read_job_file(dir, "net.prototxt")},
                     {"solver.prototxt", read_job_file(dir, "solver.prototxt")}}}};
          if (source.contains("dataset_id")) job["dataset_id"] = source["dataset_id"];
          // The snapshot as it is now, so the search does not depend on the source job staying.
          const fs::path weights = snaps.back().second;
          const int64_t nid = c.scheduler.submit(job, [weights](const std::string& job_dir) {
            link_or_copy(weights, fs::path(job_dir) / "weights.safetensors");
          });
          return *c.store.get("jobs", nid);
        },
        201);
  });
  s.Get(R"(/api/jobs/(\d+)/optimize/report\.json)", [&c](const httplib::Request& req, httplib::Response& res) {
    handle_raw(res, [&] { send_file(res, search_output(c, req, "best.json"), "application/json"); });
  });
  s.Get(R"(/api/jobs/(\d+)/optimize/plot\.svg)", [&c](const httplib::Request& req, httplib::Response& res) {
    handle_raw(res, [&] { send_file(res, search_output(c, req, "best.svg"), "image/svg+xml"); });
  });
  s.Get(R"(/api/jobs/(\d+)/optimize/best\.bks)", [&c](const httplib::Request& req, httplib::Response& res) {
    handle_raw(res, [&] {
      const fs::path p = search_output(c, req, "best.bks");
      send_file(res, p, "application/octet-stream", fmt::format("job{}_best.bks", req.matches[1].str()));
    });
  });
}

}  // namespace bks::server
