// TextData (bakusoku's; text_data_param): UTF-8 text as (seq_len, batch_size) batches for
// character-level recurrent nets. Tops, in order: each character's vocabulary index, the
// recurrent layers' `cont`, and the next character's index (the label).
//
// The layer's part of the text (all of it but the held-out tail, or that tail) is cut into
// batch_size streams of equal length. Batch b holds timesteps [b * seq_len, (b + 1) * seq_len)
// of every stream, so a recurrent layer that carries its state from one batch to the next
// reads each stream on without a break (truncated backpropagation through time). After the
// last whole batch of an epoch the streams start over, with cont 0 at their first timestep.
// Batch `step` is a pure function of the step, so a resumed run reads what an uninterrupted
// one would have.
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/log.h"
#include "data/text_corpus.h"
#include "ops/op.h"

namespace bks {
namespace {

struct TextDataAttrs final : AttrsOf<TextDataAttrs> {
  std::string source;  // empty: not given
  int64_t batch_size = 0;
  int64_t seq_len = 50;
  float holdout = 0.f;
  bool read_holdout = false;
  std::string vocabulary;
  int64_t vocabulary_size = 0;
  void visit(AttrVisitor& v) override {
    v.field("source", source);
    v.field("batch_size", batch_size);
    v.field("seq_len", seq_len);
    v.field("holdout", holdout);
    v.field("read_holdout", read_holdout);
    v.field("vocabulary", vocabulary);
    v.field("vocabulary_size", vocabulary_size);
  }
};

void text_data_from_caffe(const proto::LayerParameter& l, TextDataAttrs& a, const std::string& where) {
  if (l.has_transform_param()) input_error("{}: TextData does not transform data; remove transform_param", where);
  const proto::TextDataParameter& p = l.text_data_param();
  a.source = p.source();
  a.batch_size = p.batch_size();
  a.seq_len = p.seq_len();
  a.holdout = p.holdout();
  a.read_holdout = p.read_holdout();
  a.vocabulary = p.vocabulary();
  a.vocabulary_size = p.vocabulary_size();
}
void text_data_to_caffe(const TextDataAttrs& a, proto::LayerParameter& l) {
  proto::TextDataParameter* p = l.mutable_text_data_param();
  p->clear_source();
  if (!a.source.empty()) p->set_source(a.source);
  p->set_batch_size(static_cast<uint32_t>(a.batch_size));
  p->set_seq_len(static_cast<uint32_t>(a.seq_len));
  p->set_holdout(a.holdout);
  p->set_read_holdout(a.read_holdout);
  p->clear_vocabulary();
  if (!a.vocabulary.empty()) p->set_vocabulary(a.vocabulary);
  p->set_vocabulary_size(static_cast<uint32_t>(a.vocabulary_size));
}
BKS_REGISTER_ATTRS("TextData", TextDataAttrs, text_data_from_caffe, text_data_to_caffe);

// Where the layer's streams lie in the corpus, and how long an epoch is.
struct TextStreams {
  std::shared_ptr<const TextCorpus> corpus;
  int64_t begin = 0, length = 0;  // the layer's part: ids [begin, begin + length)
  int64_t stream = 0;             // characters per stream
  int64_t batches = 0;            // whole batches per epoch
};

// The corpus and the layer's streams, checked against its fields.
TextStreams open_streams(const OpContext& c) {
  const TextDataAttrs& a = c.node.attrs.as<TextDataAttrs>();
  TextStreams s;
  try {
    s.corpus = open_text_corpus(a.source, a.vocabulary);
  } catch (const InputError& e) {
    c.fail("{}", e.what());
  }
  const auto vocab = static_cast<int64_t>(s.corpus->vocabulary.size());
  if (a.vocabulary_size > 0 && vocab > a.vocabulary_size)
    c.fail(
        "{} has {} distinct characters, more than text_data_param.vocabulary_size {}: set it, Embed's input_dim and "
        "the classifier's num_output to at least {}",
        a.vocabulary.empty() ? a.source : a.vocabulary, vocab, a.vocabulary_size, vocab);
  const auto total = static_cast<int64_t>(s.corpus->ids.size());
  const auto held = static_cast<int64_t>(static_cast<double>(total) * a.holdout);
  if (a.read_holdout && held == 0)
    c.fail("text_data_param.read_holdout reads the held-out part, but holdout {} of {}'s {} characters holds none",
           a.holdout, a.source, total);
  s.begin = a.read_holdout ? total - held : 0;
  s.length = a.read_holdout ? held : total - held;
  // Each input character needs the one after it as its label.
  s.stream = (s.length - 1) / a.batch_size;
  s.batches = s.stream / a.seq_len;
  if (s.batches == 0)
    c.fail("{} characters ({} of {}) are too few for {} streams of seq_len {}: at least {} are needed", s.length,
           a.read_holdout ? "the held-out part"
           : held > 0     ? "the part not held out"
                          : "all",
           a.source, a.batch_size, a.seq_len, a.batch_size * a.seq_len + 1);
  return s;
}

bool source_present(const std::string& source) {
  try {
    for (const std::string& f : text_source_files(source))
      if (!std::filesystem::exists(f)) return false;
    return true;
  } catch (const InputError&) {
    return false;
  }
}

class TextDataDef final : public OpDef {
 public:
  int min_inputs(const OpContext&) const override { return 0; }
  int max_outputs(const OpContext&) const override { return 3; }
  void check(const OpContext& c) const override {
    const TextDataAttrs& a = c.node.attrs.as<TextDataAttrs>();
    if (a.source.empty()) c.fail("text_data_param.source is required");
    if (a.batch_size <= 0) c.fail("text_data_param.batch_size must be positive");
    if (a.seq_len <= 0) c.fail("text_data_param.seq_len must be positive");
    if (!(a.holdout >= 0.f && a.holdout < 1.f)) c.fail("text_data_param.holdout must be in [0, 1), got {}", a.holdout);
  }
  void infer(const OpContext& c, const std::vector<Shape>&, std::vector<Shape>& out) const override {
    open_streams(c);
    const TextDataAttrs& a = c.node.attrs.as<TextDataAttrs>();
    for (Shape& s : out) s = {a.seq_len, a.batch_size};
  }
  OpFacts facts(const OpContext&, const std::vector<Shape>&) const override { return no_backward_facts(); }
  OpTraits traits(const Node&) const override { return traits_with({&OpTraits::data_layer}); }
  std::optional<AbsentSource> absent_source(const OpContext& c) const override {
    const TextDataAttrs& a = c.node.attrs.as<TextDataAttrs>();
    if (source_present(a.source)) return std::nullopt;
    return AbsentSource{a.source, std::vector<Shape>(c.node.outputs.size(), Shape{a.seq_len, a.batch_size})};
  }
};

class TextDataKernel final : public Kernel {
 public:
  explicit TextDataKernel(const OpInit& i) : Kernel(i), s_(open_streams(context())) {
    const TextDataAttrs& a = i.node.attrs.as<TextDataAttrs>();
    log::info("{}: {} characters of {} ({}), {} distinct; {} streams of {}; an epoch is {} batches of {}", i.where,
              s_.length, a.source,
              a.read_holdout  ? "the held-out part"
              : a.holdout > 0 ? "not held out"
                              : "all of it",
              s_.corpus->vocabulary.size(), a.batch_size, s_.stream, s_.batches, a.seq_len);
  }
  void forward(OpCall& c) override {
    const TextDataAttrs& a = node_.attrs.as<TextDataAttrs>();
    const int64_t b = c.step % s_.batches, T = a.seq_len, N = a.batch_size;
    const uint32_t* ids = s_.corpus->ids.data() + s_.begin;
    float* data = c.out[0]->f32();
    float* cont = c.out.size() > 1 ? c.out[1]->f32() : nullptr;
    float* label = c.out.size() > 2 ? c.out[2]->f32() : nullptr;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = 0; n < N; ++n) {
        const int64_t at = n * s_.stream + b * T + t, k = t * N + n;
        data[k] = static_cast<float>(ids[at]);
        if (cont) cont[k] = b == 0 && t == 0 ? 0.f : 1.f;
        if (label) label[k] = static_cast<float>(ids[at + 1]);
      }
  }
  // Characters: seq_len x batch_size a batch, an epoch's whole batches in the dataset.
  int64_t items_per_batch() const override {
    const TextDataAttrs& a = node_.attrs.as<TextDataAttrs>();
    return a.seq_len * a.batch_size;
  }
  int64_t dataset_size() const override { return s_.batches * items_per_batch(); }
  const char* item_unit() const override { return "characters"; }
  std::string kernel_name() const override {
    return fmt::format("text, {} characters in memory, {} distinct", s_.length, s_.corpus->vocabulary.size());
  }

 private:
  TextStreams s_;
};

}  // namespace

BKS_REGISTER_OP_DEF("TextData", TextDataDef);
BKS_REGISTER_KERNEL("TextData", ::bks::DeviceKind::cpu, TextDataKernel, "loops", kReferencePriority, nullptr);

}  // namespace bks
