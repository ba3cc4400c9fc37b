// INT8 3x3 depthwise convolution for inference, bakusoku's own, on channels-last tensors.
// oneDNN 2.6's int8 depthwise kernels (brdgmm_dw, jit_int8) compute about one output per
// cycle and core even when everything is in cache (MobileNet v1's 32-channel 112x112 layer
// at batch 1: 5.7-6.8 G outputs/s on 2 AVX-512 cores); its thirteen depthwise layers took a
// third of the network's INT8 time. This one keeps 16 channels of 8 outputs of a row in
// registers, gathers each source column's three rows into one vector (channel c's dword holds
// its three bytes) and adds it into each output whose window covers it with one VNNI
// instruction (vpdpbusd), 3 per output where a per-tap kernel needs 9. It runs where the CPU
// has AVX-512 VNNI and VBMI (the byte gather), for u8 sources (a ReLU's outputs).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace bks {

struct DwInt8Shape {
  int64_t n = 0, c = 0, h = 0, w = 0;  // source; the destination has the same channels
  int64_t oh = 0, ow = 0;
  int64_t stride = 1;      // both directions
  int64_t ph = 0, pw = 0;  // padding before (after: whatever reaches oh, ow)
};

class DwInt8Conv {
 public:
  // The CPU has the instructions the kernel needs (AVX-512 VNNI and VBMI).
  static bool cpu_supported();
  // Whether the kernel computes this convolution on this CPU: 3x3 window, one group per
  // channel, equal strides of 1 or 2, no dilation, pads below 3, a u8 source and an int8 or
  // f32 destination, both channels-last, and no fused residual.
  static bool applies(int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t dh, int64_t dw, int64_t group,
                      const DwInt8Shape& s, const dnnl::memory::desc& src, const dnnl::memory::desc& dst,
                      const FusedPostOps& post);

  // The destination type (u8, s8 or f32) and the fused (leaky or bounded) ReLU, its bound
  // in the destination's units (levels for int8), as oneDNN's post-ops take it.
  DwInt8Conv(const DwInt8Shape& s, dnnl::memory::data_type dst_type, const FusedPostOps& post);
  // Weights: c x 3 x 3 int8 levels. bias: c values already in accumulator units (may be
  // null). scale: c factors from accumulator units to the destination's.
  void set_weights(const int8_t* weights, const float* bias, const float* scale);
  // y = post(scale * (sum of w * x + bias)), rounded to nearest and saturated for int8.
  void forward(const void* src, void* dst) const;

 private:
  DwInt8Shape s_;
  dnnl::memory::data_type dst_type_;
  FusedPostOps post_;
  int64_t blocks_ = 0;        // 16-channel blocks (the last one may be partial)
  std::vector<int32_t> w_;    // [block][kw][16]: the levels of rows 0, 1, 2 in bytes 0, 1, 2
  std::vector<float> bias_;   // [blocks * 16]
  std::vector<float> scale_;  // [blocks * 16]
};

}  // namespace bks
