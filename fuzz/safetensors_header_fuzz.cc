// safetensors_header_fuzz.cc — libFuzzer target for parse_safetensors_file_bytes
// (io/safetensors_header.h). The input is a whole file: 8-byte length, header, data.
//
// Any input may be refused with a meshlayout::Error; anything else — another exception type,
// a crash, a sanitizer report, a leak, a timeout — is a finding. An accepted file must also:
//   * describe itself: file_bytes() is the input's size;
//   * list its tensors by begin, their ranges contiguous from 0 to data_bytes, each range the
//     size of its shape × dtype size, and find(name) return each tensor;
//   * survive a round trip: safetensors_header_bytes(header) followed by data_bytes zeros
//     parses again to the same tensors (name, dtype_name, shape, begin, end) and metadata, with
//     a header padded to a multiple of 8 that serialises to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "meshlayout/core/errors.h"
#include "meshlayout/io/safetensors_header.h"

namespace {

using meshlayout::SafetensorsHeader;
using meshlayout::TensorInfo;

[[noreturn]] void finding(std::string_view what, std::string_view detail) {
  std::fprintf(stderr, "\nsafetensors_header_fuzz FINDING: %.*s\n%.*s\n",
               static_cast<int>(what.size()), what.data(), static_cast<int>(detail.size()),
               detail.data());
  std::abort();
}

bool same_tensor(const TensorInfo& a, const TensorInfo& b) {
  return a.name == b.name && a.dtype_name == b.dtype_name && a.shape == b.shape &&
         a.begin == b.begin && a.end == b.end;
}

void check_layout(const SafetensorsHeader& h, size_t file_size) {
  if (h.file_bytes() != file_size) finding("file_bytes() is not the input's size", "");
  uint64_t at = 0;
  for (const TensorInfo& t : h.tensors) {
    if (t.begin != at) {
      finding("tensors not sorted by begin or not contiguous", t.name);
    }
    if (t.end < t.begin) finding("a tensor ends before it begins", t.name);
    const std::optional<size_t> size = meshlayout::safetensors_dtype_size(t.dtype_name);
    if (!size || *size != t.element_size) finding("element_size is not the dtype's", t.name);
    if (static_cast<uint64_t>(t.num_elements()) * t.element_size != t.num_bytes()) {
      finding("the byte range is not shape x dtype size", t.name);
    }
    if (h.find(t.name) != &t) finding("find(name) does not return the tensor", t.name);
    at = t.end;
  }
  if (at != h.data_bytes) finding("the tensors do not end at data_bytes", "");
}

void check_round_trip(const SafetensorsHeader& h) {
  std::string file;
  try {
    file = meshlayout::safetensors_header_bytes(h);
  } catch (const meshlayout::Error& error) {
    finding("an accepted header cannot be serialised", error.what());
  }
  const std::string json = file.substr(8);
  file.append(h.data_bytes, '\0');
  std::optional<SafetensorsHeader> again;
  try {
    again.emplace(meshlayout::parse_safetensors_file_bytes(
        std::as_bytes(std::span(file.data(), file.size())), "fuzz round trip"));
  } catch (const meshlayout::Error& error) {
    finding("the re-serialised header is refused", json + "\n" + error.what());
  }
  if (again->tensors.size() != h.tensors.size()) {
    finding("the round trip changes the number of tensors", json);
  }
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    if (!same_tensor(again->tensors[i], h.tensors[i])) {
      finding("the round trip changes a tensor", h.tensors[i].name + "\n" + json);
    }
  }
  if (again->metadata != h.metadata) finding("the round trip changes the metadata", json);
  if (again->data_bytes != h.data_bytes) finding("the round trip changes data_bytes", json);
  if (again->header_bytes % 8 != 0) finding("the serialised header is not padded to 8", json);
  if (meshlayout::serialize_safetensors_header(*again) != json) {
    finding("serialising the re-parsed header gives other bytes", json);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data), size);
  std::optional<SafetensorsHeader> header;
  try {
    header.emplace(meshlayout::parse_safetensors_file_bytes(file, "fuzz"));
  } catch (const meshlayout::Error&) {
    return 0;
  }
  check_layout(*header, size);
  check_round_trip(*header);
  return 0;
}
