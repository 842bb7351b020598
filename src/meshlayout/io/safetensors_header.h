// safetensors_header.h — the safetensors header: parsing with the reference implementation's
// checks, and writing it to the byte.
//
// A safetensors file is: 8 bytes (little-endian u64 N), N bytes of UTF-8 JSON (padded with
// spaces so the data starts at a multiple of 8), then the data section. The JSON maps each
// tensor name to {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]} (offsets into
// the data section) and may hold "__metadata__", a map of strings to strings.
//
// parse_safetensors_header refuses, with a DataLossError naming the tensor or the byte offset:
// N over 100,000,000 or past the end of the file; invalid UTF-8 or JSON; a header not starting
// with '{'; duplicate, empty or NUL-containing names; unknown dtypes; negative or overflowing
// shapes; shape × dtype size different from the byte range; ranges past the end of the file,
// overlapping, leaving gaps or trailing bytes; a __metadata__ that is not a map of strings.
//
// Example:
//   SafetensorsHeader h = parse_safetensors_file_bytes(bytes, "model.safetensors");
//   const TensorInfo* t = h.find("dense/kernel");        // nullptr if absent
//   std::string json = serialize_safetensors_header(h);  // padded to a multiple of 8
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "meshlayout/core/dtype.h"
#include "meshlayout/core/shape.h"

namespace meshlayout {

/// The largest header the reference implementation accepts.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

/// One tensor of a safetensors file. Offsets are relative to the start of the data section.
struct TensorInfo {
  std::string name;
  std::string dtype_name;      // as written in the file: "F32", "BF16", "U32", "F8_E4M3", …
  std::optional<DType> dtype;  // std::nullopt for safetensors dtypes meshlayout cannot compute
                               // with (U16, U32, U64, F8_*): they can be inspected, not loaded
  size_t element_size = 0;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;

  uint64_t num_bytes() const { return end - begin; }
  int64_t num_elements() const { return meshlayout::num_elements(shape); }
};

struct SafetensorsHeader {
  SafetensorsHeader() = default;
  /// A copy gets its own name index (find() must not point into the original's names).
  SafetensorsHeader(const SafetensorsHeader& other);
  SafetensorsHeader& operator=(const SafetensorsHeader& other);
  SafetensorsHeader(SafetensorsHeader&&) = default;
  SafetensorsHeader& operator=(SafetensorsHeader&&) = default;

  /// In the order of their data (by `begin`, then name).
  std::vector<TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
  /// N: the JSON's length in the file, padding included. The data starts at 8 + N.
  uint64_t header_bytes = 0;
  /// Bytes in the data section (sum of the tensors' sizes).
  uint64_t data_bytes = 0;

  uint64_t data_start() const { return 8 + header_bytes; }
  uint64_t file_bytes() const { return data_start() + data_bytes; }
  /// The tensor called `name`, or nullptr.
  const TensorInfo* find(std::string_view name) const;
  /// Builds the name index find() uses (the parser and make_safetensors_header call it).
  void index();

 private:
  std::unordered_map<std::string_view, size_t> by_name_;
};

/// The size in bytes of a safetensors dtype name, or std::nullopt if the name is not one.
std::optional<size_t> safetensors_dtype_size(std::string_view name);
/// Every dtype name the format defines, for messages.
std::string_view safetensors_dtype_names();

/// Reads the 8-byte length prefix and checks it against the limit and the file size.
/// DataLossError naming `source` otherwise.
uint64_t parse_safetensors_header_length(std::span<const std::byte> prefix, uint64_t file_bytes,
                                         std::string_view source);

/// Parses and validates the N JSON bytes that follow the prefix, for a file of `file_bytes`.
SafetensorsHeader parse_safetensors_header(std::string_view json, uint64_t file_bytes,
                                           std::string_view source);

/// Both steps on a whole file held in memory.
SafetensorsHeader parse_safetensors_file_bytes(std::span<const std::byte> file,
                                               std::string_view source);

/// What a writer gives for each tensor: name, dtype and shape.
struct TensorSpec {
  std::string name;
  DType dtype;
  Shape shape;
};

/// The header of a new file: tensors laid out as the reference writer does (by element size,
/// largest first, then by name, so every tensor starts aligned to its element size). Errors
/// (ValueError) for empty, duplicate or NUL-containing names, or "__metadata__" as a name.
SafetensorsHeader make_safetensors_header(std::span<const TensorSpec> tensors,
                                          std::map<std::string, std::string> metadata = {});

/// The header's JSON, compact, __metadata__ first then tensors in data order, padded with
/// spaces to a multiple of 8 bytes. Sets nothing; header_bytes of `header` must match (it does
/// for make_safetensors_header's result).
std::string serialize_safetensors_header(const SafetensorsHeader& header);

/// The 8-byte little-endian length prefix followed by the serialised header.
std::string safetensors_header_bytes(const SafetensorsHeader& header);

}  // namespace meshlayout
