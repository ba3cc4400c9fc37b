// Knowledge distillation (train --teacher): the graph rewrite that gives a training net's
// classification loss a soft-target partner, fed with a teacher's scores for each batch.
#pragma once

#include <string>

#include "passes/deploy_model.h"

namespace bks {

// The value the trainer fills with the teacher's class scores before the loss reads them.
constexpr const char kTeacherScores[] = "teacher_scores";

// In a TRAIN graph with one softmax classification loss (SoftmaxWithLoss) over scores z:
// an Input "teacher_scores" of z's shape and a DistillationLoss (ops/distillation_loss.cc)
// of (z, teacher_scores) at `temperature`, weighted `alpha`; the classification loss's weight
// is multiplied by 1 - alpha. InputError when the graph has no such loss or several, or
// alpha is outside [0, 1].
PassReport insert_distillation(Graph& g, float temperature, float alpha);

}  // namespace bks
