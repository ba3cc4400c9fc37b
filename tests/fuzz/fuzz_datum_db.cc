// Caffe databases as a Data layer reads them (data/image_dataset.cc through data/caffe_db.cc).
// The first byte chooses what the rest is: an odd byte, the bytes of an LMDB data.mdb file
// (liblmdb parses it in a forked child); an even one, up to four Datum records (split at
// 0xfe 0xfe) written into a fresh LMDB, so the record checks and the image decoding see them.
#include <filesystem>
#include <string_view>

#include "data/caffe_db.h"
#include "data/dataset.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bks;
  namespace fs = std::filesystem;
  if (size < 1) return 0;
  const fs::path db = fs::path(fuzz::scratch_dir()) / "db";
  fs::remove_all(db);
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  if (data[0] & 1) {
    fs::create_directories(db);
    fuzz::write_scratch("db/data.mdb", data + 1, size - 1);
  } else {
    auto w = DbWriter::create(db.string(), DbBackend::lmdb);
    for (int k = 0; k < 4 && !rest.empty(); ++k) {
      size_t cut = rest.find("\xfe\xfe");
      std::string_view record = rest.substr(0, cut);
      w->put("key" + std::to_string(k), record);
      rest = cut == std::string_view::npos ? std::string_view() : rest.substr(cut + 2);
    }
    w->commit();
  }
  fuzz::expect_input_errors([&] { read_datum_db(db.string(), DbBackend::lmdb, {}); });
  return 0;
}
