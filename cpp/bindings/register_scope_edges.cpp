// A scope's two edges in C: `ScopeEdges`, the base class of stroboscope.annotate, whose
// __enter__/__exit__ take the common case without running Python: a named scope with no NVTX
// range (with labels of its own: once their id for the ambient labels is known), while events are recorded and no Python waits on an edge (the
// default session's starter, edge rows asked in this process, open hooks). Every other case
// calls the class's Python `_enter_slow` / `_exit_slow`, which hold the scope's rules in full.
//
// The two paths keep one stack: the scopes room's ContextVar of open frames (its OpenScope
// tuples) and its ambient labels, handed over once by `scope_edges_setup`; the stack id is the
// running asyncio task's id(), else the thread's ident, as `_stack.stack_id()` gives it. The
// switchboard says which path edges take (`scope_edges_mode`) whenever its state changes.
// A scope's own labels are checked, written and interned in one call too (`_take_labels`).
// Measured: bench/shared_events_bench.py (a scope's enter + exit, in-process and shared),
// bench/bench_scope_labels.py (a labelled scope beside an unlabelled one).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <structmember.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "register.hpp"
#include "stroboscope/events.hpp"

namespace py = pybind11;

namespace stroboscope::bindings {
namespace {

struct ScopeEdgesObject {
  PyObject_HEAD
  long long fast_id;  // the scope's interned name id where the C path may take its edges, else -1
  // Where this scope was last opened while events were recorded (0: not open, or closed): its
  // stack, depth and labels id, so that an exit in another thread (whose stack does not hold
  // the frame) can write the end on the stack that opened it (_close, the Python path).
  unsigned long long open_sid;
  unsigned long long open_depth;
  unsigned long long open_lid;
  // A scope with labels of its own writes the id of its labels merged with the ambient ones:
  // (ambient id << 32) | merged id, as the Python path last made it (one member, so that one
  // attribute store replaces both halves at once); kNoLabels: none made yet. The C path takes
  // a labelled scope only when the ambient id matches; otherwise the Python path makes it.
  unsigned long long labels_cache;
  char has_labels;  // the scope has labels of its own (set once, when it is made)
};

constexpr unsigned long long kNoLabels = ~0ull;  // never a match: no id is 0xFFFFFFFF

enum Mode : int {
  kOff = 0,     // nothing records: an edge writes nothing
  kFast = 1,    // events recorded, nothing in Python waits on an edge
  kPython = 2,  // events recorded, and Python has work at an edge: the slow path
};

// Set once by scope_edges_setup (strong references, kept for the process's life).
struct Setup {
  PyObject* stack_var = nullptr;      // ContextVar: tuple of open frames, outermost first
  PyObject* labels_var = nullptr;     // ContextVar: (ambient labels dict, their interned id)
  PyTypeObject* frame_type = nullptr; // OpenScope(owner, scope_id, labels_id, stack_id, depth)
  PyObject* bind_asyncio = nullptr;   // () -> (asyncio._get_running_loop, current_task) or None
  PyObject* get_loop = nullptr;       // bound once asyncio is imported
  PyObject* current_task = nullptr;
  PyObject* asyncio_name = nullptr;
  PyObject* enter_slow = nullptr;     // method names of the Python path
  PyObject* exit_slow = nullptr;
  PyObject* close = nullptr;
  int mode = kOff;
  // Stacks holding a frame that another thread closed (scope_edges_pending): a scope opened on
  // one takes the Python path, which takes the stale frame off first. Usually none.
  static constexpr int kMaxPending = 64;
  std::uint64_t pending[kMaxPending] = {};
  int n_pending = 0;
};
Setup g;

bool is_pending(std::uint64_t sid) {
  for (int i = 0; i < g.n_pending; ++i) {
    if (g.pending[i] == sid) return true;
  }
  return false;
}

constexpr Py_ssize_t kFrameStackId = 3;  // OpenScope's fields by index
constexpr Py_ssize_t kFrameDepth = 4;
constexpr Py_ssize_t kFrameLabelsId = 2;
constexpr Py_ssize_t kFrameScopeId = 1;
constexpr unsigned long kMaxDepth = 0xFFFF;  // the events log's depth is 16 bits

// The stack a scope opened now belongs to: the running asyncio task, else this thread. False
// with a Python error set.
bool stack_id(std::uint64_t* out) {
  if (g.get_loop == nullptr) {
    // No event loop runs before asyncio is imported: one dict lookup until then.
    PyObject* aio = PyDict_GetItemWithError(PyImport_GetModuleDict(), g.asyncio_name);
    if (aio == nullptr && PyErr_Occurred() != nullptr) return false;
    if (aio != nullptr) {
      PyObject* bound = PyObject_CallNoArgs(g.bind_asyncio);
      if (bound == nullptr) return false;
      if (PyTuple_Check(bound) && PyTuple_GET_SIZE(bound) == 2) {
        g.get_loop = Py_NewRef(PyTuple_GET_ITEM(bound, 0));
        g.current_task = Py_NewRef(PyTuple_GET_ITEM(bound, 1));
      }
      Py_DECREF(bound);  // None: asyncio still importing, asked again at the next scope
    }
  }
  if (g.get_loop != nullptr) {
    PyObject* loop = PyObject_CallNoArgs(g.get_loop);
    if (loop == nullptr) return false;
    const bool running = loop != Py_None;
    Py_DECREF(loop);
    if (running) {
      PyObject* task = PyObject_CallNoArgs(g.current_task);
      if (task == nullptr) return false;
      const bool is_task = task != Py_None;
      *out = reinterpret_cast<std::uintptr_t>(task);  // id(task)
      Py_DECREF(task);  // the loop holds it: its id stays the running task's
      if (is_task) return true;
    }
  }
  *out = PyThread_get_thread_ident();
  return true;
}

// An unsigned field of a frame; false with a Python error set.
bool frame_uint(PyObject* frame, Py_ssize_t i, unsigned long long* out) {
  *out = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(frame, i));
  return !(*out == static_cast<unsigned long long>(-1) && PyErr_Occurred() != nullptr);
}

bool is_frame(PyObject* obj) {
  return Py_TYPE(obj) == g.frame_type && PyTuple_GET_SIZE(obj) == 5;
}

// The begin of a fast scope, as _open writes it: the edge, then its frame on the stack.
// Returns self, nullptr with an error, or Py_None (borrowed) when the Python path must take it.
PyObject* open_fast(ScopeEdgesObject* self) {
  PyObject* stack = nullptr;
  if (PyContextVar_Get(g.stack_var, nullptr, &stack) < 0) return nullptr;
  PyObject* labels = nullptr;
  if (PyContextVar_Get(g.labels_var, nullptr, &labels) < 0) {
    Py_DECREF(stack);
    return nullptr;
  }
  PyObject* result = Py_None;
  PyObject* frame = nullptr;
  PyObject* grown = nullptr;
  std::uint64_t sid = 0;
  unsigned long long depth = 0, lid = 0;
  const bool shapes = PyTuple_Check(stack) && PyTuple_Check(labels) &&
                      PyTuple_GET_SIZE(labels) == 2 &&
                      (PyTuple_GET_SIZE(stack) == 0 ||
                       is_frame(PyTuple_GET_ITEM(stack, PyTuple_GET_SIZE(stack) - 1)));
  if (!shapes) goto done;  // not what the scopes room writes: its own path decides
  result = nullptr;
  if (!stack_id(&sid)) goto done;
  if (g.n_pending > 0 && is_pending(sid)) {
    result = Py_None;  // a frame here was closed in another thread: the Python path prunes it
    goto done;
  }
  if (const Py_ssize_t n = PyTuple_GET_SIZE(stack); n > 0) {
    PyObject* top = PyTuple_GET_ITEM(stack, n - 1);
    unsigned long long top_sid = 0;
    if (!frame_uint(top, kFrameStackId, &top_sid)) goto done;
    if (top_sid == sid) {
      if (!frame_uint(top, kFrameDepth, &depth)) goto done;
      ++depth;
    }
  }
  lid = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(labels, 1));
  if (lid == static_cast<unsigned long long>(-1) && PyErr_Occurred() != nullptr) goto done;
  if (self->has_labels != 0) {
    if ((self->labels_cache >> 32) != lid) {
      result = Py_None;  // its merged labels for these ambient ones are made in Python
      goto done;
    }
    lid = self->labels_cache & 0xFFFFFFFFull;
  }
  if (depth > kMaxDepth || lid > 0xFFFFFFFFull) {
    result = Py_None;  // the Python path refuses it, in its words
    goto done;
  }
  frame = g.frame_type->tp_alloc(g.frame_type, 5);
  grown = frame == nullptr ? nullptr : PyTuple_New(PyTuple_GET_SIZE(stack) + 1);
  if (grown == nullptr) goto done;
  {
    PyObject* fields[5] = {Py_NewRef(reinterpret_cast<PyObject*>(self)),
                           PyLong_FromLongLong(self->fast_id),
                           self->has_labels != 0 ? PyLong_FromUnsignedLongLong(lid)
                                                 : Py_NewRef(PyTuple_GET_ITEM(labels, 1)),
                           PyLong_FromUnsignedLongLong(sid), PyLong_FromUnsignedLongLong(depth)};
    bool made = true;
    for (Py_ssize_t i = 0; i < 5; ++i) {
      made = made && fields[i] != nullptr;
      PyTuple_SET_ITEM(frame, i, fields[i]);  // a NULL field is allowed in a tuple being freed
    }
    if (!made) goto done;
  }
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(stack); ++i) {
    PyTuple_SET_ITEM(grown, i, Py_NewRef(PyTuple_GET_ITEM(stack, i)));
  }
  PyTuple_SET_ITEM(grown, PyTuple_GET_SIZE(stack), frame);
  frame = nullptr;  // grown owns it
  EventLog::global().push(EventKind::kBegin, static_cast<std::uint32_t>(self->fast_id),
                          static_cast<std::uint16_t>(depth), static_cast<std::uint32_t>(lid), sid);
  if (PyObject* token = PyContextVar_Set(g.stack_var, grown); token != nullptr) {
    Py_DECREF(token);
    self->open_sid = sid;
    self->open_depth = depth;
    self->open_lid = lid;
    result = reinterpret_cast<PyObject*>(self);
  }
done:
  Py_XDECREF(frame);
  Py_XDECREF(grown);
  Py_DECREF(labels);
  Py_DECREF(stack);
  return result;
}

// Whether C takes this scope's edges: a name id the events log can hold (a value set by hand
// outside [0, 2**32) sends the scope to the Python path, which writes its own `_scope_id`).
bool takes_fast(const ScopeEdgesObject* self) {
  return self->fast_id >= 0 && self->fast_id <= 0xFFFFFFFFll;
}

PyObject* scope_enter(PyObject* obj, PyObject* /*unused*/) {
  auto* self = reinterpret_cast<ScopeEdgesObject*>(obj);
  if (takes_fast(self) && g.mode == kOff) return Py_NewRef(obj);
  if (takes_fast(self) && g.mode == kFast) {
    PyObject* got = open_fast(self);
    if (got != Py_None) return got == nullptr ? nullptr : Py_NewRef(got);
  }
  return PyObject_CallMethodNoArgs(obj, g.enter_slow);
}

// The end of a fast scope: the top frame is its own (the common case) or the Python path
// decides (nothing open here, or scopes left open above it).
PyObject* scope_exit(PyObject* obj, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 3) {
    PyErr_Format(PyExc_TypeError, "__exit__() takes 3 arguments (exc_type, exc, tb), got %zd",
                 nargs);
    return nullptr;
  }
  auto* self = reinterpret_cast<ScopeEdgesObject*>(obj);
  if (!takes_fast(self)) {
    PyObject* call[4] = {obj, args[0], args[1], args[2]};
    return PyObject_VectorcallMethod(g.exit_slow, call, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                     nullptr);
  }
  PyObject* stack = nullptr;
  if (PyContextVar_Get(g.stack_var, nullptr, &stack) < 0) return nullptr;
  if (!PyTuple_Check(stack) || PyTuple_GET_SIZE(stack) == 0) {
    Py_DECREF(stack);
    if (self->open_sid == 0) Py_RETURN_NONE;  // opened while nothing recorded: nothing to close
    PyObject* r = PyObject_CallMethodNoArgs(obj, g.close);  // opened in another thread
    if (r == nullptr) return nullptr;
    Py_DECREF(r);
    Py_RETURN_NONE;
  }
  const Py_ssize_t n = PyTuple_GET_SIZE(stack);
  PyObject* top = PyTuple_GET_ITEM(stack, n - 1);
  if (!is_frame(top) || PyTuple_GET_ITEM(top, 0) != obj) {
    Py_DECREF(stack);
    PyObject* r = PyObject_CallMethodNoArgs(obj, g.close);  // misnested, or not ours
    if (r == nullptr) return nullptr;
    Py_DECREF(r);
    Py_RETURN_NONE;
  }
  unsigned long long scope = 0, lid = 0, sid = 0, depth = 0;
  PyObject* shrunk = nullptr;
  if (frame_uint(top, kFrameScopeId, &scope) && frame_uint(top, kFrameLabelsId, &lid) &&
      frame_uint(top, kFrameStackId, &sid) && frame_uint(top, kFrameDepth, &depth)) {
    if (depth <= kMaxDepth) {  // deeper: its begin was not written either (counted there)
      EventLog::global().push(EventKind::kEnd, static_cast<std::uint32_t>(scope),
                              static_cast<std::uint16_t>(depth), static_cast<std::uint32_t>(lid),
                              sid);
    }
    self->open_sid = 0;
    shrunk = PyTuple_GetSlice(stack, 0, n - 1);
  }
  Py_DECREF(stack);
  if (shrunk == nullptr) return nullptr;
  PyObject* token = PyContextVar_Set(g.stack_var, shrunk);
  Py_DECREF(shrunk);
  if (token == nullptr) return nullptr;
  Py_DECREF(token);
  Py_RETURN_NONE;
}

// -- a scope's own labels, taken in one call (`_take_labels`) ----------------------------------
//
// `annotate("step", step=step)` makes a new label set on every call: checking it, writing its
// stored text and interning that in one C call costs what the scope's edges cost, where the
// Python path (check_labels, encode_labels, events_intern) cost twice that. The rules stay in
// Python: C takes only the cases whose answer is plain (a name the scopes room already checked,
// a str UTF-8 can encode, an int, a bool, a finite float, each of its exact type) and hands
// every other one back (None), so that the Python path refuses it in its own words.

// Appends `text` as JSON writes it with ensure_ascii (json.encoder.encode_basestring_ascii):
// quoted; '"', '\\', \b \f \n \r \t as two-character escapes; every other code point outside
// ' '..'~' as \uXXXX in lower-case hex, one past U+FFFF as its UTF-16 surrogate pair.
void append_json_str(std::string& out, PyObject* text) {
  static constexpr char kHex[] = "0123456789abcdef";
  const auto u4 = [&out](unsigned c) {
    const char esc[6] = {'\\', 'u', kHex[(c >> 12) & 0xF], kHex[(c >> 8) & 0xF],
                         kHex[(c >> 4) & 0xF], kHex[c & 0xF]};
    out.append(esc, 6);
  };
  const int kind = PyUnicode_KIND(text);
  const void* data = PyUnicode_DATA(text);
  const Py_ssize_t n = PyUnicode_GET_LENGTH(text);
  out.push_back('"');
  for (Py_ssize_t i = 0; i < n; ++i) {
    const Py_UCS4 c = PyUnicode_READ(kind, data, i);
    if (c >= ' ' && c <= '~' && c != '\\' && c != '"') {
      out.push_back(static_cast<char>(c));
      continue;
    }
    switch (c) {
      case '\\': out.append("\\\\", 2); break;
      case '"': out.append("\\\"", 2); break;
      case '\b': out.append("\\b", 2); break;
      case '\f': out.append("\\f", 2); break;
      case '\n': out.append("\\n", 2); break;
      case '\r': out.append("\\r", 2); break;
      case '\t': out.append("\\t", 2); break;
      default:
        if (c >= 0x10000) {
          const Py_UCS4 v = c - 0x10000;
          u4(0xD800 | ((v >> 10) & 0x3FF));
          u4(0xDC00 | (v & 0x3FF));
        } else {
          u4(c);
        }
    }
  }
  out.push_back('"');
}

// A label value as check_labels stores it (a new reference), nullptr with no error set when
// the Python path must decide (a type it does not take plainly, a float that is not finite, a
// str UTF-8 cannot encode, an int too long for str()), nullptr with an error set on failure.
PyObject* label_text(PyObject* value) {
  PyTypeObject* kind = Py_TYPE(value);
  if (kind == &PyUnicode_Type) {
    Py_ssize_t n = 0;
    if (PyUnicode_AsUTF8AndSize(value, &n) == nullptr) {  // a lone surrogate: said in Python
      PyErr_Clear();
      return nullptr;
    }
    return Py_NewRef(value);
  }
  if (kind == &PyFloat_Type && !std::isfinite(PyFloat_AS_DOUBLE(value))) return nullptr;
  if (kind == &PyLong_Type || kind == &PyBool_Type || kind == &PyFloat_Type) {
    PyObject* text = PyObject_Str(value);
    if (text == nullptr && PyErr_ExceptionMatches(PyExc_ValueError)) {
      PyErr_Clear();  // more digits than str() writes: Python raises it, as before
    }
    return text;
  }
  return nullptr;
}

// Label sets made on this thread: their (name, value) strs (borrowed) and stored text, kept
// for the next call so that a scope made in a loop allocates nothing here.
thread_local std::vector<std::pair<PyObject*, PyObject*>> t_pairs;
thread_local std::string t_text;

// The stored text of `own` over `ambient` (both str -> str), as encode_labels writes
// {**ambient, **own}, in t_text; false when a key or value is not an exact str (Python's).
bool encode_merged(PyObject* own, PyObject* ambient) {
  t_pairs.clear();
  PyObject* key = nullptr;
  PyObject* value = nullptr;
  for (Py_ssize_t pos = 0; PyDict_Next(own, &pos, &key, &value);) t_pairs.emplace_back(key, value);
  for (Py_ssize_t pos = 0; PyDict_Next(ambient, &pos, &key, &value);) {
    if (!PyUnicode_CheckExact(key) || !PyUnicode_CheckExact(value)) return false;
    const int shadowed = PyDict_Contains(own, key);
    if (shadowed < 0) {
      PyErr_Clear();
      return false;
    }
    if (shadowed == 0) t_pairs.emplace_back(key, value);
  }
  // Keys in code point order, as sorted() puts them (all exact strs: the compare cannot fail).
  std::sort(t_pairs.begin(), t_pairs.end(), [](const auto& a, const auto& b) {
    return PyUnicode_Compare(a.first, b.first) < 0;
  });
  t_text.clear();
  t_text.push_back('{');
  for (const auto& [k, v] : t_pairs) {
    if (t_text.size() > 1) t_text.push_back(',');
    append_json_str(t_text, k);
    t_text.push_back(':');
    append_json_str(t_text, v);
  }
  t_text.push_back('}');
  return true;
}

// ScopeEdges._take_labels(labels, checked_names): the scope's own labels as check_labels makes
// them (a new dict of strs), marked as its own (_has_labels); while events are recorded also
// the id of them merged with the ambient labels, in _labels_cache. None: the Python path takes
// them (check_labels, then _merged_labels_id), which refuses bad ones in its words.
PyObject* scope_take_labels(PyObject* obj, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 2 || !PyDict_Check(args[0]) || !PyAnySet_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError,
                    "_take_labels() takes (labels: dict, checked_names: set or frozenset)");
    return nullptr;
  }
  auto* self = reinterpret_cast<ScopeEdgesObject*>(obj);
  PyObject* labels = args[0];
  PyObject* out = PyDict_New();
  if (out == nullptr) return nullptr;
  PyObject* key = nullptr;
  PyObject* value = nullptr;
  for (Py_ssize_t pos = 0; PyDict_Next(labels, &pos, &key, &value);) {
    const int known = PyUnicode_CheckExact(key) ? PySet_Contains(args[1], key) : 0;
    PyObject* text = known == 1 ? label_text(value) : nullptr;
    if (text == nullptr) {
      Py_DECREF(out);
      if (known < 0 || PyErr_Occurred() != nullptr) return nullptr;
      Py_RETURN_NONE;  // a name not checked yet, or a value the Python path decides
    }
    const int set = PyDict_SetItem(out, key, text);
    Py_DECREF(text);
    if (set < 0) {
      Py_DECREF(out);
      return nullptr;
    }
  }
  self->has_labels = 1;
  if (g.mode == kOff || g.labels_var == nullptr) return out;  // the id is made when entered
  PyObject* ambient = nullptr;
  if (PyContextVar_Get(g.labels_var, nullptr, &ambient) < 0) {
    Py_DECREF(out);
    return nullptr;
  }
  if (PyTuple_Check(ambient) && PyTuple_GET_SIZE(ambient) == 2 &&
      PyDict_Check(PyTuple_GET_ITEM(ambient, 0)) &&
      encode_merged(out, PyTuple_GET_ITEM(ambient, 0))) {
    const unsigned long long lid = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(ambient, 1));
    if (lid == static_cast<unsigned long long>(-1) && PyErr_Occurred() != nullptr) {
      PyErr_Clear();  // not an id of ours: the Python path makes it when the scope is entered
    } else if (lid < 0xFFFFFFFFull) {
      try {
        const std::uint32_t id = EventLog::global().intern(t_text);
        self->labels_cache = lid << 32 | id;  // one store: both halves at once
      } catch (const std::exception& e) {
        Py_DECREF(ambient);
        Py_DECREF(out);
        PyErr_SetString(PyExc_RuntimeError, e.what());
        return nullptr;
      }
    }
  }
  Py_DECREF(ambient);
  return out;
}

void scope_dealloc(PyObject* obj) {
  PyTypeObject* type = Py_TYPE(obj);
  type->tp_free(obj);
  Py_DECREF(type);  // a heap type: its instances hold a reference
}

PyMethodDef g_methods[] = {
    {"__enter__", reinterpret_cast<PyCFunction>(&scope_enter), METH_NOARGS,
     "Open the scope (its begin edge), in C where nothing else is asked of it."},
    {"__exit__",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&scope_exit)), METH_FASTCALL,
     "Close the scope (its end edge); an exception goes on unchanged."},
    {"_take_labels",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(&scope_take_labels)),
     METH_FASTCALL,
     "The scope's own labels as strs (and, while recorded, their merged id in _labels_cache); "
     "None: the Python path takes them."},
    {nullptr, nullptr, 0, nullptr}};

PyMemberDef g_members[] = {
    {"_fast_id", T_LONGLONG, offsetof(ScopeEdgesObject, fast_id), 0,
     "The scope's name id where C takes its edges; -1: the Python path (_enter_slow)."},
    {"_open_sid", T_ULONGLONG, offsetof(ScopeEdgesObject, open_sid), 0,
     "The stack id this scope was last opened on while recorded; 0: not open."},
    {"_open_depth", T_ULONGLONG, offsetof(ScopeEdgesObject, open_depth), 0,
     "Its depth there."},
    {"_open_lid", T_ULONGLONG, offsetof(ScopeEdgesObject, open_lid), 0,
     "Its labels id there."},
    {"_labels_cache", T_ULONGLONG, offsetof(ScopeEdgesObject, labels_cache), 0,
     "(ambient labels id << 32) | id of the scope's labels merged with them; all ones: none."},
    {"_has_labels", T_BOOL, offsetof(ScopeEdgesObject, has_labels), 0,
     "Whether the scope has labels of its own (the C path then writes _labels_cache's id)."},
    {nullptr, 0, 0, 0, nullptr}};

PyObject* scope_new(PyTypeObject* type, PyObject* /*args*/, PyObject* /*kwargs*/) {
  PyObject* obj = type->tp_alloc(type, 0);
  if (obj != nullptr) {
    auto* self = reinterpret_cast<ScopeEdgesObject*>(obj);
    self->fast_id = -1;
    self->open_sid = self->open_depth = self->open_lid = 0;
    self->labels_cache = kNoLabels;
    self->has_labels = 0;
  }
  return obj;
}

PyType_Slot g_slots[] = {
    {Py_tp_methods, g_methods},
    {Py_tp_members, g_members},
    {Py_tp_new, reinterpret_cast<void*>(&scope_new)},
    {Py_tp_dealloc, reinterpret_cast<void*>(&scope_dealloc)},
    {Py_tp_doc, const_cast<char*>("A scope's edges in C (the base of stroboscope.annotate).")},
    {0, nullptr}};

PyType_Spec g_spec = {"stroboscope._core.ScopeEdges", sizeof(ScopeEdgesObject), 0,
                      Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, g_slots};

}  // namespace

void register_scope_edges(py::module_& m) {
  m.add_object("ScopeEdges", py::reinterpret_steal<py::object>(PyType_FromSpec(&g_spec)));
  m.def(
      "scope_edges_setup",
      [](const py::object& stack_var, const py::object& labels_var, const py::type& frame_type,
         const py::object& bind_asyncio) {
        if (!PyContextVar_CheckExact(stack_var.ptr()) ||
            !PyContextVar_CheckExact(labels_var.ptr())) {
          throw py::type_error("scope_edges_setup(): stack_var and labels_var must be ContextVars");
        }
        if (!PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(frame_type.ptr()),
                              &PyTuple_Type) ||
            !PyCallable_Check(bind_asyncio.ptr())) {
          throw py::type_error(
              "scope_edges_setup(): frame_type must be a tuple type, bind_asyncio a callable");
        }
        if (g.stack_var != nullptr) {
          throw std::runtime_error("scope_edges_setup(): already set up");
        }
        g.stack_var = Py_NewRef(stack_var.ptr());
        g.labels_var = Py_NewRef(labels_var.ptr());
        g.frame_type = reinterpret_cast<PyTypeObject*>(Py_NewRef(frame_type.ptr()));
        g.bind_asyncio = Py_NewRef(bind_asyncio.ptr());
        g.asyncio_name = PyUnicode_InternFromString("asyncio");
        g.enter_slow = PyUnicode_InternFromString("_enter_slow");
        g.exit_slow = PyUnicode_InternFromString("_exit_slow");
        g.close = PyUnicode_InternFromString("_close");
      },
      py::arg("stack_var"), py::arg("labels_var"), py::arg("frame_type"),
      py::arg("bind_asyncio"),
      "Hand the scopes room's stack, labels, frame type and asyncio binder to ScopeEdges (once).");
  m.def(
      "scope_edges_mode",
      [](int mode) {
        if (mode < kOff || mode > kPython) {
          throw py::value_error("scope_edges_mode(): mode must be 0 (off), 1 (fast) or 2 "
                                "(Python), got " + std::to_string(mode));
        }
        if (mode == kFast && g.stack_var == nullptr) {
          throw std::runtime_error("scope_edges_mode(): scope_edges_setup() first");
        }
        g.mode = mode;
      },
      py::arg("mode"),
      "Which path scope edges take: 0 nothing records, 1 C, 2 the Python path.");
  m.def(
      "scope_edges_pending",
      [](const std::vector<std::uint64_t>& sids) {
        if (sids.size() > static_cast<std::size_t>(Setup::kMaxPending)) {
          throw py::value_error("scope_edges_pending(): at most " +
                                std::to_string(Setup::kMaxPending) + " stacks, got " +
                                std::to_string(sids.size()));
        }
        for (std::size_t i = 0; i < sids.size(); ++i) g.pending[i] = sids[i];
        g.n_pending = static_cast<int>(sids.size());
      },
      py::arg("sids"),
      "The stacks holding a frame another thread closed: their scopes take the Python path.");
}

}  // namespace stroboscope::bindings
