// What the ONNX tests share: reading raw float32 files, running a model as imported and as
// deployed, and the tolerance outputs are held to.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/worse.h"
#include "engine/deploy.h"
#include "engine/session.h"
#include "formats/onnx_import.h"
#include "formats/weights.h"
#include "runtime/net.h"

namespace bks::test {

inline std::vector<float> read_f32(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::vector<float> v(std::filesystem::file_size(path) / 4);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
  return v;
}

// 1e-4 of the reference's largest magnitude (relative, so softmax outputs near 0.1 are held
// as tightly as logits of 5). Both sides compute in float32 but sum in different orders
// (blocked convolutions, folded BatchNorm), which moves results of O(1) by ~1e-6; a wrong
// weight layout, pad or rounding moves them by 1e-2 and more.
inline void expect_close(const float* got, int64_t n, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(n, static_cast<int64_t>(want.size())) << what;
  double scale = 1e-30, worst = 0;
  for (float w : want) scale = std::max(scale, std::fabs(static_cast<double>(w)));
  for (size_t i = 0; i < want.size(); ++i) worst = worse(worst, std::fabs(got[i] - static_cast<double>(want[i])));
  EXPECT_LE(worst, 1e-4 * scale) << what << ": largest difference " << worst << " (outputs up to " << scale << ")";
}
inline void expect_close(const Tensor& got, const std::vector<float>& want, const std::string& what) {
  expect_close(got.f32(), got.numel(), want, what);
}

inline void set_input(Tensor& x, const std::vector<float>& v) {
  ASSERT_EQ(x.numel(), static_cast<int64_t>(v.size()));
  std::copy(v.begin(), v.end(), x.f32());
}

// The ONNX model as imported (no deploy pass), its only output; `shape` replaces the
// input's shape when given (import_onnx's input_shape).
inline Tensor run_imported(const std::string& path, const std::vector<float>& input, const Shape& shape = {}) {
  NetLoad nl = import_onnx(path, shape);
  proto::NetState st;
  st.set_phase(proto::TEST);
  CpuBackend be(2);
  ParamStore store;
  Net net(build_caffe_graph(nl, st), proto::TEST, store, be, 1);
  load_weights(nl.weights, store, path);
  EXPECT_EQ(net.outputs().size(), 1u);
  set_input(net.value(net.inputs().at(0)), input);
  net.forward(0);
  return net.plain_copy(net.outputs().at(0));
}

// The model deployed (every pass) on 2 threads with the default kernels (timing autotune
// candidates would only slow the tests), its first output.
inline Tensor run_deployed(DeployOptions o, const std::vector<float>& input) {
  o.autotune = false;
  o.threads = 2;
  DeployResult r = deploy(o);
  InferenceSession s(r.bundle, o.model, 2);
  set_input(s.value(s.inputs().at(0)), input);
  s.run();
  return s.net().plain_copy(s.outputs().at(0));
}

}  // namespace bks::test
