// The message of the InputError a call throws, for tests of bad input (the call is expected
// to refuse it; "" when it throws none, which no expected message matches).
#pragma once

#include <string>

#include "core/error.h"

namespace bks::test {

template <class F>
std::string input_error_of(F&& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace bks::test
