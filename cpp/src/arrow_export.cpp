// Frame → Arrow C data interface (schema, struct array, one-batch stream). No copies of cells;
// each column carries the frame's offset into its buffers.
#include "stroboscope/arrow_export.hpp"

#include <cerrno>
#include <exception>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace stroboscope {
namespace {

// ---------------------------------------------------------------- ownership

// Every exported struct owns one Private object, its private_data, and nothing else: release
// deletes it (after releasing its children, for a struct that has them).
template <typename Struct, typename Private>
void release_owned(Struct* s) noexcept {
  delete static_cast<Private*>(s->private_data);
  s->release = nullptr;
}

// For a struct with children (the Private holds `children`): releases the children first.
template <typename Struct, typename Private>
void release_with_children(Struct* s) noexcept {
  for (Struct& child : static_cast<Private*>(s->private_data)->children) {
    // A consumer may have moved a child out (leaving release null): then it is theirs to free.
    if (child.release != nullptr) child.release(&child);
  }
  release_owned<Struct, Private>(s);
}

// Builds a struct the nanoarrow way: `out` starts released, its owner (a new Private) and
// `release` are installed next, then `fill(owner)` builds the rest. Whatever fill() allocated
// before it threw is reachable from the owner, so out->release frees it and `out` is left
// released (release == nullptr) when the exception propagates.
template <typename Struct, typename Private, typename Fill>
void build_owned(Struct* out, void (*release)(Struct*) noexcept, Fill&& fill) {
  *out = Struct{};
  auto* priv = new Private();  // throws before anything exists: `out` stays released
  out->private_data = priv;
  out->release = release;
  try {
    fill(*priv);
  } catch (...) {
    out->release(out);
    throw;
  }
}

// One child per frame column. The children start zeroed (released), so the parent's release
// skips the ones not built when a fill_child() throws.
template <typename Private, typename FillChild>
void build_children(Private& priv, const std::vector<FrameColumn>& cols, FillChild&& fill_child) {
  priv.children.resize(cols.size());
  priv.child_ptrs.resize(cols.size());
  for (std::size_t i = 0; i < cols.size(); ++i) {
    fill_child(cols[i], &priv.children[i]);
    priv.child_ptrs[i] = &priv.children[i];
  }
}

// ---------------------------------------------------------------- schema

struct FieldPrivate {
  std::string name;
  std::string metadata;  // Arrow's binary key/value encoding
};

struct StructSchemaPrivate {
  std::vector<ArrowSchema> children;
  std::vector<ArrowSchema*> child_ptrs;
};

void append_i32(std::string& out, std::int32_t v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);  // native endianness, as specified
}

std::string encode_metadata(const std::vector<std::pair<std::string, std::string>>& kv) {
  std::string out;
  append_i32(out, static_cast<std::int32_t>(kv.size()));
  for (const auto& [k, v] : kv) {
    append_i32(out, static_cast<std::int32_t>(k.size()));
    out.append(k.data(), k.size());
    append_i32(out, static_cast<std::int32_t>(v.size()));
    out.append(v.data(), v.size());
  }
  return out;
}

void fill_field(const FrameColumn& col, ArrowSchema* out) {
  build_owned<ArrowSchema, FieldPrivate>(
      out, release_owned<ArrowSchema, FieldPrivate>, [&](FieldPrivate& priv) {
        priv.name = col.spec.name;
        priv.metadata = encode_metadata({{"unit", col.spec.unit},
                                         {"kind", kind_name(col.spec.kind)},
                                         {"help", col.spec.help}});
        // Format strings are literals: nothing to own.
        if (col.is_timestamp) {
          out->format = "tsn:UTC";
        } else {
          out->format = col.spec.dtype == DType::kInt64 ? "l" : "g";
        }
        out->name = priv.name.c_str();
        out->metadata = priv.metadata.data();
        out->flags = ARROW_FLAG_NULLABLE;
      });
}

// ---------------------------------------------------------------- array

struct ColumnArrayPrivate {
  std::shared_ptr<const Frame> frame;  // keeps the buffers alive
  const void* buffers[2] = {nullptr, nullptr};
};

struct StructArrayPrivate {
  std::shared_ptr<const Frame> frame;
  std::vector<ArrowArray> children;
  std::vector<ArrowArray*> child_ptrs;
  const void* buffers[1] = {nullptr};
};

void fill_column_array(const std::shared_ptr<const Frame>& frame, const FrameColumn& col,
                       ArrowArray* out) {
  build_owned<ArrowArray, ColumnArrayPrivate>(
      out, release_owned<ArrowArray, ColumnArrayPrivate>, [&](ColumnArrayPrivate& priv) {
        priv.frame = frame;
        // A column without nulls has no validity bitmap (buffer 0 = null). Both buffers start
        // at the ring block that held the frame's first row: the offset skips what came before
        // it (rows outside the copy, or overwritten while copying), so nothing is moved.
        priv.buffers[0] = col.validity;
        priv.buffers[1] = col.cells;
        out->length = frame->length();
        out->offset = col.offset;
        out->null_count = col.null_count;
        out->n_buffers = 2;
        out->buffers = priv.buffers;
      });
}

// ---------------------------------------------------------------- stream

struct StreamPrivate {
  std::shared_ptr<const Frame> frame;
  bool batch_sent = false;
  std::string last_error;
};

// Keeps the text of the exception being handled for get_last_error; never throws (it runs in a C
// callback): when the text cannot be stored, the error says so in fewer words.
int stream_error(StreamPrivate* priv) noexcept {
  try {
    try {
      throw;
    } catch (const std::exception& e) {
      priv->last_error = e.what();
    } catch (...) {
      priv->last_error = "unknown error";
    }
  } catch (...) {
    priv->last_error.clear();  // no room for the text: get_last_error returns null
  }
  return ENOMEM;
}

int stream_get_schema(ArrowArrayStream* stream, ArrowSchema* out) noexcept {
  auto* priv = static_cast<StreamPrivate*>(stream->private_data);
  try {
    export_schema(priv->frame, out);
    return 0;
  } catch (...) {
    return stream_error(priv);
  }
}

int stream_get_next(ArrowArrayStream* stream, ArrowArray* out) noexcept {
  auto* priv = static_cast<StreamPrivate*>(stream->private_data);
  if (priv->batch_sent) {
    *out = ArrowArray{};  // release == nullptr marks the end of the stream
    return 0;
  }
  try {
    export_array(priv->frame, out);
    priv->batch_sent = true;
    return 0;
  } catch (...) {
    return stream_error(priv);
  }
}

const char* stream_get_last_error(ArrowArrayStream* stream) noexcept {
  auto* priv = static_cast<StreamPrivate*>(stream->private_data);
  return priv->last_error.empty() ? nullptr : priv->last_error.c_str();
}

}  // namespace

void export_schema(const std::shared_ptr<const Frame>& frame, ArrowSchema* out) {
  build_owned<ArrowSchema, StructSchemaPrivate>(
      out, release_with_children<ArrowSchema, StructSchemaPrivate>,
      [&](StructSchemaPrivate& priv) {
        out->format = "+s";
        out->name = "";
        build_children(priv, frame->columns(), fill_field);
        out->n_children = static_cast<std::int64_t>(priv.children.size());
        out->children = priv.child_ptrs.data();
      });
}

void export_array(const std::shared_ptr<const Frame>& frame, ArrowArray* out) {
  build_owned<ArrowArray, StructArrayPrivate>(
      out, release_with_children<ArrowArray, StructArrayPrivate>, [&](StructArrayPrivate& priv) {
        priv.frame = frame;
        build_children(priv, frame->columns(), [&](const FrameColumn& col, ArrowArray* child) {
          fill_column_array(frame, col, child);
        });
        out->length = frame->length();
        out->n_buffers = 1;
        out->n_children = static_cast<std::int64_t>(priv.children.size());
        out->buffers = priv.buffers;
        out->children = priv.child_ptrs.data();
      });
}

void export_stream(const std::shared_ptr<const Frame>& frame, ArrowArrayStream* out) {
  build_owned<ArrowArrayStream, StreamPrivate>(
      out, release_owned<ArrowArrayStream, StreamPrivate>, [&](StreamPrivate& priv) {
        priv.frame = frame;
        out->get_schema = stream_get_schema;
        out->get_next = stream_get_next;
        out->get_last_error = stream_get_last_error;
      });
}

}  // namespace stroboscope
