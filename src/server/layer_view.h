// One layer's row of the dashboard's visualize answer: its output and its first parameter
// blob, each as statistics, a histogram and an image, with how much of the blob the image
// leaves out (the page says "16 of 20 channels").
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "server/store.h"

namespace bks::server {

constexpr int64_t kChannelsShown = 16;  // feature maps drawn per activation
constexpr int64_t kFiltersShown = 32;   // convolution filters drawn

// Sets shape, activation {mean, std, min, max}, activation_histogram, activation_channels
// (the blob's second axis; 1 without one), activation_channels_shown and, for a 4-D blob of
// at least 4 pixels a map, activation_image (up to kChannelsShown maps of the first item).
void add_activation(json& row, const Tensor& out);
// Sets weights_shape, weights, weights_histogram, weights_filters (the first axis),
// weights_filters_shown and, for a convolution's 4-D weights, weights_image (the first input
// channel of up to kFiltersShown filters, on one scale).
void add_weights(json& row, const Tensor& w, bool convolution);

}  // namespace bks::server
