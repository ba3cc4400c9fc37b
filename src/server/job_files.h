// Files one job takes from another (a snapshot, its net and solver): shared by the
// dashboard's optimize, deploy and fine-tune jobs.
#pragma once

#include <filesystem>
#include <string>

namespace bks::server {

// `from` as `to`: a hard link where the file system allows (no copy, and the new job does
// not depend on the source job staying), else a copy.
void link_or_copy(const std::filesystem::path& from, const std::filesystem::path& to);

// The text of a job's file `name` in `dir`; ApiError 409 "the job has no NAME" when absent.
std::string read_job_file(const std::filesystem::path& dir, const std::string& name);

}  // namespace bks::server
