// IDX files (MNIST's format), raw or gzip-compressed: magic 0x0000 <type> <ndims>, big-endian
// dims, then the data. zlib's gz* functions read both compressed and plain files.
#include <zlib.h>

#include <filesystem>

#include "core/error.h"
#include "data/dataset.h"

namespace bks {
namespace {

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;
};

IdxArray read_idx(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) input_error("{}: cannot open IDX file", path);
  auto read_exact = [&](void* dst, size_t n, const char* what) {
    size_t done = 0;
    while (done < n) {
      int r = gzread(f, static_cast<char*>(dst) + done, static_cast<unsigned>(std::min<size_t>(n - done, 1u << 30)));
      if (r <= 0) {
        gzclose(f);
        input_error("{}: corrupt IDX file: truncated while reading {} ({} of {} bytes)", path, what, done, n);
      }
      done += static_cast<size_t>(r);
    }
  };
  uint8_t magic[4];
  read_exact(magic, 4, "the header");
  if (magic[0] != 0 || magic[1] != 0) {
    gzclose(f);
    input_error("{}: not an IDX file (bad magic number)", path);
  }
  if (magic[2] != 0x08) {
    gzclose(f);
    input_error("{}: IDX element type 0x{:02x} is not supported (only unsigned bytes, 0x08)", path, magic[2]);
  }
  int nd = magic[3];
  if (nd < 1 || nd > 4) {
    gzclose(f);
    input_error("{}: corrupt IDX file: {} dimensions", path, nd);
  }
  IdxArray a;
  int64_t total = 1;
  for (int i = 0; i < nd; ++i) {
    uint8_t b[4];
    read_exact(b, 4, "the dimensions");
    int64_t d = (int64_t{b[0]} << 24) | (b[1] << 16) | (b[2] << 8) | b[3];
    if (d <= 0 || d > (1 << 28)) {
      gzclose(f);
      input_error("{}: corrupt IDX file: dimension {} is {}", path, i, d);
    }
    a.dims.push_back(d);
    total *= d;
  }
  a.data.resize(static_cast<size_t>(total));
  read_exact(a.data.data(), a.data.size(), "the data");
  gzclose(f);
  return a;
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
  IdxArray im = read_idx(images);
  if (!std::filesystem::exists(labels))
    input_error("{}: labels file {} not found (expected beside the images file)", images, labels);
  IdxArray lb = read_idx(labels);
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
    // Convert HWC to CHW once, at load.
    auto& b = data.bytes;
    std::vector<uint8_t> chw(b.size());
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
