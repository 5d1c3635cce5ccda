// The stack reader's pieces that need no interpreter: the maps parser, the ELF symbol lookup with
// the load bias (on this test's own executable, which defines the two symbols the reader looks
// for), and the decoding of str objects of each kind from hand-made bytes.
#include <elf.h>
#include <unistd.h>

#include <algorithm>
#include <deque>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "check.hpp"
#include "stroboscope/py_stacks.hpp"

// Stand-ins for CPython's symbols: find_runtime must find these, at their run-time addresses.
extern "C" {
__attribute__((used)) char _PyRuntime[64] = {1};
__attribute__((used)) std::uint32_t Py_Version = 0x030B07F0;  // not const: external linkage
}

namespace sp = stroboscope::py_stacks;

namespace {

void test_parse_maps() {
  const auto maps = sp::parse_maps(
      "55d0c0a00000-55d0c0a02000 r--p 00000000 fe:00 260131                     /usr/bin/cat\n"
      "7f1e2c000000-7f1e2c021000 rw-p 00000000 00:00 0 \n"
      "7f1e2d400000-7f1e2d600000 r-xp 00200000 fe:00 1234   /lib/libpython3.11.so.1.0\n"
      "7ffc1c5e7000-7ffc1c608000 rw-p 00000000 00:00 0                          [stack]\n"
      "garbage\n");
  CHECK_EQ(maps.size(), 4U);
  CHECK_EQ(maps[0].start, 0x55d0c0a00000ULL);
  CHECK_EQ(maps[0].end, 0x55d0c0a02000ULL);
  CHECK(maps[0].path == "/usr/bin/cat");
  CHECK(maps[1].path.empty());
  CHECK_EQ(maps[2].offset, 0x200000ULL);
  CHECK(maps[2].path == "/lib/libpython3.11.so.1.0");
  CHECK(maps[3].path == "[stack]");
}

void test_find_runtime_in_own_executable() {
  const sp::RuntimeAddress found = sp::find_runtime(static_cast<int>(::getpid()));
  CHECK(found.why.empty());
  CHECK_EQ(found.runtime, reinterpret_cast<std::uint64_t>(&_PyRuntime[0]));
  CHECK_EQ(found.version, reinterpret_cast<std::uint64_t>(&Py_Version));
  // The same through the cache (a second process of one tree).
  sp::ElfCache cache;
  const auto a = sp::find_runtime(static_cast<int>(::getpid()), "/proc", &cache);
  const auto b = sp::find_runtime(static_cast<int>(::getpid()), "/proc", &cache);
  CHECK_EQ(cache.size(), 1U);
  CHECK_EQ(a.runtime, found.runtime);
  CHECK_EQ(b.runtime, found.runtime);
  // A process that is gone: a reason, no address.
  const auto gone = sp::find_runtime(0x3fffffff);
  CHECK_EQ(gone.runtime, 0U);
  CHECK(!gone.why.empty());
}

void test_elf_rejects_what_is_not_elf() {
  const std::string junk = "not an ELF file at all, just some bytes";
  const sp::ReadAt read = [&](std::uint64_t off, void* buf, std::size_t n) {
    if (off + n > junk.size()) return false;
    std::memcpy(buf, junk.data() + off, n);
    return true;
  };
  const char* names[] = {"_PyRuntime"};
  std::uint64_t values[1] = {7};
  CHECK(!sp::elf_find_symbols(read, names, 1, values).ok);
  CHECK_EQ(values[0], 0U);
}

// CPython 3.11's layout of a str object (what py_stacks_layout.c takes from the headers).
StroboscopePyLayout layout() {
  StroboscopePyLayout l{};
  l.unicode_length = 16;
  l.unicode_state = 32;
  l.unicode_ascii_size = 48;
  l.unicode_compact_size = 72;
  l.state_kind_mask = 0x1C;  // interned:2, kind:3, compact:1, ascii:1, ready:1
  l.state_compact_mask = 0x20;
  l.state_ascii_mask = 0x40;
  return l;
}

std::vector<std::uint8_t> str_object(const StroboscopePyLayout& l, bool ascii, unsigned kind,
                                     const std::vector<std::uint32_t>& cps, bool compact = true) {
  const std::size_t data = static_cast<std::size_t>(ascii ? l.unicode_ascii_size
                                                          : l.unicode_compact_size);
  std::vector<std::uint8_t> obj(data + (cps.size() + 1) * kind, 0);
  const std::int64_t n = static_cast<std::int64_t>(cps.size());
  std::memcpy(obj.data() + l.unicode_length, &n, 8);
  const std::uint32_t state = (kind << 2) | (compact ? 0x20U : 0U) | (ascii ? 0x40U : 0U) | 0x80U;
  std::memcpy(obj.data() + l.unicode_state, &state, 4);
  for (std::size_t i = 0; i < cps.size(); ++i) {
    std::memcpy(obj.data() + data + i * kind, &cps[i], kind);  // little-endian
  }
  return obj;
}

std::string decode(const std::vector<std::uint8_t>& obj, long* rc = nullptr) {
  char out[256];
  std::size_t need = 0;
  const long n = sp::unicode_utf8(obj.data(), obj.size(), layout(), out, sizeof out, &need);
  if (rc != nullptr) *rc = n;
  return n < 0 ? std::string() : std::string(out, static_cast<std::size_t>(n));
}

void test_unicode_kinds() {
  const auto l = layout();
  CHECK(decode(str_object(l, true, 1, {'f', 'o', 'o', '.', 'b'})) == "foo.b");
  CHECK(decode(str_object(l, false, 1, {'c', 0xE9})) == "c\xC3\xA9");              // é, UCS1
  CHECK(decode(str_object(l, false, 2, {0x3BB, 'x'})) == "\xCE\xBBx");              // λx, UCS2
  CHECK(decode(str_object(l, false, 4, {0x1F600})) == "\xF0\x9F\x98\x80");          // 😀, UCS4
  CHECK(decode(str_object(l, false, 2, {0xD800})) == "\xEF\xBF\xBD");  // a lone surrogate: U+FFFD
  long rc = 0;
  decode(str_object(l, true, 1, {'a'}, false), &rc);  // not compact: refused
  CHECK_EQ(rc, -1);
  auto cut = str_object(l, false, 4, {'a', 'b', 'c'});
  const std::size_t full = cut.size() - 4;  // the object without its terminator
  cut.resize(80);
  char out[16];
  std::size_t need = 0;
  CHECK_EQ(sp::unicode_utf8(cut.data(), cut.size(), l, out, sizeof out, &need), -2);
  CHECK_EQ(need, full);
  // A length past what a name can be, or a kind that does not exist: refused.
  auto bad = str_object(l, true, 1, {'a'});
  const std::int64_t huge = std::int64_t{1} << 40;
  std::memcpy(bad.data() + l.unicode_length, &huge, 8);
  decode(bad, &rc);
  CHECK_EQ(rc, -1);
  auto kind3 = str_object(l, false, 1, {'a'});
  const std::uint32_t state = (3U << 2) | 0x20U;
  std::memcpy(kind3.data() + l.unicode_state, &state, 4);
  decode(kind3, &rc);
  CHECK_EQ(rc, -1);
  // Output cut at a whole character.
  char small[3];
  const auto two = str_object(l, false, 2, {0x3BB, 0x3BB});
  CHECK_EQ(sp::unicode_utf8(two.data(), two.size(), l, small, sizeof small, &need), 2);
}


// A string of a name that claims a huge length: only what `cap` can use is asked for and read.
void test_unicode_huge_length_reads_only_what_fits() {
  const auto l = layout();
  auto obj = str_object(l, true, 1, std::vector<std::uint32_t>(64, 'n'));
  const std::int64_t claimed = 500000;  // within what is a name by length, far past the output
  std::memcpy(obj.data() + l.unicode_length, &claimed, 8);
  char out[16];
  std::size_t need = 0;
  const auto header = static_cast<std::size_t>(l.unicode_ascii_size);
  CHECK_EQ(sp::unicode_utf8(obj.data(), header, l, out, sizeof out, &need), -2);
  CHECK_EQ(need, header + sizeof out);  // the 16 characters that fit, not 500,000
  CHECK_EQ(sp::unicode_utf8(obj.data(), need, l, out, sizeof out, &need), 16);
  CHECK(std::string(out, 16) == std::string(16, 'n'));
}

// -- ELF files that lie about their sizes (the recorded command's files are not trusted) -------

struct FakeFile {
  std::vector<std::uint8_t> bytes;
  std::size_t reads = 0;
  std::size_t largest = 0;  // the largest read asked for (bytes): what the reader allocated
  sp::ReadAt reader() {
    return [this](std::uint64_t off, void* buf, std::size_t n) {
      ++reads;
      largest = std::max(largest, n);
      if (off > bytes.size() || n > bytes.size() - off) return false;
      std::memcpy(buf, bytes.data() + off, n);
      return true;
    };
  }
};

// An ELF64 header with `shnum` section headers at its end, each given by `section(i)`.
template <typename F>
FakeFile elf_with_sections(std::size_t shnum, std::size_t shnum_claimed, F section) {
  FakeFile f;
  Elf64_Ehdr eh{};
  std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
  eh.e_ident[EI_CLASS] = ELFCLASS64;
  eh.e_ident[EI_DATA] = ELFDATA2LSB;
  eh.e_type = ET_DYN;
  eh.e_phentsize = sizeof(Elf64_Phdr);
  eh.e_shentsize = sizeof(Elf64_Shdr);
  eh.e_shoff = sizeof eh + 64;  // a string table of 64 bytes first
  eh.e_shnum = static_cast<std::uint16_t>(shnum_claimed);
  f.bytes.resize(sizeof eh + 64 + shnum * sizeof(Elf64_Shdr));
  std::memcpy(f.bytes.data(), &eh, sizeof eh);
  std::memcpy(f.bytes.data() + sizeof eh, "\0_PyRuntime\0", 12);
  for (std::size_t i = 0; i < shnum; ++i) {
    const Elf64_Shdr sh = section(i);
    std::memcpy(f.bytes.data() + eh.e_shoff + i * sizeof sh, &sh, sizeof sh);
  }
  return f;
}

void test_elf_sizes_past_the_file_allocate_nothing() {
  const char* names[] = {"_PyRuntime"};
  std::uint64_t values[1];
  // A symbol table that claims 60 MiB (under the 64 MiB cap) of a file of a few hundred bytes.
  auto big = elf_with_sections(2, 2, [](std::size_t i) {
    Elf64_Shdr sh{};
    if (i == 0) {
      sh.sh_type = SHT_STRTAB;
      sh.sh_offset = sizeof(Elf64_Ehdr);
      sh.sh_size = 64;
    } else {
      sh.sh_type = SHT_DYNSYM;
      sh.sh_entsize = sizeof(Elf64_Sym);
      sh.sh_size = 60ULL << 20;
      sh.sh_link = 0;
    }
    return sh;
  });
  CHECK(sp::elf_find_symbols(big.reader(), names, 1, values).ok);
  CHECK_EQ(values[0], 0U);
  CHECK(big.largest < 4096);  // the table's last byte probed, not 60 MiB allocated
  // Section headers claimed past the end of the file: not allocated either.
  auto many = elf_with_sections(1, 4000, [](std::size_t) { return Elf64_Shdr{}; });
  sp::elf_find_symbols(many.reader(), names, 1, values);
  CHECK(many.largest < 4000 * sizeof(Elf64_Shdr));
}

void test_elf_many_symbol_tables_are_capped() {
  const char* names[] = {"_PyRuntime"};
  std::uint64_t values[1];
  // 1,000 symbol tables (each a valid empty one over the same strings): a few are searched.
  auto f = elf_with_sections(1000, 1000, [](std::size_t i) {
    Elf64_Shdr sh{};
    sh.sh_type = i == 0 ? SHT_STRTAB : SHT_SYMTAB;
    sh.sh_offset = sizeof(Elf64_Ehdr);
    sh.sh_size = i == 0 ? 64 : sizeof(Elf64_Sym);
    sh.sh_entsize = i == 0 ? 0 : sizeof(Elf64_Sym);
    return sh;
  });
  CHECK(sp::elf_find_symbols(f.reader(), names, 1, values).ok);
  CHECK(f.reads < 40);  // 4 tables of 4 reads each, plus the headers; not 4,000
}

// -- the walker over a fake interpreter in this process's own memory ---------------------------
// The sampler reads this process (pid 0) with process_vm_readv; find_runtime finds the
// `_PyRuntime` above, whose word at offset 8 names a fake interpreter built here from a layout
// of 8-byte fields. So the walk of runtime -> interpreter -> thread states -> frames -> code
// objects -> strings runs on memory the test scripts, crafted as a hostile process would.

StroboscopePyLayout walker_layout() {
  StroboscopePyLayout l = layout();
  l.version_hex = Py_Version & 0xFFFF0000U;
  l.supported = 1;
  l.runtime_interpreters_head = 8;
  l.interp_next = 0;
  l.interp_threads_head = 8;
  l.tstate_next = 0;
  l.tstate_native_thread_id = 8;
  l.tstate_cframe = 16;
  l.tstate_datastack_chunk = 24;
  l.tstate_datastack_top = 32;
  l.tstate_size = 40;
  l.cframe_current_frame = 0;
  l.frame_code = 0;
  l.frame_previous = 8;
  l.frame_owner = 16;
  l.frame_size = 24;
  l.owner_cstack = 3;
  l.chunk_previous = 0;
  l.chunk_size_field = 8;
  l.chunk_data = 16;
  l.code_qualname = 0;
  l.code_filename = 8;
  l.code_firstlineno = 16;
  return l;
}

std::uint64_t addr(const void* p) { return reinterpret_cast<std::uint64_t>(p); }

// Objects of the fake interpreter; every one stays where it was made (deque, no reallocation).
struct FakeInterp {
  std::deque<std::vector<std::uint64_t>> words;
  std::deque<std::vector<std::uint8_t>> strs;
  std::uint64_t* make(std::size_t n) { return words.emplace_back(n, 0).data(); }
  std::uint64_t str(const std::string& s) {
    std::vector<std::uint32_t> cps(s.begin(), s.end());
    return addr(strs.emplace_back(str_object(layout(), true, 1, cps)).data());
  }
  std::uint64_t code(const std::string& name, std::uint64_t line) {
    std::uint64_t* c = make(3);
    c[0] = str(name);
    c[1] = str("fake.py");
    c[2] = line;
    return addr(c);
  }
  // A frame (outside any data-stack chunk) running `code`, called from `previous`.
  std::uint64_t* frame(std::uint64_t code, std::uint64_t previous) {
    std::uint64_t* f = make(3);
    f[0] = code;
    f[1] = previous;
    return f;
  }
  // A thread state whose current frame is `leaf` (no chunk: each frame read alone).
  std::uint64_t* tstate(std::uint64_t tid, std::uint64_t leaf) {
    std::uint64_t* cframe = make(1);
    cframe[0] = leaf;
    std::uint64_t* ts = make(5);
    ts[1] = tid;
    ts[2] = addr(cframe);
    return ts;
  }
};

struct Round {
  std::vector<sp::StackSample> samples;
  std::vector<std::string> strings;
  std::vector<sp::StackFrameRow> rows;
  sp::StackStats stats;
  // The function names of stack `id`, root first.
  std::vector<std::string> functions(std::int32_t id) const {
    std::vector<std::string> out;
    for (const auto& r : rows) {
      if (r.stack_id == id) out.push_back(strings.at(static_cast<std::size_t>(r.function)));
    }
    return out;
  }
};

// One sampling round of this process with the fake interpreter whose first thread is `head`
// (and a second interpreter whose first thread is `head2`, when given).
Round sample_fake(const std::uint64_t* head, const std::uint64_t* head2 = nullptr) {
  static FakeInterp keep;  // the interpreter objects outlive the round
  std::uint64_t* interp = keep.make(2);
  interp[1] = addr(head);
  if (head2 != nullptr) {
    std::uint64_t* second = keep.make(2);
    second[1] = addr(head2);
    interp[0] = addr(second);
  }
  const std::uint64_t at = addr(interp);
  std::memcpy(&_PyRuntime[8], &at, 8);
  sp::StackSampler sampler(walker_layout(), 0, false, 1'000'000, 64);
  sampler.sample_once();
  Round r;
  r.samples.resize(64);
  r.samples.resize(sampler.drain(r.samples.data(), r.samples.size()));
  std::size_t stacks = 0;
  sampler.published(0, 0, &r.strings, &r.rows, &stacks);
  r.stats = sampler.stats();
  return r;
}

const std::uint64_t kTid = static_cast<std::uint64_t>(::getpid());

void test_walker_reads_a_fake_stack() {
  FakeInterp fi;
  std::uint64_t* root = fi.frame(fi.code("main", 1), 0);
  std::uint64_t* mid = fi.frame(fi.code("work", 10), addr(root));
  std::uint64_t* leaf = fi.frame(fi.code("leaf", 20), addr(mid));
  const Round r = sample_fake(fi.tstate(kTid, addr(leaf)));
  CHECK_EQ(r.samples.size(), 1U);
  CHECK_EQ(r.samples[0].tid, static_cast<std::int32_t>(kTid));
  CHECK(r.functions(r.samples[0].stack_id) == (std::vector<std::string>{"main", "work", "leaf"}));
  CHECK_EQ(r.stats.torn, 0U);
}

void test_walker_drops_a_frame_chain_that_loops() {
  FakeInterp fi;
  std::uint64_t* a = fi.frame(fi.code("a", 1), 0);
  std::uint64_t* b = fi.frame(fi.code("b", 2), addr(a));
  a[1] = addr(b);  // a -> b -> a -> ...
  const Round r = sample_fake(fi.tstate(kTid, addr(b)));
  CHECK_EQ(r.samples.size(), 0U);  // not a 1,024-frame stack of a, b, a, b
  CHECK_EQ(r.stats.torn, 1U);
  CHECK_EQ(r.stats.truncated, 0U);
}

void test_walker_drops_a_thread_list_that_loops() {
  FakeInterp fi;
  std::uint64_t* f = fi.frame(fi.code("spin", 1), 0);
  std::uint64_t* t1 = fi.tstate(kTid, addr(f));
  std::uint64_t* t2 = fi.tstate(kTid, addr(f));
  t1[0] = addr(t2);
  t2[0] = addr(t1);  // t1 -> t2 -> t1 -> ...
  const Round r = sample_fake(t1);
  CHECK(r.stats.threads_read < 8);  // not 1,024 copies of two states
  CHECK_EQ(r.samples.size(), 0U);
  CHECK_EQ(r.stats.torn, 1U);
}

void test_walker_caps_the_thread_list() {
  FakeInterp fi;
  std::vector<std::uint64_t*> states;
  for (int i = 0; i < 1100; ++i) states.push_back(fi.tstate(0, 0));  // tid 0: not walked
  for (std::size_t i = 0; i + 1 < states.size(); ++i) states[i][0] = addr(states[i + 1]);
  const Round r = sample_fake(states[0]);
  CHECK_EQ(r.stats.threads_read, sp::StackSampler::kMaxThreads);
  CHECK_EQ(r.stats.threads_capped, 1U);
  // Two interpreters, of 600 and 500: the cap is the process's, not each interpreter's.
  states[599][0] = 0;
  const Round two = sample_fake(states[0], states[600]);
  CHECK_EQ(two.stats.threads_read, sp::StackSampler::kMaxThreads);
  CHECK_EQ(two.stats.threads_capped, 1U);
}

void test_walker_cuts_a_long_name() {
  FakeInterp fi;
  const std::string longest(5000, 'q');
  std::uint64_t* f = fi.frame(fi.code(longest, 1), 0);
  const Round r = sample_fake(fi.tstate(kTid, addr(f)));
  CHECK_EQ(r.samples.size(), 1U);
  const auto names = r.functions(r.samples[0].stack_id);
  CHECK_EQ(names.size(), 1U);
  CHECK(names[0] == longest.substr(0, 1024));
}

// Pointers that point anywhere: a frame's `previous` near 2^64 next to a copied data-stack chunk
// (must not wrap into the copy), and a code object pointer to an unmapped page.
void test_walker_survives_wild_pointers() {
  FakeInterp fi;
  std::uint64_t* chunk = fi.make(8);  // header (previous, size) + one frame + room
  chunk[1] = 64;
  chunk[2] = fi.code("in_chunk", 1);
  chunk[3] = ~std::uint64_t{7};  // previous = 2^64 - 8
  std::uint64_t* t1 = fi.tstate(kTid, addr(&chunk[2]));
  t1[3] = addr(chunk);
  t1[4] = addr(chunk) + 64;
  std::uint64_t* bad_code = fi.frame(16, 0);  // code object at address 16
  std::uint64_t* t2 = fi.tstate(kTid + 1, addr(bad_code));
  t1[0] = addr(t2);
  const Round r = sample_fake(t1);
  CHECK_EQ(r.samples.size(), 0U);
  CHECK(r.stats.reads_failed >= 2);
  CHECK_EQ(r.stats.threads_read, 2U);
}
}  // namespace

int main() {
  test_parse_maps();
  test_find_runtime_in_own_executable();
  test_elf_rejects_what_is_not_elf();
  test_unicode_kinds();
  test_unicode_huge_length_reads_only_what_fits();
  test_elf_sizes_past_the_file_allocate_nothing();
  test_elf_many_symbol_tables_are_capped();
  test_walker_reads_a_fake_stack();
  test_walker_drops_a_frame_chain_that_loops();
  test_walker_drops_a_thread_list_that_loops();
  test_walker_caps_the_thread_list();
  test_walker_cuts_a_long_name();
  test_walker_survives_wild_pointers();
  TEST_MAIN_END();
}
