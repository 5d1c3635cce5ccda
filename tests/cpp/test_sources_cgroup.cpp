// Source tests for cgroup: the source on recorded v1 and v2 hierarchies (a temp copy of
// tests/data) with every cell checked against hand-computed numbers, and the discovery of the
// cgroup files on its own (which paths the source is given, the tightest-limit rule).
#include <cerrno>
#include <string>
#include <vector>

#include "check.hpp"
#include "stroboscope/cgroup.hpp"
#include "stroboscope/linux_sources.hpp"
#include "stroboscope/registry.hpp"

#include "source_fixture.hpp"

namespace {

// ---- cgroup -------------------------------------------------------------------------------------

void test_cgroup() {
  Tree t;
  // v2: ctr has cpu.max 1.5 cores (its parent allows 2), memory.max "max" under a 1 GiB parent.
  SourceOptions v2 = cgroup_opts(t, "cgroup_v2", 4242, "v2");
  CHECK(cgroup_limits_exist(v2));
  auto src = make_source("cgroup", v2);
  Row r(*src);
  r.read(*src, kT0);
  CHECK(src->reason() == nullptr);
  CHECK_NEAR(r.f64("cgroup.cpu_limit_cores"), 1.5, 1e-12);
  CHECK(r.null("cgroup.cpu_used_cores"));
  CHECK(r.null("cgroup.cpu_util_pct"));
  CHECK_EQ(r.i64("cgroup.mem_limit_bytes"), 1073741824);
  CHECK_EQ(r.i64("cgroup.mem_used_bytes"), 268435456);
  CHECK_NEAR(r.f64("cgroup.mem_util_pct"), 25.0, 1e-9);
  t.advance("cgroup/v2");
  r.read(*src, kT1);
  CHECK_NEAR(r.f64("cgroup.cpu_used_cores"), 1.2, 1e-9);  // +600000 µs in 0.5 s
  CHECK_NEAR(r.f64("cgroup.cpu_util_pct"), 80.0, 1e-9);   // 1.2 / 1.5
  CHECK_EQ(r.i64("cgroup.mem_used_bytes"), 536870912);
  CHECK_NEAR(r.f64("cgroup.mem_util_pct"), 50.0, 1e-9);

  // v1, "cpu,cpuacct" mounted together: abc's quota is 50000/100000 but its parent's 25000/100000
  // is tighter; the memory limit is also the parent's (abc says "unlimited").
  SourceOptions v1 = cgroup_opts(t, "cgroup_v1", 4243, "v1");
  CHECK(cgroup_limits_exist(v1));
  auto s1 = make_source("cgroup", v1);
  Row r1(*s1);
  r1.read(*s1, kT0);
  CHECK_NEAR(r1.f64("cgroup.cpu_limit_cores"), 0.25, 1e-12);
  CHECK(r1.null("cgroup.cpu_used_cores"));
  CHECK_EQ(r1.i64("cgroup.mem_limit_bytes"), 536870912);
  CHECK_EQ(r1.i64("cgroup.mem_used_bytes"), 134217728);
  CHECK_NEAR(r1.f64("cgroup.mem_util_pct"), 25.0, 1e-9);
  t.advance("cgroup/v1");
  r1.read(*s1, kT1);
  CHECK_NEAR(r1.f64("cgroup.cpu_used_cores"), 0.2, 1e-9);  // +0.1e9 ns in 0.5 s
  CHECK_NEAR(r1.f64("cgroup.cpu_util_pct"), 80.0, 1e-9);   // 0.2 / 0.25
  CHECK(s1->reason() == nullptr);

  // Recorded on the dev machine: v1 with separate cpu and cpuacct mounts, no limits anywhere.
  SourceOptions rec = cgroup_opts(t, "basic", 6767, "basic");
  CHECK(!cgroup_limits_exist(rec));
  auto s2 = make_source("cgroup", rec);
  Row r2(*s2);
  r2.read(*s2, kT0);
  r2.read(*s2, kT1);
  CHECK(s2->reason() == nullptr);
  CHECK(r2.null("cgroup.cpu_limit_cores"));
  CHECK_NEAR(r2.f64("cgroup.cpu_used_cores"), 0.0, 1e-12);  // cpuacct.usage did not move
  CHECK(r2.null("cgroup.cpu_util_pct"));
  CHECK(r2.null("cgroup.mem_limit_bytes"));
  CHECK_EQ(r2.i64("cgroup.mem_used_bytes"), 26427392);
  CHECK(r2.null("cgroup.mem_util_pct"));

  // Container namespace: the listed path is absent under the mount, so the mount root is used.
  SourceOptions ns = cgroup_opts(t, "cgroup_ns", 4244, "ns_root");
  CHECK(!cgroup_limits_exist(ns));
  auto s3 = make_source("cgroup", ns);
  Row r3(*s3);
  r3.read(*s3, kT0);
  t.advance("cgroup/ns_root");
  r3.read(*s3, kT1);
  CHECK(r3.null("cgroup.cpu_limit_cores"));
  CHECK_NEAR(r3.f64("cgroup.cpu_used_cores"), 0.5, 1e-9);  // +250000 µs in 0.5 s
  CHECK(r3.null("cgroup.cpu_util_pct"));
  CHECK(r3.null("cgroup.mem_limit_bytes"));
  CHECK_EQ(r3.i64("cgroup.mem_used_bytes"), 4096);

  CHECK(throws_with([&] { (void)make_source("cgroup", cgroup_opts(t, "cgroup_v2", 5555, "v2")); },
                    "cannot read"));
  CHECK(throws_with([&] { (void)make_source("cgroup", cgroup_opts(t, "cgroup_v1", 4243, "none")); },
                    "no cgroup cpu or memory accounting found"));
  CHECK(!cgroup_limits_exist(cgroup_opts(t, "cgroup_v1", 4243, "none")));
}

// Discovery on its own: which files the source is given, so the tightest-limit rule is checked
// on the paths, not only through the values read from them.
void test_cgroup_discovery() {
  using cgroup::dirs_up;
  using Dirs = std::vector<std::string>;
  CHECK(dirs_up("/sys/fs/cgroup", "/sys/fs/cgroup/a/b") ==
        Dirs({"/sys/fs/cgroup/a/b", "/sys/fs/cgroup/a", "/sys/fs/cgroup"}));
  CHECK(dirs_up("/sys/fs/cgroup", "/sys/fs/cgroup") == Dirs({"/sys/fs/cgroup"}));
  CHECK(dirs_up("/m", "/m/x") == Dirs({"/m/x", "/m"}));

  Tree t;
  // v2: ctr's own cpu.max (1.5 cores) beats its parent's 2; memory is limited by the parent only.
  const std::string v2 = t.path("cgroup/v2");
  cgroup::Layout l = cgroup::find_layout(cgroup_opts(t, "cgroup_v2", 4242, "v2"));
  CHECK(l.v2);
  CHECK(l.cpu_limit == v2 + "/kubepods/pod1/ctr/cpu.max");
  CHECK(l.cpu_period.empty());
  CHECK(l.cpu_usage == v2 + "/kubepods/pod1/ctr/cpu.stat");
  CHECK(l.mem_limit == v2 + "/kubepods/pod1/memory.max");
  CHECK(l.mem_usage == v2 + "/kubepods/pod1/ctr/memory.current");

  // v1, cpu and cpuacct mounted together: the parent's 0.25-core quota beats abc's 0.5, and its
  // 512 MiB memory limit beats the "unlimited" above and below it; usage stays abc's.
  const std::string v1 = t.path("cgroup/v1");
  l = cgroup::find_layout(cgroup_opts(t, "cgroup_v1", 4243, "v1"));
  CHECK(!l.v2);
  CHECK(l.cpu_limit == v1 + "/cpu,cpuacct/docker/cpu.cfs_quota_us");
  CHECK(l.cpu_period == v1 + "/cpu,cpuacct/docker/cpu.cfs_period_us");
  CHECK(l.cpu_usage == v1 + "/cpu,cpuacct/docker/abc/cpuacct.usage");
  CHECK(l.mem_limit == v1 + "/memory/docker/memory.limit_in_bytes");
  CHECK(l.mem_usage == v1 + "/memory/docker/abc/memory.usage_in_bytes");

  // No limit anywhere: the process's own directory (here the mount root) is kept.
  const std::string basic = t.path("cgroup/basic");
  l = cgroup::find_layout(cgroup_opts(t, "basic", 6767, "basic"));
  CHECK(!l.v2);  // a "0::/" line, but no cgroup.controllers at the root: v1
  CHECK(l.cpu_limit == basic + "/cpu/cpu.cfs_quota_us");
  CHECK(l.cpu_usage == basic + "/cpuacct/cpuacct.usage");
  const std::string mem_leaf = basic + "/memory/process_api/8727d5f5ec74dfb7d31986f5618e8966";
  CHECK(l.mem_limit == mem_leaf + "/memory.limit_in_bytes");
  CHECK(l.mem_usage == mem_leaf + "/memory.usage_in_bytes");

  // The listed path is absent under the mount (a container's namespace): the root is used.
  const std::string ns = t.path("cgroup/ns_root");
  l = cgroup::find_layout(cgroup_opts(t, "cgroup_ns", 4244, "ns_root"));
  CHECK(l.v2);
  CHECK(l.cpu_limit == ns + "/cpu.max" && l.cpu_usage == ns + "/cpu.stat");
  CHECK(l.mem_limit == ns + "/memory.max" && l.mem_usage == ns + "/memory.current");

  // read_cpu_limit: cores, no quota, and a v1 period read only when there is a quota.
  int err = 0;
  ProcFile none;
  ProcFile v2_max(v2 + "/kubepods/pod1/ctr/cpu.max");
  CHECK_NEAR(cgroup::read_cpu_limit(v2_max, none, true, &err), 1.5, 1e-12);
  ProcFile ns_max(ns + "/cpu.max");
  CHECK(cgroup::read_cpu_limit(ns_max, none, true, &err) == cgroup::kNoCpuLimit);
  ProcFile quota(v1 + "/cpu,cpuacct/docker/abc/cpu.cfs_quota_us");
  ProcFile period(v1 + "/cpu,cpuacct/docker/abc/cpu.cfs_period_us");
  CHECK_NEAR(cgroup::read_cpu_limit(quota, period, false, &err), 0.5, 1e-12);
  ProcFile no_quota(v1 + "/cpu,cpuacct/cpu.cfs_quota_us");  // -1
  CHECK(cgroup::read_cpu_limit(no_quota, none, false, &err) == cgroup::kNoCpuLimit);
  err = 0;
  CHECK(cgroup::read_cpu_limit(quota, none, false, &err) == cgroup::kCpuLimitUnreadable);
  CHECK_EQ(err, EBADF);  // the unopened period file was asked for
  Tree::write(t.path("cgroup/v2/cpu.max"), "lots 100000\n");
  ProcFile garbage(t.path("cgroup/v2/cpu.max"));
  CHECK(cgroup::read_cpu_limit(garbage, none, true, &err) == cgroup::kCpuLimitUnreadable);
  ProcFile missing(t.path("cgroup/v2/no-such-file"));
  err = 0;
  CHECK(cgroup::read_cpu_limit(missing, none, true, &err) == cgroup::kCpuLimitUnreadable);
  CHECK_EQ(err, ENOENT);
}

}  // namespace

int main() {
  test_cgroup();
  test_cgroup_discovery();
  TEST_MAIN_END();
}
