// sigmoid_gate and its backward against their formulas in double, on split layouts (s's last
// dimension split too, g in another layout than s), F32 and F64; the gate's gradient against
// central differences of Σ dy · y; bad shapes and dtypes named.
#include "meshlayout/ops/sigmoid_gate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout {
namespace {

class SigmoidGateTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
  DeviceMesh mesh_{{2, 4}, {"batch", "model"}};
};

double at(const HostTensor& t, int64_t i) {
  return t.dtype() == DType::kF64 ? t.data_as<double>()[i] : t.data_as<float>()[i];
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

TEST_F(SigmoidGateTest, ForwardAndBackwardMatchTheFormulas) {
  const int64_t rows = 2 * 6, n = 8;
  for (const DType dtype : {DType::kF32, DType::kF64}) {
    const HostTensor g = HostTensor::random(dtype, {2, 6, 1}, 3);
    const HostTensor s = HostTensor::random(dtype, {2, 6, n}, 4);
    const HostTensor dy = HostTensor::random(dtype, {2, 6, n}, 5);
    const double tol = dtype == DType::kF64 ? 1e-13 : 1e-6;
    for (const auto& [gl, sl] : {std::pair{TensorLayout({"batch", None, None}, mesh_),
                                           TensorLayout({"batch", None, "model"}, mesh_)},
                                 std::pair{TensorLayout({None, "model", None}, mesh_),
                                           TensorLayout({"batch", "model", None}, mesh_)}}) {
      const Array ga = distribute_tensor(g, gl), sa = distribute_tensor(s, sl);
      const Array y = sigmoid_gate(ga, sa);
      EXPECT_EQ(y.layout(), sl);
      const HostTensor yh = y.gather();
      const Array dya = distribute_tensor(dy, TensorLayout({None, None, "model"}, mesh_));
      const SigmoidGateGrads grads = sigmoid_gate_backward(ga, sa, dya);
      EXPECT_EQ(grads.dg.layout(), gl);
      EXPECT_EQ(grads.ds.layout(), dya.layout());
      const HostTensor dg = grads.dg.gather(), ds = grads.ds.gather();
      for (int64_t r = 0; r < rows; ++r) {
        const double p = sigmoid(at(g, r));
        double dot = 0;
        for (int64_t j = 0; j < n; ++j) {
          EXPECT_NEAR(at(yh, r * n + j), p * at(s, r * n + j), tol);
          EXPECT_NEAR(at(ds, r * n + j), p * at(dy, r * n + j), tol);
          dot += at(dy, r * n + j) * at(s, r * n + j);
        }
        // Central differences of L = Σ_j dy · sigmoid(g) · s in g[r].
        const double h = 1e-5;
        const double numeric = (sigmoid(at(g, r) + h) - sigmoid(at(g, r) - h)) / (2 * h) * dot;
        EXPECT_NEAR(at(dg, r), numeric, dtype == DType::kF64 ? 1e-9 : 1e-5);
      }
    }
  }
}

TEST_F(SigmoidGateTest, BadShapesAndDtypesAreNamed) {
  const TensorLayout l({None, None}, mesh_);
  const Array s = distribute_tensor(HostTensor(DType::kF32, {4, 6}), l);
  const Array g2 = distribute_tensor(HostTensor(DType::kF32, {4, 2}), l);
  EXPECT_THAT([&] { sigmoid_gate(g2, s); },
              ::testing::ThrowsMessage<ValueError>(::testing::HasSubstr("g F32 (4, 2)")));
  const Array g64 = distribute_tensor(HostTensor(DType::kF64, {4, 1}), l);
  EXPECT_THAT([&] { sigmoid_gate(g64, s); },
              ::testing::ThrowsMessage<ValueError>(::testing::HasSubstr("g F64 (4, 1)")));
  const Array g = distribute_tensor(HostTensor(DType::kF32, {4, 1}), l);
  const Array dy = distribute_tensor(HostTensor(DType::kF32, {4, 5}), l);
  EXPECT_THAT([&] { sigmoid_gate_backward(g, s, dy); },
              ::testing::ThrowsMessage<ValueError>(::testing::HasSubstr("dy F32 (4, 5)")));
}

}  // namespace
}  // namespace meshlayout
