#include "dist/gradient_buckets.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/error.h"

namespace bks::dist {

GradientBuckets::GradientBuckets(Communicator& comm, std::vector<GradientSlot> grads, BucketOptions opt)
    : comm_(comm), grads_(std::move(grads)), opt_(opt) {
  bucket_of_.assign(grads_.size(), -1);
  slot_ready_.assign(grads_.size(), false);
  // The last bucket is small too: it holds the gradients backward completes last (the
  // first layers'), and its reduction is the one nothing can hide.
  size_t tail = grads_.size(), tail_bytes = 0;
  while (tail > 0 &&
         (tail == grads_.size() || tail_bytes + grads_[tail - 1].n * sizeof(float) <= opt_.first_bucket_bytes))
    tail_bytes += grads_[--tail].n * sizeof(float);
  size_t limit = opt_.first_bucket_bytes;
  size_t bytes = 0;
  for (size_t s = 0; s < grads_.size(); ++s) {
    if (buckets_.empty() || bytes >= limit || (s == tail && s > 0)) {
      if (!buckets_.empty()) limit = opt_.bucket_bytes;
      buckets_.emplace_back();
      bytes = 0;
    }
    Bucket& b = buckets_.back();
    b.slots.push_back(static_cast<int>(s));
    b.offsets.push_back(bytes / sizeof(float));
    bytes += grads_[s].n * sizeof(float);
    bucket_of_[s] = static_cast<int>(buckets_.size()) - 1;
  }
  for (Bucket& b : buckets_) {
    for (int s : b.slots) b.n += grads_[static_cast<size_t>(s)].n;
    b.storage = std::make_shared<Storage>(b.n * sizeof(float), Device{});
    b.buffer = static_cast<float*>(b.storage->data());
    std::fill(b.buffer, b.buffer + b.n, 0.f);
    b.missing = static_cast<int>(b.slots.size());
  }
}

const std::shared_ptr<Storage>& GradientBuckets::storage(int slot) const {
  return buckets_[static_cast<size_t>(bucket_of_[static_cast<size_t>(slot)])].storage;
}

size_t GradientBuckets::byte_offset(int slot) const {
  const Bucket& b = buckets_[static_cast<size_t>(bucket_of_[static_cast<size_t>(slot)])];
  size_t k = 0;
  while (b.slots[k] != slot) ++k;
  return b.offsets[k] * sizeof(float);
}

GradientBuckets::~GradientBuckets() {
  // A step cut short by an error still completes its reductions: MPI needs its requests
  // finished before their buffers go away.
  for (Bucket& b : buckets_)
    if (b.pending) b.pending->wait();
}

void GradientBuckets::ready(int slot) {
  if (slot < 0 || static_cast<size_t>(slot) >= grads_.size() || slot_ready_[static_cast<size_t>(slot)]) return;
  slot_ready_[static_cast<size_t>(slot)] = true;
  Bucket& b = buckets_[static_cast<size_t>(bucket_of_[static_cast<size_t>(slot)])];
  const GradientSlot& g = grads_[static_cast<size_t>(slot)];
  size_t k = 0;
  while (b.slots[k] != slot) ++k;
  if (g.data) std::memcpy(b.buffer + b.offsets[k], g.data, g.n * sizeof(float));
  --b.missing;
  start_ready_buckets();
  // Non-blocking collectives advance only inside MPI calls: each gradient that becomes
  // ready gives the ones in flight a push.
  for (int i = 0; i < next_to_start_; ++i)
    if (buckets_[static_cast<size_t>(i)].pending) buckets_[static_cast<size_t>(i)].pending->done();
}

void GradientBuckets::start_ready_buckets() {
  while (next_to_start_ < buckets() && buckets_[static_cast<size_t>(next_to_start_)].missing == 0) {
    if (opt_.debug) check_same_bucket(next_to_start_);
    Bucket& b = buckets_[static_cast<size_t>(next_to_start_)];
    b.pending = comm_.iallreduce_sum(b.buffer, b.n);
    ++next_to_start_;
  }
}

void GradientBuckets::check_same_bucket(int b) {
  // Bucket index and size in one word: equal on every rank, or the reductions would not match.
  uint64_t mine = (static_cast<uint64_t>(b) << 40) ^ buckets_[static_cast<size_t>(b)].n;
  std::vector<uint64_t> all = comm_.allgather(mine);
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r] != all[0]) {
      // Every rank sees the same values and stops here; rank 0 says why.
      mark_error_agreed();
      if (comm_.rank() != 0) throw QuietExit{1};
      runtime_error(
          "--dist-debug: ranks disagree on the next gradient bucket: rank 0 reduces bucket {} ({} values), rank {} "
          "bucket {} ({} values); their nets or their backward passes differ",
          all[0] >> 40, all[0] & ((uint64_t{1} << 40) - 1), r, all[r] >> 40, all[r] & ((uint64_t{1} << 40) - 1));
    }
}

void GradientBuckets::finish() {
  for (size_t s = 0; s < grads_.size(); ++s)
    if (!slot_ready_[s]) ready(static_cast<int>(s));
  const auto t0 = std::chrono::steady_clock::now();
  for (Bucket& b : buckets_) b.pending->wait();
  exposed_wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const float mean = 1.f / static_cast<float>(comm_.size());
  for (Bucket& b : buckets_) {
    for (size_t k = 0; k < b.slots.size(); ++k) {
      const GradientSlot& g = grads_[static_cast<size_t>(b.slots[k])];
      float* src = b.buffer + b.offsets[k];
      float* dst = g.data ? g.data : src;  // in place when the gradient lives in the bucket
      for (size_t i = 0; i < g.n; ++i) dst[i] = src[i] * mean;
    }
    b.pending.reset();
    b.missing = static_cast<int>(b.slots.size());
  }
  slot_ready_.assign(grads_.size(), false);
  next_to_start_ = 0;
}

}  // namespace bks::dist
