// The global log of a process whose in-process recorder owns the events directory
// (keep_in_memory): its own events stay in memory although $STROBOSCOPE_EVENTS_DIR is set, and a
// child forked from it switches to a file of its own there at its first event.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "check.hpp"
#include "stroboscope/events.hpp"
#include "stroboscope/shared_events.hpp"

using stroboscope::EventKind;
using stroboscope::EventLog;

namespace {

void test_parent_in_memory_child_in_a_file() {
  EventLog& log = EventLog::global();
  char dir[] = "strobo-fork-XXXXXX";  // in the working directory
  CHECK(mkdtemp(dir) != nullptr);
  log.keep_in_memory(true);
  CHECK_EQ(setenv(stroboscope::kEventsDirEnv, dir, 1), 0);
  log.push(EventKind::kBegin, 1, 0, 0, 1);  // the first event: mapped in memory
  CHECK(log.file_path().empty());
  const std::uint64_t base = log.written();
  const pid_t child = fork();
  if (child == 0) {
    int bad = 0;
    log.push(EventKind::kBegin, 2, 0, 0, 1);
    const std::string path = log.file_path();
    const std::string want = std::string(dir) + "/" + std::to_string(getpid()) + ".py.sev";
    if (path != want) bad |= 1;
    if (log.written() != base + 1) bad |= 2;  // the counter goes on from the parent's
    if (log.read(base, base + 1).columns.size() != 1) bad |= 4;  // the child's event, in its file
    _exit(bad);
  }
  int status = 0;
  CHECK_EQ(waitpid(child, &status, 0), child);
  CHECK(WIFEXITED(status));
  CHECK_EQ(WEXITSTATUS(status), 0);
  log.push(EventKind::kEnd, 1, 0, 0, 1);
  CHECK(log.file_path().empty());  // the parent's stay in memory
  CHECK(access((std::string(dir) + "/" + std::to_string(getpid()) + ".py.sev").c_str(), F_OK) != 0);
  CHECK(access((std::string(dir) + "/" + std::to_string(child) + ".py.sev").c_str(), F_OK) == 0);
  unlink((std::string(dir) + "/" + std::to_string(child) + ".py.sev").c_str());
  rmdir(dir);
  unsetenv(stroboscope::kEventsDirEnv);
  log.keep_in_memory(false);
}

}  // namespace

int main() {
  test_parent_in_memory_child_in_a_file();  // one thread: fork is safe
  TEST_MAIN_END();
}
