// What machine this is: CPU model, cores, instruction sets, memory. (The libraries a
// backend runs on describe themselves: backend/backend.h.)
#pragma once

#include <string>
#include <vector>

namespace bks {

struct SysInfo {
  std::string cpu_model;
  int logical_cpus = 0;
  int physical_cores = 0;
  std::vector<std::string> isa;  // avx2, avx512f, avx512_vnni, avx512_bf16, amx_tile, ...
  double memory_gb = 0;
  bool has(const std::string& flag) const;
};

SysInfo query_sysinfo();
// This machine's physical memory in bytes (0 when the system does not say).
double physical_memory_bytes();

}  // namespace bks
