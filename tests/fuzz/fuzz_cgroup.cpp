// libFuzzer harness: the cgroup parsers (/proc/<pid>/cgroup membership, cpu.max, single-number
// files, memory limits, keyed files); every parser sees every input.
#include "fuzz_check.hpp"
#include "stroboscope/procfs.hpp"

using namespace stroboscope::procfs;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = as_text(data, size);
  std::vector<CgroupMembership> lines = parse_proc_cgroup(text);
  for (const char* c : {"memory", "cpu", "cpuacct"}) {
    const CgroupMembership* m = find_v1_controller(lines, c);
    FUZZ_CHECK(m == nullptr || m->hierarchy_id != 0);
  }
  const CgroupMembership* v2 = find_v2(lines);
  FUZZ_CHECK(v2 == nullptr || (v2->hierarchy_id == 0 && v2->controllers.empty()));
  CpuMax cm;
  if (parse_cpu_max(text, &cm)) FUZZ_CHECK(cm.period_us > 0 && (!cm.has_quota || cm.quota_us > 0));
  std::int64_t v = 0;
  (void)parse_single_i64(text, &v);
  std::int64_t limit = 0;
  if (parse_memory_limit(text, &limit)) FUZZ_CHECK(limit == kMissing || limit >= 0);
  (void)find_keyed_i64(text, "usage_usec");
  return 0;
}
