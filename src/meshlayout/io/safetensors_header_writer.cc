// The safetensors writer side: the header of a new file, laid out as the reference writer does,
// and its bytes (see safetensors_header.h).
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "meshlayout/core/errors.h"
#include "meshlayout/io/safetensors_header.h"
#include "meshlayout/io/safetensors_header_internal.h"

namespace meshlayout {
namespace {

using nlohmann::json;
using namespace safetensors_detail;

std::string json_string(std::string_view s, std::string_view what) {
  try {
    return json(std::string(s)).dump();
  } catch (const json::exception&) {
    throw ValueError(fmt::format("{} {} is not valid UTF-8", what, quote_name(s)));
  }
}

}  // namespace

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
      throw ValueError(
          fmt::format("the tensors to save hold more than 2^64 bytes together "
                      "(at tensor {})",
                      quote_name(t.name)));
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
  for (int i = 0; i < 8; ++i)
    out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + json_text;
}

}  // namespace meshlayout
