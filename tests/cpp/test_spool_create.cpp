// create_spool: exclusive creation (a second creator gets EEXIST and the first file is untouched),
// an flock held for the life of the storage, and no file left behind when the creation fails.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.hpp"
#include "stroboscope/spool.hpp"

namespace {

using stroboscope::ColumnSpec;
using stroboscope::SpoolCreateError;

std::vector<ColumnSpec> columns() {
  return {ColumnSpec{"mono_ns", "ns", stroboscope::DType::kInt64, stroboscope::Kind::kGauge, ""},
          ColumnSpec{"x", "1", stroboscope::DType::kFloat64, stroboscope::Kind::kGauge, ""}};
}

std::string temp_dir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base != nullptr && *base != '\0' ? base : "/tmp") +
                     "/stroboscope-spool-test-XXXXXX";
  const char* dir = ::mkdtemp(tmpl.data());
  CHECK(dir != nullptr);
  return tmpl;
}

// Whether another open file description can take a shared lock on `path` right now.
bool lockable(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::flock(fd, LOCK_SH | LOCK_NB) == 0;
  ::close(fd);
  return ok;
}

void test_second_creator_is_refused_and_the_lock_lives_with_the_storage() {
  const std::string dir = temp_dir();
  const std::string path = dir + "/run.spool";
  stroboscope::RingStorage first =
      stroboscope::create_spool(path, columns(), 64, stroboscope::SpoolInfo{1, 1000});
  first.head->store(7);
  CHECK(!lockable(path));  // a live spool is locked
  int err = 0;
  std::string message;
  try {
    auto second = stroboscope::create_spool(path, columns(), 64, stroboscope::SpoolInfo{1, 1000});
    second.release();
  } catch (const SpoolCreateError& e) {
    err = e.code().value();
    message = e.what();
    CHECK(e.path() == path);
  }
  CHECK_EQ(err, EEXIST);
  CHECK(message.find(path) != std::string::npos);
  CHECK_EQ(first.head->load(), 7u);  // the first spool's mapping and file are untouched
  struct stat st {};
  CHECK(::stat(path.c_str(), &st) == 0 && st.st_size > 4096);
  first.release();
  CHECK(lockable(path));  // the lock went with the storage
  ::unlink(path.c_str());
  ::rmdir(dir.c_str());
}

void test_a_failed_reservation_removes_the_file_it_created() {
  const std::string dir = temp_dir();
  const std::string path = dir + "/big.spool";
  std::signal(SIGXFSZ, SIG_IGN);  // EFBIG instead of a signal past the limit
  struct rlimit old {};
  ::getrlimit(RLIMIT_FSIZE, &old);
  struct rlimit small = old;
  small.rlim_cur = 4096;
  ::setrlimit(RLIMIT_FSIZE, &small);
  int err = 0;
  try {
    auto s = stroboscope::create_spool(path, columns(), 4096, stroboscope::SpoolInfo{1, 1000});
    s.release();
  } catch (const SpoolCreateError& e) {
    err = e.code().value();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  CHECK_EQ(err, EFBIG);
  struct stat st {};
  CHECK(::lstat(path.c_str(), &st) != 0 && errno == ENOENT);
  ::rmdir(dir.c_str());
}

// 2 columns x 2^63 rows: the file size wraps around size_t. Refused before the file is made.
void test_a_size_that_overflows_is_refused_before_the_file_exists() {
  const std::string dir = temp_dir();
  const std::string path = dir + "/huge.spool";
  bool refused = false;
  try {
    auto s = stroboscope::create_spool(path, columns(), std::uint64_t{1} << 63,
                                       stroboscope::SpoolInfo{1, 1000});
    s.release();
  } catch (const std::length_error&) {
    refused = true;
  }
  CHECK(refused);
  struct stat st {};
  CHECK(::lstat(path.c_str(), &st) != 0 && errno == ENOENT);
  ::rmdir(dir.c_str());
}

}  // namespace

int main() {
  test_a_size_that_overflows_is_refused_before_the_file_exists();
  test_second_creator_is_refused_and_the_lock_lives_with_the_storage();
  test_a_failed_reservation_removes_the_file_it_created();
  TEST_MAIN_END();
}
