#include "server/http.h"

#include <fmt/format.h>

#include "core/error.h"
#include "server/request_guard.h"

namespace bks::server {

void reply(httplib::Response& res, int status, const json& body) {
  res.status = status;
  // Replace, never throw, on bytes that are not UTF-8 (a log full of garbage).
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void reply_error(httplib::Response& res, const ApiError& e) {
  json err{{"error", e.what()}};
  if (!e.field.empty()) err["field"] = e.field;
  reply(res, e.status, err);
}

void handle(httplib::Response& res, const std::function<json()>& f, int ok_status) {
  handle_raw(res, [&] { reply(res, ok_status, f()); });
}

void handle_raw(httplib::Response& res, const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiError& e) {
    reply_error(res, e);
  } catch (const InputError& e) {
    reply(res, 400, {{"error", e.what()}});
  } catch (const std::exception& e) {
    reply(res, 500, {{"error", std::string("internal error: ") + e.what()}});
  } catch (...) {
    reply(res, 500, {{"error", "internal error: an exception that is not a std::exception"}});
  }
}

namespace {

// Whether brackets in `text` (outside strings) nest deeper than `limit`; a scan that needs
// no stack of its own, made before any parser sees the text.
bool nests_deeper_than(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (char ch : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (ch == '\\')
        escaped = true;
      else if (ch == '"')
        in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > limit) return true;
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  return false;
}

}  // namespace

json parse_bounded_json(std::string_view text) {
  if (nests_deeper_than(text, kMaxJsonDepth)) return json(json::value_t::discarded);
  return json::parse(text, nullptr, false);
}

json body_object(const httplib::Request& req) {
  require_json_content_type(req);
  if (req.body.size() > kMaxJsonBodyBytes)
    throw ApiError(413, "body", fmt::format("the JSON body is larger than {} MiB", kMaxJsonBodyBytes >> 20));
  if (nests_deeper_than(req.body, kMaxJsonDepth))
    throw ApiError(400, "body", fmt::format("the JSON body nests deeper than {} levels", kMaxJsonDepth));
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
