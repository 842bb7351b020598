#include "meshlayout/ops/swiglu.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/ops/elementwise_test_util.h"

namespace meshlayout {
namespace {

using ::testing::HasSubstr;

class SwigluTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
  std::shared_ptr<Runtime> rt_ = Runtime::single_process(8);
  DeviceMesh mesh_ = DeviceMesh({2, 4}, {"data", "model"});
};

double silu(double g) { return g / (1.0 + std::exp(-g)); }

// L = Σ w · silu(g) · u for fixed weights w: dL/dg and dL/du by central differences in float64,
// against the F32 backward with dy = w, in every layout pair.
TEST_F(SwigluTest, MatchesFloat64FormulasAndFiniteDifferencesInEveryLayout) {
  const Shape shape{2, 3, 8};
  const HostTensor hg = HostTensor::random(DType::kF32, shape, 11),
                   hu = HostTensor::random(DType::kF32, shape, 12),
                   hw = HostTensor::random(DType::kF32, shape, 13);
  const int64_t n = hg.num_elements();
  const auto at = [](const HostTensor& t, int64_t i) {
    return static_cast<double>(t.data_as<float>()[i]);
  };
  for (const char* lg : {"None,None,None", "data,None,model", "None,None,model"}) {
    for (const char* lu : {"data,None,model", "model,None,None"}) {
      SCOPED_TRACE(std::string(lg) + " / " + lu);
      const Array g = testing::distribute_on(rt_, hg, lg, mesh_),
                  u = testing::distribute_on(rt_, hu, lu, mesh_),
                  w = testing::distribute_on(rt_, hw, lu, mesh_);
      const Array y = swiglu(g, u);
      EXPECT_EQ(y.layout(), g.layout());
      const SwigluGrads grads = swiglu_backward(g, u, w);
      EXPECT_EQ(grads.dg.layout(), g.layout());
      const HostTensor yy = y.gather(), dg = grads.dg.gather(), du = grads.du.gather();
      for (int64_t i = 0; i < n; ++i) {
        const double gi = at(hg, i), ui = at(hu, i), wi = at(hw, i), h = 1e-5;
        EXPECT_NEAR(yy.data_as<float>()[i], silu(gi) * ui, 1e-6 * (1 + std::abs(silu(gi) * ui)))
            << i;
        const double want_dg = wi * ui * (silu(gi + h) - silu(gi - h)) / (2 * h);
        const double want_du = wi * silu(gi);
        EXPECT_NEAR(dg.data_as<float>()[i], want_dg, 1e-5 * (1 + std::abs(want_dg))) << i;
        EXPECT_NEAR(du.data_as<float>()[i], want_du, 1e-6 * (1 + std::abs(want_du))) << i;
      }
    }
  }
}

TEST_F(SwigluTest, RefusesOperandsOfAnotherShapeOrDtype) {
  const Array g =
      testing::distribute_on(rt_, HostTensor::random(DType::kF32, {2, 4}, 1), "None,None", mesh_);
  const Array u =
      testing::distribute_on(rt_, HostTensor::random(DType::kF32, {4, 2}, 2), "None,None", mesh_);
  const Array i32 =
      testing::distribute_on(rt_, HostTensor(DType::kI32, {2, 4}), "None,None", mesh_);
  try {
    swiglu(g, u);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("gate (2, 4) F32 and up (4, 2) F32"));
  }
  EXPECT_THROW(swiglu_backward(g, g, u), ValueError);
  EXPECT_THROW(swiglu(i32, i32), ValueError);
}

}  // namespace
}  // namespace meshlayout
