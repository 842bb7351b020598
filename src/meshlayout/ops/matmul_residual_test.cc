// matmul(x, w, {.add_to_output = &r}): y = x @ w + r in every rule's layout — without partial
// sums, with an all-reduce, a reduce-scatter and the two-step all-reduce over four processes —
// against float64, and its refusals.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshlayout/array/array_test_util.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/ops/matmul.h"

namespace meshlayout {
namespace {

// max |got − want| / max(1, max |want|) for got = x @ w + r, want in float64.
double error_of(const HostTensor& got, const HostTensor& x, const HostTensor& w,
                const HostTensor& r) {
  const int64_t m = x.shape()[0], k = x.shape()[1], n = w.shape()[1];
  double worst = 0, scale = 1;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double want = r.data_as<float>()[i * n + j];
      for (int64_t c = 0; c < k; ++c)
        want += double(x.data_as<float>()[i * k + c]) * w.data_as<float>()[c * n + j];
      worst = std::max(worst, std::abs(got.data_as<float>()[i * n + j] - want));
      scale = std::max(scale, std::abs(want));
    }
  }
  return worst / scale;
}

struct Case {
  const char* x;
  const char* w;
  const char* r;
  std::optional<const char*> out;
};

const Case kCases[] = {
    {"None,None", "None,None", "None,None", std::nullopt},     // replicated
    {"data,None", "None,model", "None,None", std::nullopt},    // column-parallel, r resharded
    {"None,model", "model,None", "None,None", std::nullopt},   // row-parallel: all-reduce
    {"data,model", "model,None", "data,None", std::nullopt},   // row-parallel with a batch split
    {"None,model", "model,None", "model,None", "model,None"},  // reduce-scatter
};

void check_cases(const std::shared_ptr<Runtime>& rt) {
  const DeviceMesh mesh({2, 4}, {"data", "model"});
  const HostTensor x = HostTensor::random(DType::kF32, {6, 12}, 1),
                   w = HostTensor::random(DType::kF32, {12, 10}, 2),
                   r = HostTensor::random(DType::kF32, {6, 10}, 3);
  for (const Case& c : kCases) {
    const auto on = [&](const HostTensor& t, const char* layout) {
      return distribute_tensor(t, TensorLayout::from_string(layout).with_device_mesh(mesh),
                               {.runtime = rt});
    };
    const Array xa = on(x, c.x), wa = on(w, c.w), ra = on(r, c.r);
    MatmulOptions options{.add_to_output = &ra};
    if (c.out) options.output_layout = TensorLayout::from_string(*c.out).with_device_mesh(mesh);
    const Array y = matmul(xa, wa, options);
    const Array plain = matmul(xa, wa, {.output_layout = options.output_layout});
    if (!(y.layout() == plain.layout()))
      throw InternalError(fmt::format("{} @ {}: layout changed", c.x, c.w));
    const double e = error_of(y.gather(), x, w, r);
    if (e > 1e-5)
      throw InternalError(fmt::format("{} @ {} + {}: relative error {}", c.x, c.w, c.r, e));
  }
}

TEST(MatmulResidualTest, AddsTheResidualOnceInEveryRule) {
  set_device_count(8);
  EXPECT_NO_THROW(check_cases(Runtime::single_process(8)));
  for (int procs : {2, 4}) {
    SCOPED_TRACE(procs);
    testing::run_as_processes(
        procs, 8 / procs, [](std::shared_ptr<Runtime> rt) { check_cases(rt); }, 2);
  }
  reset_device_count();
}

TEST(MatmulResidualTest, RefusesAResidualOfAnotherShapeOrDtype) {
  set_device_count(8);
  const DeviceMesh mesh({2, 4}, {"data", "model"});
  const TensorLayout rep({None, None}, mesh);
  const Array x = distribute_tensor(HostTensor::random(DType::kF32, {6, 12}, 1), rep);
  const Array w = distribute_tensor(HostTensor::random(DType::kF32, {12, 10}, 2), rep);
  const Array wrong = distribute_tensor(HostTensor::random(DType::kF32, {10, 6}, 3), rep);
  try {
    matmul(x, w, {.add_to_output = &wrong});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(
                              "add_to_output must have the output's shape (6, 10) and dtype F32"));
  }
  reset_device_count();
}

}  // namespace
}  // namespace meshlayout
