// Memory on devices other than the CPU. The core knows no device API: a backend library
// (src/cuda) installs its operations here when it loads, and Storage and Tensor go through
// them for buffers on that device. Without them, a tensor on the device is an error that
// says the build has no such backend.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor.h"

namespace bks {

struct DeviceMemoryOps {
  // A zero-filled buffer of `bytes` on device `index`; throws on failure.
  void* (*allocate)(size_t bytes, int index);
  void (*release)(void* p, size_t bytes, int index);
  // Copies between any two devices, one of which may be the CPU; returns when the copy
  // is done (every earlier kernel on the device has finished writing `src`).
  void (*copy)(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes);
  void (*zero)(void* p, size_t bytes, Device dev);
  // dst[i] += src[i] for i < n, both on `dev` (the executor's gradient sums).
  void (*add)(float* dst, const float* src, int64_t n, Device dev);
};

// Installs (or, with null, removes) the operations for device kind `k`.
void set_device_memory_ops(DeviceKind k, const DeviceMemoryOps* ops);
// The installed operations for `k`; RuntimeError naming the device when there are none.
const DeviceMemoryOps& device_memory_ops(Device d);

// A copy of `t` (plain layout) on device `d`.
Tensor to_device(const Tensor& t, Device d);

}  // namespace bks
