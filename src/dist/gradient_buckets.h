// Averaging gradients over ranks in buckets, overlapped with backward: as each gradient is
// final its bucket fills, and a full bucket's allreduce starts while backward goes on.
// Buckets are laid out once, in the order the gradients become ready (the same on every
// rank: the same graph gives the same backward order), and start strictly in that order,
// so every rank issues the same reductions in the same sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "dist/communicator.h"

namespace bks::dist {

struct BucketOptions {
  // The first bucket is small so that communication starts early, and so is the last (the
  // gradients backward completes last, whose reduction nothing hides); the others hold
  // about `bucket_bytes` (a gradient larger than that gets a bucket of its own).
  size_t first_bucket_bytes = size_t{1} << 20;
  size_t bucket_bytes = size_t{25} << 20;
  // Before each reduction, check that every rank reduces the same bucket (a hang otherwise).
  bool debug = false;
};

struct GradientSlot {
  // Where the gradient is; null: it lives in its bucket (see storage()), so nothing is
  // copied in or out, only the mean taken in place.
  float* data;
  size_t n;
};

class GradientBuckets {
 public:
  // `grads` in the order they become ready in backward.
  GradientBuckets(Communicator& comm, std::vector<GradientSlot> grads, BucketOptions opt);
  ~GradientBuckets();

  // Gradient `slot` is final for this step: copied into its bucket, whose reduction starts
  // once all of its gradients (and those of the buckets before it) are in.
  void ready(int slot);
  // Waits for every bucket and writes the mean over ranks back into the gradients. Slots
  // that never became ready this step are taken as they are (ready now).
  void finish();

  int buckets() const { return static_cast<int>(buckets_.size()); }
  size_t bucket_elements(int b) const { return buckets_[static_cast<size_t>(b)].n; }
  // Where slot `slot` lives in its bucket: the bucket's memory and the byte offset in it
  // (a gradient tensor bound there is reduced without copies).
  const std::shared_ptr<Storage>& storage(int slot) const;
  size_t byte_offset(int slot) const;
  // Seconds finish() spent waiting for reductions: the communication backward did not hide.
  double exposed_wait_s() const { return exposed_wait_s_; }

 private:
  struct Bucket {
    std::vector<int> slots;
    std::vector<size_t> offsets;  // of each slot's data in the buffer, in floats
    std::shared_ptr<Storage> storage;
    float* buffer = nullptr;
    size_t n = 0;
    int missing = 0;
    std::unique_ptr<Pending> pending;
  };
  void start_ready_buckets();
  void check_same_bucket(int b);

  Communicator& comm_;
  std::vector<GradientSlot> grads_;
  BucketOptions opt_;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;    // per slot
  std::vector<bool> slot_ready_;  // this step
  int next_to_start_ = 0;         // buckets start in order
  double exposed_wait_s_ = 0;
};

}  // namespace bks::dist
