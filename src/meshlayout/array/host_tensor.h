// host_tensor.h — HostTensor: an owning, contiguous, row-major tensor in host memory, of any
// DType. It is what distribute_tensor() takes and Array::gather() returns.
//
// Example:
//   HostTensor t(DType::kF32, {4, 6});               // zero-filled
//   t.data_as<float>()[7] = 1.5f;                     // element (1, 1)
//   HostTensor r = HostTensor::random(DType::kBF16, {8, 8}, /*seed=*/1);
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "meshlayout/core/dtype.h"
#include "meshlayout/core/shape.h"

namespace meshlayout {

class HostTensor {
 public:
  HostTensor() = default;
  /// Zero-filled. ValueError for a negative extent.
  HostTensor(DType dtype, Shape shape);
  /// Deterministic pseudo-random bytes (valid values for every dtype; bools are 0 or 1).
  static HostTensor random(DType dtype, Shape shape, uint64_t seed);

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t num_elements() const { return meshlayout::num_elements(shape_); }
  size_t num_bytes() const { return bytes_.size(); }
  std::byte* data() { return bytes_.data(); }
  const std::byte* data() const { return bytes_.data(); }
  template <typename T>
  T* data_as() {
    return reinterpret_cast<T*>(bytes_.data());
  }
  template <typename T>
  const T* data_as() const {
    return reinterpret_cast<const T*>(bytes_.data());
  }

  /// Same dtype, shape and bytes.
  friend bool operator==(const HostTensor& a, const HostTensor& b) = default;

 private:
  DType dtype_ = DType::kF32;
  Shape shape_;
  std::vector<std::byte> bytes_;
};

}  // namespace meshlayout
