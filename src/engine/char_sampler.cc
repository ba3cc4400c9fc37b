#include "engine/char_sampler.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/error.h"
#include "core/rng.h"
#include "data/text_corpus.h"
#include "engine/deploy.h"
#include "engine/session.h"
#include "ops/op_def.h"

namespace bks {
namespace {

// The TEST net's TextData layer: the one whose text gives the characters.
const proto::LayerParameter& text_layer(const NetLoad& nl, const StateFlags& state) {
  const proto::NetState st = net_state(nl, proto::TEST, state);
  for (const proto::LayerParameter& l : nl.param.layer())
    if (l.type() == "TextData" && layer_included(l, st)) return l;
  input_error("{}: sample needs a TextData layer in the TEST phase (its text gives the characters)", nl.source);
}

// Whether the net reads whole windows of text rather than carrying a state from one
// character to the next (recurrent layers): a layer in it mixes the timesteps of axis 0
// (attention) or tells them apart (positions).
bool reads_windows(const NetLoad& nl, const StateFlags& state) {
  const proto::NetState st = net_state(nl, proto::TEST, state);
  for (const proto::LayerParameter& l : nl.param.layer())
    if (layer_included(l, st) && op_traits(l).mixes_axis0) return true;
  return false;
}

// Every TextData layer becomes an Input of `timesteps` characters of one stream.
void feed_characters(NetLoad& nl, int64_t timesteps) {
  for (proto::LayerParameter& l : *nl.param.mutable_layer()) {
    if (l.type() != "TextData") continue;
    l.set_type("Input");
    l.clear_text_data_param();
    proto::BlobShape* s = l.mutable_input_param()->add_shape();
    s->add_dim(timesteps);
    s->add_dim(1);
  }
}

}  // namespace

CharSampler::CharSampler(const SampleOptions& o) : o_(o) {
  if (!(o.temperature >= 0.0) || !std::isfinite(o.temperature))
    input_error("sample: --temperature must be a finite number >= 0, got {}", o.temperature);
  if (o.length < 0) input_error("sample: --length must be >= 0, got {}", o.length);
  NetLoad nl = load_net_file(o.model);
  const proto::LayerParameter text = text_layer(nl, o.state);
  const std::string where = fmt::format("{}: layer '{}'", o.model, text.name());
  try {
    vocabulary_ = text_vocabulary(text.text_data_param().source(), text.text_data_param().vocabulary());
  } catch (const InputError& e) {
    input_error("{}: the characters come from its text_data_param source (or vocabulary): {}", where, e.what());
  }
  const std::vector<char32_t> primer = decode_utf8(o.primer, "--primer");
  for (size_t i = 0; i < primer.size(); ++i) {
    const int64_t id = vocabulary_index(vocabulary_, primer[i]);
    if (id < 0)
      input_error("sample: --primer character {} (character {}) is not among the {} characters the net knows",
                  describe_char(primer[i]), i, vocabulary_.size());
    primer_.push_back(id);
  }

  // A windowed net sees the last seq_len characters at every step (causal attention
  // ignores the unused positions after them); a recurrent one sees one.
  if (reads_windows(nl, o.state)) window_ = std::max<int64_t>(1, text.text_data_param().seq_len());
  feed_characters(nl, window_);
  DeployOptions d;
  d.model = o.model;
  d.weights = o.weights;
  d.state = o.state;
  d.threads = o.threads;
  DeployModel m = load_deploy_model(d, nl);
  run_deploy_passes(m);
  Bundle b;
  b.graph = bundle_graph(m);
  b.weights = weights_by_layer(m);
  session_ = std::make_unique<InferenceSession>(b, o.model, o.threads, 0, 0);

  for (int v : session_->inputs()) {
    const std::string& name = session_->value_name(v);
    if (text.top_size() > 0 && name == text.top(0)) data_ = v;
    if (text.top_size() > 1 && name == text.top(1)) cont_ = v;
  }
  if (data_ < 0) input_error("{}: its first top (the characters) reaches no output", where);
  for (int v : session_->outputs())
    if (session_->value_name(v) == "prob" || session_->outputs().size() == 1) prob_ = v;
  if (prob_ < 0) input_error("{}: sample needs one output, or one named 'prob' (a SoftmaxWithLoss's)", o.model);
  const int64_t classes = session_->value(prob_).numel() / window_;
  if (classes < static_cast<int64_t>(vocabulary_.size()))
    input_error("{}: output '{}' has {} values for {} characters", o.model, session_->value_name(prob_), classes,
                vocabulary_.size());
}

CharSampler::~CharSampler() = default;

const float* CharSampler::step(int64_t id, bool cont) {
  if (window_ == 1) {
    session_->value(data_).f32()[0] = static_cast<float>(id);
    if (cont_ >= 0) session_->value(cont_).f32()[0] = cont ? 1.f : 0.f;
    session_->run();
    return session_->value(prob_).f32();
  }
  if (!cont) context_.clear();
  if (static_cast<int64_t>(context_.size()) == window_) context_.erase(context_.begin());
  context_.push_back(id);
  float* x = session_->value(data_).f32();
  std::fill(x, x + window_, 0.f);
  for (size_t t = 0; t < context_.size(); ++t) x[t] = static_cast<float>(context_[t]);
  if (cont_ >= 0) std::fill(session_->value(cont_).f32(), session_->value(cont_).f32() + window_, 1.f);
  session_->run();
  const int64_t row = session_->value(prob_).numel() / window_;
  return session_->value(prob_).f32() + static_cast<int64_t>(context_.size() - 1) * row;
}

int64_t CharSampler::draw(const float* p, uint64_t draw_index) {
  const auto n = static_cast<int64_t>(vocabulary_.size());
  const int64_t best = std::max_element(p, p + n) - p;
  if (o_.temperature == 0.0 || p[best] <= 0.f) return best;
  // p^(1/T), renormalised: the softmax of the logits divided by T.
  weights_.resize(static_cast<size_t>(n));
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double q = std::max(0.0, static_cast<double>(p[i]) / p[best]);
    sum += weights_[static_cast<size_t>(i)] = std::pow(q, 1.0 / o_.temperature);
  }
  // A counter-based draw: the same seed and index give the same character.
  std::mt19937_64 gen(mix64(o_.seed ^ mix64(draw_index)));
  double u = std::uniform_real_distribution<double>(0.0, sum)(gen);
  for (int64_t i = 0; i < n; ++i) {
    u -= weights_[static_cast<size_t>(i)];
    if (u < 0) return i;
  }
  return best;
}

void CharSampler::generate(const std::function<void(std::string_view)>& emit) {
  auto show = [&](int64_t id) { emit(encode_utf8(vocabulary_[static_cast<size_t>(id)])); };
  int64_t left = o_.length, id = 0;
  uint64_t draws = 0;
  if (primer_.empty()) {
    if (left == 0) return;
    // No primer: the first character is drawn uniformly.
    std::mt19937_64 gen(mix64(o_.seed ^ mix64(~uint64_t{0})));
    id = static_cast<int64_t>(gen() % vocabulary_.size());
    show(id);
    --left;
  } else {
    for (int64_t c : primer_) show(c);
    for (size_t i = 0; i + 1 < primer_.size(); ++i) step(primer_[i], i > 0);
    id = primer_.back();
  }
  bool cont = primer_.size() > 1;
  for (; left > 0; --left) {
    id = draw(step(id, cont), draws++);
    cont = true;
    show(id);
  }
}

}  // namespace bks
