// A minimal test harness for the C++ unit tests: no framework to fetch, one failure count.
#pragma once

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace stroboscope_test {
inline int& failures() {
  static int n = 0;
  return n;
}
}  // namespace stroboscope_test

#define CHECK(cond)                                                              \
  do {                                                                           \
    if (!(cond)) {                                                               \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++stroboscope_test::failures();                                            \
    }                                                                            \
  } while (0)

#define CHECK_EQ(a, b)                                                                  \
  do {                                                                                  \
    auto va_ = (a);                                                                     \
    auto vb_ = (b);                                                                     \
    if (!(va_ == vb_)) {                                                                \
      std::fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %s (%lld vs %lld)\n", __FILE__, \
                   __LINE__, #a, #b, static_cast<long long>(va_),                        \
                   static_cast<long long>(vb_));                                         \
      ++stroboscope_test::failures();                                                   \
    }                                                                                   \
  } while (0)

#define CHECK_NEAR(a, b, tol)                                                              \
  do {                                                                                     \
    double va_ = (a);                                                                      \
    double vb_ = (b);                                                                      \
    if (!(std::fabs(va_ - vb_) <= (tol))) {                                                \
      std::fprintf(stderr, "%s:%d: CHECK_NEAR failed: %s ~ %s (%.9g vs %.9g, tol %g)\n",    \
                   __FILE__, __LINE__, #a, #b, va_, vb_, static_cast<double>(tol));        \
      ++stroboscope_test::failures();                                                      \
    }                                                                                      \
  } while (0)

#define TEST_MAIN_END()                                                        \
  do {                                                                         \
    if (stroboscope_test::failures() != 0) {                                   \
      std::fprintf(stderr, "%d check(s) failed\n", stroboscope_test::failures()); \
      return 1;                                                                \
    }                                                                          \
    std::printf("all checks passed\n");                                        \
    return 0;                                                                  \
  } while (0)
