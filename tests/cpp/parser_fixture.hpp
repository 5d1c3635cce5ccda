// Helpers of the parser tests (test_parsers_*.cpp): a recorded file of tests/data read whole
// (see its README), a missing one counted as a failure.
#pragma once

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "check.hpp"

namespace {

std::string slurp(const std::string& rel) {
  std::string path = std::string(STROBOSCOPE_TEST_DATA) + "/" + rel;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "missing fixture %s\n", path.c_str());
    ++stroboscope_test::failures();
    return {};
  }
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace
