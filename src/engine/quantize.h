// INT8 post-training quantization of a deployed graph, from a calibration table.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/bundle.h"
#include "engine/calibrate.h"

namespace bks {

struct Int8Plan {
  int quantized = 0;     // layers running an int8 kernel
  int int8_outputs = 0;  // of them, layers writing int8 for int8 readers
  int timed = 0;         // int8 layers keep_int8_where_faster compared with their FP32 times
  std::map<std::string, float> calibrated;  // the calibration table's |x| range per blob
};

// Gives every Convolution and InnerProduct whose input the table measured its input
// threshold (deploy.int8_input_threshold), so it runs oneDNN's int8 kernel, then keeps int8
// between layers (keep_int8_between_layers). Other layers stay FP32. First layers (a grey or
// RGB image) are quantized too: where oneDNN's int8 kernel is the slower one there (LeNet's
// one-channel conv1), deploy's timing sends them back (keep_int8_where_faster); ResNet-50's
// 7x7 stem runs in 13 ms in INT8 against 25 ms in FP32 at batch 32 on AVX-512 VNNI.
Int8Plan quantize_int8(Bundle& b, const CalibrationTable& t);

// An int8 layer whose output is read only by int8 layers (directly or through MAX
// poolings, which keep the scale) writes it as int8 with their threshold
// (deploy.int8_output_threshold), so nothing converts to f32 and back between them. An int8
// layer reading it as a fused residual takes any threshold (deploy.int8_residual_threshold
// says which); read only so, it is written with its `calibrated` range, and so it is when
// its readers are average poolings, which then read it int8 (their deploy.int8_input_threshold)
// and dequantize their means. Returns how many layers write int8.
int keep_int8_between_layers(Graph& g, const std::map<std::string, float>& calibrated = {});

// INT8 only where it is faster. Without VNNI (AVX2) some of oneDNN's int8 kernels are slower
// than its f32 ones (LeNet's 800 -> 500 inner product at batch 1: 0.26 ms against 0.04 ms).
// `fp32_ms` and `int8_ms` are each node's measured time in the FP32 and in the INT8 graph
// (same node order); an int8 node more than 5% slower than in FP32 goes back to FP32, and
// int8 between layers is recomputed. Returns one line per node sent back, with its times.
std::vector<std::string> keep_int8_where_faster(Graph& g, const std::vector<double>& fp32_ms,
                                                const std::vector<double>& int8_ms, Int8Plan& plan);

}  // namespace bks
