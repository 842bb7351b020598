// A model born sharded and run forward under mpirun (np 2 and 4): each process materialises and
// computes only its devices' shards; the gathered output matches the one-process result.
#include <gtest/gtest.h>

#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/layers/core/dense.h"
#include "meshlayout/nn/layers/core/embedding.h"
#include "meshlayout/nn/layers/merging/merge_test_util.h"
#include "meshlayout/nn/layers/normalization/batch_normalization.h"
#include "meshlayout/nn/layers/normalization/layer_normalization.h"
#include "meshlayout/nn/layers/reshaping/reshape.h"
#include "meshlayout/nn/layers/rnn/lstm.h"
#include "meshlayout/nn/layers/rnn/lstm_test_util.h"
#include "meshlayout/nn/model.h"

namespace meshlayout {
namespace {

class MlpBlock : public Model {
 public:
  MlpBlock() : Model("mlp") {
    up = track("up", std::make_shared<Dense>(32, DenseOptions{.activation = Activation::kRelu}));
    down = track("down", std::make_shared<Dense>(8));
  }
  Tensor call(const Tensor& x) override { return (*down)((*up)(x)); }
  std::shared_ptr<Dense> up, down;
};

TEST(ModelMpiTest, MegatronBlockMatchesTheOneDeviceResult) {
  auto rt = default_runtime();
  clear_session();
  DeviceMesh mesh({2, rt->global_device_count() / 2}, {"data", "model"});
  LayoutMap rules(mesh);
  rules["up.kernel"] = {None, "model"};
  rules["down.kernel"] = {"model", None};
  std::shared_ptr<MlpBlock> block;
  {
    LayoutMapScope scope = rules.scope();
    block = std::make_shared<MlpBlock>();
  }
  HostTensor x = HostTensor::random(DType::kF32, {6, 16}, 5);
  HostTensor y =
      (*block)(distribute_tensor(x, TensorLayout({"data", None}, mesh))).value().gather();
  for (const VariablePtr& v : block->variables()) {
    for (const Array::Shard& s : v->value().local_shards()) EXPECT_TRUE(rt->is_local(s.device_id));
  }
  // The same paths give the same weights (counter-based init); replicated, they give the
  // reference. clear_session() so the layers get the same automatic names again.
  clear_session();
  LayoutMap one(mesh);
  std::shared_ptr<MlpBlock> reference;
  {
    LayoutMapScope scope = one.scope();
    reference = std::make_shared<MlpBlock>();
  }
  HostTensor want =
      (*reference)(distribute_tensor(x, TensorLayout({None, None}, mesh))).value().gather();
  ASSERT_EQ(y.shape(), want.shape());
  for (int64_t i = 0; i < y.num_elements(); ++i) {
    EXPECT_NEAR(y.data_as<float>()[i], want.data_as<float>()[i],
                1e-5 * std::max(1.0f, std::abs(want.data_as<float>()[i])));
  }
}

class TokenModel : public Model {
 public:
  TokenModel() : Model("tokens") {
    emb = track("emb", std::make_shared<Embedding>(37, 16));
    norm = track("norm", std::make_shared<LayerNormalization>());
    head = track("head", std::make_shared<Dense>(5));
  }
  Tensor call(const Tensor& x) override { return (*head)((*norm)((*emb)(x))); }
  std::shared_ptr<Embedding> emb;
  std::shared_ptr<LayerNormalization> norm;
  std::shared_ptr<Dense> head;
};

TEST(ModelMpiTest, VocabParallelEmbeddingLayerNormDenseMatchOneDevice) {
  auto rt = default_runtime();
  DeviceMesh mesh({2, rt->global_device_count() / 2}, {"data", "model"});
  HostTensor ids(DType::kI32, {4, 6});
  for (int64_t i = 0; i < ids.num_elements(); ++i)
    ids.data_as<int32_t>()[i] = static_cast<int32_t>((i * 7) % 37);
  auto run = [&](const LayoutMap& rules) {
    clear_session();
    std::shared_ptr<TokenModel> m;
    {
      LayoutMapScope scope = rules.scope();
      m = std::make_shared<TokenModel>();
    }
    return (*m)(distribute_tensor(ids, TensorLayout({"data", None}, mesh))).value().gather();
  };
  LayoutMap sharded(mesh);
  sharded["emb.embeddings"] = {"model", None};  // vocab-parallel: partial sums across processes
  sharded["head.kernel"] = {None, "model"};
  HostTensor y = run(sharded);
  HostTensor want = run(LayoutMap(mesh));
  ASSERT_EQ(y.shape(), want.shape());
  for (int64_t i = 0; i < y.num_elements(); ++i) {
    EXPECT_NEAR(y.data_as<float>()[i], want.data_as<float>()[i],
                1e-5 * std::max(1.0f, std::abs(want.data_as<float>()[i])));
  }
}

// Residual and two-input graphs (Add, Multiply, Concatenate) with Megatron rules, each input
// layout, against the float64 reference on every rank.
TEST(ModelMpiTest, MergeGraphsMatchTheFloat64Reference) {
  auto rt = default_runtime();
  DeviceMesh mesh({2, rt->global_device_count() / 2}, {"data", "model"});
  for (const std::string layout : {"None,None", "data,None", "(data,model),None", "data,model"}) {
    EXPECT_NO_THROW(testing::run_merge_cases(rt, mesh, layout, 43)) << layout;
  }
}

// Flatten → BatchNormalization (inference) → Reshape with sharded statistics and inputs gives
// the replicated result.
TEST(ModelMpiTest, FlattenBatchNormalizationReshapeMatchReplicated) {
  auto rt = default_runtime();
  DeviceMesh mesh({2, rt->global_device_count() / 2}, {"data", "model"});
  HostTensor x = HostTensor::random(DType::kF32, {8, 3, 4}, 11);
  HostTensor g = HostTensor::random(DType::kF32, {12}, 12),
             b = HostTensor::random(DType::kF32, {12}, 13);
  HostTensor m = HostTensor::random(DType::kF32, {12}, 14),
             v = HostTensor::random(DType::kF32, {12}, 15);
  for (int64_t i = 0; i < 12; ++i) v.data_as<float>()[i] = std::abs(v.data_as<float>()[i]) + 0.5f;
  auto run = [&](const LayoutMap& rules, const TensorLayout& input_layout) {
    clear_session();
    std::shared_ptr<Model> model;
    std::shared_ptr<BatchNormalization> bn;
    {
      LayoutMapScope scope = rules.scope();
      Tensor in = Input({3, 4}, 8);
      bn = std::make_shared<BatchNormalization>();
      Tensor flat = (*std::make_shared<Flatten>())(in);
      model = Model::functional(in, (*std::make_shared<Reshape>(Shape{2, 6}))((*bn)(flat)));
    }
    bn->gamma()->assign(g);
    bn->beta()->assign(b);
    bn->moving_mean()->assign(m);
    bn->moving_variance()->assign(v);
    return (*model)(distribute_tensor(x, input_layout)).value().gather();
  };
  LayoutMap sharded(mesh), replicated(mesh);
  sharded["batch_normalization.*"] = {"model"};
  const HostTensor want = run(replicated, TensorLayout({None, None, None}, mesh));
  for (const TensorLayout& layout :
       {TensorLayout({"data", None, None}, mesh), TensorLayout({"data", "model", None}, mesh),
        TensorLayout({None, None, "model"}, mesh)}) {
    const HostTensor got = run(sharded, layout);
    ASSERT_EQ(got.shape(), (Shape{8, 2, 6}));
    for (int64_t i = 0; i < got.num_elements(); ++i) {
      EXPECT_NEAR(got.data_as<float>()[i], want.data_as<float>()[i],
                  1e-6 * std::max(1.0f, std::abs(want.data_as<float>()[i])))
          << layout.to_string();
    }
  }
}

// LSTM with its weights sharded by rules over 'model' and the batch over 'data': each process
// runs its rows; the result matches the float64 reference on every rank.
TEST(ModelMpiTest, LstmMatchesTheFloat64Reference) {
  auto rt = default_runtime();
  DeviceMesh mesh({2, rt->global_device_count() / 2}, {"data", "model"});
  clear_session();
  LayoutMap rules(mesh);
  rules["lstm.cell.kernel"] = {None, "model"};
  rules["lstm.cell.recurrent_kernel"] = {"model", None};
  std::shared_ptr<LSTM> lstm;
  std::shared_ptr<Model> model;
  {
    LayoutMapScope scope = rules.scope();
    Tensor in = Input({4, 3}, 6);
    lstm = std::make_shared<LSTM>(4, LSTMOptions{.return_sequences = true});
    model = Model::functional(in, (*lstm)(in));
  }
  const HostTensor x = HostTensor::random(DType::kF32, {6, 4, 3}, 31);
  const HostTensor got =
      (*model)(distribute_tensor(x, TensorLayout({"data", None, None}, mesh))).value().gather();
  const HostTensor bias = lstm->cell()->bias()->value().gather();
  const std::vector<double> want =
      testing::lstm_reference(x, lstm->cell()->kernel()->value().gather(),
                              lstm->cell()->recurrent_kernel()->value().gather(), &bias, true);
  ASSERT_EQ(static_cast<size_t>(got.num_elements()), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got.data_as<float>()[i], want[i], 1e-5) << i;
}

}  // namespace
}  // namespace meshlayout
