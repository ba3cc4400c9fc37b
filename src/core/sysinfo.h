// What machine this is: CPU model, cores, instruction sets, library versions.
#pragma once

#include <string>
#include <vector>

namespace bks {

struct SysInfo {
  std::string cpu_model;
  int logical_cpus = 0;
  int physical_cores = 0;
  std::vector<std::string> isa;  // avx2, avx512f, avx512_vnni, avx512_bf16, amx_tile, ...
  std::string onednn_version;
  std::string onednn_isa;        // the best ISA oneDNN will use here
  double memory_gb = 0;
  bool has(const std::string& flag) const;
};

SysInfo query_sysinfo();

}  // namespace bks
