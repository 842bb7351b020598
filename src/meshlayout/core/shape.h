// shape.h — a tensor shape (one extent per dimension) and its text form.
//
// Example:
//   Shape s{8, 6};
//   shape_to_string(s)          // "(8, 6)"
//   parse_shape("8,6")          // Shape{8, 6}; ValueError on "8,-1" or "8,x"
//   num_elements({1LL << 32, 1LL << 32})        // ValueError: more than 2^63-1 elements
//   num_bytes({1LL << 62, 2}, DType::kF32)      // ValueError: bytes do not fit in int64
//   ceil_div(INT64_MAX, 2)                       // 4611686018427387904, no overflow
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "meshlayout/core/dtype.h"

namespace meshlayout {

using Shape = std::vector<int64_t>;

/// Python tuple form: `(8, 6)`, `(5,)`, `()`.
std::string shape_to_string(const Shape& shape);

/// Parses comma-separated non-negative extents such as `8,6`; an empty string is rank 0.
Shape parse_shape(std::string_view text);

/// Product of the extents (1 for rank 0; 0 as soon as one extent is 0, whatever the others).
/// ValueError naming the shape when the product does not fit in int64: every size in
/// meshlayout is an int64, so such a tensor cannot be described, let alone allocated.
int64_t num_elements(const Shape& shape);

/// num_elements(shape) × dtype_size(dtype), with the same overflow check on the bytes.
int64_t num_bytes(const Shape& shape, DType dtype);

/// ceil(n / k) for n >= 0, k >= 1, without the overflow of (n + k - 1) / k.
constexpr int64_t ceil_div(int64_t n, int64_t k) { return n / k + (n % k != 0 ? 1 : 0); }

/// a × b for non-negative a, b, or std::nullopt when it does not fit in int64.
std::optional<int64_t> checked_mul(int64_t a, int64_t b);

/// a + b, or std::nullopt when it does not fit in int64 (options such as --steps reach here
/// with any value a user can type).
std::optional<int64_t> checked_add(int64_t a, int64_t b);

}  // namespace meshlayout
