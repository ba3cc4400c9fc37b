// A shared dataset copy in /dev/shm (data/shared_dataset.cc) as another rank of the job left
// it: the bytes become the file that open_shared_dataset finds for its key. Whatever it
// then returns (the mapped copy, or the dataset loaded afresh when the copy is not trusted)
// must be whole: every sample of every field readable where the consumers read it.
#include <fmt/format.h>

#include <cstdlib>

#include "core/rng.h"
#include "data/shared_dataset.h"
#include "fuzz_util.h"

namespace {

// What the rank would have read from the source itself: 3 samples of 2x2 u8 pixels and a
// float label.
std::shared_ptr<const bks::Dataset> load_afresh() {
  auto ds = std::make_shared<bks::Dataset>();
  ds->source = "fuzz";
  ds->format = "idx";
  ds->size = 3;
  bks::DatasetField pixels{"data", {1, 2, 2}, bks::DType::u8, std::vector<uint8_t>(12, 7)};
  bks::DatasetField labels{"label", {}, bks::DType::f32, std::vector<uint8_t>(12, 0)};
  ds->fields = {pixels, labels};
  return ds;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bks;
  static const bool once = [] {
    share_datasets_between_processes("fuzz", fuzz::scratch_dir());
    return true;
  }();
  (void)once;
  const std::string key = "fuzz-key";
  fuzz::write_scratch(fmt::format("bakusoku-fuzz-{:016x}", fnv1a(key)), data, size);
  fuzz::expect_input_errors([&] {
    std::shared_ptr<const Dataset> ds = open_shared_dataset(key, load_afresh);
    if (!ds || ds->fields.empty() || ds->size < 0) std::abort();
    double sum = 0;
    for (const DatasetField& f : ds->fields) {
      const int64_t numel = f.sample_numel();
      if (numel < 1 || static_cast<size_t>(numel * ds->size) * dtype_size(f.dtype) != f.byte_size()) std::abort();
      for (int64_t i = 0; i < ds->size; ++i)
        for (int64_t j = 0; j < numel; ++j) sum += f.dtype == DType::f32 ? f.f32(i)[j] : f.u8(i)[j];
    }
    if (sum < -1e300) std::abort();  // keeps the reads
  });
  remove_shared_dataset_files();  // the copy this run wrote, and its list
  return 0;
}
