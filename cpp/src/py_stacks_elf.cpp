// Where a process keeps `_PyRuntime`: its maps, and the symbol tables of the ELF file that holds
// the interpreter (libpython*.so when Python is built shared, else the executable). Runs when a
// process is first seen, never per sample.
#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <charconv>
#include <cstring>
#include <string>

#include "stroboscope/py_stacks.hpp"

namespace stroboscope::py_stacks {
namespace {

constexpr std::size_t kMaxSections = 4096;
constexpr std::uint64_t kMaxTableBytes = 64ULL << 20;  // a symbol or string table we will read
constexpr std::size_t kMaxTables = 4;  // symbol tables searched (a real image has 1 or 2)

// Whether the file holds [off, off + n): its last byte is read before a buffer of n bytes is
// allocated, so headers that claim a table past the end of a small file cost nothing.
bool file_holds(const ReadAt& read, std::uint64_t off, std::uint64_t n) {
  if (n == 0 || off > UINT64_MAX - n) return n == 0;
  char last;
  return read(off + n - 1, &last, 1);
}

bool looks_like_libpython(const std::string& path) {
  const auto slash = path.rfind('/');
  const std::string_view base = std::string_view(path).substr(slash == std::string::npos ? 0 : slash + 1);
  return base.substr(0, 9) == "libpython" && base.find(".so") != std::string_view::npos;
}

// Looks the names up in one symbol table section; fills the values still 0.
void search_table(const ReadAt& read, const Elf64_Shdr& symtab, const Elf64_Shdr& strtab,
                  const char* const* names, std::size_t n, std::uint64_t* values) {
  if (symtab.sh_entsize != sizeof(Elf64_Sym) || symtab.sh_size > kMaxTableBytes ||
      strtab.sh_size > kMaxTableBytes || strtab.sh_size == 0 ||
      !file_holds(read, symtab.sh_offset, symtab.sh_size) ||
      !file_holds(read, strtab.sh_offset, strtab.sh_size)) {
    return;
  }
  std::vector<Elf64_Sym> syms(symtab.sh_size / sizeof(Elf64_Sym));
  std::string strings(strtab.sh_size, '\0');
  if (!read(symtab.sh_offset, syms.data(), syms.size() * sizeof(Elf64_Sym)) ||
      !read(strtab.sh_offset, strings.data(), strings.size())) {
    return;
  }
  strings.back() = '\0';  // a table cut short still ends in a terminator
  for (const Elf64_Sym& s : syms) {
    if (s.st_shndx == SHN_UNDEF || s.st_name >= strings.size()) continue;
    const char* name = strings.data() + s.st_name;
    for (std::size_t i = 0; i < n; ++i) {
      if (values[i] == 0 && std::strcmp(name, names[i]) == 0) values[i] = s.st_value;
    }
  }
}

std::uint64_t parse_hex(std::string_view s) {
  std::uint64_t v = 0;
  std::from_chars(s.data(), s.data() + s.size(), v, 16);
  return v;
}

}  // namespace

ElfImage elf_find_symbols(const ReadAt& read, const char* const* names, std::size_t n,
                          std::uint64_t* values) {
  ElfImage image;
  for (std::size_t i = 0; i < n; ++i) values[i] = 0;
  Elf64_Ehdr eh{};
  if (!read(0, &eh, sizeof eh) || std::memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
      eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_shentsize != sizeof(Elf64_Shdr) ||
      eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_shnum > kMaxSections) {
    return image;
  }
  image.ok = true;
  image.shared = eh.e_type == ET_DYN;
  for (std::size_t i = 0; i < eh.e_phnum && i < kMaxSections; ++i) {
    Elf64_Phdr ph{};
    if (!read(eh.e_phoff + i * sizeof ph, &ph, sizeof ph)) break;
    if (ph.p_type == PT_LOAD) {
      const std::uint64_t align = ph.p_align > 1 ? ph.p_align : 1;
      image.first_vaddr = ph.p_vaddr & ~(align - 1);
      break;
    }
  }
  if (!file_holds(read, eh.e_shoff, std::uint64_t{eh.e_shnum} * sizeof(Elf64_Shdr))) {
    return image;
  }
  std::vector<Elf64_Shdr> sh(eh.e_shnum);
  if (sh.empty() || !read(eh.e_shoff, sh.data(), sh.size() * sizeof(Elf64_Shdr))) return image;
  // .dynsym first (always there in a shared library), then .symtab (a static build's only one).
  // At most kMaxTables of them: a crafted file with thousands must not cost thousands of reads.
  std::size_t tables = 0;
  for (const std::uint32_t type : {SHT_DYNSYM, SHT_SYMTAB}) {
    for (const Elf64_Shdr& s : sh) {
      if (s.sh_type != type || s.sh_link >= sh.size()) continue;
      if (tables++ == kMaxTables) return image;
      search_table(read, s, sh[s.sh_link], names, n, values);
    }
  }
  return image;
}

std::vector<Mapping> parse_maps(std::string_view text) {
  std::vector<Mapping> out;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    // start-end perms offset dev inode [path]
    Mapping m;
    const auto dash = line.find('-');
    const auto sp1 = line.find(' ');
    if (dash == std::string_view::npos || sp1 == std::string_view::npos || dash > sp1) continue;
    m.start = parse_hex(line.substr(0, dash));
    m.end = parse_hex(line.substr(dash + 1, sp1 - dash - 1));
    std::size_t pos = sp1 + 1;
    std::string_view fields[4];
    for (auto& f : fields) {
      const auto next = line.find(' ', pos);
      f = line.substr(pos, next == std::string_view::npos ? std::string_view::npos : next - pos);
      pos = next == std::string_view::npos ? line.size() : next + 1;
    }
    m.offset = parse_hex(fields[1]);
    const auto path_at = line.find_first_not_of(' ', pos);
    if (path_at != std::string_view::npos) m.path = std::string(line.substr(path_at));
    out.push_back(std::move(m));
  }
  return out;
}

RuntimeAddress find_runtime(int pid, const char* proc_root, ElfCache* cache) {
  RuntimeAddress found;
  const std::string dir = std::string(proc_root) + "/" + std::to_string(pid);
  std::string text;
  {
    const int fd = ::open((dir + "/maps").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      found.why = std::string("cannot read its maps: ") + std::strerror(errno);
      return found;
    }
    char buf[65536];
    for (;;) {
      const ssize_t r = ::read(fd, buf, sizeof buf);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      text.append(buf, static_cast<std::size_t>(r));
    }
    ::close(fd);
  }
  char exe[4096];
  const ssize_t exe_len = ::readlink((dir + "/exe").c_str(), exe, sizeof exe - 1);
  const std::string exe_path = exe_len > 0 ? std::string(exe, static_cast<std::size_t>(exe_len)) : "";
  const std::vector<Mapping> maps = parse_maps(text);
  // Candidates: a libpython first (a shared build keeps the runtime there), then the executable.
  std::vector<std::string> candidates;
  for (const Mapping& m : maps) {
    if (looks_like_libpython(m.path)) {
      candidates.push_back(m.path);
      break;
    }
  }
  if (!exe_path.empty()) candidates.push_back(exe_path);
  static const char* const kNames[] = {"_PyRuntime", "Py_Version"};
  for (const std::string& path : candidates) {
    // Through /proc/PID/root: the file as the target sees it (another mount namespace too).
    int fd = ::open((dir + "/root" + path).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    const ReadAt read = [fd](std::uint64_t off, void* buf, std::size_t n) {
      std::size_t done = 0;
      while (done < n) {
        const ssize_t r = ::pread(fd, static_cast<char*>(buf) + done, n - done,
                                  static_cast<off_t>(off + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        done += static_cast<std::size_t>(r);
      }
      return true;
    };
    ElfLookup lookup;
    struct stat st {};
    std::string key;
    if (cache != nullptr && ::fstat(fd, &st) == 0) {
      key = path + "|" + std::to_string(st.st_dev) + "|" + std::to_string(st.st_ino) + "|" +
            std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec);
      const auto it = cache->find(key);
      if (it != cache->end()) {
        lookup = it->second;
        key.clear();  // found: nothing to add
      } else {
        lookup.image = elf_find_symbols(read, kNames, 2, lookup.values);
      }
    } else {
      lookup.image = elf_find_symbols(read, kNames, 2, lookup.values);
    }
    ::close(fd);
    if (cache != nullptr && !key.empty()) cache->emplace(key, lookup);
    const ElfImage& image = lookup.image;
    const std::uint64_t* values = lookup.values;
    if (!image.ok || values[0] == 0) continue;
    std::uint64_t bias = 0;
    if (image.shared) {
      // The mapping of the file's start (offset 0) is where its first segment was loaded.
      bool mapped = false;
      for (const Mapping& m : maps) {
        if (m.path == path && m.offset == 0) {
          bias = m.start - image.first_vaddr;
          mapped = true;
          break;
        }
      }
      if (!mapped) continue;
    }
    found.runtime = bias + values[0];
    found.version = values[1] == 0 ? 0 : bias + values[1];
    found.image = path;
    return found;
  }
  found.why = candidates.empty() ? "no executable or libpython mapped"
                                 : "no _PyRuntime symbol in " + candidates.back() +
                                       (candidates.size() > 1 ? " or " + candidates.front() : "") +
                                       " (not CPython, or its symbols are stripped)";
  return found;
}

}  // namespace stroboscope::py_stacks
