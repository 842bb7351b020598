// The allocation replay against real ops: for products of each kind of the matmul table
// (column-parallel, row-parallel with partial sums, a pair that needs reshards) and their
// backward, the replayed peak per device equals the peak the devices' accounts measure.
#include "meshlayout/plan/allocation_replay.h"

#include <gtest/gtest.h>

#include "meshlayout/array/array.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/ops/matmul.h"
#include "meshlayout/ops/matmul_backward.h"
#include "meshlayout/runtime/runtime.h"

namespace meshlayout {
namespace {

class AllocationReplayTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }

  // Each device's peak over what it held while `f` runs.
  template <typename F>
  static std::vector<uint64_t> measured(F&& f) {
    std::vector<VirtualDevice*> devices = default_runtime()->local_devices();
    std::vector<int64_t> before;
    for (VirtualDevice* d : devices) {
      before.push_back(d->memory().stats().bytes_live);
      d->memory().reset_peak();
    }
    f();
    std::vector<uint64_t> out;
    for (size_t i = 0; i < devices.size(); ++i) {
      out.push_back(static_cast<uint64_t>(devices[i]->memory().stats().peak_bytes - before[i]));
    }
    return out;
  }
};

TEST_F(AllocationReplayTest, MatmulPeaksAreTheDevicesPeaks) {
  const DeviceMesh mesh({2, 4}, {"batch", "model"});
  const struct {
    TensorLayout x, w;
  } cases[] = {
      {TensorLayout({"batch", None, None}, mesh), TensorLayout({None, "model"}, mesh)},
      {TensorLayout({"batch", None, "model"}, mesh), TensorLayout({"model", None}, mesh)},
      {TensorLayout({"batch", None, None}, mesh), TensorLayout({"batch", "model"}, mesh)},
      {TensorLayout({None, None, "model"}, mesh), TensorLayout({"batch", None}, mesh)},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.x.to_string() + " @ " + c.w.to_string());
    const Array x = distribute_tensor(HostTensor::random(DType::kF32, {4, 6, 16}, 1), c.x);
    const Array w = distribute_tensor(HostTensor::random(DType::kF32, {16, 24}, 2), c.w);
    const Array dy = distribute_tensor(HostTensor::random(DType::kF32, {4, 6, 24}, 3),
                                       TensorLayout({"batch", None, None}, mesh));
    const std::vector<uint64_t> forward = measured([&] { matmul(x, w); });
    const std::vector<uint64_t> input = measured([&] { matmul_backward_input(dy, w, x.layout()); });
    const std::vector<uint64_t> weight =
        measured([&] { matmul_backward_weight(x, dy, w.layout()); });

    const replay::Sym xs{c.x, {4, 6, 16}}, ws{c.w, {16, 24}},
        dys{TensorLayout({"batch", None, None}, mesh), {4, 6, 24}};
    const auto replayed = [&](auto f) {
      replay::Replay r(mesh, 4);
      f(r);
      return r.result().peak;
    };
    EXPECT_EQ(replayed([&](replay::Replay& r) { replay::matmul(r, xs, ws); }), forward);
    EXPECT_EQ(
        replayed([&](replay::Replay& r) { replay::matmul_backward_input(r, dys, ws, xs.layout); }),
        input);
    EXPECT_EQ(
        replayed([&](replay::Replay& r) { replay::matmul_backward_weight(r, xs, dys, ws.layout); }),
        weight);
  }
}

TEST_F(AllocationReplayTest, BytesAreFreedWithTheirLastSymAndGradientsCounted) {
  const DeviceMesh mesh({2, 4}, {"batch", "model"});
  replay::Replay r(mesh, 4);
  const TensorLayout rows({"batch", None}, mesh);
  {
    const replay::Sym a = r.alloc(rows, {8, 16});  // 4 x 16 floats per device
    const replay::Sym b = a;                       // shares a's bytes
    r.gradient("g", r.alloc(rows, {8, 16}));
  }
  // a and b freed: 256 bytes (the gradient) live; two more arrays make a new peak of 768.
  const replay::Sym c = r.alloc(rows, {8, 16}), d = r.alloc(rows, {8, 16});
  const StepMemory m = r.result();
  EXPECT_EQ(m.peak[0], 768u);
  EXPECT_EQ(m.gradients_at_peak[0], 256u);
  EXPECT_EQ(r.reshard(c, TensorLayout({None, "model"}, mesh), "w").layout,
            TensorLayout({None, "model"}, mesh));
  EXPECT_EQ(r.result().largest_reshard[0], 8u * 4 * 4);
  EXPECT_EQ(r.result().largest_reshard_text, "w to layout[None,model]");
}

}  // namespace
}  // namespace meshlayout
