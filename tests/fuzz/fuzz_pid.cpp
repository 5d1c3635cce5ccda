// libFuzzer harness: /proc/<pid>/{stat,statm,status,io}; every parser sees every input.
#include "fuzz_check.hpp"
#include "stroboscope/procfs.hpp"

using namespace stroboscope::procfs;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = as_text(data, size);
  PidStat st;
  if (parse_pid_stat(text, &st)) {
    // comm is a view into the input, between the first '(' and the last ')'.
    FUZZ_CHECK(st.comm.data() >= text.data() &&
               st.comm.data() + st.comm.size() <= text.data() + text.size());
  }
  PidStatm sm;
  (void)parse_pid_statm(text, &sm);
  PidStatus s = parse_pid_status(text);
  for (std::int64_t v : {s.ppid, s.threads, s.voluntary_ctxt, s.nonvoluntary_ctxt}) {
    FUZZ_CHECK(v == kMissing || v >= 0);
  }
  PidIo io = parse_pid_io(text);
  for (std::int64_t v : {io.rchar, io.wchar, io.read_bytes, io.write_bytes}) {
    FUZZ_CHECK(v == kMissing || v >= 0);
  }
  return 0;
}
