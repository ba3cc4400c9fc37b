// What every libFuzzer harness shares: the outcome rules and the temporary files.
//
// An InputError (or the server's ApiError) is the expected answer to bad bytes. Anything
// else escaping the entry point (another exception type, a crash, a sanitizer report) is a
// finding, so it aborts with the exception's type and message for libFuzzer to record.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace bks::fuzz {

// Runs `body`; returns normally when it succeeds or throws InputError/ApiError, aborts on
// any other exception. BKS_FUZZ_VERBOSE=1 prints the expected errors too (to see how far
// the seeds get).
void expect_input_errors(const std::function<void()>& body);

// A per-process scratch directory under /tmp (created on first use, removed at exit), so
// harnesses running side by side never share a file.
const std::string& scratch_dir();
// Writes the bytes to scratch_dir()/name (the same file on every run) and returns its path.
std::string write_scratch(const std::string& name, const uint8_t* data, size_t size);
std::string write_scratch(const std::string& name, const std::string& bytes);

}  // namespace bks::fuzz
