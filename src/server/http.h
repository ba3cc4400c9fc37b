// What every API handler shares: the server's parts, JSON replies, and one place that turns
// errors into 4xx/5xx JSON ({"error": ..., "field": ...}) so no request takes the server
// down.
#pragma once

#include <httplib.h>

#include <functional>
#include <string>
#include <vector>

#include "server/api_error.h"
#include "server/classify.h"
#include "server/jobs.h"
#include "server/models.h"
#include "server/store.h"

namespace bks::server {

struct Context {
  Store& store;
  Scheduler& scheduler;
  Classifier& classifier;
  std::vector<std::string> import_roots;  // folders datasets may be read from
  std::string data_dir;
};

void reply(httplib::Response& res, int status, const json& body);
// Runs `f` and replies with its result (status 200, or `ok_status`), or with the error it
// threw: ApiError as given, InputError 400, anything else 500.
void handle(httplib::Response& res, const std::function<json()>& f, int ok_status = 200);
// The same for handlers that write the response themselves (files, images, streams).
void handle_raw(httplib::Response& res, const std::function<void()>& f);
// The request body as a JSON object (ApiError 400 when it is not one).
json body_object(const httplib::Request& req);
// The numeric id captured by the route's first group (ApiError 404 when no such row).
json row(Context& c, const std::string& table, const httplib::Request& req);

// A packed dataset as networks see it (ApiError naming `field` when it is missing or not
// packed yet).
DatasetView dataset_view(Context& c, int64_t id, const std::string& field);

// A job with what a page shows about it: progress and latest figures from its metrics,
// and with `full` the end of its log while it runs and its snapshots.
json describe_job(Context& c, json job, bool full);

void add_dataset_routes(httplib::Server& s, Context& c);
void add_model_routes(httplib::Server& s, Context& c);
void add_job_routes(httplib::Server& s, Context& c);
void add_event_routes(httplib::Server& s, Context& c);
void add_classify_routes(httplib::Server& s, Context& c);
void add_static_routes(httplib::Server& s);

}  // namespace bks::server
