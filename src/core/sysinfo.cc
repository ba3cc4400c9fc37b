#include "core/sysinfo.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>

namespace bks {

bool SysInfo::has(const std::string& flag) const { return std::find(isa.begin(), isa.end(), flag) != isa.end(); }

SysInfo query_sysinfo() {
  SysInfo s;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  std::set<std::string> flags, cores;
  std::string phys_id;
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    std::string val = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "model name" && s.cpu_model.empty()) s.cpu_model = val;
    if (key == "physical id") phys_id = val;
    if (key == "core id") cores.insert(phys_id + ":" + val);
    if (key == "flags" && flags.empty()) {
      std::istringstream fs(val);
      std::string f;
      while (fs >> f) flags.insert(f);
    }
  }
  for (const char* f : {"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
                        "avx_vnni", "amx_tile", "amx_int8", "amx_bf16", "avx512_fp16"})
    if (flags.count(f)) s.isa.push_back(f);
  s.logical_cpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  s.physical_cores = cores.empty() ? s.logical_cpus : static_cast<int>(cores.size());
  s.memory_gb = physical_memory_bytes() / (1024.0 * 1024 * 1024);
  return s;
}

double physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

}  // namespace bks
