// Text generation from a trained character-level net (`bakusoku sample`, the dashboard):
// the net's TEST phase with its TextData layer as an input, run one character at a time.
// A recurrent net reads one character per step and its layers carry their state to the
// next; a net with attention or positions reads the last seq_len characters every step.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/caffe_net.h"

namespace bks {

class InferenceSession;

struct SampleOptions {
  std::string model, weights;
  std::string primer;        // UTF-8; fed to the net first and printed as it is
  int64_t length = 500;      // characters generated after the primer
  double temperature = 1.0;  // < 1: safer, > 1: more surprising; 0: always the likeliest
  uint64_t seed = 1;
  int threads = 1;
  StateFlags state;  // stages and level of the TEST net
};

class CharSampler {
 public:
  // Loads the net and its weights. InputError (naming the file and field) when the net has
  // no TextData layer, its text or vocabulary file cannot be read, the net has no output
  // with one probability per character, or the primer holds a character outside the
  // vocabulary.
  explicit CharSampler(const SampleOptions& o);
  ~CharSampler();
  CharSampler(const CharSampler&) = delete;
  CharSampler& operator=(const CharSampler&) = delete;

  const std::vector<char32_t>& vocabulary() const { return vocabulary_; }
  // Writes the primer, then `length` generated characters, to `emit` one character (UTF-8)
  // at a time as they are made. The same options give the same text.
  void generate(const std::function<void(std::string_view)>& emit);

 private:
  // Feeds character `id` (cont: whether it continues the sequence) and returns the next
  // character's probabilities.
  const float* step(int64_t id, bool cont);
  int64_t draw(const float* p, uint64_t draw_index);

  SampleOptions o_;
  std::vector<char32_t> vocabulary_;
  std::vector<int64_t> primer_;  // vocabulary indices
  std::unique_ptr<InferenceSession> session_;
  int data_ = -1, cont_ = -1, prob_ = -1;  // value ids in the session
  int64_t window_ = 1;                     // characters per step
  std::vector<int64_t> context_;           // a windowed net's last characters
  std::vector<double> weights_;            // scratch for draw()
};

}  // namespace bks
