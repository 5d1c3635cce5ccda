// The spool file: header, schema, and the MAP_SHARED mapping the ring lives in.
#include "stroboscope/spool.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string_view>
#include <system_error>

#include "stroboscope/clock.hpp"

namespace stroboscope {
namespace {

static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
              "the spool's counters are shared through a file mapping: they must be lock-free");
static_assert(sizeof(std::atomic<std::uint64_t>) == sizeof(std::uint64_t));

constexpr std::size_t kPage = kSpoolPage;
constexpr std::size_t kSchemaOffset = kSpoolSchemaOffset;
constexpr std::size_t kWriteBeginOffset = kSpoolWriteBeginOffset;
constexpr std::size_t kHeadOffset = kSpoolHeadOffset;

constexpr std::size_t field_offset(const char* name) {
  for (const SpoolField& f : kSpoolHeaderFields) {
    if (std::string_view(f.name) == name) return f.offset;
  }
  return static_cast<std::size_t>(-1);
}

template <typename T>
void put(char* base, std::size_t offset, T value) {
  std::memcpy(base + offset, &value, sizeof value);
}

std::string schema_text(const std::vector<ColumnSpec>& columns) {
  std::string text;
  for (const ColumnSpec& c : columns) {
    for (const std::string* field : {&c.name, &c.unit}) {
      if (field->find_first_of("\t\n") != std::string::npos) {
        throw std::invalid_argument("column name or unit with a tab or newline: " + *field);
      }
    }
    text += c.name + '\t' + c.unit + '\t' + dtype_name(c.dtype) + '\t' + kind_name(c.kind) + '\n';
  }
  return text;
}

// Removes the file this run created at `path`, unless what is there now is another file (someone
// renamed ours away and put theirs in its place): only the inode behind `fd` is unlinked.
void remove_created(int fd, const std::string& path) noexcept {
  struct stat ours{};
  struct stat there{};
  if (::fstat(fd, &ours) != 0 || ::lstat(path.c_str(), &there) != 0) return;
  if (ours.st_dev == there.st_dev && ours.st_ino == there.st_ino) ::unlink(path.c_str());
}

}  // namespace

RingStorage create_spool(const std::string& path, const std::vector<ColumnSpec>& columns,
                         std::uint64_t capacity, const SpoolInfo& info) {
  const std::string schema = schema_text(columns);
  const std::size_t header = ((kSchemaOffset + schema.size() + kPage - 1) / kPage) * kPage;
  const std::size_t ncols = columns.size();
  // Checked before the file exists: a wrapped product would size the file too small for the
  // ring that is then mapped over it (storage_words throws std::length_error).
  std::size_t total = 0;
  if (__builtin_mul_overflow(Ring::storage_words(ncols, capacity), sizeof(std::uint64_t), &total) ||
      __builtin_add_overflow(total, header, &total)) {
    throw std::length_error("spool size overflows: too many columns times rows");
  }

  // O_EXCL: two recorders racing for one path cannot both get it (the loser gets EEXIST and the
  // winner's file is untouched); O_NOFOLLOW: a planted symlink is refused, not followed.
  const int fd =
      ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    const int err = errno;
    if (err == EEXIST) {
      throw SpoolCreateError(err,
                             "spool already exists (another recording may be writing it: "
                             "recover it or remove it, then start again)",
                             path);
    }
    throw SpoolCreateError(err, "cannot create spool", path);
  }
  // From here the file is ours: any failure removes it (a headerless full-size file left behind
  // would block the next run) and reports the errno taken before the cleanup.
  const auto fail = [fd, &path](int err, const std::string& what) {
    remove_created(fd, path);
    ::close(fd);
    return SpoolCreateError(err, what, path);
  };
  // The lock lives as long as the fd, which the storage keeps until the ring goes: other
  // processes can tell a live spool from a leftover one (flock LOCK_SH fails on a live one).
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) throw fail(errno, "cannot lock spool");
  if (::fchmod(fd, 0600) != 0) throw fail(errno, "cannot set mode 0600 on spool");
  // Reserve the blocks now (posix_fallocate also sets the size, zero-filled): a sparse file would
  // allocate them from inside Ring::push, and a full filesystem would then kill the process with
  // SIGBUS instead of failing here with a message.
  if (const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(total)); rc != 0) {
    throw fail(rc, "cannot reserve " + std::to_string(total) + " bytes for spool");
  }
  // MAP_POPULATE: fault every page in now, not on the sampler's first lap.
  void* map =
      ::mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (map == MAP_FAILED) throw fail(errno, "cannot map spool");

  char* base = static_cast<char*>(map);
  // posix_fallocate gave zeros: only the header needs writing. Counters are placement-new'd
  // atomics.
  std::memcpy(base, kSpoolMagic, sizeof kSpoolMagic);
  put<std::uint32_t>(base, field_offset("version"), kSpoolVersion);
  put<std::uint32_t>(base, field_offset("header_size"), static_cast<std::uint32_t>(header));
  put<std::uint64_t>(base, field_offset("capacity"), capacity);
  put<std::uint32_t>(base, field_offset("columns"), static_cast<std::uint32_t>(ncols));
  put<std::uint32_t>(base, field_offset("schema_size"), static_cast<std::uint32_t>(schema.size()));
  put<std::int64_t>(base, field_offset("anchor_ns"), info.anchor_ns);
  put<std::int64_t>(base, field_offset("interval_ns"), info.interval_ns);
  put<std::int64_t>(base, field_offset("created_ns"), clock_ns(CLOCK_REALTIME));
  put<std::uint32_t>(base, field_offset("pid"), static_cast<std::uint32_t>(::getpid()));
  put<std::uint32_t>(base, field_offset("block_rows"), static_cast<std::uint32_t>(kBlockRows));
  put<std::uint64_t>(base, field_offset("total_size"), static_cast<std::uint64_t>(total));
  std::memcpy(base + kSchemaOffset, schema.data(), schema.size());

  RingStorage storage;
  storage.write_begin = new (base + kWriteBeginOffset) std::atomic<std::uint64_t>(0);
  storage.head = new (base + kHeadOffset) std::atomic<std::uint64_t>(0);
  storage.blocks = reinterpret_cast<std::uint64_t*>(base + header);  // page-aligned
  // Unmapping and closing the fd (which drops the flock) when the ring goes.
  storage.release = [map, total, fd] {
    ::munmap(map, total);
    ::close(fd);
  };
  return storage;
}

}  // namespace stroboscope
