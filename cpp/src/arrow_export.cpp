// Frame → Arrow C data interface (schema, struct array, one-batch stream). No copies of cells.
#include "stroboscope/arrow_export.hpp"

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace stroboscope {
namespace {

// ---------------------------------------------------------------- schema

struct FieldPrivate {
  std::string format;
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

void release_field(ArrowSchema* schema) {
  delete static_cast<FieldPrivate*>(schema->private_data);
  schema->release = nullptr;
}

void release_struct_schema(ArrowSchema* schema) {
  auto* priv = static_cast<StructSchemaPrivate*>(schema->private_data);
  for (ArrowSchema& child : priv->children) {
    // A consumer may have moved a child out (leaving release null): then it is theirs to free.
    if (child.release != nullptr) child.release(&child);
  }
  delete priv;
  schema->release = nullptr;
}

void fill_field(const FrameColumn& col, ArrowSchema* out) {
  auto* priv = new FieldPrivate();
  if (col.is_timestamp) {
    priv->format = "tsn:UTC";
  } else {
    priv->format = col.spec.dtype == DType::kInt64 ? "l" : "g";
  }
  priv->name = col.spec.name;
  priv->metadata = encode_metadata({{"unit", col.spec.unit},
                                    {"kind", kind_name(col.spec.kind)},
                                    {"help", col.spec.help}});
  *out = ArrowSchema{};
  out->format = priv->format.c_str();
  out->name = priv->name.c_str();
  out->metadata = priv->metadata.data();
  out->flags = ARROW_FLAG_NULLABLE;
  out->release = release_field;
  out->private_data = priv;
}

// ---------------------------------------------------------------- array

struct ColumnArrayPrivate {
  std::shared_ptr<const Frame> frame;  // keeps the buffers alive
  const void* buffers[2];
};

struct StructArrayPrivate {
  std::shared_ptr<const Frame> frame;
  std::vector<ArrowArray> children;
  std::vector<ArrowArray*> child_ptrs;
  const void* buffers[1] = {nullptr};
};

void release_column_array(ArrowArray* array) {
  delete static_cast<ColumnArrayPrivate*>(array->private_data);
  array->release = nullptr;
}

void release_struct_array(ArrowArray* array) {
  auto* priv = static_cast<StructArrayPrivate*>(array->private_data);
  for (ArrowArray& child : priv->children) {
    if (child.release != nullptr) child.release(&child);
  }
  delete priv;
  array->release = nullptr;
}

void fill_column_array(const std::shared_ptr<const Frame>& frame, const FrameColumn& col,
                       ArrowArray* out) {
  auto* priv = new ColumnArrayPrivate{frame, {nullptr, nullptr}};
  // A column without nulls may omit its validity bitmap (buffer 0 = null).
  priv->buffers[0] = col.null_count == 0 ? nullptr : col.validity.get();
  priv->buffers[1] = col.cells.get();
  *out = ArrowArray{};
  out->length = frame->length();
  out->null_count = col.null_count;
  out->n_buffers = 2;
  out->buffers = priv->buffers;
  out->release = release_column_array;
  out->private_data = priv;
}

// ---------------------------------------------------------------- stream

struct StreamPrivate {
  std::shared_ptr<const Frame> frame;
  bool batch_sent = false;
  std::string last_error;
};

int stream_get_schema(ArrowArrayStream* stream, ArrowSchema* out) {
  auto* priv = static_cast<StreamPrivate*>(stream->private_data);
  try {
    export_schema(priv->frame, out);
    return 0;
  } catch (const std::exception& e) {
    priv->last_error = e.what();
    return ENOMEM;
  }
}

int stream_get_next(ArrowArrayStream* stream, ArrowArray* out) {
  auto* priv = static_cast<StreamPrivate*>(stream->private_data);
  if (priv->batch_sent) {
    *out = ArrowArray{};  // release == nullptr marks the end of the stream
    return 0;
  }
  try {
    export_array(priv->frame, out);
    priv->batch_sent = true;
    return 0;
  } catch (const std::exception& e) {
    priv->last_error = e.what();
    return ENOMEM;
  }
}

const char* stream_get_last_error(ArrowArrayStream* stream) {
  auto* priv = static_cast<StreamPrivate*>(stream->private_data);
  return priv->last_error.empty() ? nullptr : priv->last_error.c_str();
}

void stream_release(ArrowArrayStream* stream) {
  delete static_cast<StreamPrivate*>(stream->private_data);
  stream->release = nullptr;
}

}  // namespace

void export_schema(const std::shared_ptr<const Frame>& frame, ArrowSchema* out) {
  auto* priv = new StructSchemaPrivate();
  const auto& cols = frame->columns();
  priv->children.resize(cols.size());
  priv->child_ptrs.resize(cols.size());
  try {
    for (std::size_t i = 0; i < cols.size(); ++i) {
      fill_field(cols[i], &priv->children[i]);
      priv->child_ptrs[i] = &priv->children[i];
    }
  } catch (...) {
    for (ArrowSchema& child : priv->children) {
      if (child.release != nullptr) child.release(&child);
    }
    delete priv;
    throw;
  }
  *out = ArrowSchema{};
  out->format = "+s";
  out->name = "";
  out->metadata = nullptr;
  out->flags = 0;
  out->n_children = static_cast<std::int64_t>(cols.size());
  out->children = priv->child_ptrs.data();
  out->release = release_struct_schema;
  out->private_data = priv;
}

void export_array(const std::shared_ptr<const Frame>& frame, ArrowArray* out) {
  auto* priv = new StructArrayPrivate();
  priv->frame = frame;
  const auto& cols = frame->columns();
  priv->children.resize(cols.size());
  priv->child_ptrs.resize(cols.size());
  for (std::size_t i = 0; i < cols.size(); ++i) {
    fill_column_array(frame, cols[i], &priv->children[i]);
    priv->child_ptrs[i] = &priv->children[i];
  }
  *out = ArrowArray{};
  out->length = frame->length();
  out->null_count = 0;
  out->n_buffers = 1;
  out->n_children = static_cast<std::int64_t>(cols.size());
  out->buffers = priv->buffers;
  out->children = priv->child_ptrs.data();
  out->release = release_struct_array;
  out->private_data = priv;
}

void export_stream(const std::shared_ptr<const Frame>& frame, ArrowArrayStream* out) {
  auto* priv = new StreamPrivate{frame, false, {}};
  *out = ArrowArrayStream{};
  out->get_schema = stream_get_schema;
  out->get_next = stream_get_next;
  out->get_last_error = stream_get_last_error;
  out->release = stream_release;
  out->private_data = priv;
}

}  // namespace stroboscope
