#include "meshlayout/nn/variable.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout {
namespace {

using ::testing::HasSubstr;

class VariableTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
};

TEST_F(VariableTest, LazyVariableHasNoValueAndSaysWhy) {
  Variable v({.name = "kernel", .shape = {10, 20}});
  v.set_paths("d1.kernel", "d1/kernel");
  EXPECT_TRUE(v.is_lazy());
  EXPECT_EQ(v.layout(), std::nullopt);
  try {
    v.value();
    FAIL();
  } catch (const FailedPreconditionError& e) {
    EXPECT_THAT(e.what(), HasSubstr("variable 'd1.kernel' with shape (10, 20) is lazily "
                                    "initialised and has no value yet"));
  }
}

TEST_F(VariableTest, ValuesAreBitIdenticalOnEveryMeshAndLayout) {
  const Shape shape{13, 7};
  for (const char* init : {"glorot_uniform", "random_normal", "truncated_normal", "he_uniform",
                           "lecun_normal", "ones"}) {
    SCOPED_TRACE(init);
    Variable reference(
        {.name = "kernel", .shape = shape, .initializer = Initializer::from_name(init)});
    reference.set_paths("d.kernel", "d/kernel");
    DeviceMesh one({1}, {"x"}, std::vector<std::string>{"cpu:0"});
    reference.materialize(TensorLayout({None, None}, one));
    const HostTensor whole = reference.value().gather();
    for (const char* mesh_text : {"mesh[x=8]", "mesh[data=2,model=4]", "mesh[data=4,model=2]"}) {
      DeviceMesh mesh = DeviceMesh::from_string(mesh_text);
      for (int l = 0; l < 3; ++l) {
        std::vector<DimSharding> axes =
            l == 0   ? std::vector<DimSharding>{mesh.axis_names()[0], None}
            : l == 1 ? std::vector<DimSharding>{None, mesh.axis_names().back()}
                     : std::vector<DimSharding>{DimSharding(mesh.axis_names()), None};
        Variable v({.name = "kernel", .shape = shape, .initializer = Initializer::from_name(init)});
        v.set_paths("d.kernel", "d/kernel");
        v.materialize(TensorLayout(axes, mesh));
        EXPECT_EQ(v.value().gather(), whole) << mesh_text << " layout " << l;
      }
    }
  }
}

TEST_F(VariableTest, MaterialisingAllocatesOnlyEachDevicesShard) {
  auto rt = Runtime::single_process(8);
  DeviceMesh mesh({2, 4}, {"data", "model"});
  Variable v(
      {.name = "kernel", .shape = {1024, 512}, .initializer = Initializer::glorot_uniform()});
  v.set_paths("d.kernel", "d/kernel");
  for (VirtualDevice* d : rt->local_devices()) d->memory().reset_peak();
  v.materialize(TensorLayout({"data", "model"}, mesh), rt);
  for (VirtualDevice* d : rt->local_devices()) {
    EXPECT_EQ(d->memory().stats().peak_bytes, 512 * 128 * 4) << d->name();  // its shard only
  }
}

TEST_F(VariableTest, LayoutThatDoesNotFitIsRefusedBeforeAllocating) {
  auto rt = Runtime::single_process(8);
  DeviceMesh mesh({2, 4}, {"data", "model"});
  Variable v({.name = "kernel", .shape = {10, 30}});
  v.set_paths("d1.kernel", "d1/kernel");
  try {
    v.materialize(TensorLayout({"model"}, mesh), rt);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "variable 'd1.kernel' with shape (10, 30) does not fit "
                 "layout[model]@mesh[data=2,model=4]: the layout has 1 dimension, the tensor has "
                 "2");
  }
  EXPECT_THROW(v.materialize(TensorLayout({None, "model"}, mesh), rt, /*strict=*/true), ValueError);
  for (VirtualDevice* d : rt->local_devices()) EXPECT_EQ(d->memory().stats().allocations, 0);
}

TEST_F(VariableTest, AssignKeepsTheLayout) {
  DeviceMesh mesh({8}, {"x"});
  Variable v({.name = "w", .shape = {16, 4}});
  v.materialize(TensorLayout({"x", None}, mesh));
  HostTensor t = HostTensor::random(DType::kF32, {16, 4}, 3);
  v.assign(t);
  EXPECT_EQ(v.layout(), TensorLayout({"x", None}, mesh));
  EXPECT_EQ(v.value().gather(), t);
  Array other = distribute_tensor(t, TensorLayout({None, "x"}, mesh));
  v.assign(other);
  EXPECT_EQ(v.layout(), TensorLayout({"x", None}, mesh));
  EXPECT_THROW(v.assign(HostTensor(DType::kF32, {4, 16})), ValueError);
}

}  // namespace
}  // namespace meshlayout
