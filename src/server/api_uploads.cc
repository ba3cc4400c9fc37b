// Weights a user starts a model from, uploaded through the page (a .caffemodel or a
// .safetensors of at most the request limit, 16 MiB; larger ones go into the import folder
// by hand):
//   POST /api/weights   multipart field "weights" -> 201 {"path": <data>/imports/uploads/NAME}
// The file lands inside the import folder, where POST /api/models' weights_from {"file"}
// reads it like any file put there.
#include <fmt/format.h>

#include <filesystem>

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
          const fs::path dir = fs::path(c.data_dir) / "imports" / "uploads";
          fs::create_directories(dir);
          // A name already there gets a number: an upload never replaces a file in use.
          fs::path to = dir / name;
          for (int k = 2; fs::exists(to); ++k)
            to = dir / fmt::format("{}-{}{}", fs::path(name).stem().string(), k, fs::path(name).extension().string());
          write_file_atomic(to.string(), file.content);
          return json{{"path", to.string()}, {"bytes", file.content.size()}};
        },
        201);
  });
}

}  // namespace bks::server
