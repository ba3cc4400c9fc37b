// Caffe's convert_imageset and compute_image_mean tools: a list of image files with labels
// into an LMDB/LevelDB database of Datum records, and the per-pixel mean of such a database.
#pragma once

#include <functional>
#include <string>

#include "data/caffe_db.h"

namespace bks {

struct ConvertImagesetOptions {
  bool gray = false;     // decode as one grey channel (else colour, BGR)
  bool shuffle = false;  // records in a random order (seeded: the same order every time)
  uint64_t seed = 0;
  DbBackend backend = DbBackend::lmdb;
  int resize_height = 0, resize_width = 0;  // 0 and 0: keep each image's size
  bool check_size = false;                  // every image must have the first one's size
  bool encoded = false;                     // store PNG/JPEG files instead of pixels
  std::string encode_type;                  // "png" or "jpg" when re-encoding; empty: the file's own
};

// Reads `list_file` ("PATH LABEL" per line, PATH under `root`) and writes database `db`, which
// must not exist. The database appears only when complete (built beside it, then renamed).
// `progress(done, total)` is called every 1000 images. Returns the number of records.
int64_t convert_imageset(const std::string& root, const std::string& list_file, const std::string& db,
                         const ConvertImagesetOptions& o, const std::function<void(int64_t, int64_t)>& progress);

// The mean of every sample of a Datum database, as Caffe's BlobProto (1, C, H, W), written
// atomically to `out`. Returns the per-channel means.
std::vector<double> compute_image_mean(const std::string& db, const std::string& out);

}  // namespace bks
