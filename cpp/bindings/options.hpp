// Builds SourceOptions from the keyword arguments the Python layer passes.
#pragma once

#include <string>
#include <vector>

#include "stroboscope/source.hpp"

namespace stroboscope::bindings {

inline SourceOptions make_options(std::string proc_root, std::string sys_root,
                                  std::string cgroup_root, int pid,
                                  std::vector<std::string> disk_paths) {
  SourceOptions opts;
  opts.proc_root = std::move(proc_root);
  opts.sys_root = std::move(sys_root);
  opts.cgroup_root = std::move(cgroup_root);
  opts.pid = pid;
  opts.disk_paths = std::move(disk_paths);
  return opts;
}

}  // namespace stroboscope::bindings
