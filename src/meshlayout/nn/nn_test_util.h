// nn_test_util.h — the fixture most nn tests share: 8 virtual CPU devices, fresh automatic
// layer names, no global distribution left behind, and a 2 x 4 mesh.
//
// Example:
//   class DenseTest : public NnTest {};
//   TEST_F(DenseTest, …) { LayoutMap map(mesh_); … }
#pragma once

#include <gtest/gtest.h>

#include "meshlayout/layout/devices.h"
#include "meshlayout/nn/distribution.h"
#include "meshlayout/nn/layer.h"

namespace meshlayout {

class NnTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(8);
    clear_session();
  }
  void TearDown() override {
    set_distribution(nullptr);
    reset_device_count();
  }
  DeviceMesh mesh_ = DeviceMesh::from_string("mesh[data=2,model=4]");
};

}  // namespace meshlayout
