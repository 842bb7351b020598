#include "meshlayout/core/shape.h"

#include <fmt/format.h>

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
  if (t.size() >= 2 && ((t.front() == '(' && t.back() == ')') || (t.front() == '[' && t.back() == ']'))) {
    t = trim(t.substr(1, t.size() - 2));
  }
  if (t.empty()) return shape;
  auto parts = split(t, ',');
  if (parts.size() > 1 && trim(parts.back()).empty()) parts.pop_back();  // "(5,)"
  for (size_t i = 0; i < parts.size(); ++i) {
    int64_t extent = parse_int64(parts[i], fmt::format("shape {} dimension {}", quote(text), i));
    if (extent < 0) {
      throw ValueError(fmt::format("shape {} dimension {} is {}; extents must be >= 0",
                                   quote(text), i, extent));
    }
    shape.push_back(extent);
  }
  return shape;
}

int64_t num_elements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  return n;
}

}  // namespace meshlayout
