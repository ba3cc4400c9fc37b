// What every API handler shares: the server's parts, JSON replies, and one place that turns
// errors into 4xx/5xx JSON ({"error": ..., "field": ...}) so no request takes the server
// down.
#pragma once

#include <httplib.h>

#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.h"
#include "server/classify.h"
#include "server/jobs.h"
#include "server/models.h"
#include "server/request_guard.h"
#include "server/store.h"

namespace bks::server {

struct Context {
  Store& store;
  Scheduler& scheduler;
  Classifier& classifier;
  std::vector<std::string> import_roots;  // folders datasets may be read from
  std::string data_dir;
  uintmax_t max_upload_bytes = uintmax_t{2048} << 20;  // the uploads folder's files together
};

void reply(httplib::Response& res, int status, const json& body);
// {"error": ..., "field": ...} with the error's status.
void reply_error(httplib::Response& res, const ApiError& e);
// Runs `f` and replies with its result (status 200, or `ok_status`), or with the error it
// threw: ApiError as given, InputError 400, anything else 500.
void handle(httplib::Response& res, const std::function<json()>& f, int ok_status = 200);
// The same for handlers that write the response themselves (files, images, streams).
void handle_raw(httplib::Response& res, const std::function<void()>& f);
// Bounds on JSON a request sends: nlohmann's DOM copies and frees values recursively, so a
// body nested thousands of levels deep would overflow a server thread's stack; no API body
// needs more than a few levels. The size bound leaves room for a 1 MiB prototxt, escaped.
constexpr int kMaxJsonDepth = 64;
constexpr size_t kMaxJsonBodyBytes = size_t{4} << 20;
// JSON text parsed only when it nests at most kMaxJsonDepth levels; a discarded value when
// it nests deeper or is not JSON (for files the server reads back, e.g. metrics lines).
json parse_bounded_json(std::string_view text);
// The request body as a JSON object: ApiError 415 unless sent as application/json, 413 when
// larger than kMaxJsonBodyBytes, 400 when nested deeper than kMaxJsonDepth or not an object.
json body_object(const httplib::Request& req);
// The numeric id captured by the route's first group (ApiError 404 when no such row).
json row(Context& c, const std::string& table, const httplib::Request& req);

// A packed dataset as networks see it (ApiError naming `field` when it is missing or not
// packed yet).
DatasetView dataset_view(Context& c, int64_t id, const std::string& field);

// A training job's metrics file (the run directory's metrics.jsonl).
std::filesystem::path metrics_file(Context& c, int64_t job);

// A job with what a page shows about it: progress and latest figures from its metrics,
// and with `full` the end of its log while it runs and its snapshots.
json describe_job(Context& c, json job, bool full);

// The file at `p` as the response (ApiError 404 when it cannot be read), offered for download
// as `download_name` when that is given (else shown inline).
void send_file(httplib::Response& res, const std::filesystem::path& p, const std::string& type,
               const std::string& download_name = "");

void add_dataset_routes(httplib::Server& s, Context& c);
void add_model_routes(httplib::Server& s, Context& c);
void add_job_routes(httplib::Server& s, Context& c);
// At most `max_viewers` event streams at once; one more gets 503 with Retry-After.
void add_event_routes(httplib::Server& s, Context& c, int max_viewers);
void add_classify_routes(httplib::Server& s, Context& c);
// POST /api/jobs/<id>/sample: text from a character-level job (api_sample.cc).
void add_sample_routes(httplib::Server& s, Context& c);
// A training job's snapshot weights: the one at ?iter=N, else its latest (ApiError 409 when
// it has none yet, 400 for a bad or missing iteration); `out["iter"]` says which.
std::filesystem::path snapshot_weights(Context& c, const json& job, const httplib::Request& req, json& out);
// POST /api/jobs/<id>/optimize and the finished search's report, plot and bundle.
void add_optimize_routes(httplib::Server& s, Context& c);
void add_deploy_routes(httplib::Server& s, Context& c);
void add_upload_routes(httplib::Server& s, Context& c);
void add_static_routes(httplib::Server& s);

}  // namespace bks::server
