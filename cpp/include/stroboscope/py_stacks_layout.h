/* Where CPython keeps what the stack reader walks: offsets of struct members, filled by the
 * bindings (cpp/bindings/py_stacks_layout.c) from the running Python's own internal headers, so
 * the layout the core reads is the build's, not a copy of it. Plain C, no Python header: the core
 * stays free of Python, and the struct is all it knows about the interpreter. */
#ifndef STROBOSCOPE_PY_STACKS_LAYOUT_H
#define STROBOSCOPE_PY_STACKS_LAYOUT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct StroboscopePyLayout {
  uint32_t version_hex; /* PY_VERSION_HEX of the Python the extension was built for */
  int32_t supported;    /* 1 when the reader walks this version's layout (3.11, 3.12) */
  /* _PyRuntimeState */
  int64_t runtime_interpreters_head;
  /* PyInterpreterState */
  int64_t interp_next;
  int64_t interp_threads_head;
  /* PyThreadState */
  int64_t tstate_next;
  int64_t tstate_native_thread_id;
  int64_t tstate_cframe; /* _PyCFrame* (3.11, 3.12) */
  int64_t tstate_datastack_chunk;
  int64_t tstate_datastack_top;
  int64_t tstate_size;
  /* _PyCFrame */
  int64_t cframe_current_frame;
  /* _PyInterpreterFrame */
  int64_t frame_code;
  int64_t frame_previous;
  int64_t frame_owner; /* a char */
  int64_t frame_size;
  int64_t owner_cstack; /* FRAME_OWNED_BY_CSTACK (a shim frame, 3.12), -1 where none */
  /* _PyStackChunk: the frames start after its header */
  int64_t chunk_previous;
  int64_t chunk_size_field;
  int64_t chunk_data;
  /* PyCodeObject */
  int64_t code_qualname;
  int64_t code_filename;
  int64_t code_firstlineno; /* an int */
  /* PyASCIIObject / PyCompactUnicodeObject */
  int64_t unicode_length;
  int64_t unicode_state; /* a 32-bit word of bit fields */
  int64_t unicode_ascii_size;   /* data of a compact ASCII string starts here */
  int64_t unicode_compact_size; /* data of another compact string starts here */
  uint32_t state_kind_mask;
  uint32_t state_compact_mask;
  uint32_t state_ascii_mask;
} StroboscopePyLayout;

#ifdef __cplusplus
}
#endif

#endif
