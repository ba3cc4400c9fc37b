// An HDF5 file as HDF5Data layers and packed dashboard datasets read it ('data' and
// 'label'), written to one fixed file per process. libhdf5 runs in a forked child as in
// bakusoku, unless BKS_FUZZ_HDF5_IN_PROCESS (fuzz_hdf5_in_process.cc) is defined.
#include "core/isolated_call.h"
#include "data/dataset.h"
#include "fuzz_util.h"

#ifdef BKS_FUZZ_HDF5_IN_PROCESS
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  bks::run_isolated_calls_in_process(true);
  return 0;
}
#endif

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace bks;
  std::string path = fuzz::write_scratch("data.h5", data, size);
  fuzz::expect_input_errors([&] {
    if (detect_file_kind(path) != FileKind::hdf5) return;  // open_dataset refuses it before HDF5 sees it
    read_hdf5(path, {"data", "label"});
  });
  return 0;
}
