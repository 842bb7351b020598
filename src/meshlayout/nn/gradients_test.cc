#include "meshlayout/nn/gradients.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/nn/layer.h"

namespace meshlayout {
namespace {

using ::testing::HasSubstr;

class GradientsTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
  DeviceMesh mesh_ = DeviceMesh::from_string("mesh[data=2,model=4]");

  VariablePtr variable(const Shape& shape, const TensorLayout& layout) {
    auto v = std::make_shared<Variable>(VariableSpec{.name = "kernel", .shape = shape});
    v->set_paths("d.kernel", "d/kernel");
    v->materialize(layout);
    return v;
  }
  static HostTensor filled(const Shape& shape, float start) {
    HostTensor t(DType::kF32, shape);
    for (int64_t i = 0; i < t.num_elements(); ++i)
      t.data_as<float>()[i] = start + static_cast<float>(i);
    return t;
  }
};

TEST_F(GradientsTest, SumsRepeatedContributionsInTheVariablesLayout) {
  const TensorLayout kernel_layout({None, DimSharding("model")}, mesh_);
  VariablePtr v = variable({6, 8}, kernel_layout);
  Gradients grads;
  EXPECT_EQ(grads.find(*v), nullptr);
  // The first contribution arrives row-split, the second replicated: both end in the kernel's
  // layout.
  grads.accumulate(
      *v, distribute_tensor(filled({6, 8}, 1), TensorLayout({DimSharding("data"), None}, mesh_)));
  grads.accumulate(*v, distribute_tensor(filled({6, 8}, 100), TensorLayout::replicated(2, mesh_)));
  const Array* g = grads.find(*v);
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->layout(), kernel_layout);
  const HostTensor sum = g->gather();
  for (int64_t i = 0; i < 48; ++i)
    EXPECT_EQ(sum.data_as<float>()[i], 101.0f + 2.0f * static_cast<float>(i)) << i;
  EXPECT_EQ(grads.size(), 1u);

  VariablePtr other = variable({6, 8}, kernel_layout);
  const VariablePtr vars[] = {v, other};
  const std::vector<const Array*> ptrs = grads.for_variables(vars);
  ASSERT_EQ(ptrs.size(), 2u);
  EXPECT_EQ(ptrs[0], g);
  EXPECT_EQ(ptrs[1], nullptr);
}

TEST_F(GradientsTest, RefusesAGradientOfAnotherShapeOrDtypeNamingTheVariable) {
  VariablePtr v = variable({6, 8}, TensorLayout::replicated(2, mesh_));
  Gradients grads;
  try {
    grads.accumulate(*v, distribute_tensor(filled({8, 6}, 0), TensorLayout::replicated(2, mesh_)));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'d.kernel'"));
    EXPECT_THAT(e.what(), HasSubstr("shape (8, 6)"));
    EXPECT_THAT(e.what(), HasSubstr("shape (6, 8)"));
  }
  HostTensor f64(DType::kF64, {6, 8});
  EXPECT_THROW(grads.accumulate(*v, distribute_tensor(f64, TensorLayout::replicated(2, mesh_))),
               ValueError);
  EXPECT_EQ(grads.find(*v), nullptr);  // nothing was kept
}

class Doubler : public Layer {
 public:
  Doubler() : Layer("doubler", "") {}
  Shape compute_output_shape(const Shape& s) const override { return s; }

 protected:
  void build(const Shape&) override { set_built(); }
  Array call(const Array& x) override { return distribute_tensor(x, x.layout()); }
};

TEST_F(GradientsTest, ALayerWithoutABackwardSaysSoByName) {
  Doubler layer;
  const Array x = distribute_tensor(filled({2, 3}, 0), TensorLayout::replicated(2, mesh_));
  Gradients grads;
  try {
    layer.backward(x, x, grads);
    FAIL();
  } catch (const FailedPreconditionError& e) {
    EXPECT_THAT(e.what(), HasSubstr("layer 'doubler' (Doubler) has no backward pass"));
  }
}

}  // namespace
}  // namespace meshlayout
