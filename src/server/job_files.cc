#include "server/job_files.h"

#include <fstream>
#include <iterator>

#include "server/api_error.h"

namespace bks::server {

namespace fs = std::filesystem;

void link_or_copy(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::create_hard_link(from, to, ec);
  if (ec) fs::copy_file(from, to, fs::copy_options::overwrite_existing);
}

std::string read_job_file(const fs::path& dir, const std::string& name) {
  std::ifstream in(dir / name, std::ios::binary);
  if (!in) throw ApiError(409, "", "the job has no " + name);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace bks::server
