// The teacher of knowledge distillation (train --teacher NET --teacher-weights W): a trained
// network, optimised as `bakusoku deploy` would (BatchNorm folded, ReLUs fused) and run for
// inference on every batch the student trains on. Its class scores (the input of its final
// Softmax) go to the student's DistillationLoss (passes/insert_distillation.h).
#pragma once

#include <memory>
#include <string>

#include "core/tensor.h"

namespace bks {

class InferenceSession;

class Teacher {
 public:
  // `batch` items per run, on `threads` CPU threads (0: all). InputError naming `net` when
  // it cannot be loaded, or it has not exactly one input and one output.
  Teacher(const std::string& net, const std::string& weights, int64_t batch, int threads);
  ~Teacher();
  Teacher(const Teacher&) = delete;
  Teacher& operator=(const Teacher&) = delete;

  const std::string& input_name() const { return input_name_; }
  Shape input_shape() const;
  Shape scores_shape() const;
  // InputError naming the teacher and the student's blob unless the teacher reads input of
  // `input` 's shape and scores as many classes as `scores` has (both with the batch).
  void check_matches(const std::string& input_blob, const Shape& input, const Shape& scores) const;
  // Scores one batch: `input` and `scores` hold input_shape() and scores_shape() floats.
  void run(const float* input, float* scores);

 private:
  std::string net_;
  std::string input_name_;
  std::unique_ptr<InferenceSession> session_;
};

}  // namespace bks
