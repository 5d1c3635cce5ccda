// The source registry: maps each source name to its constructor (the Linux sources live one per
// file in cpp/src), says which are on by default and why one cannot be built here.
#include "stroboscope/registry.hpp"

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "stroboscope/amdsmi.hpp"
#include "stroboscope/linux_sources.hpp"
#include "stroboscope/nvml.hpp"
#include "stroboscope/nvml_gpm.hpp"

namespace stroboscope {
namespace {

using Factory = std::unique_ptr<Source> (*)(const SourceOptions&);

struct Entry {
  const char* name;
  const char* help;
  Factory make;
};

// The stable order of source_names(), docs/metrics.md and describe_sources().
const Entry kEntries[] = {
    {"cpu", "CPU utilisation of the whole machine, from /proc/stat.", &make_cpu_source},
    {"cpu_cores", "CPU utilisation of each core, from /proc/stat.", &make_cpu_cores_source},
    {"memory", "Physical memory and swap in use, from /proc/meminfo.", &make_memory_source},
    {"network", "Bytes sent and received by all interfaces but lo, from rtnetlink "
                "(RTM_GETSTATS), or /proc/net/dev.",
     &make_network_source},
    {"disk", "Space used and free on the filesystems of the given paths, from statvfs(2).",
     &make_disk_source},
    {"diskio", "Bytes read and written by whole block devices, from /sys/block/*/stat, or "
               "/proc/diskstats.",
     &make_diskio_source},
    {"process", "CPU, memory and threads of one process, from its CPU clocks and "
                "/proc/<pid>/stat and statm.",
     &make_process_source},
    {"process_io", "I/O bytes and context switches of one process, from /proc/<pid>/io and "
                   "status.",
     &make_process_io_source},
    {"threads", "CPU time and run-queue wait of the threads of one process, and its busiest "
                "threads, from /proc/<pid>/task/*/schedstat.",
     &make_threads_source},
    {"proc_tree", "CPU, memory and threads of a process and all its descendants, from /proc.",
     &make_proc_tree_source},
    {"load", "Load averages and runnable tasks, from /proc/loadavg.", &make_load_source},
    {"pressure", "CPU, memory and I/O stall time (PSI), from /proc/pressure.",
     &make_pressure_source},
    {"cgroup", "CPU quota/use and memory limit/use of the process's cgroup (v1 or v2).",
     &make_cgroup_source},
    {"gpu", "NVIDIA GPU utilisation, memory, power, energy, clocks and per-process use, from "
            "NVML (loaded at run time; polled on its own thread).",
     &make_nvml_source},
    {"gpu_gpm", "NVIDIA GPU performance counters (GPM: SM activity and occupancy, tensor and "
                "FP pipes, DRAM bandwidth, PCIe/NVLink rates) on Hopper or newer, from NVML "
                "sample pairs at most 10 times a second (polled on its own thread).",
     &make_nvml_gpm_source},
    {"amd_gpu", "AMD GPU activity, VRAM, temperature, energy and power, clocks, from amdsmi "
                "(libamd_smi.so, loaded at run time; polled on its own thread); gpu.{i} columns "
                "numbered after NVML's GPUs.",
     &make_amd_gpu_source},
};

std::string known_names() {
  std::string out;
  for (const Entry& e : kEntries) {
    if (!out.empty()) out += ", ";
    out += e.name;
  }
  return out;
}

}  // namespace

std::vector<std::string> source_names() {
  std::vector<std::string> out;
  for (const Entry& e : kEntries) out.emplace_back(e.name);
  return out;
}

std::vector<std::string> default_source_names(const SourceOptions& opts) {
  std::vector<std::string> out{"cpu", "memory", "network", "disk", "diskio", "process"};
  if (cgroup_limits_exist(opts)) out.emplace_back("cgroup");
  // All GPUs by default where NVML loads and sees at least one; absence is normal and silent
  // here (gpu_status() and `stroboscope info` say why).
  if (nvml_available(nullptr)) out.emplace_back("gpu");
  // GPM where a GPU has it (Hopper or newer): one sample per GPU per poll, at most 10 per second.
  if (nvml_gpm_available()) out.emplace_back("gpu_gpm");
  // AMD GPUs by default only where NVML sees none, so gpu.0 is the first AMD GPU there (see
  // amdsmi.hpp for mixed machines, where amd_gpu is asked for by name).
  if (!nvml_available(nullptr) && amdsmi_available(nullptr)) out.emplace_back("amd_gpu");
  return out;
}

std::vector<SourceInfo> describe_sources(const SourceOptions& opts) {
  std::vector<std::string> defaults = default_source_names(opts);
  std::vector<SourceInfo> out;
  for (const Entry& e : kEntries) {
    SourceInfo info{e.name, e.help, false, true, {}, {}, 0, {}};
    for (const std::string& d : defaults) info.is_default = info.is_default || d == e.name;
    try {
      describe_built(*e.make(opts), &info);
    } catch (const std::exception& ex) {
      info.available = false;
      info.reason = ex.what();
    }
    out.push_back(std::move(info));
  }
  return out;
}

void describe_built(const Source& source, SourceInfo* info) {
  info->interface = source.interface();
  info->resolution_ns = source.natural_resolution_ns();
  info->resolution_reason = source.resolution_reason();
}

std::unique_ptr<Source> make_source(std::string_view name, const SourceOptions& opts) {
  for (const Entry& e : kEntries) {
    if (name == e.name) return e.make(opts);
  }
  throw std::invalid_argument("unknown source '" + std::string(name) +
                              "'; known sources: " + known_names());
}

}  // namespace stroboscope
