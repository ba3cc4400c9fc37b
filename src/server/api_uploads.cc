// Weights a user starts a model from, uploaded through the page (a .caffemodel or a
// .safetensors of at most the request limit, 16 MiB; larger ones go into the import folder
// by hand):
//   POST /api/weights   multipart field "weights" -> 201 {"path": <data>/imports/uploads/NAME}
//   GET /api/weights    the uploads, newest first, with their room
//   DELETE /api/weights/NAME
// The file lands inside the import folder, where POST /api/models' weights_from {"file"}
// reads it like any file put there. The folder's files together stay within `serve
// --max-uploads` (default 2 GiB) and kMaxUploadFiles: past either, 507 and nothing written.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <mutex>

#include "core/file_io.h"
#include "server/http.h"

namespace bks::server {

namespace fs = std::filesystem;

namespace {

// The upload's own name kept to letters, digits, '.', '-' and '_' (no path, no hidden
// file), with the extension that tells train how to read it.
std::string safe_name(const std::string& given) {
  std::string base = fs::path(given).filename().string(), out;
  for (char ch : base)
    out += std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '-' || ch == '_' ? ch : '_';
  while (!out.empty() && out.front() == '.') out.erase(out.begin());
  const std::string ext = fs::path(out).extension().string();
  if (ext != ".safetensors" && ext != ".caffemodel")
    throw ApiError(400, "weights", fmt::format("'{}' is not a .safetensors or .caffemodel file", given));
  if (out.size() > 120) out = out.substr(0, 120 - ext.size()) + ext;
  return out;
}

// Files the uploads folder may hold, whatever their size (each upload reads the folder).
constexpr uintmax_t kMaxUploadFiles = 10000;

double mib(uintmax_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

fs::path uploads_dir(const Context& c) { return fs::path(c.data_dir) / "imports" / "uploads"; }

// Uploads and deletions check and change the folder one at a time, so two uploads cannot
// both fit the last of the room.
std::mutex& folder_lock() {
  static std::mutex m;
  return m;
}

// Refuses (507) an upload of `bytes` that would take the folder's files past `limit` bytes
// or kMaxUploadFiles files.
void check_room(const fs::path& dir, uintmax_t bytes, uintmax_t limit) {
  uintmax_t used = 0, files = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::error_code ec;
    const uintmax_t size = e.is_regular_file(ec) ? e.file_size(ec) : 0;
    if (!ec) used += size;
    ++files;
  }
  if (files >= kMaxUploadFiles || used + bytes > limit)
    throw ApiError(507, "weights",
                   fmt::format("{} holds {} file(s) of {:.1f} MiB; this upload of {:.1f} MiB would pass the "
                               "server's limit of {:.0f} MiB and {} files (serve --max-uploads): delete some first "
                               "(the new-model page lists them under its weights field)",
                               dir.string(), files, mib(used), mib(bytes), mib(limit), kMaxUploadFiles));
}

}  // namespace

void add_upload_routes(httplib::Server& s, Context& c) {
  s.Post("/api/weights", [&c](const httplib::Request& req, httplib::Response& res) {
    handle(
        res,
        [&] {
          if (!req.is_multipart_form_data() || !req.has_file("weights"))
            throw ApiError(400, "weights", "upload the file as multipart field 'weights'");
          const auto file = req.get_file_value("weights");
          if (file.content.empty()) throw ApiError(400, "weights", "the uploaded file is empty");
          const std::string name = safe_name(file.filename);
          const fs::path dir = uploads_dir(c);
          fs::create_directories(dir);
          std::lock_guard<std::mutex> lock(folder_lock());
          check_room(dir, file.content.size(), c.max_upload_bytes);
          // A name already there gets a number: an upload never replaces a file in use.
          fs::path to = dir / name;
          for (int k = 2; fs::exists(to); ++k)
            to = dir / fmt::format("{}-{}{}", fs::path(name).stem().string(), k, fs::path(name).extension().string());
          write_file_atomic(to.string(), file.content);
          return json{{"path", to.string()}, {"bytes", file.content.size()}};
        },
        201);
  });
  // What the folder holds, so the page can show it (uploads keep it to kMaxUploadFiles files;
  // files put there by hand are listed too).
  s.Get("/api/weights", [&c](const httplib::Request&, httplib::Response& res) {
    handle(res, [&] {
      const fs::path dir = uploads_dir(c);
      json files = json::array();
      uintmax_t used = 0;
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(dir, ec)) {
        std::error_code fe;
        if (!e.is_regular_file(fe)) continue;
        const uintmax_t bytes = e.file_size(fe);
        const auto when = fs::last_write_time(e.path(), fe);
        if (fe) continue;  // removed meanwhile
        used += bytes;
        // The file clock's epoch is the library's own: carried over through "now".
        const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(
            (std::chrono::system_clock::now() + (when - fs::file_time_type::clock::now())).time_since_epoch());
        files.push_back({{"name", e.path().filename().string()},
                         {"path", e.path().string()},
                         {"bytes", bytes},
                         {"modified", seconds.count()}});
      }
      std::sort(files.begin(), files.end(), [](const json& a, const json& b) {
        return a["modified"].get<int64_t>() != b["modified"].get<int64_t>()
                   ? a["modified"].get<int64_t>() > b["modified"].get<int64_t>()
                   : a["name"].get<std::string>() < b["name"].get<std::string>();
      });
      return json{{"folder", dir.string()},
                  {"files", files},
                  {"bytes", used},
                  {"limit_bytes", c.max_upload_bytes},
                  {"limit_files", kMaxUploadFiles}};
    });
  });
  // Jobs started from an upload keep their own link or copy of it (init.*), so deleting it
  // changes no job; a model naming it cannot start new fine-tunes from it afterwards.
  s.Delete(R"(/api/weights/([^/]+))", [&c](const httplib::Request& req, httplib::Response& res) {
    handle(res, [&] {
      const std::string name = req.matches[1].str();
      std::lock_guard<std::mutex> lock(folder_lock());
      // Only a name the folder lists: nothing outside it, whatever the request spells.
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(uploads_dir(c), ec)) {
        if (e.path().filename().string() != name) continue;
        std::error_code fe;
        if (!e.is_regular_file(fe)) break;
        if (!fs::remove(e.path(), fe) || fe)
          throw ApiError(500, "", fmt::format("could not delete {}: {}", e.path().string(), fe.message()));
        return json{{"deleted", e.path().string()}};
      }
      throw ApiError(404, "", fmt::format("no uploaded weights file named '{}'", name));
    });
  });
}

}  // namespace bks::server
