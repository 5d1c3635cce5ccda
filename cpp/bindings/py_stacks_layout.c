/* The offsets the stack reader needs, taken with offsetof from the running Python's own internal
 * headers (Py_BUILD_CORE), so the core reads the layout of the Python it was built for. C, not
 * C++: the internal headers are written for a C compiler. */
#define Py_BUILD_CORE 1
#include <Python.h>

#include <stddef.h>
#include <string.h>

#include "stroboscope/py_stacks_layout.h"

#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>
#include <internal/pycore_interp.h>
#include <internal/pycore_runtime.h>
#define STROBOSCOPE_STACKS_LAYOUT 1
#endif

/* The bits of one field of PyASCIIObject.state: set it to all ones in a zeroed object and see
 * which bits of the word changed (a bit field has no offsetof). */
#define STATE_MASK(field, ones)                                            \
  do {                                                                     \
    PyASCIIObject o;                                                       \
    memset(&o, 0, sizeof o);                                               \
    o.state.field = (ones);                                                \
    memcpy(&mask, (const char*)&o + offsetof(PyASCIIObject, state), 4);    \
  } while (0)

void stroboscope_fill_py_layout(StroboscopePyLayout* out) {
  memset(out, 0, sizeof *out);
  out->version_hex = (uint32_t)PY_VERSION_HEX;
  out->owner_cstack = -1;
#ifdef STROBOSCOPE_STACKS_LAYOUT
  uint32_t mask = 0;
  out->supported = 1;
  out->runtime_interpreters_head = offsetof(_PyRuntimeState, interpreters.head);
  out->interp_next = offsetof(PyInterpreterState, next);
  out->interp_threads_head = offsetof(PyInterpreterState, threads.head);
  out->tstate_next = offsetof(PyThreadState, next);
  out->tstate_native_thread_id = offsetof(PyThreadState, native_thread_id);
  out->tstate_cframe = offsetof(PyThreadState, cframe);
  out->tstate_datastack_chunk = offsetof(PyThreadState, datastack_chunk);
  out->tstate_datastack_top = offsetof(PyThreadState, datastack_top);
  out->tstate_size = sizeof(PyThreadState);
  out->cframe_current_frame = offsetof(_PyCFrame, current_frame);
  out->frame_code = offsetof(_PyInterpreterFrame, f_code);
  out->frame_previous = offsetof(_PyInterpreterFrame, previous);
  out->frame_owner = offsetof(_PyInterpreterFrame, owner);
  out->frame_size = sizeof(_PyInterpreterFrame);
#if PY_VERSION_HEX >= 0x030C0000
  out->owner_cstack = FRAME_OWNED_BY_CSTACK;
#endif
  out->chunk_previous = offsetof(_PyStackChunk, previous);
  out->chunk_size_field = offsetof(_PyStackChunk, size);
  out->chunk_data = offsetof(_PyStackChunk, data);
  out->code_qualname = offsetof(PyCodeObject, co_qualname);
  out->code_filename = offsetof(PyCodeObject, co_filename);
  out->code_firstlineno = offsetof(PyCodeObject, co_firstlineno);
  out->unicode_length = offsetof(PyASCIIObject, length);
  out->unicode_state = offsetof(PyASCIIObject, state);
  out->unicode_ascii_size = sizeof(PyASCIIObject);
  out->unicode_compact_size = sizeof(PyCompactUnicodeObject);
  STATE_MASK(kind, 7);
  out->state_kind_mask = mask;
  STATE_MASK(compact, 1);
  out->state_compact_mask = mask;
  STATE_MASK(ascii, 1);
  out->state_ascii_mask = mask;
#endif
}
