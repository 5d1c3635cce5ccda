// The spool: the sampler's ring kept in a file mapped MAP_SHARED, so that every row written before
// the process dies — by any signal — is in the file (the page cache holds it; the kernel writes it
// back even after a SIGKILL). The file describes itself; stroboscope.recover() reads it.
//
// Layout (native byte order, x86-64/aarch64 little-endian; every offset in bytes):
//
//   0    char[8]  magic "STROBSPL"
//   8    u32      format version (kSpoolVersion)
//   12   u32      header size H (a multiple of 4096)
//   16   u64      capacity (rows; a power of two)
//   24   u32      columns C (ring columns: mono_ns first, then the metrics)
//   28   u32      schema text size S
//   32   i64      clock anchor: add to a CLOCK_MONOTONIC ns value to get UTC ns
//   40   i64      sampling interval (ns)
//   48   i64      creation time (UTC ns)
//   56   u32      pid of the writer
//   60   u32      rows per block B (kBlockRows = 64)
//   64   u64      total file size
//   72   u64[7]   reserved for the recorder's figures (ticks, cost, rows lost), written by its
//                 Python side under a sequence word (python/stroboscope/formats/spool_stats.py,
//                 whose layout lives in formats/spool_layout.py): the core leaves them zero and
//                 never writes them
//   128  u64      write_begin: j + 1 is stored before row j's cells are written
//   136  u64      head: j + 1 is stored after row j is complete (rows [0, head) were written)
//   192  char[S]  schema: one line per column, "name\tunit\tdtype\tkind\n"
//   H             blocks: max(1, capacity / B) blocks of Ring::block_words(C) u64 words each;
//                 block k holds rows with (j / B) % blocks == k, row j at r = j % B. In a block
//                 the columns go in groups of 8 (the last may be smaller, n columns): group g
//                 starts at word 520·g and holds, for i < n, column 8g + i's cells at word
//                 64·i + r, then at word 64·n + i its validity word (bit r set = cell present,
//                 Arrow's order), then zero words up to a multiple of 8 (whole cache lines)
//
// Rows [max(0, write_begin - capacity), head) are intact: a crash in the middle of a push leaves
// write_begin = head + 1, which marks the reused slot (the oldest row) as torn; nothing else.
//
// Version 1 (written before the row blocks; stroboscope.recover() still reads it): offset 60 is
// W = ceil(capacity / 64), validity words per column; at H, C arrays of `capacity` u64 cells
// (row j of column c at c·capacity + j % capacity), then C arrays of W validity words (bit j % 64
// of word (j % capacity) / 64 of column c), then one spare word.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "stroboscope/column.hpp"
#include "stroboscope/ring.hpp"

namespace stroboscope {

inline constexpr char kSpoolMagic[8] = {'S', 'T', 'R', 'O', 'B', 'S', 'P', 'L'};
inline constexpr std::uint32_t kSpoolVersion = 2;
// Versions stroboscope.recover() reads (this one and the column-array layout before it).
inline constexpr std::uint32_t kSpoolVersionsRead[] = {1, 2};

// Byte offsets of the header fields above: the one definition of the layout. The bindings export
// them (`_core.SPOOL_LAYOUT`) and the Python reader's generated copy is tested against them.
struct SpoolField {
  const char* name;
  std::size_t offset;
  char type;  // struct-module code: 'I' u32, 'Q' u64, 'q' i64, 's' magic bytes
};
inline constexpr SpoolField kSpoolHeaderFields[] = {
    {"magic", 0, 's'},         {"version", 8, 'I'},      {"header_size", 12, 'I'},
    {"capacity", 16, 'Q'},     {"columns", 24, 'I'},     {"schema_size", 28, 'I'},
    {"anchor_ns", 32, 'q'},    {"interval_ns", 40, 'q'}, {"created_ns", 48, 'q'},
    {"pid", 56, 'I'},          {"block_rows", 60, 'I'},  {"total_size", 64, 'Q'},
    {"write_begin", 128, 'Q'}, {"head", 136, 'Q'},
};
inline constexpr std::size_t kSpoolPage = 4096;           // the header size is a multiple of it
inline constexpr std::size_t kSpoolSchemaOffset = 192;
inline constexpr std::size_t kSpoolWriteBeginOffset = 128;
inline constexpr std::size_t kSpoolHeadOffset = 136;
static_assert(kSpoolHeaderFields[12].offset == kSpoolWriteBeginOffset &&
              kSpoolHeaderFields[13].offset == kSpoolHeadOffset);

struct SpoolInfo {
  std::int64_t anchor_ns;    // realtime - monotonic
  std::int64_t interval_ns;
};

// Why a spool could not be created, sized or mapped: the errno, what was being done, and the path
// (the bindings turn it into the matching OSError subclass with `filename` set).
class SpoolCreateError : public std::system_error {
 public:
  SpoolCreateError(int err, const std::string& what, std::string path)
      : std::system_error(err, std::generic_category(), what + " " + path),
        what_(what),
        path_(std::move(path)) {}
  // What was being done, without the path ("cannot create spool").
  [[nodiscard]] const std::string& action() const noexcept { return what_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  std::string what_;
  std::string path_;
};

// Creates the spool file exclusively (O_EXCL | O_NOFOLLOW: never an existing file or a symlink's
// target) with mode 0600, takes an exclusive flock on it for the life of the storage, reserves its
// blocks, writes its header and maps it. Returns the storage for a Ring of `columns.size()`
// columns and `capacity` rows; its `release` unmaps the file and drops the lock. When anything
// after the creation fails, the file this call created is removed (and only that file: one that
// was there before is never touched). Throws SpoolCreateError (EEXIST when the path exists) or
// std::invalid_argument, with the path in the message.
[[nodiscard]] RingStorage create_spool(const std::string& path,
                                       const std::vector<ColumnSpec>& columns,
                                       std::uint64_t capacity, const SpoolInfo& info);

}  // namespace stroboscope
