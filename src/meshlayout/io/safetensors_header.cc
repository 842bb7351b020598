#include "meshlayout/io/safetensors_header.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

using nlohmann::json;

struct DTypeRow {
  std::string_view name;
  size_t size;
  std::optional<DType> dtype;
};

// In the reference implementation's enum order: its writer lays tensors out by this order,
// descending, then by name.
constexpr std::array<DTypeRow, 17> kSafetensorsDTypes{{
    {"BOOL", 1, DType::kBool},  {"U8", 1, DType::kU8},     {"I8", 1, DType::kI8},
    {"F8_E5M2", 1, {}},         {"F8_E4M3", 1, {}},        {"F8_E8M0", 1, {}},
    {"I16", 2, DType::kI16},    {"U16", 2, {}},            {"F16", 2, DType::kF16},
    {"BF16", 2, DType::kBF16},  {"I32", 4, DType::kI32},   {"U32", 4, {}},
    {"F32", 4, DType::kF32},    {"F64", 8, DType::kF64},   {"I64", 8, DType::kI64},
    {"U64", 8, {}},             {"C64", 8, {}},
}};

const DTypeRow* find_dtype(std::string_view name) {
  for (const DTypeRow& row : kSafetensorsDTypes) {
    if (row.name == name) return &row;
  }
  return nullptr;
}

size_t dtype_order(std::string_view name) {
  for (size_t i = 0; i < kSafetensorsDTypes.size(); ++i) {
    if (kSafetensorsDTypes[i].name == name) return i;
  }
  return 0;
}

// A name as it can be printed in a message: quoted, control bytes escaped, long names cut.
std::string quote_name(std::string_view name) {
  std::string out = "'";
  for (size_t i = 0; i < name.size() && i < 200; ++i) {
    const unsigned char c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (name.size() > 200) out += fmt::format("… ({} bytes)", name.size());
  return out + "'";
}

// The bytes of a tensor of `shape` (extents >= 0) and `element_size`, or std::nullopt if the
// element count overflows int64 at any step of num_elements()'s left-to-right product (so
// TensorInfo::num_elements() is always defined) or the byte count overflows 64 bits.
std::optional<uint64_t> checked_num_bytes(const Shape& shape, size_t element_size) {
  int64_t elements = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(elements, d, &elements)) return std::nullopt;
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(elements), element_size, &bytes)) {
    return std::nullopt;
  }
  return bytes;
}

// Fills TensorInfo/metadata from nlohmann's SAX events, checking types and duplicates as it
// goes. Iterative (no recursion): a deeply nested header cannot exhaust the stack.
class HeaderSax {
 public:
  HeaderSax(SafetensorsHeader& out, std::string_view source) : out_(out), source_(source) {}

  bool null() { return scalar("null"); }
  bool boolean(bool) { return scalar("a boolean"); }
  bool number_integer(json::number_integer_t v) {
    if (skip_ > 0 || state_ == State::kSkipValue) return scalar("");
    if (state_ == State::kShape || state_ == State::kOffsets) {
      fail(fmt::format("{} of tensor {} holds the negative number {}; expected a non-negative "
                       "integer", field_name(), quote_name(key_), v));
    }
    return scalar("a number");
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (skip_ > 0 || state_ == State::kSkipValue) return scalar("");
    if (state_ == State::kShape) {
      if (v > static_cast<uint64_t>(INT64_MAX)) {
        fail(fmt::format("shape of tensor {} has the dimension {}, too large", quote_name(key_), v));
      }
      tensor_.shape.push_back(static_cast<int64_t>(v));
      return true;
    }
    if (state_ == State::kOffsets) {
      if (offsets_.size() == 2) {
        fail(fmt::format("data_offsets of tensor {} has more than 2 entries; expected [begin, "
                         "end]", quote_name(key_)));
      }
      offsets_.push_back(v);
      return true;
    }
    return scalar("a number");
  }
  bool number_float(json::number_float_t, const std::string& text) {
    if (skip_ > 0 || state_ == State::kSkipValue) return scalar("");
    if (state_ == State::kShape || state_ == State::kOffsets) {
      fail(fmt::format("{} of tensor {} holds {}; expected a non-negative integer", field_name(),
                       quote_name(key_), text));
    }
    return scalar("a number");
  }
  bool string(std::string& s) {
    if (skip_ > 0 || state_ == State::kSkipValue) return scalar("");
    if (state_ == State::kMetadataValue) {
      out_.metadata[meta_key_] = std::move(s);
      state_ = State::kMetadata;
      return true;
    }
    if (state_ == State::kTensorValue && field_ == Field::kDType) {
      tensor_.dtype_name = std::move(s);
      state_ = State::kTensor;
      return true;
    }
    return scalar("a string");
  }
  bool binary(json::binary_t&) { return scalar("binary"); }

  bool start_object(size_t) {
    if (skip_ > 0 || state_ == State::kSkipValue) return open_skip();
    switch (state_) {
      case State::kStart:
        state_ = State::kTop;
        return true;
      case State::kTopValue:
        if (key_ == "__metadata__") {
          state_ = State::kMetadata;
        } else {
          state_ = State::kTensor;
          tensor_ = TensorInfo{.name = key_};
          offsets_.clear();
          seen_fields_ = 0;
        }
        return true;
      default:
        return scalar("an object");
    }
  }
  bool key(std::string& k) {
    if (skip_ > 0) return true;
    switch (state_) {
      case State::kTop:
        if (!top_keys_.insert(k).second) {
          fail(fmt::format("duplicate tensor name {} in the header", quote_name(k)));
        }
        if (k.empty()) fail("a tensor has an empty name");
        if (k.find('\0') != std::string::npos) {
          fail(fmt::format("tensor name {} contains a NUL byte", quote_name(k)));
        }
        key_ = std::move(k);
        state_ = State::kTopValue;
        return true;
      case State::kMetadata:
        if (!out_.metadata.emplace(k, std::string()).second) {
          fail(fmt::format("duplicate key {} in __metadata__", quote_name(k)));
        }
        meta_key_ = std::move(k);
        state_ = State::kMetadataValue;
        return true;
      case State::kTensor: {
        Field f = k == "dtype" ? Field::kDType
                  : k == "shape" ? Field::kShape
                  : k == "data_offsets" ? Field::kOffsets
                                        : Field::kOther;
        if (f == Field::kOther) {  // unknown fields are ignored, as the reference does
          state_ = State::kSkipValue;
          return true;
        }
        const unsigned bit = 1u << static_cast<unsigned>(f);
        if (seen_fields_ & bit) {
          fail(fmt::format("tensor {} has the field '{}' twice", quote_name(key_), k));
        }
        seen_fields_ |= bit;
        field_ = f;
        state_ = State::kTensorValue;
        return true;
      }
      default:
        fail("unexpected key " + quote_name(k));
    }
    return false;
  }
  bool end_object() {
    if (skip_ > 0) return close_skip();
    switch (state_) {
      case State::kTop:
        state_ = State::kDone;
        return true;
      case State::kMetadata:
        state_ = State::kTop;
        return true;
      case State::kTensor:
        finish_tensor();
        state_ = State::kTop;
        return true;
      default:
        fail("unexpected end of object");
    }
    return false;
  }
  bool start_array(size_t) {
    if (skip_ > 0 || state_ == State::kSkipValue) return open_skip();
    if (state_ == State::kTensorValue && field_ == Field::kShape) {
      state_ = State::kShape;
      return true;
    }
    if (state_ == State::kTensorValue && field_ == Field::kOffsets) {
      state_ = State::kOffsets;
      return true;
    }
    return scalar("an array");
  }
  bool end_array() {
    if (skip_ > 0) return close_skip();
    if (state_ == State::kShape || state_ == State::kOffsets) {
      state_ = State::kTensor;
      return true;
    }
    fail("unexpected end of array");
    return false;
  }
  bool parse_error(size_t position, const std::string&, const nlohmann::detail::exception& ex) {
    std::string what = ex.what();
    if (const size_t p = what.find("] "); what.starts_with("[json.exception") && p != what.npos) {
      what = what.substr(p + 2);
    }
    throw DataLossError(fmt::format("'{}': the header is not valid JSON (near file byte {}): {}",
                                    source_, 8 + (position > 0 ? position - 1 : 0), what));
  }

  bool done() const { return state_ == State::kDone; }

 private:
  enum class State {
    kStart, kTop, kTopValue, kMetadata, kMetadataValue, kTensor, kTensorValue, kShape,
    kOffsets, kSkipValue, kDone
  };
  enum class Field { kDType = 0, kShape = 1, kOffsets = 2, kOther = 3 };

  [[noreturn]] void fail(const std::string& what) const {
    throw DataLossError(fmt::format("'{}': invalid safetensors header: {}", source_, what));
  }
  std::string_view field_name() const {
    return state_ == State::kShape ? "shape" : "data_offsets";
  }
  // A scalar value (or `kind` of value) where the state expects something else.
  bool scalar(std::string_view kind) {
    if (skip_ > 0) return true;
    if (state_ == State::kSkipValue) {
      state_ = State::kTensor;
      return true;
    }
    switch (state_) {
      case State::kStart:
        fail(fmt::format("the header is {}; expected a JSON object", kind));
      case State::kTopValue:
        if (key_ == "__metadata__" && kind == "null") {  // Option<HashMap> in the reference
          state_ = State::kTop;
          return true;
        }
        fail(fmt::format("{} is {}; expected an object", key_ == "__metadata__"
                                                             ? std::string("__metadata__")
                                                             : "tensor " + quote_name(key_),
                         kind));
      case State::kMetadataValue:
        fail(fmt::format("__metadata__[{}] is {}; expected a string (__metadata__ maps strings "
                         "to strings)", quote_name(meta_key_), kind));
      case State::kTensorValue:
        fail(fmt::format("field '{}' of tensor {} is {}; expected {}",
                         field_ == Field::kDType ? "dtype"
                         : field_ == Field::kShape ? "shape"
                                                   : "data_offsets",
                         quote_name(key_), kind,
                         field_ == Field::kDType ? "a dtype name string"
                                                 : "an array of non-negative integers"));
      case State::kShape:
      case State::kOffsets:
        fail(fmt::format("{} of tensor {} holds {}; expected a non-negative integer",
                         field_name(), quote_name(key_), kind));
      default:
        fail(fmt::format("unexpected {}", kind));
    }
  }
  bool open_skip() {
    if (state_ == State::kSkipValue) state_ = State::kTensor;
    ++skip_;
    return true;
  }
  bool close_skip() {
    --skip_;
    return true;
  }
  void finish_tensor() {
    if (!(seen_fields_ & 1u)) fail(fmt::format("tensor {} has no 'dtype'", quote_name(key_)));
    if (!(seen_fields_ & 2u)) fail(fmt::format("tensor {} has no 'shape'", quote_name(key_)));
    if (!(seen_fields_ & 4u)) fail(fmt::format("tensor {} has no 'data_offsets'", quote_name(key_)));
    const DTypeRow* row = find_dtype(tensor_.dtype_name);
    if (!row) {
      fail(fmt::format("tensor {} has the unknown dtype {}; expected one of {}", quote_name(key_),
                       quote_name(tensor_.dtype_name), safetensors_dtype_names()));
    }
    tensor_.dtype = row->dtype;
    tensor_.element_size = row->size;
    if (offsets_.size() != 2) {
      fail(fmt::format("data_offsets of tensor {} has {} entries; expected [begin, end]",
                       quote_name(key_), offsets_.size()));
    }
    tensor_.begin = offsets_[0];
    tensor_.end = offsets_[1];
    if (tensor_.end < tensor_.begin) {
      fail(fmt::format("tensor {} has data_offsets [{}, {}]: end before begin", quote_name(key_),
                       tensor_.begin, tensor_.end));
    }
    const std::optional<uint64_t> size = checked_num_bytes(tensor_.shape, row->size);
    if (!size) {
      fail(fmt::format("tensor {} has the shape {}, whose size overflows 64 bits",
                       quote_name(key_), shape_to_string(tensor_.shape)));
    }
    const uint64_t bytes = *size;
    if (bytes != tensor_.end - tensor_.begin) {
      fail(fmt::format("tensor {} of shape {} and dtype {} needs {} bytes, but its data_offsets "
                       "[{}, {}] hold {}", quote_name(key_), shape_to_string(tensor_.shape),
                       tensor_.dtype_name, bytes, tensor_.begin, tensor_.end,
                       tensor_.end - tensor_.begin));
    }
    out_.tensors.push_back(std::move(tensor_));
  }

  SafetensorsHeader& out_;
  std::string_view source_;
  State state_ = State::kStart;
  size_t skip_ = 0;
  std::string key_, meta_key_;
  Field field_ = Field::kOther;
  unsigned seen_fields_ = 0;
  TensorInfo tensor_;
  std::vector<uint64_t> offsets_;
  std::unordered_set<std::string> top_keys_;
};

void check_ranges(SafetensorsHeader& h, std::string_view source) {
  auto fail = [&](const std::string& what) {
    throw DataLossError(fmt::format("'{}': invalid safetensors header: {}", source, what));
  };
  for (const TensorInfo& t : h.tensors) {
    if (t.end > h.data_bytes) {
      fail(fmt::format("tensor {} spans data bytes [{}, {}) (file bytes [{}, {})), past the end "
                       "of the file at byte {}: truncated file?",
                       quote_name(t.name), t.begin, t.end, h.data_start() + t.begin,
                       h.data_start() + t.end, h.data_start() + h.data_bytes));
    }
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t at = 0;
  const TensorInfo* previous = nullptr;
  for (const TensorInfo& t : h.tensors) {
    if (t.begin < at) {
      fail(fmt::format("tensors {} [{}, {}) and {} [{}, {}) overlap (data offsets)",
                       quote_name(previous->name), previous->begin, previous->end, quote_name(t.name),
                       t.begin, t.end));
    }
    if (t.begin > at) {
      fail(fmt::format("data bytes [{}, {}) (file bytes [{}, {})) belong to no tensor{}; the "
                       "format requires the tensors to cover the data contiguously",
                       at, t.begin, h.data_start() + at, h.data_start() + t.begin,
                       previous ? " (after tensor " + quote_name(previous->name) + ")" : ""));
    }
    at = t.end;
    previous = &t;
  }
  if (at != h.data_bytes) {
    fail(fmt::format("the file has {} bytes after the last tensor's data (file bytes [{}, {})); "
                     "the format allows none", h.data_bytes - at, h.data_start() + at,
                     h.data_start() + h.data_bytes));
  }
}

std::string json_string(std::string_view s, std::string_view what) {
  try {
    return json(std::string(s)).dump();
  } catch (const json::exception&) {
    throw ValueError(fmt::format("{} {} is not valid UTF-8", what, quote_name(s)));
  }
}

}  // namespace

const TensorInfo* SafetensorsHeader::find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors[it->second];
}

void SafetensorsHeader::index() {
  by_name_.clear();
  by_name_.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) by_name_.emplace(tensors[i].name, i);
}

std::optional<size_t> safetensors_dtype_size(std::string_view name) {
  const DTypeRow* row = find_dtype(name);
  return row ? std::optional<size_t>(row->size) : std::nullopt;
}

std::string_view safetensors_dtype_names() {
  return "BOOL, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, F64, "
         "I64, U64, C64";
}

uint64_t parse_safetensors_header_length(std::span<const std::byte> prefix, uint64_t file_bytes,
                                         std::string_view source) {
  if (file_bytes < 8 || prefix.size() < 8) {
    throw DataLossError(fmt::format("'{}': the file is {} bytes, shorter than the 8-byte "
                                    "header length that starts every safetensors file",
                                    source, file_bytes));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | std::to_integer<uint64_t>(prefix[static_cast<size_t>(i)]);
  if (n > kMaxSafetensorsHeaderBytes) {
    throw DataLossError(fmt::format("'{}': the header length at byte 0 is {}, over the limit "
                                    "of {} bytes (not a safetensors file, or a corrupt one)",
                                    source, n, kMaxSafetensorsHeaderBytes));
  }
  if (8 + n > file_bytes) {
    throw DataLossError(fmt::format("'{}': the header length at byte 0 is {}, so the header "
                                    "ends at byte {}, past the end of the {}-byte file: "
                                    "truncated file?", source, n, 8 + n, file_bytes));
  }
  return n;
}

SafetensorsHeader parse_safetensors_header(std::string_view text, uint64_t file_bytes,
                                           std::string_view source) {
  SafetensorsHeader h;
  h.header_bytes = text.size();
  if (8 + text.size() > file_bytes) {
    throw DataLossError(fmt::format("'{}': header of {} bytes does not fit a {}-byte file",
                                    source, text.size(), file_bytes));
  }
  h.data_bytes = file_bytes - 8 - text.size();
  if (text.empty() || text.front() != '{') {
    throw DataLossError(fmt::format("'{}': the header at byte 8 does not start with '{{' (it "
                                    "starts with {}); not a safetensors file?", source,
                                    text.empty() ? std::string("nothing") : quote_name(text.substr(0, 1))));
  }
  HeaderSax sax(h, source);
  json::sax_parse(text.begin(), text.end(), &sax);
  if (!sax.done()) {
    throw DataLossError(fmt::format("'{}': the header JSON ends early", source));
  }
  check_ranges(h, source);
  h.index();
  return h;
}

SafetensorsHeader parse_safetensors_file_bytes(std::span<const std::byte> file,
                                               std::string_view source) {
  const uint64_t n = parse_safetensors_header_length(file.first(std::min<size_t>(8, file.size())),
                                                     file.size(), source);
  std::string_view text(reinterpret_cast<const char*>(file.data()) + 8, n);
  return parse_safetensors_header(text, file.size(), source);
}

SafetensorsHeader make_safetensors_header(std::span<const TensorSpec> tensors,
                                          std::map<std::string, std::string> metadata) {
  SafetensorsHeader h;
  h.metadata = std::move(metadata);
  std::unordered_set<std::string_view> names;
  for (const TensorSpec& t : tensors) {
    if (t.name.empty()) throw ValueError("a tensor to save has an empty name");
    if (t.name.find('\0') != std::string::npos) {
      throw ValueError(fmt::format("tensor name {} contains a NUL byte", quote_name(t.name)));
    }
    if (t.name == "__metadata__") {
      throw ValueError("'__metadata__' is reserved by the safetensors format; rename the tensor");
    }
    if (!names.insert(t.name).second) {
      throw ValueError(fmt::format("two tensors to save are named {}", quote_name(t.name)));
    }
    for (int64_t d : t.shape) {
      if (d < 0) {
        throw ValueError(fmt::format("tensor {} has the negative shape {}", quote_name(t.name),
                                     shape_to_string(t.shape)));
      }
    }
    if (!checked_num_bytes(t.shape, dtype_size(t.dtype))) {
      throw ValueError(fmt::format("tensor {} has the shape {}, whose size overflows 64 bits",
                                   quote_name(t.name), shape_to_string(t.shape)));
    }
    h.tensors.push_back(TensorInfo{.name = t.name,
                                   .dtype_name = std::string(dtype_name(t.dtype)),
                                   .dtype = t.dtype,
                                   .element_size = dtype_size(t.dtype),
                                   .shape = t.shape});
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    const size_t oa = dtype_order(a.dtype_name), ob = dtype_order(b.dtype_name);
    return oa != ob ? oa > ob : a.name < b.name;
  });
  uint64_t at = 0;
  for (TensorInfo& t : h.tensors) {
    t.begin = at;
    if (__builtin_add_overflow(at, *checked_num_bytes(t.shape, t.element_size), &at)) {
      throw ValueError(fmt::format("the tensors to save hold more than 2^64 bytes together "
                                   "(at tensor {})", quote_name(t.name)));
    }
    t.end = at;
  }
  h.data_bytes = at;
  h.header_bytes = serialize_safetensors_header(h).size();
  h.index();
  return h;
}

std::string serialize_safetensors_header(const SafetensorsHeader& h) {
  std::string out = "{";
  if (!h.metadata.empty()) {
    out += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : h.metadata) {
      if (!first) out += ',';
      first = false;
      out += json_string(k, "metadata key");
      out += ':';
      out += json_string(v, "metadata value");
    }
    out += '}';
  }
  for (const TensorInfo& t : h.tensors) {
    if (out.size() > 1) out += ',';
    out += json_string(t.name, "tensor name");
    out += fmt::format(":{{\"dtype\":\"{}\",\"shape\":[{}],\"data_offsets\":[{},{}]}}",
                       t.dtype_name, fmt::join(t.shape, ","), t.begin, t.end);
  }
  out += '}';
  out.append((8 - out.size() % 8) % 8, ' ');
  return out;
}

std::string safetensors_header_bytes(const SafetensorsHeader& h) {
  const std::string json_text = serialize_safetensors_header(h);
  std::string out(8, '\0');
  uint64_t n = json_text.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + json_text;
}

}  // namespace meshlayout
