// floatx.cc — see floatx.h.
#include "meshlayout/nn/floatx.h"

#include <fmt/format.h>

#include <atomic>
#include <optional>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

std::atomic<DType> g_floatx{DType::kF32};
thread_local std::optional<DType> t_floatx;

void check_floatx(DType dtype) {
  if (dtype != DType::kF16 && dtype != DType::kBF16 && dtype != DType::kF32 &&
      dtype != DType::kF64) {
    throw ValueError(fmt::format("Unknown `floatx` value: {}. Expected one of F16, BF16, F32, F64",
                                 dtype_name(dtype)));
  }
}

}  // namespace

DType floatx() { return t_floatx ? *t_floatx : g_floatx.load(); }

void set_floatx(DType dtype) {
  check_floatx(dtype);
  g_floatx.store(dtype);
}

FloatxScope::FloatxScope(DType dtype)
    : had_previous_(t_floatx.has_value()), previous_(t_floatx.value_or(DType::kF32)) {
  check_floatx(dtype);
  t_floatx = dtype;
}

FloatxScope::~FloatxScope() {
  if (had_previous_) {
    t_floatx = previous_;
  } else {
    t_floatx.reset();
  }
}

}  // namespace meshlayout
