#include "meshlayout/core/shape.h"

#include <fmt/format.h>

#include <limits>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

namespace meshlayout {

std::string shape_to_string(const Shape& shape) {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  return fmt::format("({})", fmt::join(shape, ", "));
}

Shape parse_shape(std::string_view text) {
  Shape shape;
  std::string_view t = trim(text);
  if (t.size() >= 2 &&
      ((t.front() == '(' && t.back() == ')') || (t.front() == '[' && t.back() == ']'))) {
    t = trim(t.substr(1, t.size() - 2));
  }
  if (t.empty()) return shape;
  auto parts = split(t, ',');
  if (parts.size() > 1 && trim(parts.back()).empty()) parts.pop_back();  // "(5,)"
  for (size_t i = 0; i < parts.size(); ++i) {
    int64_t extent = parse_int64(parts[i], fmt::format("shape {} dimension {}", quote(text), i));
    if (extent < 0) {
      throw ValueError(
          fmt::format("shape {} dimension {} is {}; extents must be >= 0", quote(text), i, extent));
    }
    shape.push_back(extent);
  }
  return shape;
}

std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t sum = 0;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

int64_t num_elements(const Shape& shape) {
  for (int64_t e : shape) {
    if (e == 0) return 0;
  }
  int64_t n = 1;
  for (int64_t e : shape) {
    std::optional<int64_t> next = checked_mul(n, e);
    if (!next) {
      throw ValueError(
          fmt::format("shape {} has more elements than fit in a signed 64-bit count (at most {}); "
                      "meshlayout cannot describe a tensor that large",
                      shape_to_string(shape), std::numeric_limits<int64_t>::max()));
    }
    n = *next;
  }
  return n;
}

int64_t num_bytes(const Shape& shape, DType dtype) {
  const int64_t elements = num_elements(shape);
  std::optional<int64_t> bytes = checked_mul(elements, static_cast<int64_t>(dtype_size(dtype)));
  if (!bytes) {
    throw ValueError(fmt::format(
        "shape {} of {} has {} elements of {} bytes: more bytes than fit in a signed 64-bit "
        "count (at most {})",
        shape_to_string(shape), dtype_name(dtype), elements, dtype_size(dtype),
        std::numeric_limits<int64_t>::max()));
  }
  return *bytes;
}

}  // namespace meshlayout
