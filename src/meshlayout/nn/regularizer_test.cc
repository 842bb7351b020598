#include "meshlayout/nn/regularizer.h"

#include <gtest/gtest.h>

#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/model.h"

namespace meshlayout {
namespace {

class RegularizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(8);
    clear_session();
  }
  void TearDown() override { reset_device_count(); }
  DeviceMesh mesh_ = DeviceMesh::from_string("mesh[data=2,model=4]");
};

TEST_F(RegularizerTest, CountsEveryElementOnceWhateverTheLayout) {
  HostTensor t = HostTensor::random(DType::kF32, {13, 7}, 4);
  double l1 = 0, l2 = 0;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const double v = t.data_as<float>()[i];
    l1 += std::abs(v);
    l2 += v * v;
  }
  const Regularizer r = Regularizer::L1L2(0.5, 0.25);
  for (const TensorLayout& layout :
       {TensorLayout({None, None}, mesh_), TensorLayout({"data", None}, mesh_),
        TensorLayout({"model", "data"}, mesh_), TensorLayout({{"data", "model"}, None}, mesh_)}) {
    EXPECT_NEAR(r(distribute_tensor(t, layout)), 0.5 * l1 + 0.25 * l2, 1e-9) << layout.to_string();
  }
  EXPECT_THROW(r(distribute_tensor(HostTensor(DType::kI32, {4}), TensorLayout({None}, mesh_))),
               ValueError);
}

class Block : public Model {
 public:
  Block() : Model("block") {
    d = track("d", std::make_shared<Dense>(
                       8, DenseOptions{.kernel_regularizer = Regularizer::L2(0.01)}));
  }
  Tensor call(const Tensor& x) override { return (*d)(x); }
  std::shared_ptr<Dense> d;
};

TEST_F(RegularizerTest, AttachesAfterMaterialisationAndMatchesTheGatheredKernel) {
  LayoutMap rules(mesh_);
  rules["d.kernel"] = {None, "model"};
  std::shared_ptr<Block> block;
  {
    LayoutMapScope scope = rules.scope();
    block = std::make_shared<Block>();
  }
  (*block)(distribute_tensor(HostTensor(DType::kF32, {2, 4}), TensorLayout({None, None}, mesh_)));
  HostTensor k = block->d->kernel()->value().gather();
  double want = 0;
  for (int64_t i = 0; i < k.num_elements(); ++i) want += 0.01 * k.data_as<float>()[i] * k.data_as<float>()[i];
  const std::vector<double> losses = block->losses();
  ASSERT_EQ(losses.size(), 1u);
  EXPECT_NEAR(losses[0], want, 1e-9);
}

TEST_F(RegularizerTest, ExplicitLayoutWinsOverTheMap) {
  class Custom : public Model {
   public:
    Custom() : Model("custom") { w = track("w", std::make_shared<Holder>()); }
    Tensor call(const Tensor& x) override { return (*w)(x); }
    struct Holder : Layer {
      Holder() : Layer("holder", "") {}
      Shape compute_output_shape(const Shape& s) const override { return s; }
      void build(const Shape&) override {
        v = add_weight({.name = "w", .shape = {8, 4}, .layout = TensorLayout({"data", None})});
      }
      Array call(const Array& x) override { return distribute_tensor(x, x.layout()); }
      VariablePtr v;
    };
    std::shared_ptr<Holder> w;
  };
  LayoutMap rules(mesh_);
  rules[".*"] = {None, "model"};
  std::shared_ptr<Custom> m;
  {
    LayoutMapScope scope = rules.scope();
    m = std::make_shared<Custom>();
  }
  (*m)(Tensor::symbolic({2, 4}));
  EXPECT_EQ(m->w->v->layout(), TensorLayout({"data", None}, mesh_));
}

}  // namespace
}  // namespace meshlayout
