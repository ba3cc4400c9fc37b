// File formats: safetensors round trip and corruption, IDX (raw and gzip) and its errors,
// HDF5 datasets and lists, Caffe mean files.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <sys/resource.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "caffe.pb.h"
#include "core/file_io.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/prefetcher.h"
#include "data/shared_dataset.h"
#include "data/transform.h"
#include "formats/byte_streams.h"
#include "formats/caffe_net.h"
#include "formats/graph_json.h"
#include "formats/packed_parts.h"
#include "formats/prototxt.h"
#include "formats/range_coder.h"
#include "formats/safetensors.h"
#include "formats/weight_coding.h"
#include "formats/weights.h"
#include "input_error.h"
#include "ops/conv_attrs.h"
#include "ops/op_def.h"
#include "ops/pooling_attrs.h"

namespace bks {
namespace {
namespace fs = std::filesystem;
using test::input_error_of;

fs::path tmp(const std::string& name) { return fs::temp_directory_path() / ("bks_fmt_" + name); }

// Each of N data-parallel ranks asks for every N-th batch: the background thread builds the
// batch the rank asks for next, not the one after this (another rank's, never asked for).
TEST(Prefetcher, BuildsTheNextBatchOfAStridedRankInTheBackground) {
  std::mutex mu;
  std::map<int64_t, std::vector<std::thread::id>> built;  // step -> the threads that built it
  const int ranks = 3, rank = 1;
  {
    Prefetcher p({Shape{1}}, [&](int64_t step, std::vector<Tensor>& out) {
      std::lock_guard lock(mu);
      built[step].push_back(std::this_thread::get_id());
      out[0].f32()[0] = static_cast<float>(step);
    });
    Tensor t(Shape{1});
    for (int s = 0; s < 10; ++s) {
      const int64_t step = int64_t{s} * ranks + rank;
      p.load(step, {&t});
      EXPECT_EQ(t.f32()[0], static_cast<float>(step));
    }
  }
  int others = 0;
  for (const auto& [step, threads] : built) {
    if (step % ranks != rank) {
      ++others;  // only the first guess, step 1 + 1
      continue;
    }
    EXPECT_EQ(threads.size(), 1u) << "step " << step << " built more than once";
    // From the third batch on, each was ready before it was asked for.
    if (step >= 2 * ranks + rank && step <= 9 * ranks + rank) {
      EXPECT_NE(threads[0], std::this_thread::get_id()) << "step " << step << " built while the rank waited";
    }
  }
  EXPECT_EQ(others, 1);
}

TEST(Safetensors, RoundTripAndMetadata) {
  Tensor a({2, 3}), b({4}, DType::u8);
  for (int i = 0; i < 6; ++i) a.f32()[i] = i * 1.5f;
  b.data<uint8_t>()[2] = 7;
  save_safetensors(tmp("rt.safetensors"), {{"a", &a}, {"b", &b}}, {{"k", "v"}});
  TensorFile f = load_safetensors(tmp("rt.safetensors"));
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.find("a")->shape(), (Shape{2, 3}));
  EXPECT_EQ(f.find("a")->f32()[5], 7.5f);
  EXPECT_EQ(f.find("b")->data<uint8_t>()[2], 7);
  EXPECT_EQ(f.metadata["k"], "v");
}

// A tensor of `n` floats from N(0, 1), each zero with probability `zeros`.
Tensor sparse_normal(const Shape& shape, double zeros, uint64_t seed) {
  Tensor t(shape);
  Rng rng(seed);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = rng.uniform(0.f, 1.f) < zeros ? 0.f : rng.gaussian(0.f, 1.f);
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

TEST(WeightCoding, DecodesEveryElementBitForBit) {
  for (double zeros : {0.0, 0.3, 0.9, 1.0})
    for (const Shape& shape : {Shape{1000}, Shape{7, 3, 5, 5}, Shape{13}, Shape{0}}) {
      Tensor t = sparse_normal(shape, zeros, 7);
      if (t.numel() > 4) {  // values a float coder might mangle
        t.f32()[1] = std::numeric_limits<float>::quiet_NaN();
        t.f32()[2] = -std::numeric_limits<float>::infinity();
        t.f32()[3] = std::numeric_limits<float>::denorm_min();
      }
      const CodedWeights c = encode_weights(t);
      EXPECT_TRUE(same_bytes(decode_weights(c.bytes, shape, DType::f32, "t"), t)) << zeros << " " << shape_str(shape);
      if (shape == Shape{1000}) {
        EXPECT_EQ(c.layout, zeros > 0 ? "sparse f32" : "dense f32") << zeros;
      }
    }
  // Other element types, zeros included.
  for (DType dt : {DType::s8, DType::bf16, DType::f64, DType::s32}) {
    Tensor t({300}, dt);
    auto* b = static_cast<uint8_t*>(t.raw());
    for (size_t i = 0; i < t.bytes(); ++i) b[i] = (i / dtype_size(dt)) % 3 == 0 ? 0 : static_cast<uint8_t>(i * 37);
    EXPECT_TRUE(same_bytes(decode_weights(encode_weights(t).bytes, t.shape(), dt, "t"), t)) << dtype_name(dt);
  }
  // -0 is a zero, and comes back as +0.
  Tensor neg({64});
  neg.fill(-0.f);
  neg.f32()[5] = 1.f;
  const Tensor back = decode_weights(encode_weights(neg).bytes, neg.shape(), DType::f32, "t");
  EXPECT_FALSE(std::signbit(back.f32()[0]));
  EXPECT_EQ(back.f32()[5], 1.f);
}

// 90% zeros cost a bit each; the rest keep their 32 bits less what the exponent byte
// repeats: about a tenth of the dense size. Random dense floats barely grow.
TEST(WeightCoding, NinetyPercentZerosTakeATenthOfTheRoom) {
  const Tensor t = sparse_normal({100000}, 0.9, 3);
  const size_t coded = encode_weights(t).bytes.size();
  EXPECT_LT(coded, t.bytes() / 9) << coded;
  EXPECT_GT(coded, t.bytes() / 14) << coded;  // the mantissas are noise: no coder gets under that
  const Tensor dense = sparse_normal({100000}, 0, 4);
  EXPECT_LE(encode_weights(dense).bytes.size(), dense.bytes() + 64);
}

// On a grid, each channel's weights become int8 levels times that channel's step, so an
// INT8 kernel (max |w| -> levels, round to nearest) gets the levels it would get from the
// original weights.
TEST(WeightCoding, Int8GridKeepsTheLevelsTheInt8KernelsRoundTo) {
  auto kernel_levels = [](const Tensor& w, int64_t channels, bool channel_last, int levels) {
    const int64_t n = w.numel(), per = n / channels;
    auto ch = [&](int64_t i) { return channel_last ? i % channels : i / per; };
    std::vector<float> mx(static_cast<size_t>(channels), 0.f);
    for (int64_t i = 0; i < n; ++i) mx[ch(i)] = std::max(mx[ch(i)], std::fabs(w.f32()[i]));
    std::vector<int> q(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      q[i] = mx[ch(i)] > 0 ? static_cast<int>(std::nearbyint(w.f32()[i] * (levels / mx[ch(i)]))) : 0;
    return q;
  };
  for (bool channel_last : {false, true})
    for (int levels : {127, 63}) {
      const Shape shape = channel_last ? Shape{45, 6} : Shape{6, 5, 3, 3};
      Tensor w = sparse_normal(shape, 0.5, 11);
      float* wp = w.f32();
      ASSERT_NE(wp, nullptr);
      for (int64_t i = 0; i < 45; ++i) wp[channel_last ? i * 6 + 2 : 2 * 45 + i] = 0.f;  // an empty channel
      const ChannelGrid grid{6, channel_last, levels};
      const CodedWeights c = encode_weights(w, &grid);
      EXPECT_EQ(c.layout, "sparse int8 grid");
      const Tensor d = decode_weights(c.bytes, shape, DType::f32, "w");
      EXPECT_EQ(kernel_levels(d, 6, channel_last, levels), kernel_levels(w, 6, channel_last, levels))
          << channel_last << " " << levels;
      // Zeros stay zeros, and each decoded value is within half a step of the original.
      const float tol = 0.51f * 4.5f / static_cast<float>(levels);  // max |N(0,1)| over 45 draws < 4.5
      for (int64_t i = 0; i < w.numel(); ++i) {
        if (w.f32()[i] == 0.f) {
          EXPECT_EQ(d.f32()[i], 0.f);
        }
        EXPECT_NEAR(d.f32()[i], w.f32()[i], tol);
      }
    }
  // A tensor that is not finite keeps its floats.
  Tensor inf = sparse_normal({6, 4}, 0, 1);
  inf.f32()[3] = std::numeric_limits<float>::infinity();
  const ChannelGrid grid{6, false, 127};
  const CodedWeights c = encode_weights(inf, &grid);
  EXPECT_EQ(c.layout, "dense f32");
  EXPECT_TRUE(same_bytes(decode_weights(c.bytes, inf.shape(), DType::f32, "t"), inf));
}

TEST(WeightCoding, CorruptBytesAreAnInputErrorNamingTheTensor) {
  const Tensor t = sparse_normal({40, 25}, 0.8, 5);
  const ChannelGrid grid{40, false, 127};
  for (const ChannelGrid* g : {static_cast<const ChannelGrid*>(nullptr), &grid}) {
    const std::string coded = encode_weights(t, g).bytes;
    for (size_t len = 0; len < coded.size(); ++len) {
      try {
        decode_weights(std::string_view(coded).substr(0, len), t.shape(), DType::f32, "bundle.bks: tensor 'ip.0'");
        ADD_FAILURE() << "a truncation to " << len << " bytes decoded";
      } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("bundle.bks: tensor 'ip.0': corrupt coded tensor: "), std::string::npos)
            << e.what();
      }
    }
    // Any single byte changed is found (the checksum covers what the header and the
    // streams do not check themselves), or changes nothing: a deflate stream's padding
    // bits, or the last byte of a range-coded stream (past the precision it needs).
    const Tensor good = decode_weights(coded, t.shape(), DType::f32, "t");
    int found = 0;
    for (size_t i = 0; i < coded.size(); ++i) {
      std::string bad = coded;
      bad[i] = static_cast<char>(bad[i] ^ 0x5a);
      try {
        EXPECT_TRUE(same_bytes(decode_weights(bad, t.shape(), DType::f32, "t"), good)) << "byte " << i;
      } catch (const InputError&) {
        ++found;
      }
    }
    EXPECT_GE(found, static_cast<int>(coded.size()) - 4);
    EXPECT_THROW(decode_weights(coded, {40, 26}, DType::f32, "t"), InputError);
    EXPECT_THROW(decode_weights(coded + "x", t.shape(), DType::f32, "t"), InputError);
  }
  // A stream that claims more than deflate can expand to is refused before any allocation:
  // 2^33 floats' mask (1 GiB) from 10 bytes.
  std::string huge = "BKW1";
  auto put = [&](auto v) { huge.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(uint8_t{1}), put(uint8_t{4}), put(uint8_t{0}), put(uint8_t{0}), put(uint64_t{1} << 33), put(uint32_t{0}),
      put(uint64_t{0}), put(uint32_t{0});
  put(uint8_t{1}), put(uint64_t{1} << 30), put(uint64_t{10});
  huge += std::string(10, '\0');
  const std::string deflated = input_error_of([&] { decode_weights(huge, {int64_t{1} << 33}, DType::f32, "t"); });
  EXPECT_NE(deflated.find("more than deflate can expand"), std::string::npos) << deflated;
  // The same in BKW2 with a range-coded mask: 2^30 bytes claimed from 10.
  std::string ranged = "BKW2";
  ranged += std::string("\x01\x04\x00", 3);
  for (uint64_t v : {uint64_t{1} << 33, uint64_t{0}, uint64_t{0}}) put_varint(ranged, v);
  ranged += std::string(4, '\0');  // checksum
  ranged += '\x02';                // range coder, 2^30 bytes from 10
  put_varint(ranged, uint64_t{1} << 30);
  put_varint(ranged, 10);
  ranged += std::string(10, '\0');
  const std::string error = input_error_of([&] { decode_weights(ranged, {int64_t{1} << 33}, DType::f32, "t"); });
  EXPECT_NE(error.find("its mask stream claims 1073741824 bytes from 10, more than the range coder"), std::string::npos)
      << error;
}

TEST(RangeCoder, DecodesWhatItCodedNearTheEntropyAndRefusesTruncation) {
  Rng rng(9);
  std::string random(5000, '\0'), mask(100000, '\0');
  for (char& c : random) c = static_cast<char>(rng.below(256));
  int64_t ones = 0;
  for (size_t i = 0; i < mask.size() * 8; ++i)
    if (rng.uniform(0.f, 1.f) < 0.02f) mask[i / 8] = static_cast<char>(mask[i / 8] | (1 << (i % 8))), ++ones;
  for (RangeModel model : {RangeModel::kBits, RangeModel::kByteTree})
    for (const std::string& raw : {std::string(), std::string("a"), random, mask, std::string(1 << 20, '\0')}) {
      const std::string coded = range_encode(raw, model);
      std::string back;
      ASSERT_TRUE(range_decode(coded, raw.size(), model, back)) << raw.size();
      EXPECT_EQ(back, raw);
      EXPECT_LE(raw.size(), coded.size() * kRangeMaxRatio);
      for (size_t len : {size_t{0}, coded.size() / 2, coded.size() - 1})
        EXPECT_FALSE(range_decode(std::string_view(coded).substr(0, len), raw.size(), model, back)) << len;
      EXPECT_FALSE(range_decode(coded + "x", raw.size(), model, back)) << "a byte after the stream";
    }
  // A 2% mask: one probability for every bit comes within 2% of the bits' entropy.
  const double p = static_cast<double>(ones) / (mask.size() * 8.0);
  const double entropy_bytes = -(p * std::log2(p) + (1 - p) * std::log2(1 - p)) * mask.size();
  EXPECT_LT(range_encode(mask, RangeModel::kBits).size(), 1.02 * entropy_bytes);
  // Random bytes grow by a few bytes at most.
  EXPECT_LT(range_encode(random, RangeModel::kByteTree).size(), random.size() + random.size() / 50);
}

PackedParts sample_parts() {
  PackedParts p;
  p.strings = {{"graph", std::string(3000, 'g')}, {"precision", "int8"}, {"", ""}};
  p.blobs = {{"conv1.0", {20, 1, 5, 5}, std::string(40, 'a')}, {"conv1.1", {20}, "bb"}, {"empty", {0}, "e"}};
  return p;
}

TEST(PackedParts, RoundTripsStringsShapesAndBytes) {
  const PackedParts p = sample_parts();
  const std::string packed = pack_parts(p);
  EXPECT_LT(packed.size(), 200u);  // the 3,000 repeated bytes deflate; each entry costs a few bytes
  const PackedParts q = unpack_parts(packed, "b.bks");
  EXPECT_EQ(q.strings, p.strings);
  ASSERT_EQ(q.blobs.size(), p.blobs.size());
  for (size_t i = 0; i < p.blobs.size(); ++i) {
    EXPECT_EQ(q.blobs[i].name, p.blobs[i].name);
    EXPECT_EQ(q.blobs[i].shape, p.blobs[i].shape);
    EXPECT_EQ(q.blobs[i].bytes, p.blobs[i].bytes);
  }
}

// Every truncation and every changed byte of the index is an InputError naming the file,
// and a crafted index cannot make the reader allocate beyond what its bytes hold.
TEST(PackedParts, CorruptBytesAreAnInputErrorNamingTheFile) {
  const std::string packed = pack_parts(sample_parts());
  auto error_of = [](std::string_view bytes) { return input_error_of([&] { unpack_parts(bytes, "b.bks"); }); };
  for (size_t len = 0; len < packed.size(); ++len)
    EXPECT_NE(error_of(std::string_view(packed).substr(0, len)).find("b.bks: corrupt bundle: "), std::string::npos)
        << len;
  EXPECT_NE(error_of(packed + "x").find("1 bytes after its last tensor"), std::string::npos);
  // The index (magic, stream, checksum) ends where the blobs' 43 bytes begin.
  const size_t index_end = packed.size() - 43;
  for (size_t i = 0; i < index_end; ++i) {
    std::string bad = packed;
    bad[i] = static_cast<char>(bad[i] ^ 0x21);
    EXPECT_NE(error_of(bad).find("b.bks: corrupt bundle: "), std::string::npos) << "byte " << i;
  }
  // Crafted indexes, raw or deflated (a deflated one may inflate to 64 times the file and
  // 1 MB more): each is refused before the reader allocates for what it claims.
  auto varint = [](uint64_t v) {
    std::string b;
    put_varint(b, v);
    return b;
  };
  auto with_index = [&](const std::string& index, bool deflate, const std::string& blobs) {
    std::string coded = index;
    if (deflate) {
      uLongf n = compressBound(index.size());
      coded.resize(n);
      compress2(reinterpret_cast<Bytef*>(coded.data()), &n, reinterpret_cast<const Bytef*>(index.data()), index.size(),
                9);
      coded.resize(n);
    }
    std::string out = "BKP1";
    out.push_back(deflate ? 1 : 0);
    out += varint(index.size()) + varint(coded.size()) + coded;
    const auto crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(index.data()), index.size()));
    out.append(reinterpret_cast<const char*>(&crc), 4);
    return out + blobs;
  };
  const std::string no_strings = varint(0), one_tensor = varint(1) + varint(1) + "t";
  for (const auto& [bytes, says] : std::vector<std::pair<std::string, std::string>>{
           {with_index(varint(uint64_t{1} << 60) + "xy", false, ""), "index: 1152921504606846976 strings in 2 bytes"},
           {with_index(std::string(9, '\xff') + '\x02', false, ""), "index: its strings is not a 64-bit number"},
           {with_index(no_strings + one_tensor + varint(100000) + std::string(100001, '\0'), true, "b"),
            "index: tensor 't' has 100000 dimensions"},
           {with_index(
                no_strings + varint(100000) +
                    [] {
                      std::string e;
                      for (int k = 0; k < 100000; ++k) e += std::string("\0\0\1", 3);  // no name, rank 0, 1 byte
                      return e;
                    }(),
                true, std::string(10, 'b')),
            "index: 100000 tensors in 10 bytes"},
           {with_index(no_strings + one_tensor + varint(0) + varint(0), false, "b"), "index: tensor 't' has no bytes"},
           {with_index(std::string(2 << 20, '\0'), true, ""), "its index stream holds 2097152 bytes, more than"},
       }) {
    EXPECT_NE(error_of(bytes).find("b.bks: corrupt bundle: " + says), std::string::npos) << error_of(bytes);
  }
}

TEST(Safetensors, CorruptFilesAreInputErrors) {
  Tensor a({16});
  save_safetensors(tmp("c.safetensors"), {{"a", &a}});
  std::string bytes = read_file(tmp("c.safetensors"), "x");
  std::ofstream(tmp("trunc.safetensors"), std::ios::binary) << bytes.substr(0, bytes.size() - 10);
  EXPECT_THROW(load_safetensors(tmp("trunc.safetensors")), InputError);
  std::string bad = bytes;
  bad[8] = '#';  // the header's opening brace
  std::ofstream(tmp("hdr.safetensors"), std::ios::binary) << bad;
  EXPECT_THROW(load_safetensors(tmp("hdr.safetensors")), InputError);
  std::ofstream(tmp("tiny.safetensors"), std::ios::binary) << "abc";
  EXPECT_THROW(load_safetensors(tmp("tiny.safetensors")), InputError);
  EXPECT_THROW(load_safetensors(tmp("missing.safetensors")), InputError);
}

// Byte ranges that overlap: many tensors claiming the same bytes would otherwise allocate
// many times the file (here 10,000 copies of its 4 KB), and two sharing part of them are
// no safetensors file either.
TEST(Safetensors, TensorsSharingBytesAreInputErrors) {
  auto file = [&](const std::string& name, const std::string& header, size_t data_bytes) {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    std::ofstream(tmp(name), std::ios::binary) << bytes << header << std::string(data_bytes, '\0');
    return tmp(name);
  };
  auto expect_error = [](const std::string& path, const std::string& says) {
    try {
      load_safetensors(path);
      ADD_FAILURE() << "loaded " << path;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  std::string many = "{";
  for (int k = 0; k < 10000; ++k)
    many += fmt::format("{}\"t{}\":{{\"dtype\":\"F32\",\"shape\":[1024],\"data_offsets\":[0,4096]}}", k ? "," : "", k);
  expect_error(file("many.safetensors", many + "}", 4096), "claim more than its 4096 data bytes");
  expect_error(file("shared.safetensors",
                    R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]},)"
                    R"("b":{"dtype":"F32","shape":[8],"data_offsets":[16,48]}})",
                    64),
               "share the bytes from 16");
  // Apart, the same two load.
  TensorFile ok = load_safetensors(file("apart.safetensors",
                                        R"({"a":{"dtype":"F32","shape":[8],"data_offsets":[0,32]},)"
                                        R"("b":{"dtype":"F32","shape":[8],"data_offsets":[32,64]}})",
                                        64));
  EXPECT_EQ(ok.tensors.size(), 2u);
}

// A small graph with every IR field set: an in-place value, deploy decisions, loss weights.
Graph sample_graph() {
  Graph g;
  g.name = "sample";
  int x = g.add_value("x"), y = g.add_value("y"), y2 = g.add_value("y");
  Node in;
  in.name = "in";
  make_external_input(in, {{2}});
  in.outputs = {x};
  Node conv;
  conv.name = "conv";
  conv.type = "Convolution";
  conv.attrs = default_attrs("Convolution");
  conv.attrs.as<ConvAttrs>().num_output = 3;
  conv.inputs = {x};
  conv.outputs = {y};
  conv.deploy.fusion.relu = true;
  conv.deploy.fusion.relu_slope = 0.25f;
  conv.deploy.fusion.relu_max = 6.f;
  conv.deploy.kernel = "winograd";
  conv.deploy.precision = Precision::int8;
  conv.deploy.int8_input_threshold = 1.5f;
  conv.deploy.int8_output_threshold = 2.5f;
  Node relu;
  relu.name = "relu";
  relu.type = "ReLU";
  relu.inputs = {y};
  relu.outputs = {y2};
  relu.loss_weight = {0.5f};
  g.nodes = {in, conv, relu};
  g.values[x].producer = 0;
  g.values[y].producer = 1;
  g.values[y2].producer = 2;
  return g;
}

TEST(GraphJson, RoundTripKeepsStructureAttributesAndDeployFields) {
  Graph g = graph_from_json(graph_to_json(sample_graph()), "sample.bks");
  ASSERT_EQ(g.values.size(), 3u);
  ASSERT_EQ(g.nodes.size(), 3u);
  EXPECT_EQ(g.name, "sample");
  EXPECT_EQ(g.values[2].name, "y");
  EXPECT_EQ(g.values[2].producer, 2);
  EXPECT_EQ(g.values[1].consumers, std::vector<int>{2});
  const Node& conv = g.nodes[1];
  EXPECT_EQ(conv.type, "Convolution");
  EXPECT_EQ(conv.attrs.as<ConvAttrs>().num_output, 3);
  EXPECT_TRUE(conv.deploy.fusion.relu);
  EXPECT_FALSE(conv.deploy.fusion.residual_sum);
  EXPECT_FLOAT_EQ(conv.deploy.fusion.relu_slope, 0.25f);
  EXPECT_FLOAT_EQ(conv.deploy.fusion.relu_max, 6.f);
  EXPECT_EQ(conv.deploy.kernel, "winograd");
  EXPECT_EQ(conv.deploy.precision, Precision::int8);
  EXPECT_FLOAT_EQ(conv.deploy.int8_input_threshold, 1.5f);
  EXPECT_FLOAT_EQ(conv.deploy.int8_output_threshold, 2.5f);
  EXPECT_TRUE(g.nodes[2].deploy.empty());
  EXPECT_EQ(g.nodes[2].loss_weight, std::vector<float>{0.5f});
  EXPECT_EQ(caffe_layer(g, 0).input_param().shape(0).dim(0), 2);
}

TEST(GraphJson, MalformedGraphsAreInputErrorsNamingTheSource) {
  std::string good = graph_to_json(sample_graph());
  auto expect_error = [](const std::string& text, const std::string& says) {
    try {
      graph_from_json(text, "crafted.bks");
      ADD_FAILURE() << "accepted: " << text;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("crafted.bks"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  auto with = [&](const std::string& from, const std::string& to) {
    std::string t = good;
    auto at = t.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) t.replace(at, from.size(), to);
    return t;
  };
  expect_error("{", "not JSON");
  expect_error("[]", "not an object");
  expect_error(R"({"name":"g","values":[],"nodes":[]})", "no nodes");
  expect_error(with("\"values\":", "\"valuez\":"), "'values'");
  expect_error(with("\"inputs\":[0]", "\"inputs\":[7]"), "value index 7");
  expect_error(with("\"inputs\":[0]", "\"inputs\":[-1]"), "value index -1");
  expect_error(with("\"inputs\":[0]", "\"inputs\":[\"x\"]"), "value index");
  // An index nested a million arrays deep: an error, not a stack exhausted printing it.
  expect_error(with("\"inputs\":[0]", "\"inputs\":[" + std::string(1000000, '[') + std::string(1000000, ']') + "]"),
               "value index array");
  expect_error(with("\"inputs\":[0]", "\"inputs\":[2]"), "before any node writes it");
  expect_error(with("\"outputs\":[2]", "\"outputs\":[1]"), "written twice");
  expect_error(with("\"type\":\"ReLU\"", "\"type\":7"), "'type'");
  expect_error(with("\"kernel\":\"winograd\"", "\"kernel\":1"), "'kernel'");
  expect_error(with("\"precision\":\"int8\"", "\"precision\":\"int4\""), "'precision' must be fp32, bf16 or int8");
  expect_error(with("\"num_output\":3", "\"num_output\":\"3\""), "attribute 'num_output' is not an integer");
  expect_error(with("\"variance_norm\":\"FAN_IN\"", "\"variance_norm\":\"FAN\""), "not one of its values");
  expect_error(with("\"type\":\"Convolution\"", "\"type\":\"Conv\""), "op type 'Conv'");
}

// Every op type's attributes, at their defaults and as a Caffe layer sets them, survive the
// bundle's JSON unchanged.
TEST(GraphJson, EveryOpsAttributesRoundTrip) {
  ASSERT_FALSE(attrs_types().empty());
  for (const std::string& type : attrs_types()) {
    Graph g;
    g.name = "one";
    Node n;
    n.name = "n";
    n.type = type;
    n.attrs = default_attrs(type);
    n.outputs = {g.add_value("y")};
    g.nodes = {n};
    g.values[0].producer = 0;
    std::string once = graph_to_json(g);
    EXPECT_NE(once.find("\"attrs\""), std::string::npos) << type;
    EXPECT_EQ(graph_to_json(graph_from_json(once, "rt")), once) << type;
  }
}

TEST(GraphJson, CaffeSpellingsBecomeOneTypedForm) {
  auto node = [](const std::string& text) {
    proto::LayerParameter l;
    parse_prototxt_string(text, "spelling", l);
    return caffe_layer_node(l, "spelling:1");
  };
  // kernel_h/kernel_w and kernel_size: per-axis lists either way.
  Node a = node("name: 'c' type: 'Convolution' convolution_param { num_output: 2 kernel_h: 3 kernel_w: 5 stride: 2 }");
  const ConvAttrs& ca = a.attrs.as<ConvAttrs>();
  EXPECT_EQ(ca.kernel, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(ca.stride, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(ca.pad, (std::vector<int64_t>{0, 0}));
  Node b = node("name: 'c' type: 'Convolution' convolution_param { num_output: 2 kernel_size: 3 kernel_size: 5 }");
  EXPECT_EQ(b.attrs.as<ConvAttrs>().kernel, ca.kernel);
  // The writer gives Caffe back, and reading that gives the same attributes.
  Graph g;
  g.values.push_back(Value{"x", {}, -1, {0}});
  g.values.push_back(Value{"y", {}, 0, {}});
  a.inputs = {0};
  a.outputs = {1};
  g.nodes = {a};
  proto::LayerParameter back = caffe_layer(g, 0);
  EXPECT_EQ(back.bottom(0), "x");
  EXPECT_EQ(back.top(0), "y");
  Node again = caffe_layer_node(back, "again");
  EXPECT_EQ(again.attrs.as<ConvAttrs>().kernel, ca.kernel);
  EXPECT_EQ(again.attrs.as<ConvAttrs>().stride, ca.stride);
  // Errors only a Caffe file can have are the front end's, naming the field.
  try {
    node("name: 'c' type: 'Convolution' convolution_param { num_output: 2 kernel_size: 3 kernel_h: 3 }");
    ADD_FAILURE() << "accepted both spellings";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("give either kernel_size or kernel_h/kernel_w"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("spelling:1"), std::string::npos) << e.what();
  }
  // An op asking for another op's attributes is a bug, not bad input.
  EXPECT_THROW(a.attrs.as<PoolingAttrs>(), RuntimeError);
}

TEST(Weights, MismatchedShapeNamesTensor) {
  ParamStore s;
  s.add("conv1.0", "", {4, 3}, true);
  Tensor wrong({3, 4});
  save_safetensors(tmp("w.safetensors"), {{"conv1.0", &wrong}});
  try {
    load_weights(tmp("w.safetensors"), s);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("conv1.0"), std::string::npos);
  }
}

TEST(Weights, ReadsCaffemodel) {
  proto::NetParameter net;
  auto* layer = net.add_layer();
  layer->set_name("ip");
  layer->set_type("InnerProduct");
  auto* w = layer->add_blobs();
  w->mutable_shape()->add_dim(2);
  w->mutable_shape()->add_dim(3);
  for (int i = 0; i < 6; ++i) w->add_data(i * 0.5f);
  auto* b = layer->add_blobs();  // old-style 4-d shape for a 1-d blob
  b->set_num(1);
  b->set_channels(1);
  b->set_height(1);
  b->set_width(2);
  b->add_data(7);
  b->add_data(8);
  std::ofstream(tmp("m.caffemodel"), std::ios::binary) << net.SerializeAsString();
  ParamStore s;
  s.add("ip.0", "", {2, 3}, true);
  s.add("ip.1", "", {2}, true);
  EXPECT_EQ(load_weights(tmp("m.caffemodel"), s), 2);
  EXPECT_EQ(s.at(0).data.f32()[5], 2.5f);
  EXPECT_EQ(s.at(1).data.f32()[1], 8.f);
}

// A blob's shape is checked against the values the file holds before anything of that size
// is allocated (found by the caffemodel fuzz harness).
TEST(Weights, CaffemodelShapeBeyondItsValuesIsAnInputError) {
  for (int64_t dim : {int64_t{1} << 40, int64_t{-3}}) {
    proto::NetParameter net;
    auto* layer = net.add_layer();
    layer->set_name("ip");
    auto* w = layer->add_blobs();
    w->mutable_shape()->add_dim(dim);
    w->mutable_shape()->add_dim(1 << 20);
    w->add_data(1.f);
    std::ofstream(tmp("huge.caffemodel"), std::ios::binary) << net.SerializeAsString();
    ParamStore s;
    s.add("ip.0", "", {2, 3}, true);
    try {
      load_weights(tmp("huge.caffemodel"), s);
      ADD_FAILURE() << "no error for dimension " << dim;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("layer 'ip' blob 0"), std::string::npos) << e.what();
    }
  }
}

void write_idx(const fs::path& p, const std::vector<int>& dims, const std::vector<uint8_t>& data, bool gz) {
  std::string s = {0, 0, 8, static_cast<char>(dims.size())};
  for (int d : dims)
    for (int k = 3; k >= 0; --k) s.push_back(static_cast<char>((d >> (8 * k)) & 0xff));
  s.append(data.begin(), data.end());
  if (gz) {
    gzFile f = gzopen(p.c_str(), "wb");
    gzwrite(f, s.data(), static_cast<unsigned>(s.size()));
    gzclose(f);
  } else {
    std::ofstream(p, std::ios::binary) << s;
  }
}

TEST(Idx, RawAndGzipReadIdentically) {
  std::vector<uint8_t> img(3 * 2 * 2), lab = {1, 0, 2};
  for (size_t i = 0; i < img.size(); ++i) img[i] = static_cast<uint8_t>(i * 10);
  for (bool gz : {false, true}) {
    std::string suffix = gz ? ".gz" : "";
    write_idx(tmp("a-images-idx3-ubyte" + suffix), {3, 2, 2}, img, gz);
    write_idx(tmp("a-labels-idx1-ubyte" + suffix), {3}, lab, gz);
    auto ds = open_dataset(tmp("a-images-idx3-ubyte" + suffix));
    ASSERT_EQ(ds->size, 3);
    EXPECT_EQ(ds->fields[0].sample_shape, (Shape{1, 2, 2}));
    EXPECT_EQ(ds->fields[0].u8(2)[3], 110);
    EXPECT_EQ(ds->fields[1].u8(2)[0], 2);
  }
}

TEST(Idx, CorruptFilesAreInputErrors) {
  write_idx(tmp("t-images-idx3-ubyte"), {10, 28, 28}, std::vector<uint8_t>(100), false);  // truncated
  write_idx(tmp("t-labels-idx1-ubyte"), {10}, std::vector<uint8_t>(10), false);
  try {
    open_dataset(tmp("t-images-idx3-ubyte"));
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  write_idx(tmp("m-images-idx3-ubyte"), {2, 1, 1}, {1, 2}, false);
  write_idx(tmp("m-labels-idx1-ubyte"), {3}, {1, 2, 3}, false);
  EXPECT_THROW(open_dataset(tmp("m-images-idx3-ubyte")), InputError);
  write_idx(tmp("n-images-idx3-ubyte"), {2, 1, 1}, {1, 2}, false);
  EXPECT_THROW(open_dataset(tmp("n-images-idx3-ubyte")), InputError) << "no labels file";
}

TEST(Hdf5, ReadsNamedDatasetsAndLists) {
  fs::path h5 = tmp("d.h5");
  hid_t f = H5Fcreate(h5.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t dd[4] = {3, 1, 2, 2}, ld[1] = {3};
  std::vector<float> data(12), label = {0, 1, 2};
  for (int i = 0; i < 12; ++i) data[i] = i * 0.5f;
  hid_t s1 = H5Screate_simple(4, dd, nullptr), s2 = H5Screate_simple(1, ld, nullptr);
  hid_t d1 = H5Dcreate2(f, "data", H5T_NATIVE_FLOAT, s1, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t d2 = H5Dcreate2(f, "label", H5T_NATIVE_FLOAT, s2, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d1, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data());
  H5Dwrite(d2, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, label.data());
  H5Dclose(d1);
  H5Dclose(d2);
  H5Sclose(s1);
  H5Sclose(s2);
  H5Fclose(f);
  auto ds = open_dataset(h5.string());
  EXPECT_EQ(ds->format, "hdf5");
  EXPECT_EQ(ds->size, 3);
  EXPECT_EQ(ds->fields[0].f32(2)[1], 4.5f);
  std::ofstream(tmp("list.txt")) << h5.string() << "\n" << h5.string() << "\n";
  auto two = open_hdf5_list(tmp("list.txt"), {"data", "label"});
  EXPECT_EQ(two->size, 6);
  EXPECT_THROW(open_hdf5_list(tmp("list.txt"), {"data", "nothing"}), InputError);
}

TEST(Hdf5, WrittenBytesReadBackAsBytes) {
  // Images packed as unsigned bytes stay bytes (a quarter of the memory); labels as float.
  DatasetField data, label;
  data.name = "data";
  data.sample_shape = {1, 2, 2};
  data.dtype = DType::u8;
  for (int i = 0; i < 12; ++i) data.bytes.push_back(static_cast<uint8_t>(i * 20));
  label.name = "label";
  label.dtype = DType::f32;
  for (float v : {2.f, 0.f, 1.f}) {
    auto* b = reinterpret_cast<const uint8_t*>(&v);
    label.bytes.insert(label.bytes.end(), b, b + 4);
  }
  fs::path h5 = tmp("packed.h5");
  write_hdf5(h5.string(), {data, label}, 3);
  EXPECT_FALSE(fs::exists(h5.string() + ".tmp"));
  auto ds = read_hdf5(h5.string(), {"data", "label"});
  EXPECT_EQ(ds->size, 3);
  EXPECT_EQ(ds->fields[0].dtype, DType::u8);
  EXPECT_EQ(ds->fields[0].sample_shape, (Shape{1, 2, 2}));
  EXPECT_EQ(ds->fields[0].u8(2)[3], 220);
  EXPECT_EQ(ds->fields[1].dtype, DType::f32);
  EXPECT_EQ(ds->fields[1].f32(0)[0], 2.f);
}

TEST(Idx, DeclaredSizesAreCheckedBeforeAllocating) {
  // 24 bytes whose dimensions multiply past 2^64: once wrapped to 0 bytes, then written far
  // out of bounds while reordering to channels-first.
  const uint32_t big = 1u << 28;
  write_idx(tmp("o-images-idx3-ubyte"), {1, static_cast<int>(big), static_cast<int>(big), static_cast<int>(big)},
            {1, 2, 3, 4}, false);
  write_idx(tmp("o-labels-idx1-ubyte"), {1}, {0}, false);
  ASSERT_EQ(fs::file_size(tmp("o-images-idx3-ubyte")), 24u);
  std::string e = input_error_of([] { read_idx_pair(tmp("o-images-idx3-ubyte"), tmp("o-labels-idx1-ubyte")); });
  EXPECT_NE(e.find(tmp("o-images-idx3-ubyte").string()), std::string::npos) << e;
  EXPECT_NE(e.find("declare more than"), std::string::npos) << e;
  // 10 MB declared by a 120-byte file: refused by size before 10 MB are allocated.
  write_idx(tmp("s-images-idx3-ubyte"), {10000, 1000}, std::vector<uint8_t>(100), false);
  e = input_error_of([] { read_idx_pair(tmp("s-images-idx3-ubyte"), tmp("o-labels-idx1-ubyte")); });
  EXPECT_NE(e.find("the file has only 100"), std::string::npos) << e;
  // gzip: no more than deflate can expand the compressed bytes to.
  write_idx(tmp("z-images-idx3-ubyte.gz"), {100000, 1000}, std::vector<uint8_t>(10), true);
  e = input_error_of([] { read_idx_pair(tmp("z-images-idx3-ubyte.gz"), tmp("o-labels-idx1-ubyte")); });
  EXPECT_NE(e.find("more than"), std::string::npos) << e;
  EXPECT_NE(e.find("compressed bytes can hold"), std::string::npos) << e;
  // Within that bound but short: truncated, read in steps.
  write_idx(tmp("y-images-idx3-ubyte.gz"), {100, 100}, std::vector<uint8_t>(5000), true);
  e = input_error_of([] { read_idx_pair(tmp("y-images-idx3-ubyte.gz"), tmp("o-labels-idx1-ubyte")); });
  EXPECT_NE(e.find("truncated while reading the data (5000 of 10000 bytes)"), std::string::npos) << e;
}

// An HDF5 file with one dataset per entry of `shapes` (never written unless `data` is given),
// `chunk`: chunked layout with this many samples a chunk (deflated when `deflate`).
void write_h5(const fs::path& p, const std::vector<std::pair<std::string, std::vector<hsize_t>>>& shapes,
              hid_t type = H5T_NATIVE_FLOAT, hsize_t chunk = 0, bool deflate = false,
              const std::vector<float>* data = nullptr) {
  hid_t f = H5Fcreate(p.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  for (const auto& [name, dims] : shapes) {
    hid_t s = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    hid_t plist = H5Pcreate(H5P_DATASET_CREATE);
    if (chunk) {
      std::vector<hsize_t> c(dims);
      c[0] = chunk;
      H5Pset_chunk(plist, static_cast<int>(c.size()), c.data());
      if (deflate) H5Pset_deflate(plist, 9);
    }
    hid_t d = H5Dcreate2(f, name.c_str(), type, s, H5P_DEFAULT, plist, H5P_DEFAULT);
    EXPECT_GE(d, 0) << name;
    if (data) H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data->data());
    H5Dclose(d);
    H5Pclose(plist);
    H5Sclose(s);
  }
  H5Fclose(f);
}

TEST(Hdf5, DeclaredSizesAreCheckedAgainstTheStoredBytes) {
  auto error_reading = [](const fs::path& p) {
    return input_error_of([&] { read_hdf5(p.string(), {"data", "label"}); });
  };
  // No samples: refused by the reader, and by the loader (it took indices modulo 0).
  write_h5(tmp("empty.h5"), {{"data", {0, 3}}, {"label", {0}}});
  std::string e = error_reading(tmp("empty.h5"));
  EXPECT_NE(e.find("dataset 'data' has no samples"), std::string::npos) << e;
  auto none = std::make_shared<Dataset>();
  none->source = "empty.h5";
  none->fields.push_back({"data", {3}, DType::f32, {}});
  e = input_error_of([&] { BatchLoader(none, {0}, std::nullopt, LoaderOptions{}); });
  EXPECT_NE(e.find("empty.h5: the dataset has no samples"), std::string::npos) << e;
  // 13 GB declared by a 1.6 KB file that stores none of it.
  write_h5(tmp("huge.h5"), {{"data", {3300000, 1000}}, {"label", {3300000}}});
  EXPECT_LT(fs::file_size(tmp("huge.h5")), 4096u);
  e = error_reading(tmp("huge.h5"));
  EXPECT_NE(e.find("declare 13200000000 bytes but the file stores only 0"), std::string::npos) << e;
  // Dimensions whose product wraps past 2^64 (to 0 bytes), in a chunked dataset.
  write_h5(tmp("wrap.h5"), {{"data", {hsize_t{1} << 32, hsize_t{1} << 32, 4}}}, H5T_NATIVE_UCHAR, 1);
  e = error_reading(tmp("wrap.h5"));
  EXPECT_NE(e.find(tmp("wrap.h5").string() + ": dataset 'data': dimensions"), std::string::npos) << e;
  EXPECT_NE(e.find("declare more than 64 GiB"), std::string::npos) << e;
  // Compressed: at most what deflate can expand the stored bytes to.
  write_h5(tmp("bomb.h5"), {{"data", {1 << 20, 1000}}}, H5T_NATIVE_FLOAT, 1024, true);
  e = error_reading(tmp("bomb.h5"));
  EXPECT_NE(e.find("compressed fields may decode to at most 1032x"), std::string::npos) << e;
  // ... while real compressed data reads.
  std::vector<float> values(64 * 10, 0.5f), labels(64, 1.f);
  write_h5(tmp("gz_data.h5"), {{"data", {64, 10}}}, H5T_NATIVE_FLOAT, 16, true, &values);
  auto ok = read_hdf5(tmp("gz_data.h5").string(), {"data"});
  EXPECT_EQ(ok->size, 64);
  EXPECT_EQ(ok->fields[0].f32(63)[9], 0.5f);
  // Not numbers; a zero sample dimension.
  hid_t str = H5Tcopy(H5T_C_S1);
  H5Tset_size(str, 8);
  write_h5(tmp("strings.h5"), {{"data", {4}}}, str);
  H5Tclose(str);
  e = error_reading(tmp("strings.h5"));
  EXPECT_NE(e.find("dataset 'data' holds strings, not numbers"), std::string::npos) << e;
  write_h5(tmp("flat.h5"), {{"data", {4, 0}}});
  e = error_reading(tmp("flat.h5"));
  EXPECT_NE(e.find("dataset 'data': dimension 1 is 0"), std::string::npos) << e;
}

// Files the fuzzer (tests/fuzz, hdf5 harness) made. libhdf5 itself crashes on some: it reads in
// a child process, so they end in an error, not in a crash of the caller. Others declare more
// storage in their metadata than the whole file holds.
TEST(Hdf5, CraftedFilesEndInAnErrorNotACrash) {
  const fs::path corpus = fs::path(BKS_SOURCE_DIR) / "tests/fuzz/corpus/hdf5";
  auto error_reading = [&](const char* name) {
    return input_error_of([&] { read_hdf5((corpus / name).string(), {"data", "label"}); });
  };
  for (const char* name : {"regress_libhdf5_null_read.h5", "regress_libhdf5_negative_memcpy.h5"}) {
    std::string e = error_reading(name);
    // "(killed by signal 11, ...)", or "(exit status 1)" where a sanitizer reports it first.
    EXPECT_NE(e.find(std::string(name) + ": libhdf5 crashed while reading it ("), std::string::npos) << e;
    EXPECT_NE(e.find("the file is damaged or crafted"), std::string::npos) << e;
  }
  // 27 GB declared as stored, contiguous, by a 2 KB file.
  std::string e = error_reading("regress_storage_declared_beyond_file.h5");
  EXPECT_NE(e.find("but the file stores only 2184"), std::string::npos) << e;
  // libhdf5 asks for 16 GiB while opening this one: the child's allocation fails, or the
  // kernel's OOM killer takes the child (it volunteers first), never the caller.
  e = error_reading("regress_libhdf5_16gib_malloc.h5");
  EXPECT_NE(e.find("regress_libhdf5_16gib_malloc.h5: "), std::string::npos) << e;
  // libhdf5 asks for gigabytes looking up 'data' in this 2 KB file; under AddressSanitizer
  // (whose shadow memory those allocations fill) the child held 2.6 GB for 13 s. The reading
  // child may map only kChildMemoryHeadroom more than it inherits before the reader's checks.
  e = error_reading("regress_libhdf5_2gb_lookup.h5");
  EXPECT_NE(e.find("regress_libhdf5_2gb_lookup.h5: "), std::string::npos) << e;
  rusage children{};
  getrusage(RUSAGE_CHILDREN, &children);
  EXPECT_LT(children.ru_maxrss, 1536 << 10) << "KB, the most any reading child held";
  // An error inside the reading process comes back with its message, and the next read works.
  std::vector<float> values(8 * 3, 2.f), labels(8, 1.f);
  write_h5(tmp("after.h5"), {{"data", {8, 3}}}, H5T_NATIVE_FLOAT, 0, false, &values);
  e = input_error_of([] { read_hdf5(tmp("after.h5").string(), {"data", "label"}); });
  EXPECT_NE(e.find("after.h5: no dataset 'label' in the HDF5 file"), std::string::npos) << e;
  auto ok = read_hdf5(tmp("after.h5").string(), {"data"});
  ASSERT_EQ(ok->size, 8);
  EXPECT_EQ(ok->fields[0].sample_shape, Shape({3}));
  EXPECT_EQ(ok->fields[0].f32(7)[2], 2.f);
}

TEST(Hdf5, ListsRefuseFilesWhoseTypesDiffer) {
  // Bytes in one file, floats in the next: one buffer cannot hold both.
  DatasetField bytes{"data", {2}, DType::u8, {1, 2, 3, 4}};
  write_hdf5(tmp("u8.h5").string(), {bytes}, 2);
  std::vector<float> floats{1, 2, 3, 4};
  write_h5(tmp("f32.h5"), {{"data", {2, 2}}}, H5T_NATIVE_FLOAT, 0, false, &floats);
  std::ofstream(tmp("mixed.txt")) << tmp("u8.h5").string() << "\n" << tmp("f32.h5").string() << "\n";
  std::string e = input_error_of([] { open_hdf5_list(tmp("mixed.txt"), {"data"}); });
  EXPECT_NE(e.find("dataset 'data' holds floats in " + tmp("f32.h5").string() + " but unsigned bytes before"),
            std::string::npos)
      << e;
}

TEST(Transform, MeanFileScaleCropMirror) {
  proto::BlobProto mean;
  mean.set_num(1);
  mean.set_channels(1);
  mean.set_height(2);
  mean.set_width(3);
  for (int i = 0; i < 6; ++i) mean.add_data(static_cast<float>(i));
  std::ofstream(tmp("mean.binaryproto"), std::ios::binary) << mean.SerializeAsString();
  TransformOptions p;
  p.mean_file = tmp("mean.binaryproto");
  p.scale = 0.5f;
  Transform t(p, {1, 2, 3}, false, "test");
  uint8_t src[6] = {10, 10, 10, 10, 10, 10};
  float dst[6];
  t.apply_u8(src, dst, nullptr);
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(dst[i], (10.f - i) * 0.5f);
  TransformOptions c;
  c.crop_size = 2;
  Transform centre(c, {1, 4, 4}, false, "test");
  uint8_t img[16];
  for (int i = 0; i < 16; ++i) img[i] = static_cast<uint8_t>(i);
  float out[4];
  centre.apply_u8(img, out, nullptr);
  EXPECT_FLOAT_EQ(out[0], 5.f);
  EXPECT_FLOAT_EQ(out[3], 10.f);
  TransformOptions bad;
  bad.mean_value = {1, 2};
  EXPECT_THROW(Transform(bad, {3, 4, 4}, true, "test"), InputError);

  // Mirror, in either phase as in Caffe: about half the samples flip, and the mean is that
  // of the source pixel (Caffe subtracts mean[data_index] before placing it mirrored).
  proto::BlobProto row_mean;
  row_mean.set_num(1), row_mean.set_channels(1), row_mean.set_height(1), row_mean.set_width(3);
  for (float v : {0.f, 10.f, 20.f}) row_mean.add_data(v);
  std::ofstream(tmp("row_mean.binaryproto"), std::ios::binary) << row_mean.SerializeAsString();
  TransformOptions m;
  m.mirror = true;
  m.mean_file = tmp("row_mean.binaryproto");
  const uint8_t row[3] = {1, 2, 3};
  for (bool train : {true, false}) {
    Transform mirror(m, {1, 1, 3}, train, "test");
    ASSERT_TRUE(mirror.needs_rng());
    Rng rng(5);
    int flipped = 0, kept = 0;
    for (int i = 0; i < 200; ++i) {
      float o[3];
      mirror.apply_u8(row, o, &rng);
      if (o[0] == 1.f && o[1] == -8.f && o[2] == -17.f) ++kept;
      if (o[0] == -17.f && o[1] == -8.f && o[2] == 1.f) ++flipped;
    }
    EXPECT_EQ(kept + flipped, 200) << "every output is the row or its mirror";
    EXPECT_GT(flipped, 70) << (train ? "TRAIN" : "TEST");
    EXPECT_GT(kept, 70) << (train ? "TRAIN" : "TEST");
  }
  // A random crop in TRAIN takes every offset in range.
  Transform random_crop(c, {1, 4, 4}, true, "test");
  Rng rng(2);
  std::set<float> corners;
  for (int i = 0; i < 200; ++i) {
    random_crop.apply_u8(img, out, &rng);
    corners.insert(out[0]);  // img[y0 * 4 + x0] for offsets y0, x0 in 0..2
  }
  EXPECT_EQ(corners, (std::set<float>{0, 1, 2, 4, 5, 6, 8, 9, 10}));
}

}  // namespace
}  // namespace bks

namespace bks {
namespace {

// A two-field dataset: 5 images of 2x3 bytes and 5 float labels.
std::shared_ptr<const Dataset> small_dataset() {
  auto ds = std::make_shared<Dataset>();
  ds->source = "small";
  ds->format = "test";
  ds->size = 5;
  DatasetField data{"data", {2, 3}, DType::u8, {}};
  for (int i = 0; i < 30; ++i) data.bytes.push_back(static_cast<uint8_t>(i * 7));
  DatasetField label{"label", {}, DType::f32, std::vector<uint8_t>(5 * sizeof(float))};
  for (int i = 0; i < 5; ++i) reinterpret_cast<float*>(label.bytes.data())[i] = i + 0.5f;
  ds->fields = {data, label};
  return ds;
}

TEST(SharedDataset, SecondOpenMapsTheFirstOnesCopyAndCorruptCopiesAreNotTrusted) {
  const std::string dir = (std::filesystem::temp_directory_path() / "bks_shared_dataset").string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  share_datasets_between_processes("test", dir);
  int loads = 0;
  auto load = [&] {
    ++loads;
    return small_dataset();
  };
  auto first = open_shared_dataset("key", load);
  auto second = open_shared_dataset("key", load);
  EXPECT_EQ(loads, 1) << "the second open read the source again";
  for (const auto& ds : {first, second}) {
    ASSERT_EQ(ds->size, 5);
    ASSERT_EQ(ds->fields.size(), 2u);
    EXPECT_TRUE(ds->fields[0].mapped) << "not read from the shared file";
    EXPECT_EQ(ds->fields[0].sample_shape, (Shape{2, 3}));
    EXPECT_EQ(ds->fields[0].u8(4)[5], static_cast<uint8_t>(29 * 7));
    EXPECT_EQ(ds->fields[1].f32(3)[0], 3.5f);
  }
  // Every byte of the file changed in turn (or the file cut short): a copy that is not
  // exactly what was written is read again from the source, never trusted.
  std::string file;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() != ".lock") file = e.path().string();
  ASSERT_FALSE(file.empty());
  const std::string good = read_file(file, "shared copy");
  int trusted_bad = 0;
  for (size_t at = 0; at < 200 && at < good.size(); ++at) {
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x5a);
    write_file_atomic(file, bad);
    loads = 0;
    auto ds = open_shared_dataset("key", load);
    if (loads == 0 && (ds->size != 5 || ds->fields.size() != 2 || ds->fields[0].sample_shape != Shape{2, 3} ||
                       ds->fields[0].byte_size() != 30 || ds->fields[1].byte_size() != 20))
      ++trusted_bad, ADD_FAILURE() << "byte " << at << " of " << good.size();
  }
  EXPECT_EQ(trusted_bad, 0);
  write_file_atomic(file, good.substr(0, good.size() / 2));
  loads = 0;
  auto cut = open_shared_dataset("key", load);
  EXPECT_EQ(loads, 1);
  EXPECT_EQ(cut->fields[1].f32(4)[0], 4.5f);
  EXPECT_GE(remove_shared_dataset_files(), 1);
  share_datasets_between_processes("");  // the other tests in this process read their own
  EXPECT_FALSE(datasets_shared_between_processes());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace bks
