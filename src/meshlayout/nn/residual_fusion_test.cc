// call_plus: a residual fused into EinsumDense's product and MultiHeadAttention's output
// projection equals call + residual (float32 rounding apart), replicated and under Megatron
// rules (row-parallel output: the residual joins one partial sum), with and without a cache;
// a residual of another shape is refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/layers/attention/multi_head_attention.h"
#include "meshlayout/nn/layers/core/einsum_dense.h"
#include "meshlayout/nn/model.h"
#include "meshlayout/nn/nn_test_util.h"
#include "meshlayout/ops/elementwise.h"

namespace meshlayout {
namespace {

class ResidualFusionTest : public NnTest {};

double max_difference(const HostTensor& a, const HostTensor& b) {
  double worst = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    worst = std::max(worst, std::abs(double(a.data_as<float>()[i]) - b.data_as<float>()[i]));
  }
  return worst;
}

TEST_F(ResidualFusionTest, CallPlusEqualsCallThenAdd) {
  for (bool megatron : {false, true}) {
    SCOPED_TRACE(megatron ? "Megatron" : "replicated");
    clear_session();
    LayoutMap rules(mesh_);
    if (megatron) {
      rules["query.kernel|key.kernel|value.kernel"] = {None, "model", None};
      rules["attention_output.kernel"] = {"model", None, None};
    }
    std::shared_ptr<MultiHeadAttention> attention;
    {
      LayoutMapScope scope = rules.scope();
      Tensor in = Input({5, 16}, 2);
      attention =
          std::make_shared<MultiHeadAttention>(MultiHeadAttentionOptions{.num_heads = 8,
                                                                         .key_dim = 4,
                                                                         .num_key_value_heads = 2,
                                                                         .use_bias = true,
                                                                         .rope_theta = 100.0});
      (void)Model::functional(in, (*attention)(in));
    }
    const TensorLayout layout({"data", None, None}, mesh_);
    const Array x = distribute_tensor(HostTensor::random(DType::kF32, {2, 5, 16}, 1), layout);
    const Array r = distribute_tensor(HostTensor::random(DType::kF32, {2, 5, 16}, 2), layout);
    const HostTensor want = add(attention->call_on(x), r).gather();
    EXPECT_LT(max_difference(attention->call_plus(x, r).gather(), want), 1e-5);
    KVCache plain, fused;
    const HostTensor cached = add(attention->call_cached(x, plain, 0, 8), r).gather();
    EXPECT_LT(max_difference(attention->call_plus(x, r, &fused, 0, 8).gather(), cached), 1e-5);
    EXPECT_EQ(fused.length, 5);
    const Array wrong = distribute_tensor(HostTensor::random(DType::kF32, {2, 5, 8}, 3), layout);
    EXPECT_THROW(attention->call_plus(x, wrong), ValueError);
    EXPECT_THROW(attention->call_plus(x, r, &fused, 3, 8), ValueError);  // not where the cache ends
  }
}

}  // namespace
}  // namespace meshlayout
