// layout_text_fuzz.cc — libFuzzer target for the text parsers: DeviceMesh::from_string,
// TensorLayout::from_string and python_regex_to_re2. Every input goes to all three.
//
// Any input may be refused with a meshlayout::Error; anything else — another exception type,
// a crash, a sanitizer report, a leak, a timeout — is a finding. What is accepted must also:
//   * mesh, layout: round-trip, from_string(to_string(x)) == x, and print the same text again;
//   * regex: compile in RE2 and work as a LayoutMap key in every match mode (insertion,
//     lookups and explain() without any error: the pattern was accepted).
#include <re2/re2.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/device_mesh.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout/tensor_layout.h"
#include "meshlayout/layout_map/layout_map.h"
#include "meshlayout/layout_map/python_regex.h"

namespace {

using meshlayout::DeviceMesh;
using meshlayout::LayoutMap;
using meshlayout::MatchMode;
using meshlayout::TensorLayout;

// Enough devices for any mesh a 4 KiB input can sensibly describe to be valid.
constexpr int64_t kFuzzDeviceCount = 4096;

[[noreturn]] void finding(std::string_view what, std::string_view input, std::string_view detail) {
  std::fprintf(stderr, "\nlayout_text_fuzz FINDING: %.*s\ninput: %.*s\n%.*s\n",
               static_cast<int>(what.size()), what.data(), static_cast<int>(input.size()),
               input.data(), static_cast<int>(detail.size()), detail.data());
  std::abort();
}

void check_mesh(std::string_view text) {
  std::optional<DeviceMesh> mesh;
  try {
    mesh.emplace(DeviceMesh::from_string(text));
  } catch (const meshlayout::Error&) {
    return;
  }
  const std::string printed = mesh->to_string();
  std::optional<DeviceMesh> again;
  try {
    again.emplace(DeviceMesh::from_string(printed));
  } catch (const meshlayout::Error& error) {
    finding("DeviceMesh::from_string refuses to_string()'s text", text,
            printed + "\n" + error.what());
  }
  if (!(*again == *mesh)) finding("DeviceMesh text does not round-trip", text, printed);
  if (again->to_string() != printed) {
    finding("DeviceMesh prints differently after a round trip", text,
            printed + "\n" + again->to_string());
  }
}

void check_layout(std::string_view text) {
  std::optional<TensorLayout> layout;
  try {
    layout.emplace(TensorLayout::from_string(text));
  } catch (const meshlayout::Error&) {
    return;
  }
  const std::string printed = layout->to_string();
  std::optional<TensorLayout> again;
  try {
    again.emplace(TensorLayout::from_string(printed));
  } catch (const meshlayout::Error& error) {
    finding("TensorLayout::from_string refuses to_string()'s text", text,
            printed + "\n" + error.what());
  }
  if (!(*again == *layout)) finding("TensorLayout text does not round-trip", text, printed);
  if (again->to_string() != printed) {
    finding("TensorLayout prints differently after a round trip", text,
            printed + "\n" + again->to_string());
  }
}

void check_regex(std::string_view text) {
  std::string pattern;
  try {
    pattern = meshlayout::python_regex_to_re2(text);
  } catch (const meshlayout::Error&) {
    return;
  }
  RE2::Options options;
  options.set_log_errors(false);
  const RE2 re(pattern, options);
  if (!re.ok()) finding("python_regex_to_re2 returned a pattern RE2 refuses", text, pattern);
  const std::string key(text);
  for (MatchMode mode : {MatchMode::kSearch, MatchMode::kFullmatch, MatchMode::kFirst}) {
    try {
      LayoutMap map(std::nullopt, mode);
      map.set(key, std::vector<meshlayout::DimSharding>{});
      if (map.match_index(key) != size_t{0}) {
        finding("a stored key does not find itself", text, pattern);
      }
      for (std::string_view path : {"", "dense_1/kernel", "my_model/dense/bias", "a"}) {
        std::optional<size_t> hit = map.match_index(path);
        if (map.explain(path).chosen_rule != hit) {
          finding("match_index and explain() disagree", text, std::string(path));
        }
      }
    } catch (const meshlayout::Error& error) {
      finding("an accepted pattern fails as a LayoutMap key", text,
              std::string(meshlayout::match_mode_name(mode)) + ": " + error.what());
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  meshlayout::set_device_count(kFuzzDeviceCount);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  check_mesh(text);
  check_layout(text);
  check_regex(text);
  return 0;
}
