// Data sharding across processes under mpirun (np 2 and 4): each process gets exactly its rows
// of every global batch, by Keras 3.15's replica-group rule, and the divisibility error.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>

#include "meshlayout/core/errors.h"
#include "meshlayout/io/array_io.h"
#include "meshlayout/nn/distribution.h"
#include "meshlayout/runtime/runtime.h"

namespace meshlayout {
namespace {

HostTensor row_numbers(int64_t rows, int64_t cols) {
  HostTensor t(DType::kI64, {rows, cols});
  for (int64_t i = 0; i < rows * cols; ++i) t.data_as<int64_t>()[i] = i / cols;
  return t;
}

// Every batch holds the rows [k*g + shard*g/shards, +g/shards) of the dataset, in order.
void expect_rows(const std::vector<HostTensor>& batches, int64_t rows, int64_t g, int64_t shards,
                 int64_t shard) {
  ASSERT_EQ(static_cast<int64_t>(batches.size()), (rows + g - 1) / g);
  for (size_t k = 0; k < batches.size(); ++k) {
    const int64_t begin = std::min(static_cast<int64_t>(k) * g + shard * (g / shards), rows);
    const int64_t end =
        std::min(begin + g / shards, std::min(static_cast<int64_t>(k + 1) * g, rows));
    ASSERT_EQ(batches[k].shape(), (Shape{end - begin, 3})) << k;
    for (int64_t r = 0; r < end - begin; ++r) {
      for (int64_t c = 0; c < 3; ++c)
        EXPECT_EQ(batches[k].data_as<int64_t>()[r * 3 + c], begin + r);
    }
  }
}

TEST(DistributionMpiTest, DataParallelGivesEachProcessItsRows) {
  auto rt = default_runtime();
  const int64_t p = rt->num_processes();
  DataParallel dp;  // every global device: replicas >= processes
  EXPECT_EQ(dp.num_processes(), p);
  EXPECT_EQ(dp.process_id(), rt->process_id());
  EXPECT_EQ(dp.num_data_shards(), p);
  EXPECT_EQ(dp.data_shard_id(), rt->process_id());
  const HostTensor data = row_numbers(44, 3);
  expect_rows(dp.distribute_dataset(data, 8), 44, 8, p, rt->process_id());
  dp.set_auto_shard_dataset(false);  // "already sharded per process": every row
  expect_rows(dp.distribute_dataset(data, 8), 44, 8, 1, 0);
  try {
    DataParallel again;
    again.distribute_dataset(data, 6 * p + 1);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_EQ(std::string(e.what()),
              "Global batch size must be divisible by the number of shards. `global_batch_size`=" +
                  std::to_string(6 * p + 1) + " and `num_shards`=" + std::to_string(p));
  }
}

TEST(DistributionMpiTest, ModelParallelWithTwoReplicasSharesShardsInContiguousGroups) {
  auto rt = default_runtime();
  const int64_t p = rt->num_processes();
  DeviceMesh mesh({2, rt->global_device_count() / 2}, {"data", "model"});
  ModelParallel mp{LayoutMap(mesh)};
  EXPECT_EQ(mp.num_model_replicas(), 2);
  EXPECT_EQ(mp.num_data_shards(), 2);
  const int64_t shard = rt->process_id() / (p / 2);  // np 4: processes 0,1 → 0; 2,3 → 1
  EXPECT_EQ(mp.data_shard_id(), shard);
  expect_rows(mp.distribute_dataset(row_numbers(37, 3), 6), 37, 6, 2, shard);
}

TEST(DistributionMpiTest, MoreProcessesThanReplicasMustBeAMultiple) {
  auto rt = default_runtime();
  const int64_t p = rt->num_processes();
  DeviceMesh three({3}, {"data"}, std::vector<std::string>{"cpu:0", "cpu:1", "cpu:2"});
  if (p > 3) {
    try {
      ModelParallel mp{LayoutMap(three)};
      FAIL();
    } catch (const ValueError& e) {
      EXPECT_EQ(std::string(e.what()),
                "If `num_processes` is greater than `num_model_replicas`, `num_processes` must be "
                "divisible by `num_model_replicas`. Got num_processes=" +
                    std::to_string(p) + ", num_model_replicas=3.");
    }
  } else {
    ModelParallel mp{LayoutMap(three)};  // fewer processes than replicas: every process a shard
    EXPECT_EQ(mp.num_data_shards(), p);
    EXPECT_EQ(mp.data_shard_id(), rt->process_id());
  }
}

// A dataset on disk: each process reads exactly its rows of every batch, nothing more, and gets
// what the in-memory dataset gives it.
TEST(DistributionMpiTest, EachProcessReadsOnlyItsRowsOfADatasetFile) {
  namespace fs = std::filesystem;
  auto rt = default_runtime();
  char name[128] = {};
  if (rt->comm().rank() == 0) {
    std::string tmpl = (fs::temp_directory_path() / "meshlayout_ds_mpi_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) != nullptr) std::snprintf(name, sizeof name, "%s", tmpl.c_str());
  }
  rt->comm().broadcast(name, sizeof name, 0);
  ASSERT_STRNE(name, "");
  const std::string path = std::string(name) + "/data.safetensors";
  const HostTensor data = row_numbers(44, 3);
  {
    DeviceMesh mesh({rt->global_device_count()}, {"x"});
    const Array rows = distribute_tensor(data, TensorLayout({"x", None}, mesh));
    const NamedArray arrays[] = {{"tokens", &rows}};
    save_arrays(path, arrays);
  }
  const Checkpoint file = Checkpoint::open(path);
  DataParallel dp;
  const uint64_t before = file.bytes_read();
  const std::vector<HostTensor> batches = dp.distribute_dataset(file, "tokens", 8);
  uint64_t mine = 0;
  for (const HostTensor& b : batches) mine += b.num_bytes();
  EXPECT_EQ(file.bytes_read() - before, mine);
  expect_rows(batches, 44, 8, rt->num_processes(), rt->process_id());
  EXPECT_THROW((void)dp.distribute_dataset(file, "missing", 8), NotFoundError);
  rt->comm().barrier();
  if (rt->comm().rank() == 0) fs::remove_all(name);
}

}  // namespace
}  // namespace meshlayout
