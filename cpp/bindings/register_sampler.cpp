// Sampler: construction from built sources, lifecycle, snapshot/drain, self-measurement.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "register.hpp"
#include "stroboscope/sampler.hpp"
#include "stroboscope/slots.hpp"

namespace py = pybind11;

namespace stroboscope::bindings {
namespace {

// Destroying a Sampler joins its thread: do it without the GIL, as every other join.
struct ReleaseGilDeleter {
  void operator()(Sampler* s) const {
    // releasing gil here is safe, we don't manipulate refcounts
    py::gil_scoped_release release;
    delete s;
  }
};

// A Sampler from sources built already (_core.build_source): it takes them, so each source is
// built once. A source taken before, or listed twice, is refused before any is taken.
std::unique_ptr<Sampler, ReleaseGilDeleter> make_sampler_built(
    const std::vector<std::pair<std::shared_ptr<BuiltSource>, std::uint32_t>>& specs,
    std::int64_t interval_ns, std::uint64_t capacity, const std::string& spool_path,
    bool precise, double max_overhead) {
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const auto& built = specs[i].first;
    if (!built || !built->source) {
      throw py::value_error("sources[" + std::to_string(i) + "] was taken by another Sampler");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (specs[j].first == built) {
        throw py::value_error("sources[" + std::to_string(i) + "] is listed twice");
      }
    }
  }
  std::vector<std::pair<std::unique_ptr<Source>, std::uint32_t>> taken;
  taken.reserve(specs.size());
  for (const auto& [built, every] : specs) taken.emplace_back(std::move(built->source), every);
  // releasing gil here is safe, we don't manipulate refcounts
  py::gil_scoped_release release;
  std::vector<SourceSlot> slots;
  slots.reserve(taken.size());
  for (auto& [source, every] : taken) {
    slots.push_back(make_source_slot(std::move(source), every, interval_ns));
  }
  return std::unique_ptr<Sampler, ReleaseGilDeleter>(
      new Sampler(std::move(slots), interval_ns, capacity, spool_path, precise, max_overhead));
}


py::dict stats_dict(const SamplerStats& s) {
  py::dict d;
  d["interval_ns"] = s.interval_ns;
  d["running"] = s.running;
  d["ticks_scheduled"] = s.ticks_scheduled;
  d["ticks_taken"] = s.ticks_taken;
  d["ticks_missed"] = s.ticks_missed;
  d["ticks_requested"] = s.ticks_requested;
  d["tick_requests"] = s.tick_requests;
  d["precise"] = s.precise;
  d["spin_window_ns"] = s.spin_window_ns;
  d["rows_written"] = s.rows_written;
  d["rows_overwritten"] = s.rows_overwritten;
  d["rows_lost"] = s.rows_lost;
  d["lateness_p50_ns"] = s.lateness_p50_ns;
  d["lateness_p99_ns"] = s.lateness_p99_ns;
  d["lateness_max_ns"] = s.lateness_max_ns;
  d["cost_mean_ns"] = s.cost_mean_ns;
  d["cost_p99_ns"] = s.cost_p99_ns;
  d["cost_max_ns"] = s.cost_max_ns;
  d["thread_cpu_ns"] = s.thread_cpu_ns;
  d["capacity"] = s.capacity;
  d["num_columns"] = s.num_columns;
  d["ring_bytes"] = s.ring_bytes;
  d["clock_anchor_uncertainty_ns"] = s.clock_anchor_uncertainty_ns;
  d["process_exited"] = s.process_exited;
  py::list sources;
  for (const SourceStats& src : s.sources) {
    py::dict sd;
    sd["name"] = src.name;
    sd["every"] = src.every;
    sd["reads"] = src.reads;
    sd["failures"] = src.failures;
    sd["read_ns_total"] = src.read_ns_total;
    sd["reason"] = src.reason.empty() ? py::object(py::none()) : py::object(py::str(src.reason));
    sd["errno"] = src.error_number;
    sd["process_exited"] = src.process_exited;
    sd["not_followed"] = src.not_followed;
    sd["poll_lead_ns"] = src.poll_lead_ns;
    sd["interval_ns"] = src.interval_ns;
    sd["first_interval_ns"] = src.first_interval_ns;
    sd["cost_ns"] = src.cost_ns;
    sources.append(sd);
  }
  d["sources"] = sources;
  d["max_overhead"] = s.max_overhead;
  d["overhead_ppm"] = s.overhead_ppm;
  d["threads_cpu_ns"] = s.threads_cpu_ns;
  d["rate_changes_total"] = s.rate_changes_total;
  d["budget_unmet"] = s.budget_unmet;
  py::list changes;
  for (const RateChange& c : s.rate_changes) {
    changes.append(py::make_tuple(c.mono_ns, s.sources.at(c.source).name, c.old_interval_ns,
                                  c.new_interval_ns, rate_reason_name(c.reason), c.share_ppm));
  }
  d["rate_changes"] = changes;
  return d;
}

}  // namespace

py::dict column_dict(const ColumnSpec& c) {
  py::dict d;
  d["name"] = c.name;
  d["unit"] = c.unit;
  d["dtype"] = dtype_name(c.dtype);
  d["kind"] = kind_name(c.kind);
  d["help"] = c.help;
  return d;
}

void register_sampler(py::module_& m) {
  m.attr("MIN_INTERVAL_NS") = kMinIntervalNs;
  m.attr("MAX_INTERVAL_NS") = kMaxIntervalNs;
  // releasing gil here is safe, we don't manipulate refcounts
  using release_gil = py::call_guard<py::gil_scoped_release>;
  py::class_<Sampler, std::unique_ptr<Sampler, ReleaseGilDeleter>>(m, "Sampler")
      .def(py::init(&make_sampler_built), py::arg("sources"), py::arg("interval_ns"),
           py::arg("capacity"), py::arg("spool_path") = "", py::arg("precise") = false,
           py::arg("max_overhead") = 0.0)
      .def("start", &Sampler::start, release_gil())
      .def("stop", &Sampler::stop, release_gil())
      .def_property_readonly("running", &Sampler::running)
      // Two atomic operations and at most one futex wake: cheaper than releasing the GIL.
      .def("request_tick", &Sampler::request_tick)
      .def("snapshot", &Sampler::snapshot, release_gil())
      .def("drain", &Sampler::drain, release_gil())
      .def("copy_since", &Sampler::copy_since, py::arg("first_row"), release_gil())
      .def("run_ticks_inline", &Sampler::run_ticks_inline, py::arg("n"), release_gil())
      .def("forget_thread_after_fork", &Sampler::forget_thread_after_fork)
      .def("columns",
           [](const Sampler& s) {
             py::list out;
             for (const ColumnSpec& c : s.ring_columns()) out.append(column_dict(c));
             return out;
           })
      // (ticks_taken, ticks_missed, rows_lost) as stats() has them: what a frame's provenance
      // needs, three atomic loads instead of stats() and its dict.
      .def("counters",
           [](const Sampler& s) {
             return py::make_tuple(s.ticks_taken(), s.ticks_missed(), s.rows_lost());
           })
      // How many rate changes the overhead budget made: one atomic load (stats() has them).
      .def_property_readonly("rate_changes_total", &Sampler::rate_changes)
      .def("stats", [](const Sampler& s) {
        SamplerStats st;
        {
          // releasing gil here is safe, we don't manipulate refcounts
          py::gil_scoped_release release;
          st = s.stats();
        }
        return stats_dict(st);
      });
}

}  // namespace stroboscope::bindings
