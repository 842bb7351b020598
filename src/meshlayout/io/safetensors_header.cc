#include "meshlayout/io/safetensors_header.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "meshlayout/core/errors.h"
#include "meshlayout/io/safetensors_header_internal.h"

namespace meshlayout {

std::string safetensors_detail::quote_name(std::string_view name) {
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

namespace {

using nlohmann::json;
using namespace safetensors_detail;

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
      fail(fmt::format(
          "{} of tensor {} holds the negative number {}; expected a non-negative "
          "integer",
          field_name(), quote_name(key_), v == 0 ? std::string("-0") : std::to_string(v)));
    }
    return scalar("a number");
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (skip_ > 0 || state_ == State::kSkipValue) return scalar("");
    if (state_ == State::kShape) {
      if (v > static_cast<uint64_t>(INT64_MAX)) {
        fail(
            fmt::format("shape of tensor {} has the dimension {}, too large", quote_name(key_), v));
      }
      tensor_.shape.push_back(static_cast<int64_t>(v));
      return true;
    }
    if (state_ == State::kOffsets) {
      if (offsets_.size() == 2) {
        fail(
            fmt::format("data_offsets of tensor {} has more than 2 entries; expected [begin, "
                        "end]",
                        quote_name(key_)));
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
        Field f = k == "dtype"          ? Field::kDType
                  : k == "shape"        ? Field::kShape
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
    kStart,
    kTop,
    kTopValue,
    kMetadata,
    kMetadataValue,
    kTensor,
    kTensorValue,
    kShape,
    kOffsets,
    kSkipValue,
    kDone
  };
  enum class Field { kDType = 0, kShape = 1, kOffsets = 2, kOther = 3 };

  [[noreturn]] void fail(const std::string& what) const {
    throw DataLossError(fmt::format("'{}': invalid safetensors header: {}", source_, what));
  }
  std::string_view field_name() const { return state_ == State::kShape ? "shape" : "data_offsets"; }
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
        fail(fmt::format(
            "{} is {}; expected an object",
            key_ == "__metadata__" ? std::string("__metadata__") : "tensor " + quote_name(key_),
            kind));
      case State::kMetadataValue:
        fail(
            fmt::format("__metadata__[{}] is {}; expected a string (__metadata__ maps strings "
                        "to strings)",
                        quote_name(meta_key_), kind));
      case State::kTensorValue:
        fail(fmt::format(
            "field '{}' of tensor {} is {}; expected {}",
            field_ == Field::kDType   ? "dtype"
            : field_ == Field::kShape ? "shape"
                                      : "data_offsets",
            quote_name(key_), kind,
            field_ == Field::kDType ? "a dtype name string" : "an array of non-negative integers"));
      case State::kShape:
      case State::kOffsets:
        fail(fmt::format("{} of tensor {} holds {}; expected a non-negative integer", field_name(),
                         quote_name(key_), kind));
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
    if (!(seen_fields_ & 4u))
      fail(fmt::format("tensor {} has no 'data_offsets'", quote_name(key_)));
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
      fail(fmt::format("tensor {} has the shape {}, whose size overflows 64 bits", quote_name(key_),
                       shape_to_string(tensor_.shape)));
    }
    const uint64_t bytes = *size;
    if (bytes != tensor_.end - tensor_.begin) {
      fail(
          fmt::format("tensor {} of shape {} and dtype {} needs {} bytes, but its data_offsets "
                      "[{}, {}] hold {}",
                      quote_name(key_), shape_to_string(tensor_.shape), tensor_.dtype_name, bytes,
                      tensor_.begin, tensor_.end, tensor_.end - tensor_.begin));
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
      fail(
          fmt::format("tensor {} spans data bytes [{}, {}) (file bytes [{}, {})), past the end "
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
                       quote_name(previous->name), previous->begin, previous->end,
                       quote_name(t.name), t.begin, t.end));
    }
    if (t.begin > at) {
      fail(
          fmt::format("data bytes [{}, {}) (file bytes [{}, {})) belong to no tensor{}; the "
                      "format requires the tensors to cover the data contiguously",
                      at, t.begin, h.data_start() + at, h.data_start() + t.begin,
                      previous ? " (after tensor " + quote_name(previous->name) + ")" : ""));
    }
    at = t.end;
    previous = &t;
  }
  if (at != h.data_bytes) {
    fail(
        fmt::format("the file has {} bytes after the last tensor's data (file bytes [{}, {})); "
                    "the format allows none",
                    h.data_bytes - at, h.data_start() + at, h.data_start() + h.data_bytes));
  }
}

}  // namespace

SafetensorsHeader::SafetensorsHeader(const SafetensorsHeader& other)
    : tensors(other.tensors),
      metadata(other.metadata),
      header_bytes(other.header_bytes),
      data_bytes(other.data_bytes) {
  index();
}

SafetensorsHeader& SafetensorsHeader::operator=(const SafetensorsHeader& other) {
  if (this != &other) {
    tensors = other.tensors;
    metadata = other.metadata;
    header_bytes = other.header_bytes;
    data_bytes = other.data_bytes;
    index();
  }
  return *this;
}

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
    throw DataLossError(
        fmt::format("'{}': the file is {} bytes, shorter than the 8-byte "
                    "header length that starts every safetensors file",
                    source, file_bytes));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | std::to_integer<uint64_t>(prefix[static_cast<size_t>(i)]);
  if (n > kMaxSafetensorsHeaderBytes) {
    throw DataLossError(
        fmt::format("'{}': the header length at byte 0 is {}, over the limit "
                    "of {} bytes (not a safetensors file, or a corrupt one)",
                    source, n, kMaxSafetensorsHeaderBytes));
  }
  if (8 + n > file_bytes) {
    throw DataLossError(
        fmt::format("'{}': the header length at byte 0 is {}, so the header "
                    "ends at byte {}, past the end of the {}-byte file: "
                    "truncated file?",
                    source, n, 8 + n, file_bytes));
  }
  return n;
}

SafetensorsHeader parse_safetensors_header(std::string_view text, uint64_t file_bytes,
                                           std::string_view source) {
  SafetensorsHeader h;
  h.header_bytes = text.size();
  if (8 + text.size() > file_bytes) {
    throw DataLossError(fmt::format("'{}': header of {} bytes does not fit a {}-byte file", source,
                                    text.size(), file_bytes));
  }
  h.data_bytes = file_bytes - 8 - text.size();
  if (text.empty() || text.front() != '{') {
    throw DataLossError(
        fmt::format("'{}': the header at byte 8 does not start with '{{' (it "
                    "starts with {}); not a safetensors file?",
                    source, text.empty() ? std::string("nothing") : quote_name(text.substr(0, 1))));
  }
  // nlohmann's lexer takes a NUL byte for the end of the input, so "{}\0<anything>" would pass
  // unchecked. A raw NUL is never valid JSON (not whitespace; escaped as \u0000 in strings).
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    throw DataLossError(
        fmt::format("'{}': the header is not valid JSON (near file byte {}): a "
                    "raw NUL byte",
                    source, 8 + nul));
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

}  // namespace meshlayout
