// The spool file's layout, from its one definition in spool.hpp, the OSError a spool that cannot
// be created raises, and the /proc/net/dev totals (the same parser as the network source) that
// the drop-in monitor starts its counters from.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "register.hpp"
#include "stroboscope/procfs.hpp"
#include "stroboscope/source.hpp"
#include "stroboscope/spool.hpp"

namespace py = pybind11;

namespace stroboscope::bindings {
namespace {

py::dict spool_layout() {
  py::dict d;
  d["magic"] = py::bytes(kSpoolMagic, sizeof kSpoolMagic);
  d["version"] = kSpoolVersion;
  py::tuple versions_read(std::size(kSpoolVersionsRead));
  for (std::size_t i = 0; i < std::size(kSpoolVersionsRead); ++i) {
    versions_read[i] = kSpoolVersionsRead[i];
  }
  d["versions_read"] = versions_read;
  d["block_rows"] = kBlockRows;
  d["page"] = kSpoolPage;
  d["schema_offset"] = kSpoolSchemaOffset;
  py::list fields;
  for (const SpoolField& f : kSpoolHeaderFields) {
    fields.append(py::make_tuple(f.name, f.offset, std::string(1, f.type)));
  }
  d["fields"] = fields;
  return d;
}

// Bytes sent and received by every interface (lo only when asked), read once from
// `proc_root`/net/dev. Throws OSError (via std::runtime_error) when the file cannot be read.
std::pair<std::uint64_t, std::uint64_t> net_dev_totals(const std::string& proc_root,
                                                       bool include_loopback) {
  std::string text;
  {
    // releasing gil here is safe, we don't manipulate refcounts
    py::gil_scoped_release release;
    ProcFile in(proc_root + "/net/dev");  // a regular file only: a FIFO is refused, not awaited
    int err = 0;
    if (in.is_open() && in.read(&err)) text.assign(in.view());
  }
  if (text.empty()) {
    std::string why = not_regular_reason(proc_root + "/net/dev");
    throw py::value_error("cannot read " + proc_root + "/net/dev" + (why.empty() ? "" : ": " + why));
  }
  std::vector<procfs::NetDevCounters> ifaces(256);
  std::size_t seen = 0;
  std::size_t n = procfs::parse_net_dev(text, ifaces, &seen);
  if (seen > n) {  // more interfaces than guessed: once more with room for all of them
    ifaces.resize(seen);
    n = procfs::parse_net_dev(text, ifaces, &seen);
  }
  std::uint64_t sent = 0, recv = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!include_loopback && std::string_view(ifaces[i].name) == "lo") continue;
    sent += ifaces[i].tx_bytes;
    recv += ifaces[i].rx_bytes;
  }
  return {sent, recv};
}

}  // namespace

void register_spool(py::module_& m) {
  m.attr("SPOOL_LAYOUT") = spool_layout();
  // SpoolCreateError -> OSError(errno, action, path): Python picks the subclass from the errno
  // (FileExistsError for EEXIST) and the message and `filename` name the spool.
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const SpoolCreateError& e) {
      const py::tuple args = py::make_tuple(e.code().value(), e.action(), e.path());
      PyErr_SetObject(PyExc_OSError, args.ptr());
    }
  });
  m.def("net_dev_totals", &net_dev_totals, py::arg("proc_root"), py::arg("include_loopback"),
        "(sent, recv) bytes of all interfaces from PROC/net/dev, lo only when asked.");
}

}  // namespace stroboscope::bindings
