// The array property suite and failure agreement under a real mpirun (np 2 and 4): each
// process holds only its devices' shards and every collective goes through MPI. The main()
// (MPI set-up, one report, any rank's failure fails the run) is mpi_gtest_main.cc's.
#include <gtest/gtest.h>

#include "meshlayout/array/array.h"
#include "meshlayout/array/array_test_util.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout {
namespace {

TEST(ArrayMpiTest, EveryProcessHoldsOnlyItsDevicesShards) {
  auto rt = default_runtime();
  ASSERT_GE(rt->num_processes(), 2);
  DeviceMesh mesh({rt->global_device_count()}, {"x"});
  HostTensor x = HostTensor::random(DType::kF32, {rt->global_device_count() * 4, 3}, 1);
  Array a = distribute_tensor(x, TensorLayout({"x", None}, mesh));
  EXPECT_EQ(static_cast<int64_t>(a.local_shards().size()), rt->local_device_count());
  for (const Array::Shard& s : a.local_shards()) EXPECT_TRUE(rt->is_local(s.device_id));
  EXPECT_EQ(a.gather(), x);
}

TEST(ArrayMpiTest, PropertyRoundTripsOverMpi) {
  const uint64_t seed = testing::test_seed(20261124);
  RecordProperty("seed", std::to_string(seed));
  EXPECT_NO_THROW(testing::check_random_reshards(default_runtime(), seed, 60))
      << "MESHLAYOUT_TEST_SEED=" << seed;
}

TEST(ArrayMpiTest, InjectedFailureOnTheLastProcessFailsEveryProcessAlike) {
  auto rt = default_runtime();
  const int last = rt->num_processes() - 1;
  DeviceMesh mesh({rt->global_device_count()}, {"x"});
  HostTensor x = HostTensor::random(DType::kF32, {32}, 2);
  Array a = distribute_tensor(x, TensorLayout({"x"}, mesh));
  try {
    distribute_tensor(a, TensorLayout({None}), {.inject_failure_on_process = last});
    FAIL() << "expected every process to fail";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              fmt::format("rank {0}: injected failure on process {0} before the reshard moved any "
                          "data (testing)",
                          last));
  }
  Array b = distribute_tensor(a, TensorLayout({None}));  // still usable
  EXPECT_EQ(b.gather(), x);
}

TEST(ArrayMpiTest, BadInputFailsOnEveryProcessWithoutCommunication) {
  DeviceMesh mesh({default_runtime()->global_device_count()}, {"x"});
  HostTensor x = HostTensor::random(DType::kF32, {8, 8}, 3);
  Array a = distribute_tensor(x, TensorLayout({"x", None}, mesh));
  EXPECT_THROW(distribute_tensor(a, TensorLayout({"x"})), ValueError);  // wrong rank
  Array bf16 = Array::allocate(TensorLayout({None, "x"}, mesh), {8, 8}, DType::kBF16);
  EXPECT_THROW(reshard_into(a, bf16), ValueError);  // dtype mismatch
}

}  // namespace
}  // namespace meshlayout
