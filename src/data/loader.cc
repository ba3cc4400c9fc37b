#include "data/loader.h"

#include <algorithm>
#include <cstring>
#include <exception>
#include <thread>
#include <utility>

#include "core/error.h"

namespace bks {

BatchLoader::BatchLoader(std::shared_ptr<const Dataset> ds, std::vector<int> fields, std::optional<Transform> transform,
                         LoaderOptions opt)
    : ds_(std::move(ds)), fields_(std::move(fields)), transform_(std::move(transform)), opt_(std::move(opt)) {
  // Sample indices are taken modulo the dataset's size, and samples split a batch evenly.
  if (ds_->size <= 0) input_error("{}: the dataset has no samples", ds_->source);
  if (opt_.batch <= 0) input_error("{}: batch size must be positive, got {}", opt_.name, opt_.batch);
  for (size_t i = 0; i < fields_.size(); ++i) {
    const auto& f = ds_->fields[fields_[i]];
    Shape s{opt_.batch};
    Shape sample = (i == 0 && transform_) ? transform_->output_shape() : f.sample_shape;
    s.insert(s.end(), sample.begin(), sample.end());
    shapes_.push_back(s);
  }
  // Encoded images are decoded as batches are built, on several threads (a JPEG of ImageNet's
  // size takes a few milliseconds: a batch of 256 on one thread would stall each step).
  for (int f : fields_)
    if (ds_->fields[static_cast<size_t>(f)].encoded)
      decode_threads_ = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 8);
  order_ = std::make_unique<EpochOrder>(ds_->size, opt_.batch, opt_.shuffle, opt_.skip, opt_.seed, opt_.name);
  prefetch_ = std::make_unique<Prefetcher>(
      shapes_, [this](int64_t step, std::vector<Tensor>& out) { build(step, out); }, opt_.background);
}

BatchLoader::~BatchLoader() = default;

std::vector<Shape> BatchLoader::output_shapes() const { return shapes_; }

int64_t BatchLoader::sample_index(int64_t step, int64_t i) const { return order_->sample(step, i); }

void BatchLoader::load(int64_t step, const std::vector<Tensor*>& out) { prefetch_->load(step, out); }

void BatchLoader::build_sample(int64_t step, int64_t i, int64_t idx, std::vector<Tensor>& b,
                               std::vector<uint8_t>& scratch) const {
  for (size_t fi = 0; fi < fields_.size(); ++fi) {
    const auto& f = ds_->fields[fields_[fi]];
    int64_t per = shape_numel(shapes_[fi]) / opt_.batch;
    float* out = b[fi].f32() + i * per;
    if (fi == 0 && transform_) {
      std::optional<Rng> rng;
      if (transform_->needs_rng())
        rng = Rng::derive(opt_.seed, opt_.name + ".transform." + std::to_string(step * opt_.batch + i));
      Rng* r = rng ? &*rng : nullptr;
      if (f.dtype == DType::u8)
        transform_->apply_u8(f.sample_u8(idx, scratch, ds_->source), out, r);
      else
        transform_->apply_f32(f.f32(idx), out, r);
    } else if (f.dtype == DType::u8) {
      const uint8_t* s = f.sample_u8(idx, scratch, ds_->source);
      for (int64_t k = 0; k < per; ++k) out[k] = s[k];
    } else {
      std::memcpy(out, f.f32(idx), static_cast<size_t>(per) * sizeof(float));
    }
  }
}

void BatchLoader::build(int64_t step, std::vector<Tensor>& b) const {
  std::vector<int64_t> idx(static_cast<size_t>(opt_.batch));
  for (int64_t i = 0; i < opt_.batch; ++i) idx[static_cast<size_t>(i)] = sample_index(step, i);
  const int64_t threads = std::min<int64_t>(decode_threads_, opt_.batch);
  if (threads <= 1) {
    std::vector<uint8_t> scratch;
    for (int64_t i = 0; i < opt_.batch; ++i) build_sample(step, i, idx[static_cast<size_t>(i)], b, scratch);
  } else {
    // Encoded images: each thread decodes and transforms every threads-th sample; the first
    // failure (in sample order) is the one reported.
    std::vector<std::exception_ptr> failed(static_cast<size_t>(opt_.batch));
    std::vector<std::thread> pool;
    for (int64_t t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        std::vector<uint8_t> scratch;
        for (int64_t i = t; i < opt_.batch; i += threads) try {
            build_sample(step, i, idx[static_cast<size_t>(i)], b, scratch);
          } catch (...) {
            failed[static_cast<size_t>(i)] = std::current_exception();
          }
      });
    for (auto& th : pool) th.join();
    for (auto& e : failed)
      if (e) std::rethrow_exception(e);
  }
}

}  // namespace bks
