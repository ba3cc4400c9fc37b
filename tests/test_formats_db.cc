// Caffe's data sources: LMDB and LevelDB databases of Datum records (raw, float and encoded
// images), convert_imageset and compute_image_mean, ImageData's list files, and the errors a
// damaged or mismatched source gives.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include <zlib.h>

#include "caffe.pb.h"
#include "cli_util.h"
#include "core/error.h"
#include "core/file_io.h"
#include "data/caffe_db.h"
#include "data/convert_imageset.h"
#include "data/dataset.h"
#include "data/image_decode.h"
#include "data/loader.h"
#include "input_error.h"

namespace bks {
namespace {
namespace fs = std::filesystem;

fs::path tmp(const std::string& name) { return fs::temp_directory_path() / ("bks_db_" + name); }

std::string datum(int c, int h, int w, const std::vector<uint8_t>& px, int label) {
  proto::Datum d;
  d.set_channels(c), d.set_height(h), d.set_width(w), d.set_label(label);
  d.set_data(std::string(px.begin(), px.end()));
  return d.SerializeAsString();
}

void write_db(const fs::path& path, DbBackend b, const std::vector<std::pair<std::string, std::string>>& records) {
  fs::remove_all(path);
  auto w = DbWriter::create(path.string(), b);
  for (auto& [k, v] : records) w->put(k, v);
  w->commit();
}

// A 3-channel image whose pixel (y, x) of channel k is 10k + 3y + x, as CHW bytes in RGB order.
std::vector<uint8_t> rgb_pattern(int h, int w) {
  std::vector<uint8_t> chw(static_cast<size_t>(3 * h * w));
  for (int k = 0; k < 3; ++k)
    for (int y = 0; y < h; ++y)
      for (int x = 0; x < w; ++x)
        chw[static_cast<size_t>((k * h + y) * w + x)] = static_cast<uint8_t>(10 * k + 3 * y + x);
  return chw;
}

TEST(DatumDb, RawRecordsReadInKeyOrderFromBothBackends) {
  for (DbBackend b : {DbBackend::lmdb, DbBackend::leveldb}) {
    fs::path p = tmp(std::string("raw_") + db_backend_name(b));
    // Written out of order: Caffe reads in key order.
    write_db(p, b,
             {{"00000001_b", datum(2, 1, 3, {7, 8, 9, 10, 11, 12}, 4)},
              {"00000000_a", datum(2, 1, 3, {1, 2, 3, 4, 5, 6}, 3)}});
    ASSERT_EQ(detect_db(p.string()), b);
    auto ds = open_dataset(p.string());
    EXPECT_EQ(ds->format, b == DbBackend::lmdb ? "lmdb" : "leveldb");
    ASSERT_EQ(ds->size, 2);
    EXPECT_EQ(ds->fields[0].sample_shape, (Shape{2, 1, 3}));
    EXPECT_EQ(ds->fields[0].u8(0)[5], 6);
    EXPECT_EQ(ds->fields[0].u8(1)[0], 7);
    EXPECT_EQ(ds->fields[1].f32(0)[0], 3.f);
    EXPECT_EQ(ds->fields[1].f32(1)[0], 4.f);
  }
}

TEST(DatumDb, FloatDataAndEncodedImages) {
  proto::Datum f;
  f.set_channels(1), f.set_height(1), f.set_width(2), f.set_label(1);
  f.add_float_data(0.5f), f.add_float_data(-2.f);
  write_db(tmp("float"), DbBackend::lmdb, {{"0", f.SerializeAsString()}});
  auto ds = open_dataset(tmp("float").string());
  ASSERT_EQ(ds->fields[0].dtype, DType::f32);
  EXPECT_EQ(ds->fields[0].f32(0)[1], -2.f);

  // An encoded PNG decodes BGR (blue first), as Caffe's OpenCV decoding gives it.
  std::vector<uint8_t> rgb = rgb_pattern(2, 3);
  proto::Datum e;
  e.set_encoded(true), e.set_label(5);
  e.set_data(encode_image(rgb.data(), 3, 2, 3, false, false));
  write_db(tmp("encoded"), DbBackend::lmdb, {{"0", e.SerializeAsString()}});
  auto enc = open_dataset(tmp("encoded").string());
  ASSERT_EQ(enc->fields[0].sample_shape, (Shape{3, 2, 3}));
  const uint8_t* px = enc->fields[0].u8(0);
  for (int k = 0; k < 3; ++k)
    for (int i = 0; i < 6; ++i) EXPECT_EQ(px[k * 6 + i], rgb[static_cast<size_t>((2 - k) * 6 + i)]) << k << " " << i;
  // force_gray gives one channel; force_color three.
  auto grey = open_dataset(tmp("encoded").string(), ImageChannels{false, true});
  EXPECT_EQ(grey->fields[0].sample_shape, (Shape{1, 2, 3}));
  auto colour = open_dataset(tmp("encoded").string(), ImageChannels{true, false});
  EXPECT_EQ(colour->fields[0].sample_shape, (Shape{3, 2, 3}));
}

TEST(DatumDb, DamagedOrMismatchedRecordsNameTheRecord) {
  write_db(tmp("notdatum"), DbBackend::lmdb, {{"k1", "\xff\xff\xff garbage"}});
  EXPECT_NE(
      test::input_error_of([] { open_dataset(tmp("notdatum").string()); }).find("record 'k1' is not a Caffe Datum"),
      std::string::npos);
  write_db(tmp("short"), DbBackend::lmdb, {{"k1", datum(1, 2, 2, {1, 2, 3}, 0)}});
  EXPECT_NE(test::input_error_of([] { open_dataset(tmp("short").string()); }).find("record 'k1' declares 4 values"),
            std::string::npos);
  write_db(tmp("shapes"), DbBackend::leveldb, {{"a", datum(1, 1, 2, {1, 2}, 0)}, {"b", datum(1, 2, 1, {1, 2}, 0)}});
  EXPECT_NE(test::input_error_of([] { open_dataset(tmp("shapes").string()); }).find("record 'b' has shape (1,2,1)"),
            std::string::npos);
  write_db(tmp("empty"), DbBackend::lmdb, {});
  EXPECT_NE(test::input_error_of([] { open_dataset(tmp("empty").string()); }).find("holds no records"),
            std::string::npos);
  proto::Datum bad;
  bad.set_encoded(true), bad.set_data("not an image");
  write_db(tmp("badimg"), DbBackend::lmdb, {{"x", bad.SerializeAsString()}});
  EXPECT_NE(test::input_error_of([] { open_dataset(tmp("badimg").string()); }).find("record 'x' is not a PNG or JPEG"),
            std::string::npos);
  // A directory that is no database, and a database whose files are damaged.
  fs::create_directories(tmp("plain_dir"));
  EXPECT_NE(test::input_error_of([] { open_dataset(tmp("plain_dir").string()); }).find("neither an LMDB"),
            std::string::npos);
  fs::path broken = tmp("broken");
  write_db(broken, DbBackend::lmdb, {{"a", datum(1, 1, 1, {1}, 0)}});
  { std::ofstream(broken / "data.mdb", std::ios::binary | std::ios::trunc) << std::string(8192, '\x5a'); }
  EXPECT_NE(test::input_error_of([&] { read_datum_db(broken.string(), DbBackend::lmdb, {}); }).find(broken.string()),
            std::string::npos);
}

// Images on disk and a list file: "PATH LABEL" lines under a root folder.
fs::path write_images(const std::string& name, int count, int h, int w) {
  fs::path root = tmp(name);
  fs::remove_all(root);
  fs::create_directories(root / "img");
  std::ofstream list(root / "list.txt");
  for (int i = 0; i < count; ++i) {
    std::vector<uint8_t> px = rgb_pattern(h, w);
    for (auto& v : px) v = static_cast<uint8_t>(v + 20 * i);
    std::string file = fmt::format("img/{} i.png", i);  // a space in the name, as Caffe allows
    std::ofstream(root / file, std::ios::binary) << encode_image(px.data(), 3, h, w, false, false);
    list << file << " " << (i % 3) << "\n";
  }
  return root;
}

TEST(ConvertImageset, RawEncodedResizedGreyAndShuffled) {
  fs::path root = write_images("conv", 5, 4, 6);
  const std::string rootdir = root.string() + "/", list = (root / "list.txt").string();
  ConvertImagesetOptions o;
  fs::remove_all(root / "raw");
  EXPECT_EQ(convert_imageset(rootdir, list, (root / "raw").string(), o, nullptr), 5);
  auto raw = open_dataset((root / "raw").string());
  ASSERT_EQ(raw->fields[0].sample_shape, (Shape{3, 4, 6}));
  std::vector<uint8_t> expect = rgb_pattern(4, 6);
  EXPECT_EQ(raw->fields[0].u8(2)[0], static_cast<uint8_t>(expect[2 * 24] + 40)) << "BGR: blue plane first";
  EXPECT_EQ(raw->fields[1].f32(2)[0], 2.f);

  o.encoded = true;
  o.backend = DbBackend::leveldb;
  EXPECT_EQ(convert_imageset(rootdir, list, (root / "enc").string(), o, nullptr), 5);
  auto enc = open_dataset((root / "enc").string());
  EXPECT_EQ(enc->fields[0].bytes, raw->fields[0].bytes) << "encoded PNGs decode to the raw pixels";

  ConvertImagesetOptions g;
  g.gray = true;
  g.resize_height = 2;
  g.resize_width = 3;
  convert_imageset(rootdir, list, (root / "grey").string(), g, nullptr);
  auto grey = open_dataset((root / "grey").string());
  EXPECT_EQ(grey->fields[0].sample_shape, (Shape{1, 2, 3}));

  ConvertImagesetOptions s;
  s.shuffle = true;
  s.seed = 3;
  convert_imageset(rootdir, list, (root / "shuf").string(), s, nullptr);
  auto shuf = open_dataset((root / "shuf").string());
  std::vector<float> labels(shuf->fields[1].f32(0), shuf->fields[1].f32(0) + 5);
  EXPECT_NE(shuf->fields[0].bytes, raw->fields[0].bytes) << "a different order";
  std::sort(labels.begin(), labels.end());
  EXPECT_EQ(labels, (std::vector<float>{0, 0, 1, 1, 2}));

  // Bad input: an existing database, a missing image, one resize dimension.
  EXPECT_NE(test::input_error_of([&] {
              convert_imageset(rootdir, list, (root / "raw").string(), o, nullptr);
            }).find("already exists"),
            std::string::npos);
  std::ofstream(root / "bad.txt") << "img/missing.png 1\n";
  EXPECT_NE(test::input_error_of([&] {
              convert_imageset(rootdir, (root / "bad.txt").string(), (root / "x").string(), {}, nullptr);
            }).find("missing.png"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(root / "x")) << "no half-written database";
  ConvertImagesetOptions half;
  half.resize_height = 3;
  EXPECT_NE(test::input_error_of([&] {
              convert_imageset(rootdir, list, (root / "y").string(), half, nullptr);
            }).find("together"),
            std::string::npos);
}

TEST(ConvertImageset, ComputeImageMeanIsThePerPixelMean) {
  fs::path p = tmp("meandb");
  write_db(p, DbBackend::lmdb, {{"a", datum(1, 1, 2, {0, 10}, 0)}, {"b", datum(1, 1, 2, {4, 20}, 0)}});
  std::vector<double> m = compute_image_mean(p.string(), tmp("mean.binaryproto").string());
  ASSERT_EQ(m.size(), 1u);
  EXPECT_DOUBLE_EQ(m[0], 8.5);
  proto::BlobProto b;
  read_binary_proto(tmp("mean.binaryproto").string(), b);
  ASSERT_EQ(b.data_size(), 2);
  EXPECT_FLOAT_EQ(b.data(0), 2.f);
  EXPECT_FLOAT_EQ(b.data(1), 15.f);
}

TEST(ConvertImageset, CommandLineWritesADatabaseTheDataLayerReads) {
  fs::path root = write_images("cli", 3, 2, 2);
  fs::remove_all(root / "db");
  auto r = test::run_cmd(fmt::format("convert_imageset --gray --backend lmdb {}/ {} {}", root.string(),
                                     (root / "list.txt").string(), (root / "db").string()));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(open_dataset((root / "db").string())->fields[0].sample_shape, (Shape{1, 2, 2}));
  r = test::run_cmd(fmt::format("convert_imageset --backend rocksdb {}/ {} {}", root.string(),
                                (root / "list.txt").string(), (root / "db2").string()));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--backend rocksdb"), std::string::npos) << r.output;
}

TEST(ImageList, ReadsResizesAndNamesBadLines) {
  fs::path root = write_images("list", 3, 4, 4);
  ImageListOptions o;
  o.root_folder = root.string() + "/";
  auto ds = read_image_list((root / "list.txt").string(), o);
  ASSERT_EQ(ds->size, 3);
  EXPECT_EQ(ds->fields[0].sample_shape, (Shape{3, 4, 4}));
  EXPECT_EQ(ds->fields[1].f32(2)[0], 2.f);
  o.is_color = false;
  o.new_height = 2;
  o.new_width = 8;
  EXPECT_EQ(read_image_list((root / "list.txt").string(), o)->fields[0].sample_shape, (Shape{1, 2, 8}));
  std::ofstream(root / "bad.txt") << "img/0 i.png 1\nno_label_here\n";
  EXPECT_NE(test::input_error_of([&] {
              read_image_list((root / "bad.txt").string(), o);
            }).find("bad.txt:2: expected 'PATH LABEL'"),
            std::string::npos);
  o.root_folder = "/nonexistent/";
  EXPECT_NE(test::input_error_of([&] { read_image_list((root / "list.txt").string(), o); }).find("cannot open image"),
            std::string::npos);
}

// Sets BKS_DATA_CACHE_MB for one scope.
struct CacheLimit {
  explicit CacheLimit(const char* mb) { setenv("BKS_DATA_CACHE_MB", mb, 1); }
  ~CacheLimit() { unsetenv("BKS_DATA_CACHE_MB"); }
};

// Every batch of a loader over `ds`, as floats.
std::vector<std::vector<float>> batches(std::shared_ptr<const Dataset> ds, int64_t steps) {
  TransformOptions t;
  t.crop_size = 3, t.mirror = true, t.scale = 0.5f;
  LoaderOptions o;
  o.batch = 3, o.shuffle = true, o.seed = 7, o.name = "data";
  BatchLoader loader(ds, {0, 1}, Transform(t, ds->fields[0].sample_shape, true, "test"), o);
  std::vector<std::vector<float>> out;
  auto shapes = loader.output_shapes();
  for (int64_t s = 0; s < steps; ++s) {
    Tensor data(shapes[0]), label(shapes[1]);
    loader.load(s, {&data, &label});
    out.emplace_back(data.f32(), data.f32() + data.numel());
    out.back().insert(out.back().end(), label.f32(), label.f32() + label.numel());
  }
  return out;
}

TEST(DatumDb, EncodedImagesBeyondTheCacheAreDecodedAsBatchesAreBuilt) {
  fs::path root = write_images("stream", 7, 4, 5);
  ConvertImagesetOptions o;
  o.encoded = true;
  fs::remove_all(root / "db");
  convert_imageset(root.string() + "/", (root / "list.txt").string(), (root / "db").string(), o, nullptr);
  auto decoded = read_datum_db((root / "db").string(), DbBackend::lmdb, {});
  ASSERT_FALSE(decoded->fields[0].encoded) << "7 small images fit the default cache";
  std::shared_ptr<Dataset> kept;
  {
    CacheLimit none("0");
    kept = read_datum_db((root / "db").string(), DbBackend::lmdb, {});
  }
  ASSERT_TRUE(kept->fields[0].encoded) << "a zero cache keeps the images encoded";
  EXPECT_EQ(kept->fields[0].sample_shape, decoded->fields[0].sample_shape);
  EXPECT_LT(kept->fields[0].bytes.size(), decoded->fields[0].bytes.size() * 2);
  // The same batches (shuffled, cropped, mirrored; 5 steps wrap the 7 samples) either way.
  EXPECT_EQ(batches(kept, 5), batches(decoded, 5));
  std::vector<uint8_t> scratch;
  const uint8_t* six = kept->fields[0].sample_u8(6, scratch, "db");
  EXPECT_EQ(std::vector<uint8_t>(six, six + 60),
            std::vector<uint8_t>(decoded->fields[0].u8(6), decoded->fields[0].u8(6) + 60));
  std::vector<double> mean = compute_image_mean((root / "db").string(), (root / "m0").string());
  {
    CacheLimit none("0");
    fs::remove_all(root / "db2");
    fs::copy(root / "db", root / "db2");
    ASSERT_TRUE(open_dataset((root / "db2").string())->fields[0].encoded);
    EXPECT_EQ(compute_image_mean((root / "db2").string(), (root / "m1").string()), mean);
  }
  CacheLimit bad("lots");
  EXPECT_NE(test::input_error_of([&] {
              read_datum_db((root / "db").string(), DbBackend::lmdb, {});
            }).find("BKS_DATA_CACHE_MB"),
            std::string::npos);
}

TEST(DatumDb, AnImageThatFailsToDecodeInTheLoaderNamesItsRecord) {
  // A PNG cut short after its header: the header reads (the shape is known when the database
  // opens), the pixels do not.
  std::vector<uint8_t> px = rgb_pattern(4, 4);
  std::string png = encode_image(px.data(), 3, 4, 4, false, false);
  proto::Datum good, cut;
  good.set_encoded(true), good.set_data(png);
  cut.set_encoded(true), cut.set_data(png.substr(0, 40));
  write_db(tmp("cutpng"), DbBackend::lmdb,
           {{"a", good.SerializeAsString()}, {"b", good.SerializeAsString()}, {"c", cut.SerializeAsString()}});
  CacheLimit none("0");
  auto ds = read_datum_db(tmp("cutpng").string(), DbBackend::lmdb, {});
  ASSERT_TRUE(ds->fields[0].encoded);
  LoaderOptions o;
  o.batch = 2, o.name = "data";
  BatchLoader loader(ds, {0}, std::nullopt, o);
  Tensor t(loader.output_shapes()[0]);
  loader.load(0, {&t});  // records a, b
  EXPECT_NE(test::input_error_of([&] { loader.load(1, {&t}); }).find("record 'c' cannot be decoded"), std::string::npos)
      << "the background thread's failure reaches the step that needs it";
  EXPECT_NO_THROW(loader.load(3, {&t})) << "records a and b";
}

TEST(ImageDecode, JpegCutShortDecodesItsFirstRowsAsOpenCvDoes) {
  // libjpeg-turbo, as OpenCV decodes for Caffe: a JPEG cut short still decodes, its first
  // rows exactly as in the whole file (stb refused such files).
  std::vector<uint8_t> px(3 * 64 * 48);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<uint8_t>((i * 7) % 251);
  std::string jpg = encode_image(px.data(), 3, 64, 48, false, true);
  ImageDecodeOptions o;
  DecodedImage whole, cut;
  std::string why;
  ASSERT_EQ(decode_image(jpg, o, whole, why), Decoded::ok) << why;
  ASSERT_EQ(decode_image(jpg.substr(0, jpg.size() * 2 / 3), o, cut, why), Decoded::ok) << why;
  ASSERT_EQ(cut.chw.size(), whole.chw.size());
  for (int k = 0; k < 3; ++k)
    for (int i = 0; i < 8 * 48; ++i)  // the first 8 rows of each channel
      ASSERT_EQ(cut.chw[static_cast<size_t>(k * 64 * 48 + i)], whole.chw[static_cast<size_t>(k * 64 * 48 + i)]) << k;
  // Grey: libjpeg's luma, within rounding of the colour decode's BT.601 luma.
  o.channels = 1;
  DecodedImage grey;
  ASSERT_EQ(decode_image(jpg, o, grey, why), Decoded::ok) << why;
  const size_t plane = 64 * 48;
  for (size_t i = 0; i < plane; i += 97) {
    double y = 0.299 * whole.chw[i] + 0.587 * whole.chw[plane + i] + 0.114 * whole.chw[2 * plane + i];
    EXPECT_NEAR(grey.chw[i], y, 12.0) << i;
  }
}

// The PNG with this IDAT payload in place of its own (the CRC left stale: the check comes
// first, and stb does not read it).
std::string with_idat(const std::string& png, const std::string& payload) {
  const size_t at = png.find("IDAT") - 4;
  const uint32_t old = (uint32_t{static_cast<unsigned char>(png[at])} << 24) |
                       (uint32_t{static_cast<unsigned char>(png[at + 1])} << 16) |
                       (uint32_t{static_cast<unsigned char>(png[at + 2])} << 8) |
                       static_cast<unsigned char>(png[at + 3]);
  const uint32_t n = static_cast<uint32_t>(payload.size());
  std::string len = {static_cast<char>(n >> 24), static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                     static_cast<char>(n)};
  return png.substr(0, at) + len + "IDAT" + payload + png.substr(at + 8 + old);
}

TEST(ImageDecode, PngPixelStreamsMustEndAndFitTheImage) {
  // Fuzzing found a 3 x 4 PNG whose broken stream made stb's inflate read zeros past its end
  // and realloc 2 GiB; zlib checks the stream first.
  std::ifstream f(std::string(BKS_SOURCE_DIR) + "/tests/fuzz/corpus/image/regress_png_endless_inflate.png",
                  std::ios::binary);
  const std::string endless((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_GT(endless.size(), 50u);
  ImageDecodeOptions o;
  DecodedImage img;
  std::string why;
  EXPECT_EQ(decode_image(endless, o, img, why), Decoded::not_an_image);
  EXPECT_NE(why.find("PNG pixel data"), std::string::npos) << why;
  // A whole stream that inflates to far more than a 4 x 4 image holds.
  std::vector<uint8_t> px = rgb_pattern(4, 4);
  const std::string png = encode_image(px.data(), 3, 4, 4, false, false);
  ASSERT_EQ(decode_image(png, o, img, why), Decoded::ok) << why;
  std::string zeros(100000, '\0'), packed(compressBound(zeros.size()), '\0');
  uLongf packed_size = packed.size();
  ASSERT_EQ(compress(reinterpret_cast<Bytef*>(packed.data()), &packed_size,
                     reinterpret_cast<const Bytef*>(zeros.data()), zeros.size()),
            Z_OK);
  packed.resize(packed_size);
  EXPECT_EQ(decode_image(with_idat(png, packed), o, img, why), Decoded::not_an_image);
  EXPECT_NE(why.find("inflates past"), std::string::npos) << why;
  // The image's own stream cut short.
  const size_t at = png.find("IDAT") + 4;
  const std::string own = png.substr(at, png.find("IEND") - 8 - at);
  EXPECT_EQ(decode_image(with_idat(png, own.substr(0, own.size() / 2)), o, img, why), Decoded::not_an_image);
  EXPECT_NE(why.find("ends before"), std::string::npos) << why;
}

TEST(ImageDecode, BilinearResizeFollowsOpenCvGeometry) {
  // A 1x2 grey image [0, 200] widened to 4 pixels: OpenCV's INTER_LINEAR gives
  // [0, 50, 150, 200] (source x = (x + 0.5) / 2 - 0.5, clamped).
  std::vector<uint8_t> px = {0, 200};
  std::string png = encode_image(px.data(), 1, 1, 2, false, false);
  ImageDecodeOptions o;
  o.channels = 1, o.height = 1, o.width = 4;
  DecodedImage img;
  std::string why;
  ASSERT_EQ(decode_image(png, o, img, why), Decoded::ok) << why;
  EXPECT_EQ(img.chw, (std::vector<uint8_t>{0, 50, 150, 200}));
}

}  // namespace
}  // namespace bks
