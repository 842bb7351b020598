// float_compute.h — the two pieces a layer computing in F32 or F64 needs (nn internal): the
// build-time refusal of weights in any other dtype (F16/BF16 under set_floatx: the layer would
// otherwise read them as floats), and the dispatch of a generic kernel on the element type.
//
// Example (a layer's call):
//   check_compute_dtype("Conv2D", name(), kernel_->dtype());      // in build
//   dispatch_float(y.dtype(), [&]<typename E>(E* /*tag*/) { … E* p = …; });
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

#include "meshlayout/core/dtype.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

namespace meshlayout::internal_nn {

/// ValueError unless `dtype` (the layer's weights' dtype, its compute dtype) is F32 or F64:
/// "<kind> layer '<name>' has BF16 weights; it computes in F32 or F64 only …".
inline void check_compute_dtype(std::string_view kind, const std::string& layer, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kF64) {
    throw ValueError(
        fmt::format("{} layer {} has {} weights (its dtype); it computes in F32 or F64 "
                    "only: build it under floatx F32 or F64",
                    kind, quote(layer), dtype_name(dtype)));
  }
}

/// Calls f(static_cast<float*>(nullptr)) for F32, f(static_cast<double*>(nullptr)) otherwise
/// (F64: callers have checked the dtype is one of the two).
template <typename F>
void dispatch_float(DType dtype, F&& f) {
  if (dtype == DType::kF32) {
    f(static_cast<float*>(nullptr));
  } else {
    f(static_cast<double*>(nullptr));
  }
}

}  // namespace meshlayout::internal_nn
