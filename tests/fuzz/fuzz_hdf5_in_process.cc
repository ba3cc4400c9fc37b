// fuzz_hdf5 with libhdf5 in the fuzzer's own process, so that libFuzzer sees the coverage
// of our reading code (which runs in the forked child otherwise; libhdf5 itself is not
// instrumented) at thousands of inputs a second; scripts/fuzz.sh replays its findings
// through fuzz_hdf5, where libhdf5's crashes are contained (tests/fuzz/CMakeLists.txt).
#define BKS_FUZZ_HDF5_IN_PROCESS 1
#include "fuzz_hdf5.cc"
