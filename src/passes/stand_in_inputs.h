// `time` and `deploy` of a train_val file without its data: data layers whose source does
// not exist stand in as Input layers, so the network can be timed and deployed anyway.
#pragma once

#include <string>
#include <vector>

#include "core/tensor.h"
#include "graph/graph.h"

namespace bks {

// Each data layer whose source is absent becomes an Input layer: its first top of shape
// `given` (when not empty) or of what the layer's definition says (batch_size, crop_size,
// the mean's channels; 3 channels assumed, and said, when only they are unknown), its label
// top (N; a label map, N x 1 x H x W, where the layer has one). An InputError naming the layer and the missing source asks for --input-shape when
// neither tells the shape. Returns one line per layer replaced.
std::vector<std::string> stand_in_absent_data(Graph& g, Phase phase, const Shape& given);

// "N,C,H,W" (or any rank, comma- or x-separated) as a Shape; InputError naming --input-shape.
Shape parse_input_shape(const std::string& text);

}  // namespace bks
