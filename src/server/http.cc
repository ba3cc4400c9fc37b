#include "server/http.h"

#include "core/error.h"

namespace bks::server {

void reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  // Replace, never throw, on bytes that are not UTF-8 (a log full of garbage).
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void handle(httplib::Response& res, const std::function<json()>& f, int ok_status) {
  handle_raw(res, [&] { reply(res, ok_status, f()); });
}

void handle_raw(httplib::Response& res, const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiError& e) {
    json err{{"error", e.what()}};
    if (!e.field.empty()) err["field"] = e.field;
    reply(res, e.status, err);
  } catch (const InputError& e) {
    reply(res, 400, {{"error", e.what()}});
  } catch (const std::exception& e) {
    reply(res, 500, {{"error", std::string("internal error: ") + e.what()}});
  }
}

json body_object(const httplib::Request& req) {
  json j = json::parse(req.body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw ApiError(400, "", "the request body must be a JSON object");
  return j;
}

json row(Context& c, const std::string& table, const httplib::Request& req) {
  int64_t id = 0;
  try {
    id = std::stoll(req.matches[1].str());
  } catch (const std::exception&) {
    throw ApiError(404, "", "no such " + table.substr(0, table.size() - 1));
  }
  auto r = c.store.get(table, id);
  if (!r) throw ApiError(404, "", "no " + table.substr(0, table.size() - 1) + " " + std::to_string(id));
  return *r;
}

}  // namespace bks::server
