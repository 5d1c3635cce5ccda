// Arrow export under allocation failure: every allocation the export makes is made to fail in
// turn (a replaced global operator new that throws std::bad_alloc at the N-th call), and each
// failure must leave the out-struct released (release == nullptr), nothing allocated and no
// reference to the frame held. The core has no test-only branch for this: only the allocator is
// replaced, in this binary.
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "check.hpp"
#include "stroboscope/arrow_export.hpp"
#include "stroboscope/sampler.hpp"

// ---- an allocator that counts live blocks and fails on request ---------------------------------
namespace {
// Plain globals: the export runs on this thread only, and no other thread allocates while the
// test measures (the sampler below is never started; its ticks run inline).
long g_live = 0;        // blocks allocated and not yet freed, over the whole run
long g_countdown = -1;  // the allocation that fails: 1 = the next one; <= 0 = none

void* counted_alloc(std::size_t n) {
  if (g_countdown > 0 && --g_countdown == 0) throw std::bad_alloc();
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  ++g_live;
  return p;
}
void counted_free(void* p) noexcept {
  if (p == nullptr) return;
  --g_live;
  std::free(p);
}
}  // namespace
void* operator new(std::size_t n) { return counted_alloc(n); }
void* operator new[](std::size_t n) { return counted_alloc(n); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_free(p); }

using namespace stroboscope;

namespace {

class TwoColumns : public Source {
 public:
  TwoColumns() : Source("src") {
    add_column("src.a_rather_long_column_name_past_sso", "count", DType::kInt64, Kind::kCounter,
               "a help text long enough to live on the heap, not in the string itself");
    add_column("src.b", "1", DType::kFloat64, Kind::kGauge, "every other read is null");
  }
  void read(RowWriter row, std::int64_t) noexcept override {
    ++n_;
    row.set_i64(0, n_);
    if (n_ % 2 == 0) row.set_f64(1, 0.5 * static_cast<double>(n_));
    ok();
  }

 private:
  std::int64_t n_ = 0;
};

std::shared_ptr<const Frame> make_frame() {
  std::vector<SourceSlot> slots;
  slots.push_back(SourceSlot{std::make_unique<TwoColumns>(), 1});
  Sampler s(std::move(slots), 1'000'000, 16);
  s.run_ticks_inline(5);
  return s.snapshot();  // outlives the sampler: the frame owns its buffers
}

// Runs `attempt(out)` with the k-th allocation failing, for k = 1, 2, ... until it succeeds.
// After each failure: `out` released, no block left, the frame back to its `owners` (ours, and
// a stream's). Returns how many allocations the successful run made (the failure points covered).
template <typename Struct, typename Attempt>
long fail_each_allocation(const std::shared_ptr<const Frame>& frame, Attempt attempt,
                          long owners = 1) {
  for (long k = 1; k < 10000; ++k) {
    Struct out;
    std::memset(&out, 0xA5, sizeof out);  // garbage, as a consumer's uninitialised struct
    const long live_before = g_live;
    g_countdown = k;
    const bool failed = !attempt(&out);
    const bool reached = g_countdown == 0;  // the k-th allocation happened (and threw)
    g_countdown = -1;
    if (failed) {
      CHECK(reached);
      CHECK(out.release == nullptr);
      CHECK_EQ(g_live, live_before);
      CHECK_EQ(frame.use_count(), owners);
      continue;
    }
    CHECK(!reached);
    CHECK(out.release != nullptr);
    out.release(&out);
    CHECK(out.release == nullptr);
    CHECK_EQ(g_live, live_before);
    CHECK_EQ(frame.use_count(), owners);
    return k - 1;
  }
  CHECK(false);  // never succeeded
  return 0;
}

template <typename Struct>
auto throwing(void (*export_fn)(const std::shared_ptr<const Frame>&, Struct*),
              const std::shared_ptr<const Frame>& frame) {
  return [export_fn, &frame](Struct* out) {
    try {
      export_fn(frame, out);
      return true;
    } catch (const std::bad_alloc&) {
      return false;
    }
  };
}

void test_direct_exports() {
  const auto frame = make_frame();
  CHECK_EQ(frame->length(), 5);
  CHECK_EQ(frame->columns().size(), 4u);  // time, mono_ns, src.a..., src.b
  // The schema allocates per child (its owner, the name, the metadata and its pieces): every one
  // of those must be a point where the export can fail cleanly.
  const long schema_allocs = fail_each_allocation<ArrowSchema>(frame, throwing(export_schema, frame));
  CHECK(schema_allocs >= 2 + 4 * 2);  // owner + children vectors, and at least two per child
  // The array: its owner, two vectors, and one owner per child.
  const long array_allocs = fail_each_allocation<ArrowArray>(frame, throwing(export_array, frame));
  CHECK(array_allocs >= 3 + 4);
  const long stream_allocs =
      fail_each_allocation<ArrowArrayStream>(frame, throwing(export_stream, frame));
  CHECK_EQ(stream_allocs, 1);
}

// Through a stream, the way a consumer calls it: a failed get_schema / get_next returns ENOMEM,
// says why in get_last_error, leaves its out-struct released, and a later call can succeed.
void test_stream_callbacks() {
  const auto frame = make_frame();
  const long live_before = g_live;
  ArrowArrayStream stream;
  export_stream(frame, &stream);
  const long schema_allocs = fail_each_allocation<ArrowSchema>(
      frame,
      [&](ArrowSchema* out) {
        const int rc = stream.get_schema(&stream, out);
        if (rc == 0) return true;
        CHECK_EQ(rc, ENOMEM);
        const char* why = stream.get_last_error(&stream);
        CHECK(why != nullptr && std::string(why).find("bad_alloc") != std::string::npos);
        return false;
      },
      2);
  CHECK(schema_allocs >= 10);
  stream.release(&stream);
  CHECK_EQ(g_live, live_before);
  CHECK_EQ(frame.use_count(), 1);

  // get_next: fail the first allocation, then succeed, then the end of the stream.
  export_stream(frame, &stream);
  ArrowArray batch;
  g_countdown = 1;
  CHECK_EQ(stream.get_next(&stream, &batch), ENOMEM);
  g_countdown = -1;
  CHECK(batch.release == nullptr);
  CHECK_EQ(g_live, live_before + 1);  // the stream's own owner, nothing else
  CHECK_EQ(stream.get_next(&stream, &batch), 0);  // the batch was not sent: it comes now
  CHECK(batch.release != nullptr && batch.length == 5);
  ArrowArray end;
  CHECK_EQ(stream.get_next(&stream, &end), 0);
  CHECK(end.release == nullptr);
  batch.release(&batch);
  stream.release(&stream);
  CHECK_EQ(g_live, live_before);
  CHECK_EQ(frame.use_count(), 1);
}

// A frame that starts inside a ring block: its exported columns carry the offset of its first
// row into buffers that start at the block (nothing moved), a column without nulls exports no
// bitmap, and an empty frame points at nothing past its buffers.
void test_offsets_and_bitmaps() {
  std::vector<SourceSlot> slots;
  slots.push_back(SourceSlot{std::make_unique<TwoColumns>(), 1});
  Sampler s(std::move(slots), 1'000'000, 64);
  s.run_ticks_inline(100);  // rows 36..99 held; row 36 is row 36 of its block
  const std::shared_ptr<const Frame> frame = s.snapshot();
  CHECK_EQ(frame->length(), 64);
  CHECK_EQ(frame->offset(), 36);
  ArrowArray array;
  export_array(frame, &array);
  CHECK_EQ(array.n_children, 4);
  for (std::int64_t c = 0; c < array.n_children; ++c) {
    CHECK_EQ(array.children[c]->offset, 36);
    CHECK_EQ(array.children[c]->length, 64);
  }
  // src.a counts reads (row j holds j + 1); src.b is null on odd counts.
  const auto* a = static_cast<const std::int64_t*>(array.children[2]->buffers[1]);
  const auto* b_valid = static_cast<const std::uint64_t*>(array.children[3]->buffers[0]);
  CHECK(array.children[2]->buffers[0] == nullptr && array.children[2]->null_count == 0);
  CHECK(b_valid != nullptr && array.children[3]->null_count == 32);
  for (std::int64_t i = 0; i < 64; ++i) {
    CHECK_EQ(a[36 + i], 37 + i);
    const std::int64_t bit = 36 + i;
    CHECK_EQ(((b_valid[bit / 64] >> (bit % 64)) & 1U) != 0, (37 + i) % 2 == 0);
  }
  array.release(&array);
  const std::shared_ptr<const Frame> empty = s.copy_since(100);
  CHECK_EQ(empty->length(), 0);
  CHECK_EQ(empty->offset(), 0);
}

}  // namespace

int main() {
  test_direct_exports();
  test_stream_callbacks();
  test_offsets_and_bitmaps();
  TEST_MAIN_END();
}
