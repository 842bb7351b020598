// scale and soft_cap against their formulas in double on split layouts, F32 and F64; soft_cap's
// backward against central differences; the input is left as it was; bad caps and dtypes named.
#include "meshlayout/ops/scalar_ops.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout {
namespace {

class ScalarOpsTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
  DeviceMesh mesh_{{2, 4}, {"batch", "model"}};
};

double at(const HostTensor& t, int64_t i) {
  return t.dtype() == DType::kF64 ? t.data_as<double>()[i] : t.data_as<float>()[i];
}

TEST_F(ScalarOpsTest, ScaleAndSoftCapMatchTheirFormulas) {
  for (const DType dtype : {DType::kF32, DType::kF64}) {
    HostTensor x = HostTensor::random(dtype, {3, 5, 6}, 4);
    for (int64_t i = 0; i < x.num_elements(); ++i) {  // spread over [-40, 40): the cap bites
      if (dtype == DType::kF64)
        x.data_as<double>()[i] *= 40;
      else
        x.data_as<float>()[i] *= 40;
    }
    const double tolerance = dtype == DType::kF64 ? 1e-14 : 1e-6;
    for (const TensorLayout& l : {TensorLayout({"batch", None, "model"}, mesh_),
                                  TensorLayout({None, "model", None}, mesh_)}) {
      const Array xa = distribute_tensor(x, l);
      const HostTensor scaled = scale(xa, 3.5).gather();
      const Array capped = soft_cap(xa, 30.0);
      EXPECT_EQ(capped.layout(), l);
      const HostTensor c = capped.gather();
      for (int64_t i = 0; i < x.num_elements(); ++i) {
        EXPECT_NEAR(at(scaled, i), at(x, i) * 3.5, tolerance * 140);
        EXPECT_NEAR(at(c, i), 30.0 * std::tanh(at(x, i) / 30.0), tolerance * 30);
      }
      const HostTensor unchanged = xa.gather();
      EXPECT_EQ(std::memcmp(unchanged.data(), x.data(), x.num_bytes()), 0);
      // The backward: dx = dy · d/dx cap·tanh(x/cap), against central differences.
      const HostTensor dy = HostTensor::random(dtype, x.shape(), 9);
      const HostTensor dx =
          soft_cap_backward(capped,
                            distribute_tensor(dy, TensorLayout({None, None, "model"}, mesh_)), 30.0)
              .gather();
      for (int64_t i = 0; i < x.num_elements(); ++i) {
        const double h = 1e-4, v = at(x, i);
        const double numeric =
            (30.0 * std::tanh((v + h) / 30.0) - 30.0 * std::tanh((v - h) / 30.0)) / (2 * h);
        EXPECT_NEAR(at(dx, i), at(dy, i) * numeric, dtype == DType::kF64 ? 1e-8 : 1e-5);
      }
    }
  }
}

TEST_F(ScalarOpsTest, BadCapsAndDtypesAreNamed) {
  const Array x = distribute_tensor(HostTensor::random(DType::kF32, {2, 3}, 1),
                                    TensorLayout({None, None}, mesh_));
  for (const double cap : {0.0, -1.0, static_cast<double>(INFINITY)}) {
    try {
      (void)soft_cap(x, cap);
      ADD_FAILURE() << cap;
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("needs a positive, finite cap"), std::string::npos);
    }
  }
  const Array ints =
      distribute_tensor(HostTensor(DType::kI32, {2, 3}), TensorLayout({None, None}, mesh_));
  EXPECT_THROW((void)scale(ints, 2.0), ValueError);
  EXPECT_THROW((void)soft_cap_backward(x, ints, 1.0), ValueError);
}

}  // namespace
}  // namespace meshlayout
