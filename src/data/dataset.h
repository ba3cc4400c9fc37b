// Datasets held in memory once and shared by every layer that reads them.
//
// A dataset is a set of named fields with one entry per sample: images stay uint8 (IDX) so a
// cached Fashion-MNIST costs 47 MB, not 188; HDF5 fields are float, or bytes when stored as
// unsigned bytes. The reader is chosen by
// the file's content, not its name.
//
// Readers trust no header for memory: every declared size is checked (overflow included)
// against the bytes the file really holds before anything is allocated, and every failure
// (a corrupt file, a library error, not enough memory) is an InputError naming the file and
// the field.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/file_io.h"
#include "core/tensor.h"
#include "data/caffe_db.h"
#include "data/image_decode.h"

namespace bks {

// Deflate (gzip, HDF5's deflate filter) expands at most about 1032:1: compressed data
// declaring more than this many bytes per stored byte is corrupt or a decompression bomb.
constexpr int64_t kMaxDecompressionRatio = 1032;
// A compressed (filtered) HDF5 field may decode to at most 16 GiB: HDF5's filters other than
// deflate have no such bound, and unwritten chunks read as fill values.
constexpr int64_t kMaxCompressedHdf5FieldBytes = int64_t{16} << 30;

// PNG/JPEG images kept as stored, for a dataset whose decoded pixels would not fit the cache
// (data_cache_bytes): sample i is the field's bytes [offsets[i], offsets[i+1]), decoded under
// `decode` each time a batch needs it (in the loader's threads).
struct EncodedImages {
  std::vector<uint64_t> offsets;   // samples + 1
  std::vector<std::string> names;  // "record 'KEY'" or "image PATH", for errors
  ImageDecodeOptions decode;
};

struct DatasetField {
  std::string name;
  Shape sample_shape;       // shape of one sample, e.g. (1, 28, 28); () for a scalar label
  DType dtype = DType::u8;  // u8 or f32
  std::vector<uint8_t> bytes;
  std::shared_ptr<const EncodedImages> encoded = nullptr;  // null: `bytes` holds the samples themselves
  // Set instead of `bytes` when the samples live in a read-only mapping that the ranks on
  // one host share (data/shared_dataset.h); `mapping` keeps it mapped.
  std::shared_ptr<const void> mapping = nullptr;
  const uint8_t* mapped = nullptr;
  size_t mapped_size = 0;
  int64_t sample_numel() const { return shape_numel(sample_shape); }
  // The field's bytes, wherever they live.
  const uint8_t* data() const { return mapped ? mapped : bytes.data(); }
  size_t byte_size() const { return mapped ? mapped_size : bytes.size(); }
  // The cached samples (not for an encoded field: see sample_u8).
  const uint8_t* u8(int64_t i) const { return data() + i * sample_numel(); }
  const float* f32(int64_t i) const { return reinterpret_cast<const float*>(data()) + i * sample_numel(); }
  // The uint8 pixels of sample i: the cached ones, or decoded into `scratch` (sample_numel
  // bytes) from an encoded field. InputError naming `source` and the sample when an image
  // fails to decode or decodes to another shape.
  const uint8_t* sample_u8(int64_t i, std::vector<uint8_t>& scratch, const std::string& source) const;
};

struct Dataset {
  std::string source;
  std::string format;  // "idx", "hdf5", "lmdb", "leveldb", "image list"
  int64_t size = 0;
  std::vector<DatasetField> fields;
  const DatasetField* field(const std::string& name) const;
};

// How many bytes of decoded samples a dataset may keep in memory: BKS_DATA_CACHE_MB when set,
// otherwise half of this machine's memory. A database of encoded images whose pixels would
// need more is kept encoded and decoded batch by batch.
int64_t data_cache_bytes();
// Decodes one encoded image under `o` into `out` (shape_numel(shape) bytes); false, saying
// why in `why`, when it is not a decodable image or decodes to another shape.
bool decode_sample(std::string_view bytes, const ImageDecodeOptions& o, const Shape& shape, uint8_t* out,
                   std::string& why);

// How encoded images become pixels (Caffe's transform_param.force_color / force_gray;
// neither: each image's own channel count).
struct ImageChannels {
  bool force_color = false, force_gray = false;
};
// Opens (or returns the cached) dataset for a Data layer's `source`: an IDX images file
// (raw or gzip) with its labels file beside it, an HDF5 file with 'data' and 'label', or an
// LMDB/LevelDB directory of Datum records (open_datum_db).
std::shared_ptr<const Dataset> open_dataset(const std::string& source, const ImageChannels& channels = {});

// The cache above holds datasets only while something else does. While a DatasetPin lives,
// every dataset opened stays loaded: a graph pass that infers shapes (reading the data)
// before the nets that hold the data are built then costs no second read.
class DatasetPin {
 public:
  DatasetPin();
  ~DatasetPin();
  DatasetPin(const DatasetPin&) = delete;
  DatasetPin& operator=(const DatasetPin&) = delete;
};
// Opens the HDF5 files listed (one per line) in a text file, as Caffe's HDF5Data does, and
// concatenates them. Only the named fields are read.
std::shared_ptr<const Dataset> open_hdf5_list(const std::string& list_file, const std::vector<std::string>& fields);

// Opens (or returns the cached) LMDB or LevelDB database of Caffe Datum records: raw pixels,
// float_data or encoded PNG/JPEG images (BGR as Caffe's OpenCV decodes them; decoded once on
// all cores when the pixels fit data_cache_bytes(), otherwise kept encoded).
std::shared_ptr<const Dataset> open_datum_db(const std::string& path, const ImageChannels& channels);

// ImageData's list file: one "PATH LABEL" per line, paths under `root_folder`.
struct ImageListOptions {
  std::string root_folder;
  bool is_color = true;
  int64_t new_height = 0, new_width = 0;  // 0 and 0: each image's own size
};
std::shared_ptr<const Dataset> open_image_list(const std::string& list_file, const ImageListOptions& opt);
// The (path, label) pairs of such a list, split at each line's last space as Caffe does (so
// paths may hold spaces); InputError naming the file and line of a malformed one.
std::vector<std::pair<std::string, int>> read_image_list_file(const std::string& list_file);

// Readers, exposed for tests.
std::shared_ptr<Dataset> read_idx_pair(const std::string& images, const std::string& labels);
std::shared_ptr<Dataset> read_datum_db(const std::string& path, DbBackend backend, const ImageChannels& channels);
std::shared_ptr<Dataset> read_image_list(const std::string& list_file, const ImageListOptions& opt);
std::shared_ptr<Dataset> read_hdf5(const std::string& path, const std::vector<std::string>& fields);
// Writes `samples` samples of each field (u8 or f32) as one HDF5 dataset each, atomically
// (a temporary file renamed into place).
void write_hdf5(const std::string& path, const std::vector<DatasetField>& fields, int64_t samples);
// Where the labels of an IDX images file live ("...images-idx3..." -> "...labels-idx1...").
std::string idx_labels_path(const std::string& images);

}  // namespace bks
