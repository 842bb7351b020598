#include "meshlayout/nn/model_summary.h"
#include "meshlayout/nn/layers/core/dense.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/layers/regularization/dropout.h"
#include "meshlayout/nn/model.h"

namespace meshlayout {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class SumModel : public Model {
 public:
  explicit SumModel(int64_t units = 8) {
    d1 = track("d1", std::make_shared<Dense>(units, DenseOptions{.name = "d1"}));
    d2 = track("d2", std::make_shared<Dense>(2, DenseOptions{.name = "d2"}));
  }
  Tensor call(const Tensor& x) override { return (*d2)((*d1)(x)); }
  std::shared_ptr<Dense> d1, d2;
};

TEST(ModelSummaryTest, ReadableMemorySizeAsKeras) {
  EXPECT_EQ(readable_memory_size(0), "0.00 B");
  EXPECT_EQ(readable_memory_size(1023), "1023.00 B");
  EXPECT_EQ(readable_memory_size(1024), "1.00 KB");
  EXPECT_EQ(readable_memory_size(16077), "15.70 KB");
  EXPECT_EQ(readable_memory_size(3.5 * 1024 * 1024 * 1024), "3.50 GB");
}

TEST(ModelSummaryTest, PathsShapesLayoutsBytesPerDeviceTotalsAndDeviceMemory) {
  set_device_count(8);
  clear_session();
  const DeviceMesh mesh = DeviceMesh::from_string("mesh[data=2,model=4]");
  LayoutMap map(mesh);
  map["d1.kernel"] = {None, "model"};
  std::shared_ptr<SumModel> m;
  {
    LayoutMapScope scope = map.scope();
    m = std::make_shared<SumModel>();
  }
  EXPECT_THAT(m->summary(), HasSubstr("Total params: 0 (0.00 B)\n"));  // not built yet
  (*m)(Input({4}, 2));
  const std::string s = m->summary();
  EXPECT_EQ(
      s,
      "Model: \"sum_model\"\n"
      "Variable path        Shape   DType  Layout                                   Bytes/device\n"
      "-----------------------------------------------------------------------------------------\n"
      "sum_model/d1/kernel  (4, 8)  F32    layout[None,model]@mesh[data=2,model=4]            32\n"
      "sum_model/d1/bias    (8,)    F32    layout[None]@mesh[data=2,model=4]                  32\n"
      "sum_model/d2/kernel  (8, 2)  F32    layout[None,None]@mesh[data=2,model=4]             64\n"
      "sum_model/d2/bias    (2,)    F32    layout[None]@mesh[data=2,model=4]                   8\n"
      "Total params: 58 (232.00 B)\n"
      "Trainable params: 58 (232.00 B)\n"
      "Non-trainable params: 0 (0.00 B)\n"
      "26 / 58 params (104.00 B) are fully replicated\n"
      "32 / 58 params (128.00 B) are sharded based on spec '('model',)' and across 4 devices.\n"
      "Overall per device memory usage: 136.00 B\n"
      "Overall sharding factor: 1.71\n"
      "Memory per device (exact): cpu:0 136.00 B, cpu:1 136.00 B, cpu:2 136.00 B, cpu:3 136.00 B, "
      "cpu:4 136.00 B, cpu:5 136.00 B, cpu:6 136.00 B, cpu:7 136.00 B\n");
  reset_device_count();
}

TEST(ModelSummaryTest, UnevenSplitsAreCountedBoxByBox) {
  set_device_count(8);
  clear_session();
  const DeviceMesh mesh = DeviceMesh::from_string("mesh[data=2,model=4]");
  LayoutMap map(mesh);
  map["d1.kernel"] = {None, "model"};  // 6 columns over 4 devices: 2, 2, 2, 0
  std::shared_ptr<SumModel> m;
  {
    LayoutMapScope scope = map.scope();
    m = std::make_shared<SumModel>(6);
  }
  (*m)(Input({3}, 2));
  const std::string s = m->summary();
  // d1/kernel (3, 6): 24 B on model positions 0-2, none on 3; the rest replicated: 24 + 48 + 8.
  EXPECT_THAT(s, HasSubstr("sum_model/d1/kernel  (3, 6)  F32    "
                           "layout[None,model]@mesh[data=2,model=4]            24\n"));
  EXPECT_THAT(
      s,
      HasSubstr("Memory per device (exact): cpu:0 104.00 B, cpu:1 104.00 B, cpu:2 104.00 B, "
                "cpu:3 80.00 B, cpu:4 104.00 B, cpu:5 104.00 B, cpu:6 104.00 B, cpu:7 80.00 B\n"));
  reset_device_count();
}

// Keras 3 (keras/src/utils/summary_utils.py) counts model.weights, which leaves out the
// SeedGenerator state of Dropout: Sequential([Input((10,)), Dense(20), Dropout(0.5), Dense(5)])
// prints "Total params: 325 (1.27 KB)", all trainable.
TEST(ModelSummaryTest, DropoutRngStateIsNoParameterAsKeras) {
  set_device_count(8);
  clear_session();
  auto dp = std::make_shared<DataParallel>();
  std::shared_ptr<Sequential> m;
  {
    DistributionScope scope = dp->scope();
    m = std::make_shared<Sequential>(
        std::vector<std::shared_ptr<Layer>>{std::make_shared<Dense>(20),
                                            std::make_shared<Dropout>(0.5),
                                            std::make_shared<Dense>(5)},
        SequentialOptions{.input_shape = Shape{10}});
  }
  ASSERT_EQ(m->variables().size(), 5u);  // kernel, bias, seed_generator_state, kernel, bias
  ASSERT_EQ(m->weights().size(), 4u);
  for (const VariablePtr& v : m->weights()) EXPECT_FALSE(v->is_rng_state()) << v->path();
  const std::string s = m->summary();
  EXPECT_THAT(s, HasSubstr("seed_generator/seed_generator_state  (2,)  "));  // still listed
  EXPECT_THAT(s, HasSubstr("Total params: 325 (1.27 KB)\n"
                           "Trainable params: 325 (1.27 KB)\n"
                           "Non-trainable params: 0 (0.00 B)\n"
                           "RNG state (not params, as Keras): 2 (16.00 B)\n"
                           "325 / 325 params (1.27 KB) are fully replicated\n"
                           "Overall per device memory usage: 1.27 KB\n"
                           "Overall sharding factor: 1.00\n"));
  // The exact memory is what each device holds: the 16 bytes of RNG state too (1316 B).
  EXPECT_THAT(s, HasSubstr("Memory per device (exact): cpu:0 1.29 KB,"));
  // Without the Dropout the counts are the same: 220 + 105.
  clear_session();
  auto plain = std::make_shared<Sequential>(
      std::vector<std::shared_ptr<Layer>>{std::make_shared<Dense>(20), std::make_shared<Dense>(5)},
      SequentialOptions{.input_shape = Shape{10}});
  EXPECT_THAT(plain->summary(), HasSubstr("Total params: 325 (1.27 KB)\n"));
  EXPECT_THAT(plain->summary(), Not(HasSubstr("RNG state")));
  reset_device_count();
}

}  // namespace
}  // namespace meshlayout
