// The tolerance the ONNX tests hold outputs to: 1e-4 of the reference's largest magnitude
// (relative, so softmax outputs near 0.1 are held as tightly as logits of 5). Both sides
// compute in float32 but sum in different orders (blocked convolutions, folded BatchNorm),
// which moves results of O(1) by ~1e-6; a wrong weight layout, pad or rounding moves them
// by 1e-2 and more.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace bks::test {

inline void expect_close(const float* got, int64_t n, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(n, static_cast<int64_t>(want.size())) << what;
  double scale = 1e-30, worst = 0;
  for (float w : want) scale = std::max(scale, std::fabs(static_cast<double>(w)));
  for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::fabs(got[i] - static_cast<double>(want[i])));
  EXPECT_LE(worst, 1e-4 * scale) << what << ": largest difference " << worst << " (outputs up to " << scale << ")";
}

}  // namespace bks::test
