// cgroup limits are re-read once a second (by the tick time), usage on every read: a limit
// changed on disk shows on the first read a second or more after the previous limit read; the
// rows in between carry null limit cells and their % columns use the limit last read.
#include "source_fixture.hpp"


namespace {

void test_limits_reread_once_a_second() {
  Tree t;
  // v2: ctr's cpu.max is 1.5 cores; memory.max comes from its parent pod1 (1 GiB).
  auto src = make_source("cgroup", cgroup_opts(t, "cgroup_v2", 4242, "v2"));
  Row r(*src);
  r.read(*src, kT0);
  CHECK_NEAR(r.f64("cgroup.cpu_limit_cores"), 1.5, 1e-12);
  CHECK_EQ(r.i64("cgroup.mem_limit_bytes"), 1073741824);
  // The limits change; usage advances (+600000 µs CPU, memory 512 MiB).
  Tree::write(t.path("cgroup/v2/kubepods/pod1/ctr/cpu.max"), "300000 100000\n");
  Tree::write(t.path("cgroup/v2/kubepods/pod1/memory.max"), "2147483648\n");
  t.advance("cgroup/v2");
  r.read(*src, kT1);  // 0.5 s later: usage read, limits not
  CHECK(src->reason() == nullptr);
  CHECK(r.null("cgroup.cpu_limit_cores"));
  CHECK(r.null("cgroup.mem_limit_bytes"));
  CHECK_NEAR(r.f64("cgroup.cpu_used_cores"), 1.2, 1e-9);
  CHECK_NEAR(r.f64("cgroup.cpu_util_pct"), 80.0, 1e-9);  // 1.2 / the 1.5 read at kT0
  CHECK_EQ(r.i64("cgroup.mem_used_bytes"), 536870912);
  CHECK_NEAR(r.f64("cgroup.mem_util_pct"), 50.0, 1e-9);  // of the 1 GiB read at kT0
  r.read(*src, kT0 + 1'000'000'000);  // a second after the first limit read: re-read
  CHECK_NEAR(r.f64("cgroup.cpu_limit_cores"), 3.0, 1e-12);
  CHECK_EQ(r.i64("cgroup.mem_limit_bytes"), 2147483648LL);
  CHECK_NEAR(r.f64("cgroup.cpu_util_pct"), 0.0, 1e-9);  // usage did not move since kT1
  CHECK_NEAR(r.f64("cgroup.mem_util_pct"), 25.0, 1e-9);  // 512 MiB of 2 GiB
  // A limit file that cannot be parsed: the reason stays until the limit is read again.
  Tree::write(t.path("cgroup/v2/kubepods/pod1/ctr/cpu.max"), "garbage\n");
  r.read(*src, kT0 + 2'000'000'000);
  CHECK(reason_is(*src, "cannot read the cgroup cpu limit"));
  CHECK(r.null("cgroup.cpu_limit_cores"));
  r.read(*src, kT0 + 2'500'000'000);
  CHECK(reason_is(*src, "cannot read the cgroup cpu limit"));
  CHECK(!r.null("cgroup.mem_used_bytes"));
  Tree::write(t.path("cgroup/v2/kubepods/pod1/ctr/cpu.max"), "max 100000\n");
  r.read(*src, kT0 + 3'000'000'000);
  CHECK(src->reason() == nullptr);
  CHECK(r.null("cgroup.cpu_limit_cores"));  // no quota now
}

}  // namespace

int main() {
  test_limits_reread_once_a_second();
  TEST_MAIN_END();
}
