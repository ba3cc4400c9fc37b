// `bakusoku deploy`: from a trained network (deploy prototxt, or a train/test prototxt whose
// TEST phase is used) and its weights to an optimised inference bundle. One pipeline for
// the command line, the dashboard and the C++ API: graph passes, then (fp32/bf16/int8)
// calibration and quantization, batch-size tuning and kernel autotuning, each reported as
// a pass and each followed by a check that the bundle's graph still builds.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/bundle.h"
#include "engine/calibrate.h"
#include "engine/compress_weights.h"
#include "engine/quantize.h"
#include "formats/caffe_net.h"
#include "graph/precision.h"
#include "passes/deploy_model.h"

namespace bks {

// Where INT8 activation ranges come from.
struct CalibrationOptions {
  // "" (none), "test" (the data the net was tested on), "random" (uniform inputs, for
  // timing only) or a dataset file.
  std::string dataset;
  std::string from_bundle;  // reuse the table saved in this bundle instead
  int batches = 10;
  std::string method = "mse";  // mse, entropy, percentile, minmax
};

struct DeployOptions {
  std::string model, weights;
  std::string output;  // the bundle's path, named in messages (may be empty)
  Precision precision = Precision::fp32;
  int64_t batch = 0;        // 0: the batch the net declares
  bool auto_batch = false;  // the highest-throughput batch whose arena fits memory_cap_bytes
  double memory_cap_bytes = 1024e6;
  // Build the bundle's net at the end: time the candidate kernels and record the choice
  // in the bundle, and fill DeployResult's kernels/arena/batch/ops (off: the caller builds
  // the net itself and kernels pick when the bundle is loaded).
  bool autotune = true;
  // With autotune, the convolutions' output layout on AVX-512 (choose_activation_layout):
  // "auto" times both, "channels-last" or "blocked" takes that one.
  std::string layout = "auto";
  CalibrationOptions calibration;
  // INT8: time every quantized layer against its FP32 self and keep INT8 only where it is
  // faster (keep_int8_where_faster); off: every layer the table covers runs INT8.
  bool int8_where_faster = true;
  int threads = 0;
  StateFlags state;  // stages and level the TEST net is built in
  // No weights file: every blob from its layer's filler (seed 1), for timing a network
  // that has not been trained.
  bool random_weights = false;
  // Store the weights coded (engine/compress_weights.h): pruned zeros as a bit mask, the
  // rest entropy-coded, INT8 layers' weights as their int8 levels.
  bool compress = false;
  // With compress: store every convolution's and inner product's weights on a grid of this
  // many bits per channel (2-8; 0: only INT8 layers', on their kernels' grid). Lossy.
  int weight_bits = 0;
  // Data layers whose source is absent stand in as Input layers of this shape (empty: the
  // shape the layer implies; passes/stand_in_inputs.h).
  Shape input_shape;
};

struct DeployResult {
  Bundle bundle;
  std::vector<PassReport> reports;
  std::map<std::string, Shape> shapes;  // every blob of the optimised graph (batch as declared)
  std::optional<CalibrationTable> calibration;
  Int8Plan int8;
  std::string batch_table;  // --batch auto: items/s by batch size
  std::string micro_batch_table;  // autotuning: the batch whole and in parts, timed
  std::string layout_table;       // autotuning: the convolutions' output layouts, timed
  std::vector<CodedTensorReport> coding;  // --compress: each weight's coded size
  int tuned = 0;            // layers whose autotuned kernel is not the default one
  // The bundle's net as built at the end: kernels and layouts, arena, batch.
  std::string kernels;
  size_t arena_bytes = 0;
  int64_t batch = 0;
  int ops = 0;
};

// Whether this CPU has bfloat16 instructions (AVX-512 BF16 or AMX).
bool cpu_has_bf16();
// InputError unless it has.
void require_bf16();
// Builds the TEST-phase model with its weights (the model and weights as loaded, before
// any pass), for deploy and for comparing against the optimised graph.
DeployModel load_deploy_model(const DeployOptions& o);
// The same, from the model file as already loaded (o.model names it).
DeployModel load_deploy_model(const DeployOptions& o, const NetLoad& nl);
// load_deploy_model + every graph pass + the bundle + calibration, quantization, batch
// tuning and autotuning as options ask. `after_each` sees the model before the first pass
// (with an empty report) and after each graph pass. InputError on options that do not go
// together (int8 without a calibration source, both --calib and --calib-from, bf16 on a
// CPU without it).
// Builds r.bundle's net: records each layer's autotuned kernel and fills r's kernels,
// arena_bytes, batch and ops; then, for a batch above 1, times it whole and in parts and
// records the faster (info "micro_batch", see InferenceSession). Before that, the
// convolutions' output layout: `layout` as DeployOptions::layout.
void autotune(DeployResult& r, const std::string& name, int threads, const std::string& layout = "auto");
DeployResult deploy(const DeployOptions& o,
                    const std::function<void(const PassReport&, const DeployModel&)>& after_each = {});

}  // namespace bks
