// Which weights magnitude pruning keeps: the largest in magnitude, ranked over several tensors
// together (one threshold) or one alone. train --prune applies them on its schedule
// (train/magnitude_pruning.h); optimize prunes a trained net at once.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace bks {

// The masks keeping the largest |w| of the tensors `w` ranked together: exactly
// round(fraction * n) zeros over their n weights (ties broken by tensor, then position, so the
// count is exact), zeros of w counted among the smallest.
std::vector<std::vector<uint8_t>> magnitude_masks(const std::vector<const Tensor*>& w, double fraction);
// The same for one tensor.
std::vector<uint8_t> magnitude_mask(const Tensor& w, double fraction);

// Layer-adaptive magnitude pruning (LAMP, Lee et al. 2021): each weight's score is w^2 over
// the sum of w'^2 of the weights of its tensor at least as large, so ranking scores of
// several tensors together needs no common scale (BatchNorm makes a convolution's weight
// scale arbitrary), and each tensor's largest weight scores 1, the highest there is.
std::vector<float> lamp_scores(const Tensor& w);
// The masks keeping the highest LAMP scores of the tensors `w` ranked together, with
// magnitude_masks' exact count and tie order.
std::vector<std::vector<uint8_t>> lamp_masks(const std::vector<const Tensor*>& w, double fraction);

}  // namespace bks
