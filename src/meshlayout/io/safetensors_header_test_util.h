// safetensors_header_test_util.h — helpers shared by safetensors_header_test.cc (accepted files,
// writer) and safetensors_header_reject_test.cc (rejections): building file bytes by hand,
// catching the parser's DataLossError, describing parsed tensors, and random headers for the
// property tests (seeded, seed printed and overridable with MESHLAYOUT_TEST_SEED).
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/io/safetensors_header.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout::testing {

using Bytes = std::vector<std::byte>;

/// The `source` every test passes to the parser; messages quote it.
inline constexpr std::string_view kSource = "t.safetensors";

/// `n` as 8 little-endian bytes: the length prefix of a safetensors file.
inline std::string le64(uint64_t n) {
  std::string out(8, '\0');
  for (size_t i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out;
}

inline Bytes to_bytes(std::string_view s) {
  Bytes out(s.size());
  for (size_t i = 0; i < s.size(); ++i) out[i] = static_cast<std::byte>(s[i]);
  return out;
}

/// A file whose prefix says `n`, whatever follows: `rest` (header and data).
inline Bytes raw_file(uint64_t n, std::string_view rest) {
  return to_bytes(le64(n) + std::string(rest));
}

/// A well-framed file: N = header.size(), the header, then `data_bytes` bytes of data.
inline Bytes file_of(std::string_view header, size_t data_bytes = 0) {
  std::string data(data_bytes, '\0');
  for (size_t i = 0; i < data_bytes; ++i) data[i] = static_cast<char>(i * 7 + 1);
  return raw_file(header.size(), std::string(header) + data);
}

inline SafetensorsHeader parse(const Bytes& file) {
  return parse_safetensors_file_bytes(file, kSource);
}

/// The message of the DataLossError that parsing `file` throws. Any other outcome (accepted,
/// another exception type) gives a text in angle brackets that no expected message contains.
inline std::string data_loss_message(const Bytes& file) {
  try {
    parse(file);
  } catch (const DataLossError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("<not a DataLossError: ") + e.what() + ">";
  }
  return "<accepted>";
}

/// A one-tensor header for tensor "x", the three fields spliced in as raw JSON text.
inline std::string one_tensor(std::string_view dtype, std::string_view shape,
                              std::string_view offsets) {
  return fmt::format(R"({{"x":{{"dtype":{},"shape":{},"data_offsets":{}}}}})", dtype, shape,
                     offsets);
}

/// "name DTYPE_NAME dtype es=size shape=(..) [begin, end)", for comparing parsed tensors.
inline std::string describe(const TensorInfo& t) {
  return fmt::format("{} {} {} es={} shape={} [{}, {})", t.name, t.dtype_name,
                     t.dtype ? std::string(dtype_name(*t.dtype)) : "-", t.element_size,
                     shape_to_string(t.shape), t.begin, t.end);
}

inline std::vector<std::string> describe(const SafetensorsHeader& h) {
  std::vector<std::string> out;
  for (const TensorInfo& t : h.tensors) out.push_back(describe(t));
  return out;
}

/// The whole file `h` describes: prefix, serialised header, then data_bytes filler bytes.
inline std::string file_text(const SafetensorsHeader& h) {
  return safetensors_header_bytes(h) + std::string(h.data_bytes, '\x5a');
}

/// A name or metadata string built from pieces that need escaping or are multi-byte UTF-8.
inline std::string random_string(Random& rng) {
  static const std::vector<std::string> pieces = {
      "a", "b",    "dense", "/",    "kernel", ".",  "0",    "17", "\"",           "\\",
      "é", "日本", "😀",     "\x01", "\n",     "\t", "\x7f", " ",  "__metadata__", "_"};
  std::string s;
  const size_t n = 1 + rng.index(4);
  for (size_t i = 0; i < n; ++i) s += pieces[rng.index(pieces.size())];
  return s;
}

/// Up to 8 tensors (empty ones included) of random dtypes and shapes, and up to 3 metadata
/// entries, laid out by make_safetensors_header.
inline SafetensorsHeader random_header(Random& rng) {
  static const std::vector<DType> dtypes = {DType::kF32, DType::kF64, DType::kBF16, DType::kF16,
                                            DType::kI8,  DType::kI16, DType::kI32,  DType::kI64,
                                            DType::kU8,  DType::kBool};
  std::vector<TensorSpec> specs;
  std::set<std::string> used;
  const size_t n = rng.index(9);
  while (specs.size() < n) {
    std::string name = random_string(rng);
    if (name == "__metadata__" || !used.insert(name).second) continue;
    Shape shape(rng.index(5));
    for (int64_t& d : shape) d = static_cast<int64_t>(rng.index(rng.index(4) == 0 ? 1 : 6));
    specs.push_back({name, dtypes[rng.index(dtypes.size())], shape});
  }
  std::map<std::string, std::string> metadata;
  const size_t m = rng.index(4);
  for (size_t i = 0; i < m; ++i) metadata[random_string(rng)] = random_string(rng);
  return make_safetensors_header(specs, metadata);
}

/// What every accepted header must satisfy: tensors contiguous from 0 to data_bytes in order,
/// sizes matching shape × dtype size, every tensor found by name.
inline void expect_header_invariants(const SafetensorsHeader& h, size_t file_size) {
  EXPECT_EQ(h.file_bytes(), file_size);
  uint64_t at = 0;
  for (const TensorInfo& t : h.tensors) {
    EXPECT_EQ(t.begin, at) << describe(t);
    EXPECT_LE(t.begin, t.end) << describe(t);
    EXPECT_EQ(safetensors_dtype_size(t.dtype_name), t.element_size) << describe(t);
    EXPECT_EQ(static_cast<uint64_t>(t.num_elements()) * t.element_size, t.num_bytes())
        << describe(t);
    EXPECT_EQ(h.find(t.name), &t) << describe(t);
    EXPECT_FALSE(t.name.empty());
    at = t.end;
  }
  EXPECT_EQ(at, h.data_bytes);
}

}  // namespace meshlayout::testing
