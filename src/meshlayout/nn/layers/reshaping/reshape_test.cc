#include "meshlayout/nn/layers/reshaping/reshape.h"
#include "meshlayout/nn/layers/core/dense.h"

#include <gtest/gtest.h>

#include <cstring>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/nn/model.h"
#include "meshlayout/nn/nn_test_util.h"

namespace meshlayout {
namespace {

class ReshapeTest : public NnTest {};

// Row-major reshape keeps the bytes: the gathered output equals the input's data.
TEST_F(ReshapeTest, FlattenAndReshapeKeepTheBatchShardingOnEveryLayout) {
  HostTensor x = HostTensor::random(DType::kF32, {4, 4, 6}, 9);
  for (const TensorLayout& layout :
       {TensorLayout({"data", None, None}, mesh_), TensorLayout({"data", "model", None}, mesh_),
        TensorLayout({None, None, "model"}, mesh_), TensorLayout({"model", "data", None}, mesh_)}) {
    auto flat = std::make_shared<Flatten>();
    Tensor y = (*flat)(distribute_tensor(x, layout));
    EXPECT_EQ(y.shape(), (Shape{4, 24}));
    EXPECT_EQ(y.value().layout(), TensorLayout({layout.axes()[0], None}, mesh_));
    HostTensor got = y.value().gather();
    ASSERT_EQ(got.num_bytes(), x.num_bytes());
    EXPECT_EQ(0, std::memcmp(got.data(), x.data(), x.num_bytes())) << layout.to_string();
    auto reshape = std::make_shared<Reshape>(Shape{3, -1});
    Tensor z = (*reshape)(distribute_tensor(x, layout));
    EXPECT_EQ(z.shape(), (Shape{4, 3, 8}));
    HostTensor back = z.value().gather();
    EXPECT_EQ(0, std::memcmp(back.data(), x.data(), x.num_bytes())) << layout.to_string();
  }
  EXPECT_EQ(Flatten().compute_output_shape({5}), (Shape{5, 1}));
}

TEST_F(ReshapeTest, BadShapesAreRefusedWithTheValues) {
  EXPECT_THROW(Reshape(Shape{-1, -1}), ValueError);
  EXPECT_THROW(Reshape(Shape{0, 2}), ValueError);
  Reshape r(Shape{7}, ReshapeOptions{.name = "r"});
  try {
    (void)r.compute_output_shape({2, 3, 2});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "Reshape layer 'r': the total size of the new array must be unchanged, "
                 "input_shape = (2, 3, 2), target_shape = (7,)");
  }
}

TEST_F(ReshapeTest, FlattenInAFunctionalModelBeforeADense) {
  Tensor in = Input({2, 3}, 4);
  auto d = std::make_shared<Dense>(5, DenseOptions{.name = "d"});
  auto f = Model::functional(in, (*d)((*std::make_shared<Flatten>())(in)));
  EXPECT_EQ(d->kernel()->shape(), (Shape{6, 5}));
  EXPECT_EQ(d->kernel()->path(), "d/kernel");
  EXPECT_EQ(f->layers()[1]->name(), "flatten");
}

}  // namespace
}  // namespace meshlayout
