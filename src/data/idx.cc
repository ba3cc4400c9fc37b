// IDX files (MNIST's format), raw or gzip-compressed: magic 0x0000 <type> <ndims>, big-endian
// dims, then the data. zlib's gz* functions read both compressed and plain files.
//
// The header is never trusted for memory: the bytes it declares are checked against the
// file's size (raw) or the most a gzip file of that size can decompress to, and compressed
// data is read in steps, so memory grows only with bytes that really arrive.
#include <zlib.h>

#include <filesystem>
#include <memory>
#include <new>

#include "core/error.h"
#include "data/dataset.h"

namespace bks {
namespace {

// Compressed data is read this many bytes at a time.
constexpr size_t kGzipStep = size_t{64} << 20;

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};

struct GzClose {
  void operator()(gzFile_s* f) const { gzclose(f); }
};

IdxArray read_idx(const std::string& path) {
  std::error_code ec;
  const auto file_bytes = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  if (ec) input_error("{}: cannot open IDX file ({})", path, ec.message());
  std::unique_ptr<gzFile_s, GzClose> f(gzopen(path.c_str(), "rb"));
  if (!f) input_error("{}: cannot open IDX file", path);
  auto read_exact = [&](void* dst, size_t n, size_t done_before, size_t total, const char* what) {
    size_t done = 0;
    while (done < n) {
      int r =
          gzread(f.get(), static_cast<char*>(dst) + done, static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30)));
      if (r <= 0)
        input_error("{}: corrupt IDX file: truncated while reading {} ({} of {} bytes)", path, what, done_before + done,
                    total);
      done += static_cast<size_t>(r);
    }
  };
  uint8_t magic[4];
  read_exact(magic, 4, 0, 4, "the header");
  if (magic[0] != 0 || magic[1] != 0) input_error("{}: not an IDX file (bad magic number)", path);
  if (magic[2] != 0x08)
    input_error("{}: IDX element type 0x{:02x} is not supported (only unsigned bytes, 0x08)", path, magic[2]);
  const int nd = magic[3];
  if (nd < 1 || nd > 4) input_error("{}: corrupt IDX file: {} dimensions", path, nd);
  IdxArray a;
  for (int i = 0; i < nd; ++i) {
    uint8_t b[4];
    read_exact(b, 4, 0, 4, "the dimensions");
    const int64_t d = (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | int64_t{b[3]};
    if (d <= 0) input_error("{}: corrupt IDX file: dimension {} is {}", path, i, d);
    a.dims.push_back(d);
  }
  const int64_t header = 4 + 4 * int64_t{nd};
  const bool compressed = !gzdirect(f.get());
  // What the file can hold at most: its own bytes, or what they can decompress to.
  int64_t can_hold = file_bytes - header;
  if (compressed && __builtin_mul_overflow(file_bytes, kMaxDecompressionRatio, &can_hold)) can_hold = INT64_MAX;
  int64_t total = 0;
  if (!checked_product(a.dims, kMaxTensorBytes, total))
    input_error("{}: corrupt IDX file: dimensions {} declare more than {} GiB of data", path, shape_str(a.dims),
                kMaxTensorBytes >> 30);
  if (total > can_hold) {
    if (compressed)
      input_error(
          "{}: corrupt IDX file: dimensions {} declare {} bytes of data, more than {} compressed bytes can hold", path,
          shape_str(a.dims), total, file_bytes);
    input_error("{}: corrupt IDX file: truncated: dimensions {} declare {} bytes of data but the file has only {}",
                path, shape_str(a.dims), total, can_hold);
  }
  const auto n = static_cast<size_t>(total);
  if (!compressed) {
    a.data.resize(n);
    read_exact(a.data.data(), n, 0, n, "the data");
  } else {
    // In steps: a header that lies allocates at most one step more than the data there is.
    for (size_t done = 0; done < n;) {
      const size_t step = std::min(kGzipStep, n - done);
      a.data.resize(done + step);
      read_exact(a.data.data() + done, step, done, n, "the data");
      done += step;
    }
  }
  return a;
}

// read_idx, with running out of memory said as one line naming the file.
IdxArray read_idx_file(const std::string& path) {
  try {
    return read_idx(path);
  } catch (const std::bad_alloc&) {
    input_error("{}: not enough memory to load this IDX file", path);
  }
}

}  // namespace

std::string idx_labels_path(const std::string& images) {
  std::string p = images;
  auto swap = [&](const std::string& from, const std::string& to) {
    auto pos = p.rfind(from);
    if (pos != std::string::npos) p.replace(pos, from.size(), to);
  };
  swap("images", "labels");
  swap("idx3", "idx1");
  return p;
}

std::shared_ptr<Dataset> read_idx_pair(const std::string& images, const std::string& labels) {
  IdxArray im = read_idx_file(images);
  if (!std::filesystem::exists(labels))
    input_error("{}: labels file {} not found (expected beside the images file)", images, labels);
  IdxArray lb = read_idx_file(labels);
  if (lb.dims.size() != 1) input_error("{}: a labels file must be 1-d, got {} dims", labels, lb.dims.size());
  if (lb.dims[0] != im.dims[0])
    input_error("{}: {} images but {} has {} labels", images, im.dims[0], labels, lb.dims[0]);
  auto ds = std::make_shared<Dataset>();
  ds->source = images;
  ds->format = "idx";
  ds->size = im.dims[0];
  DatasetField data{"data", {}, DType::u8, std::move(im.data)};
  // (N, H, W) is one channel; (N, H, W, C) is channels-last colour, stored as the file has it.
  if (im.dims.size() == 3)
    data.sample_shape = {1, im.dims[1], im.dims[2]};
  else if (im.dims.size() == 2)
    data.sample_shape = {im.dims[1], 1, 1};
  else if (im.dims.size() == 4)
    data.sample_shape = {im.dims[3], im.dims[1], im.dims[2]};
  else
    input_error("{}: IDX images need 2 to 4 dims", images);
  if (im.dims.size() == 4) {
    // Convert HWC to CHW once, at load (the dimensions' product is the data's size, checked
    // when it was read).
    auto& b = data.bytes;
    std::vector<uint8_t> chw;
    try {
      chw.resize(b.size());
    } catch (const std::bad_alloc&) {
      input_error("{}: not enough memory to reorder these images to channels-first", images);
    }
    int64_t h = im.dims[1], w = im.dims[2], c = im.dims[3];
    for (int64_t n = 0; n < ds->size; ++n)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x)
          for (int64_t k = 0; k < c; ++k) chw[((n * c + k) * h + y) * w + x] = b[((n * h + y) * w + x) * c + k];
    b.swap(chw);
  }
  DatasetField label{"label", {}, DType::u8, std::move(lb.data)};
  ds->fields.push_back(std::move(data));
  ds->fields.push_back(std::move(label));
  return ds;
}

}  // namespace bks
