// The Keras 3.15 Distribution data-sharding API: process/replica/shard counts, the per-process
// rows of an in-memory dataset for P processes x R replicas in {1,2,4,8}^2 (checked against a
// literal emulation of Keras' tf.data pipeline), explicit layouts first, and the errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshlayout/array/array_test_util.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/distribution.h"
#include "meshlayout/nn/layers/attention/multi_head_attention.h"
#include "meshlayout/nn/layers/core/dense.h"
#include "meshlayout/nn/model.h"
#include "meshlayout/nn/nn_test_util.h"

namespace meshlayout {
namespace {

// Keras 3.15 Distribution.distribute_dataset on `dataset.batch(g)` of rows 0..n-1, emulated
// step by step: the 3.15 branches, rebatch(m) (= unbatch().batch(m)), then shard(S, index)
// (keep the elements whose position % S == index). Returns the rows in order, or nullopt for
// Keras' divisibility ValueError.
std::optional<std::vector<int64_t>> keras_rows(int64_t n, int64_t g, int64_t replicas,
                                               int64_t processes, int64_t pid) {
  std::vector<int64_t> all(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) all[static_cast<size_t>(i)] = i;
  if (processes == 1 || replicas == 1) return all;
  int64_t shards = 0, index = 0;
  if (replicas >= processes) {  // "replicas / processes >= 1"
    if (g % processes != 0) return std::nullopt;
    shards = processes;
    index = pid;
  } else {
    if (g % replicas != 0) return std::nullopt;
    shards = replicas;
    index = pid / (processes / replicas);
  }
  const int64_t m = g / shards;
  std::vector<std::vector<int64_t>> minibatches;
  for (int64_t i = 0; i < n; ++i) {
    if (i % m == 0) minibatches.emplace_back();
    minibatches.back().push_back(i);
  }
  std::vector<int64_t> out;
  for (size_t k = 0; k < minibatches.size(); ++k) {
    if (static_cast<int64_t>(k) % shards == index)
      out.insert(out.end(), minibatches[k].begin(), minibatches[k].end());
  }
  return out;
}

TEST(DataShardingTest, PerProcessRowsEqualKerasForEveryProcessAndReplicaCount) {
  int checked = 0;
  for (int64_t p : {1, 2, 4, 8}) {
    for (int64_t r : {1, 2, 4, 8}) {
      EXPECT_EQ(num_data_shards(r, p), std::min(r, p));
      for (int64_t n : {0, 5, 16, 37, 64}) {
        for (int64_t g : {4, 8, 12, 16}) {
          for (int64_t pid = 0; pid < p; ++pid) {
            const auto want = keras_rows(n, g, r, p, pid);
            if (!want) {
              EXPECT_THROW(process_rows(n, g, r, p, pid), ValueError) << p << " " << r << " " << g;
              continue;
            }
            std::vector<int64_t> got;
            for (const RowRange& range : process_rows(n, g, r, p, pid)) {
              for (int64_t i = range.begin; i < range.end; ++i) got.push_back(i);
            }
            EXPECT_EQ(got, *want) << "P=" << p << " R=" << r << " n=" << n << " g=" << g
                                  << " pid=" << pid;
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 1000);
}

TEST(DataShardingTest, ShardIdsFollowContiguousReplicaGroups) {
  // 8 processes, 2 replicas: processes 0-3 read shard 0, 4-7 shard 1 (Keras >= 3.15).
  std::vector<int64_t> ids;
  for (int64_t pid = 0; pid < 8; ++pid) ids.push_back(data_shard_id(2, 8, pid));
  EXPECT_THAT(ids, ::testing::ElementsAre(0, 0, 0, 0, 1, 1, 1, 1));
  EXPECT_EQ(data_shard_id(8, 2, 1), 1);
  // One range per global batch; the last one short or empty.
  EXPECT_THAT(process_rows(10, 4, 2, 2, 1),
              ::testing::ElementsAre(RowRange{2, 4}, RowRange{6, 8}, RowRange{10, 10}));
  EXPECT_THAT(process_rows(10, 4, 2, 2, 1, /*auto_shard=*/false),
              ::testing::ElementsAre(RowRange{0, 4}, RowRange{4, 8}, RowRange{8, 10}));
}

TEST(DataShardingTest, IndivisibleBatchIsRefusedInKerasWords) {
  try {
    process_rows(64, 6, 4, 4, 0);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "Global batch size must be divisible by the number of shards. "
                 "`global_batch_size`=6 and `num_shards`=4");
  }
  EXPECT_THROW(process_rows(64, 0, 1, 1, 0), ValueError);
  EXPECT_THROW(process_rows(64, 4, 1, 2, 2), ValueError);
}

class DistributionApiTest : public NnTest {};

TEST_F(DistributionApiTest, CountsOfOneProcess) {
  DataParallel dp;
  EXPECT_EQ(dp.process_id(), 0);
  EXPECT_EQ(dp.num_processes(), 1);
  EXPECT_EQ(dp.num_model_replicas(), 8);
  EXPECT_EQ(dp.num_data_shards(), 1);
  EXPECT_EQ(dp.data_shard_id(), 0);
  EXPECT_TRUE(dp.auto_shard_dataset());
  DataParallel two_d(mesh_);
  EXPECT_EQ(two_d.num_model_replicas(), 8);  // every device, whatever the mesh rank
  ModelParallel mp{LayoutMap(mesh_)};
  EXPECT_EQ(mp.num_model_replicas(), 2);
  ModelParallel by_model(LayoutMap(mesh_), "model");
  EXPECT_EQ(by_model.num_model_replicas(), 4);
  EXPECT_EQ(by_model.get_data_layout({8, 3}), TensorLayout({"model", None}, mesh_));
}

TEST_F(DistributionApiTest, DistributeDatasetInOneProcessKeepsEveryGlobalBatch) {
  HostTensor data(DType::kI64, {10, 3});
  for (int64_t i = 0; i < 30; ++i) data.data_as<int64_t>()[i] = i;
  DataParallel dp;
  std::vector<HostTensor> batches = dp.distribute_dataset(data, 4);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[2].shape(), (Shape{2, 3}));
  EXPECT_EQ(batches[1].data_as<int64_t>()[0], 12);
  EXPECT_EQ(batches[2].data_as<int64_t>()[5], 29);
}

TEST_F(DistributionApiTest, ExplicitLayoutComesFirstThenTheMapThenReplicated) {
  LayoutMap map(mesh_);
  map["w"] = {"model", None};
  ModelParallel mp(map);
  Variable ruled(VariableSpec{.name = "w", .shape = {8, 4}});
  EXPECT_EQ(mp.get_variable_layout(ruled), TensorLayout({"model", None}, mesh_));
  Variable explicit_one(
      VariableSpec{.name = "w", .shape = {8, 4}, .layout = TensorLayout({None, "model"})});
  EXPECT_EQ(mp.get_variable_layout(explicit_one), TensorLayout({None, "model"}, mesh_));
  Variable other(VariableSpec{.name = "v", .shape = {8, 4}});
  EXPECT_EQ(mp.get_variable_layout(other), TensorLayout({None, None}, mesh_));
  DataParallel dp(mesh_);
  EXPECT_EQ(dp.get_variable_layout(explicit_one), TensorLayout({None, "model"}, mesh_));
  EXPECT_EQ(dp.get_variable_layout(ruled), TensorLayout({None, None}, mesh_));
  EXPECT_EQ(dp.get_tensor_layout("w"), std::nullopt);
  EXPECT_EQ(mp.get_tensor_layout("w"), TensorLayout({"model", None}, mesh_));
}

TEST_F(DistributionApiTest, StandaloneLayerBuiltInADistributionScopeTakesItsLayouts) {
  LayoutMap map(mesh_, MatchMode::kFullmatch);
  map["dense/kernel"] = {None, "model"};
  auto mp = std::make_shared<ModelParallel>(map);
  DistributionScope scope = mp->scope();
  auto d = std::make_shared<Dense>(8);
  (*d)(mp->distribute_input(HostTensor(DType::kF32, {4, 3})));
  EXPECT_EQ(d->kernel()->layout(), TensorLayout({None, "model"}, mesh_));
  EXPECT_EQ(d->bias()->layout(), TensorLayout({None}, mesh_));
}

// Keras 3 creates a variable with the distribution's layout when the layer builds it, whatever
// builds it: a symbolic call, an explicit build, or call_on, under a scope or set_distribution.
TEST_F(DistributionApiTest,
       StandaloneLayerBuiltSymbolicallyOrExplicitlyTakesTheDistributionsLayouts) {
  LayoutMap map(mesh_, MatchMode::kFullmatch);
  map["dense.*/kernel"] = {None, "model"};
  map["multi_head_attention/query/kernel"] = {None, "model", None};
  auto mp = std::make_shared<ModelParallel>(map);
  // The same layer built without a distribution: the values to expect (counter-based init).
  auto plain = std::make_shared<Dense>(8, DenseOptions{.name = "dense"});
  (*plain)(Input({3}, 4));
  const HostTensor want = plain->kernel()->value().gather();
  clear_session();

  set_distribution(mp);  // global
  auto symbolic = std::make_shared<Dense>(8);
  (*symbolic)(Input({3}, 4));
  ASSERT_FALSE(symbolic->kernel()->is_lazy());
  EXPECT_EQ(symbolic->kernel()->path(), "dense/kernel");
  EXPECT_EQ(symbolic->kernel()->object_path(), "dense.kernel");
  EXPECT_EQ(symbolic->kernel()->layout(), TensorLayout({None, "model"}, mesh_));
  EXPECT_EQ(symbolic->bias()->layout(), TensorLayout({None}, mesh_));
  EXPECT_EQ(symbolic->kernel()->value().gather(), want);
  set_distribution(nullptr);

  DistributionScope scope = mp->scope();
  auto built = std::make_shared<Dense>(8);  // dense_1
  built->build_standalone({4, 3});
  EXPECT_TRUE(built->built());
  ASSERT_FALSE(built->kernel()->is_lazy());
  EXPECT_EQ(built->kernel()->path(), "dense_1/kernel");
  EXPECT_EQ(built->kernel()->layout(), TensorLayout({None, "model"}, mesh_));
  built->build_standalone({4, 3});  // built already: nothing happens
  EXPECT_EQ(built->kernel()->layout(), TensorLayout({None, "model"}, mesh_));

  auto via_call_on = std::make_shared<Dense>(8);  // dense_2
  const Array y =
      via_call_on->call_on(mp->distribute_input(HostTensor::random(DType::kF32, {4, 3}, 3)));
  EXPECT_EQ(via_call_on->kernel()->layout(), TensorLayout({None, "model"}, mesh_));
  EXPECT_EQ(y.shape(), (Shape{4, 8}));

  // A composite layer: its sub-layers' weights keyed by their paths, its object paths kept.
  auto mha =
      std::make_shared<MultiHeadAttention>(MultiHeadAttentionOptions{.num_heads = 4, .key_dim = 2});
  (*mha)(Input({5, 8}, 2));
  EXPECT_EQ(mha->query()->kernel()->path(), "multi_head_attention/query/kernel");
  EXPECT_EQ(mha->query()->kernel()->object_path(), "multi_head_attention._query_dense.kernel");
  EXPECT_EQ(mha->query()->kernel()->layout(), TensorLayout({None, "model", None}, mesh_));
  EXPECT_EQ(mha->key()->kernel()->layout(), TensorLayout({None, None, None}, mesh_));

  // A functional model of such layers finds them allocated and keeps their layouts.
  Tensor in = Input({3}, 4);
  auto d1 = std::make_shared<Dense>(8, DenseOptions{.name = "dense_f"});
  Tensor out = (*d1)(in);
  EXPECT_FALSE(d1->kernel()->is_lazy());
  std::shared_ptr<Model> model = Model::functional(in, out);
  EXPECT_EQ(d1->kernel()->layout(), TensorLayout({None, "model"}, mesh_));
  EXPECT_EQ(d1->kernel()->object_path(), "dense_f.kernel");
}

TEST_F(DistributionApiTest, LayersInsideAModelOrALayoutMapScopeStayLazyUntilTheirModelDecides) {
  LayoutMap map(mesh_, MatchMode::kFullmatch);
  map["sequential/d1/kernel"] = {None, "model"};
  auto mp = std::make_shared<ModelParallel>(map);
  DistributionScope scope = mp->scope();
  // Sequential: built by the model, keyed by the model's paths.
  auto d1 = std::make_shared<Dense>(8, DenseOptions{.name = "d1"});
  auto seq = std::make_shared<Sequential>(std::vector<std::shared_ptr<Layer>>{d1},
                                          SequentialOptions{.input_shape = Shape{3}});
  EXPECT_EQ(d1->kernel()->path(), "sequential/d1/kernel");
  EXPECT_EQ(d1->kernel()->object_path(), "d1.kernel");
  EXPECT_EQ(d1->kernel()->layout(), TensorLayout({None, "model"}, mesh_));
  // Keras 2: under a LayoutMap scope a standalone layer stays lazy (a model materialises it).
  LayoutMap rules(mesh_);
  LayoutMapScope map_scope = rules.scope();
  auto lazy = std::make_shared<Dense>(8);
  lazy->build_standalone({4, 3});
  EXPECT_TRUE(lazy->kernel()->is_lazy());
}

// Each process feeds only its rows of a global batch; the array holds the global batch laid
// out over the batch axis. 2 thread-processes x 4 devices.
TEST_F(DistributionApiTest, ProcessLocalRowsMakeTheGlobalBatch) {
  const int64_t B = 6, T = 3;
  testing::run_as_processes(2, 4, [&](std::shared_ptr<Runtime> rt) {
    const DeviceMesh mesh({2, 4}, {"batch", "model"});
    ModelParallel mp{LayoutMap(mesh)};
    const int p = rt->process_id();
    HostTensor local(DType::kI32, {B / 2, T});
    for (int64_t i = 0; i < local.num_elements(); ++i)
      local.data_as<int32_t>()[i] = static_cast<int32_t>(p * 100 + i);
    const Array batch = mp.distribute_process_batch(local, B, rt);
    if (batch.shape() != Shape{B, T} || !(batch.layout() == mp.get_data_layout({B, T})))
      throw ValueError("layout");
    for (const Array::Shard& s : batch.local_shards()) {
      const int32_t* v = reinterpret_cast<const int32_t*>(s.buffer.data());
      for (int64_t i = 0; i < s.box.num_elements(); ++i) {
        const int64_t row = s.box.offset[0] + i / T;
        if (v[i] != static_cast<int32_t>(p * 100 + (row - p * B / 2) * T + i % T))
          throw ValueError("wrong value");
      }
    }
    HostTensor wrong(DType::kI32, {B, T});
    try {
      mp.distribute_process_batch(wrong, B, rt);
      throw InternalError("accepted 6 rows");
    } catch (const ValueError& e) {
      if (std::string(e.what()).find("must have 3 rows, got 6") == std::string::npos) throw;
    }
    // A batch axis that does not follow the processes: process 0's devices need every row.
    const DeviceMesh crossed({2, 4}, {"model", "batch"});
    ModelParallel mp2{LayoutMap(crossed), std::string("batch")};
    try {
      mp2.distribute_process_batch(local, B, rt);
      throw InternalError("accepted a crossed mesh");
    } catch (const ValueError& e) {
      if (std::string(e.what()).find("does not split its batch axis 'batch' along the processes") ==
          std::string::npos)
        throw;
    }
  });
}

TEST_F(DistributionApiTest, OneProcessFeedsTheWholeBatch) {
  ModelParallel mp{LayoutMap(mesh_)};
  const HostTensor x = HostTensor::random(DType::kF32, {4, 3}, 5);
  EXPECT_EQ(mp.process_batch_rows(4), (RowRange{0, 4}));
  const Array a = mp.distribute_process_batch(x, 4);
  EXPECT_EQ(a.layout(), mp.distribute_input(x).layout());
  EXPECT_EQ(a.gather(), x);
}

}  // namespace
}  // namespace meshlayout
