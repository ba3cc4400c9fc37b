#include "server/layer_view.h"

#include <algorithm>
#include <vector>

#include "server/tile_image.h"
#include "server/value_summary.h"

namespace bks::server {

void add_activation(json& row, const Tensor& out) {
  row["shape"] = out.shape();
  row["activation"] = value_stats(out.f32(), out.numel());
  if (json h = value_histogram(out.f32(), out.numel()); !h.is_null()) row["activation_histogram"] = std::move(h);
  const int64_t channels = out.ndim() >= 2 ? out.dim(1) : 1;
  int64_t shown = 0;
  if (out.ndim() == 4 && out.dim(2) * out.dim(3) >= 4 && channels > 0) {
    shown = std::min(kChannelsShown, channels);
    row["activation_image"] = tile_png(out.f32(), shown, out.dim(2), out.dim(3), 8, false);
  }
  row["activation_channels"] = channels;
  row["activation_channels_shown"] = shown;
}

void add_weights(json& row, const Tensor& w, bool convolution) {
  row["weights_shape"] = w.shape();
  row["weights"] = value_stats(w.f32(), w.numel());
  if (json h = value_histogram(w.f32(), w.numel()); !h.is_null()) row["weights_histogram"] = std::move(h);
  const int64_t filters = w.ndim() >= 1 ? w.dim(0) : 1;
  int64_t shown = 0;
  if (convolution && w.ndim() == 4 && filters > 0) {
    shown = std::min(kFiltersShown, filters);
    const int64_t kh = w.dim(2), kw = w.dim(3);
    std::vector<float> first(static_cast<size_t>(shown * kh * kw));
    for (int64_t o = 0; o < shown; ++o)
      std::copy_n(w.f32() + o * w.dim(1) * kh * kw, kh * kw, first.begin() + o * kh * kw);
    row["weights_image"] = tile_png(first.data(), shown, kh, kw, 8, true);
  }
  row["weights_filters"] = filters;
  row["weights_filters_shown"] = shown;
}

}  // namespace bks::server
