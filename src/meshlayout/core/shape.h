// shape.h — a tensor shape (one extent per dimension) and its text form.
//
// Example:
//   Shape s{8, 6};
//   shape_to_string(s)          // "(8, 6)"
//   parse_shape("8,6")          // Shape{8, 6}; ValueError on "8,-1" or "8,x"
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace meshlayout {

using Shape = std::vector<int64_t>;

/// Python tuple form: `(8, 6)`, `(5,)`, `()`.
std::string shape_to_string(const Shape& shape);

/// Parses comma-separated non-negative extents such as `8,6`; an empty string is rank 0.
Shape parse_shape(std::string_view text);

/// Product of the extents (1 for rank 0).
int64_t num_elements(const Shape& shape);

}  // namespace meshlayout
