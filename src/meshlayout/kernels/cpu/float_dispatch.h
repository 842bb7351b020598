// float_dispatch.h — dispatch_float for the CPU kernels: runs f with a null E* of the element
// type of an F32 or F64 dtype (the callers have checked the dtype).
//
// Example:
//   dispatch_float(dtype, [&]<typename E>(E* /*tag*/) { E* p = …; });
#pragma once

#include "meshlayout/core/dtype.h"

namespace meshlayout::cpu_kernels {

template <typename F>
void dispatch_float(DType dtype, F&& f) {
  if (dtype == DType::kF32) {
    f(static_cast<float*>(nullptr));
  } else {
    f(static_cast<double*>(nullptr));
  }
}

}  // namespace meshlayout::cpu_kernels
