// sparse and categorical cross-entropy (cross_entropy.h) in one process, with one pool thread, and
// as 2 and 4 threads-as-processes: the tables of cross_entropy_test_util.h (sparse, logits) and
// categorical_crossentropy_test_util.h (categorical from logits and probabilities, label smoothing,
// sparse from probabilities; its per-position values: categorical_crossentropy_values_test_util.h)
// plus hand-computed values (Keras' documented example), bit-identical
// replicas and a bad label seen by one process only.
#include "meshlayout/ops/cross_entropy.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "meshlayout/array/array_test_util.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/ops/categorical_crossentropy_test_util.h"
#include "meshlayout/ops/categorical_crossentropy_values_test_util.h"
#include "meshlayout/ops/cross_entropy_test_util.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

class CrossEntropyTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
};

// Runs `body(runtime of process p)` on `procs` threads, each a process of one in-process group
// with its own pool of two threads; returns each process's failure ("" for none).
std::vector<std::string> run_as_processes(
    int procs, const std::function<void(std::shared_ptr<Runtime>)>& body) {
  return testing::run_processes(procs, 8 / procs, 2, body);
}

TEST_F(CrossEntropyTest, HandComputedValue) {
  DeviceMesh mesh({2, 4}, {"data", "model"});
  HostTensor x(DType::kF32, {1, 3}), y(DType::kI32, {1});
  for (int j = 0; j < 3; ++j) x.data_as<float>()[j] = static_cast<float>(j + 1);
  y.data_as<int32_t>()[0] = 2;
  const Array lx = distribute_tensor(x, TensorLayout({None, "model"}, mesh));
  const Array ly = distribute_tensor(y, TensorLayout({None}, mesh));
  const double want = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 3.0;
  EXPECT_NEAR(sparse_categorical_crossentropy(lx, ly), want, 1e-15);
  const HostTensor g = sparse_categorical_crossentropy_backward(lx, ly).gather();
  EXPECT_NEAR(g.data_as<float>()[2], std::exp(3.0 - 3.0 - want) - 1.0, 1e-7);
  EXPECT_NEAR(g.data_as<float>()[0], std::exp(1.0 - 3.0 - want), 1e-7);
}

TEST_F(CrossEntropyTest, EveryLayoutMatchesTheFloat64ReferenceInOneProcess) {
  const uint64_t seed = testing::test_seed(9301);
  SCOPED_TRACE("MESHLAYOUT_TEST_SEED=" + std::to_string(seed));
  EXPECT_NO_THROW(testing::run_all_cross_entropy_cases(Runtime::single_process(8), seed));
}

TEST_F(CrossEntropyTest, EveryLayoutMatchesTheFloat64ReferenceWithOnePoolThread) {
  auto rt =
      std::make_shared<Runtime>(std::shared_ptr<Communicator>(make_single_process_communicator()),
                                8, std::make_shared<ThreadPool>(1));
  EXPECT_NO_THROW(testing::run_all_cross_entropy_cases(rt, testing::test_seed(9302)));
}

TEST_F(CrossEntropyTest, EveryLayoutMatchesTheFloat64ReferenceAsTwoAndFourProcesses) {
  const uint64_t seed = testing::test_seed(9303);
  for (int procs : {2, 4}) {
    SCOPED_TRACE(fmt::format("{} processes, MESHLAYOUT_TEST_SEED={}", procs, seed));
    for (const std::string& f : run_as_processes(procs, [&](std::shared_ptr<Runtime> rt) {
           testing::run_all_cross_entropy_cases(rt, seed);
         })) {
      EXPECT_EQ(f, "");
    }
  }
}

// categorical_crossentropy (from logits, from probabilities, label smoothing) and the sparse
// loss from probabilities: categorical_crossentropy_test_util.h's table.
TEST_F(CrossEntropyTest, CategoricalAndProbabilitiesMatchTheFloat64FormulasInOneProcess) {
  const uint64_t seed = testing::test_seed(9311);
  SCOPED_TRACE("MESHLAYOUT_TEST_SEED=" + std::to_string(seed));
  EXPECT_NO_THROW(testing::run_all_cce_cases(Runtime::single_process(8), seed));
}

TEST_F(CrossEntropyTest, CategoricalAndProbabilitiesMatchTheFloat64FormulasAsTwoAndFourProcesses) {
  const uint64_t seed = testing::test_seed(9312);
  for (int procs : {2, 4}) {
    SCOPED_TRACE(fmt::format("{} processes, MESHLAYOUT_TEST_SEED={}", procs, seed));
    for (const std::string& f : run_as_processes(
             procs, [&](std::shared_ptr<Runtime> rt) { testing::run_all_cce_cases(rt, seed); })) {
      EXPECT_EQ(f, "");
    }
  }
}

// The per-position losses (reduction "none") of the categorical and sparse losses, from logits
// and probabilities, with label smoothing: categorical_crossentropy_test_util.h's values table.
TEST_F(CrossEntropyTest, PerPositionValuesMatchTheFloat64FormulasInOneProcess) {
  const uint64_t seed = testing::test_seed(9321);
  SCOPED_TRACE("MESHLAYOUT_TEST_SEED=" + std::to_string(seed));
  EXPECT_NO_THROW(testing::run_all_cce_values_cases(Runtime::single_process(8), seed));
}

TEST_F(CrossEntropyTest, PerPositionValuesMatchTheFloat64FormulasAsTwoAndFourProcesses) {
  const uint64_t seed = testing::test_seed(9322);
  for (int procs : {2, 4}) {
    SCOPED_TRACE(fmt::format("{} processes, MESHLAYOUT_TEST_SEED={}", procs, seed));
    for (const std::string& f : run_as_processes(procs, [&](std::shared_ptr<Runtime> rt) {
           testing::run_all_cce_values_cases(rt, seed);
         })) {
      EXPECT_EQ(f, "");
    }
  }
}

// Keras' documented example, reduction "none": [0.0513, 2.303] (the second row's 0.1 / 1.0).
TEST_F(CrossEntropyTest, KerasDocumentedExampleValues) {
  DeviceMesh mesh({2, 4}, {"data", "model"});
  HostTensor p(DType::kF64, {2, 3}), t(DType::kF64, {2, 3}), y(DType::kI32, {2});
  const double pv[] = {0.05, 0.95, 0.0, 0.1, 0.8, 0.1}, tv[] = {0, 1, 0, 0, 0, 1};
  for (int i = 0; i < 6; ++i) p.data_as<double>()[i] = pv[i], t.data_as<double>()[i] = tv[i];
  y.data_as<int32_t>()[0] = 1, y.data_as<int32_t>()[1] = 2;
  const Array lp = distribute_tensor(p, TensorLayout({"data", "model"}, mesh));
  const Array lt = distribute_tensor(t, TensorLayout({None, "model"}, mesh));
  const Array ly = distribute_tensor(y, TensorLayout({None}, mesh));
  const double want[] = {-std::log(0.95), -std::log(0.1)};
  const Array values[] = {categorical_crossentropy_values(lp, lt, {.from_logits = false}),
                          sparse_categorical_crossentropy_values(lp, ly, {.from_logits = false})};
  for (const Array& v : values) {
    EXPECT_EQ(v.shape(), (Shape{2}));
    EXPECT_EQ(v.layout(), TensorLayout({"data"}, mesh));
    const HostTensor h = v.gather();
    for (int i = 0; i < 2; ++i) EXPECT_NEAR(h.data_as<double>()[i], want[i], 1e-14) << i;
  }
  EXPECT_NEAR(want[0], 0.0513, 1e-4);
  EXPECT_NEAR(want[1], 2.3026, 1e-4);
}

TEST_F(CrossEntropyTest, SparseValuesRefuseLabelSmoothing) {
  DeviceMesh mesh({2, 4}, {"data", "model"});
  const Shape shape{4, 6, 10};
  const Array x = distribute_tensor(testing::ce_logits(DType::kF32, shape, 3),
                                    TensorLayout({"data", None, "model"}, mesh));
  const Array y =
      distribute_tensor(testing::ce_labels(shape, 4), TensorLayout({"data", None}, mesh));
  for (const bool from_logits : {true, false}) {
    try {
      sparse_categorical_crossentropy_values(x, y,
                                             {.from_logits = from_logits, .label_smoothing = 0.25});
      ADD_FAILURE() << "expected a ValueError";
    } catch (const ValueError& e) {
      EXPECT_EQ(std::string(e.what()),
                "sparse_categorical_crossentropy: label_smoothing must be 0 (Keras' "
                "SparseCategoricalCrossentropy has none), got 0.25");
    }
  }
}

// Keras' documented example (keras.losses.CategoricalCrossentropy): y_true [[0, 1, 0], [0, 0, 1]],
// y_pred [[0.05, 0.95, 0], [0.1, 0.8, 0.1]] give 1.177 (the 0 is clipped to 1e-7); the sparse
// loss from probabilities on the labels [1, 2] is the same.
TEST_F(CrossEntropyTest, KerasDocumentedExampleFromProbabilities) {
  DeviceMesh mesh({2, 4}, {"data", "model"});
  HostTensor p(DType::kF32, {2, 3}), t(DType::kF32, {2, 3}), y(DType::kI32, {2});
  const float pv[] = {0.05f, 0.95f, 0.0f, 0.1f, 0.8f, 0.1f}, tv[] = {0, 1, 0, 0, 0, 1};
  for (int i = 0; i < 6; ++i) p.data_as<float>()[i] = pv[i], t.data_as<float>()[i] = tv[i];
  y.data_as<int32_t>()[0] = 1, y.data_as<int32_t>()[1] = 2;
  const Array lp = distribute_tensor(p, TensorLayout({None, "model"}, mesh));
  const Array lt = distribute_tensor(t, TensorLayout({"data", None}, mesh));
  const Array ly = distribute_tensor(y, TensorLayout({None}, mesh));
  // The rows are divided by their sums (of the float values: not exactly 1).
  const auto d = [](float v) { return static_cast<double>(v); };
  const double want = -(std::log(d(0.95f) / (d(0.05f) + d(0.95f))) +
                        std::log(d(0.1f) / (d(0.1f) + d(0.8f) + d(0.1f)))) /
                      2;
  EXPECT_NEAR(want, 1.1769392, 1e-7);
  EXPECT_NEAR(categorical_crossentropy(lp, lt, {.from_logits = false}), want, 1e-12);
  EXPECT_NEAR(sparse_categorical_crossentropy(lp, ly, {.from_logits = false}), want, 1e-12);
  // From logits, the same numbers are logits: −log_softmax.
  const double lse0 = std::log(std::exp(0.05) + std::exp(0.95) + std::exp(0.0));
  const double lse1 = std::log(std::exp(0.1) + std::exp(0.8) + std::exp(0.1));
  EXPECT_NEAR(categorical_crossentropy(lp, lt, {.from_logits = true}),
              ((lse0 - 0.95) + (lse1 - 0.1)) / 2, 1e-7);
}

TEST_F(CrossEntropyTest, ProcessesAndReplicasAgreeBitForBit) {
  const Shape shape{4, 6, 10};
  const HostTensor hx = testing::ce_logits(DType::kF32, shape, 3),
                   hy = testing::ce_labels(shape, 4);
  std::mutex mu;
  std::vector<double> losses;
  const auto failures = run_as_processes(4, [&](std::shared_ptr<Runtime> rt) {
    const DeviceMesh mesh({2, 4}, {"data", "model"});
    const Array x =
        testing::ce_distribute(rt, hx, "None,None,model", mesh);  // replicated over data
    const Array y = testing::ce_distribute(rt, hy, "data,None", mesh);
    CrossEntropyResult r = sparse_categorical_crossentropy_with_grad(x, y);
    {
      std::lock_guard lock(mu);
      losses.push_back(r.loss);
    }
  });
  for (const std::string& f : failures) EXPECT_EQ(f, "");
  ASSERT_EQ(losses.size(), 4u);
  for (double l : losses)
    EXPECT_EQ(std::memcmp(&l, &losses[0], sizeof l), 0) << l << " vs " << losses[0];

  auto rt = Runtime::single_process(8);
  const DeviceMesh mesh({2, 4}, {"data", "model"});
  const Array x = testing::ce_distribute(rt, hx, "None,None,model", mesh);
  const Array y = testing::ce_distribute(rt, hy, "None,model", mesh);
  const Array g = sparse_categorical_crossentropy_backward(x, y);
  for (int64_t p = 0; p < 4; ++p) {
    const Array::Shard& a = *g.shard_at(p);
    const Array::Shard& b = *g.shard_at(p + 4);
    ASSERT_EQ(a.buffer.size(), b.buffer.size());
    EXPECT_EQ(std::memcmp(a.buffer.data(), b.buffer.data(), a.buffer.size()), 0)
        << "position " << p;
  }
}

TEST_F(CrossEntropyTest, ABadLabelOneProcessSeesIsThrownByEveryProcess) {
  const Shape shape{4, 6, 10};
  const HostTensor hx = testing::ce_logits(DType::kF32, shape, 3);
  HostTensor hy = testing::ce_labels(shape, 4);
  hy.data_as<int32_t>()[3 * 6 + 5] = 12;  // row 3: data coordinate 1, processes 1 (of 2)
  const auto failures = run_as_processes(2, [&](std::shared_ptr<Runtime> rt) {
    const DeviceMesh mesh({2, 4}, {"data", "model"});
    const Array x = testing::ce_distribute(rt, hx, "data,None,model", mesh);
    const Array y = testing::ce_distribute(rt, hy, "data,None", mesh);
    try {
      sparse_categorical_crossentropy(x, y);
    } catch (const ValueError& e) {
      throw Error(e.what());  // reported as the process's failure
    }
  });
  for (const std::string& f : failures) {
    EXPECT_EQ(f,
              "rank 1: sparse_categorical_crossentropy: label 12 at labels[3, 5] is outside "
              "[0, 10): V = 10 is the last dimension of logits (4, 6, 10)");
  }
}

TEST_F(CrossEntropyTest, NoPositionsGiveZero) {
  DeviceMesh mesh({2, 4}, {"data", "model"});
  const Array x =
      distribute_tensor(HostTensor(DType::kF32, {0, 5}), TensorLayout({"data", "model"}, mesh));
  const Array y = distribute_tensor(HostTensor(DType::kI32, {0}), TensorLayout({"data"}, mesh));
  EXPECT_EQ(sparse_categorical_crossentropy(x, y), 0.0);
  EXPECT_EQ(sparse_categorical_crossentropy_backward(x, y).shape(), (Shape{0, 5}));
}

}  // namespace
}  // namespace meshlayout
