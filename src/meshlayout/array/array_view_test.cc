// array_view: reshapes that keep each device's bytes, the cases they must refuse, and a
// property: whenever local_reshape_layout gives a layout, the view gathers to the reshaped
// tensor and borrows (no memory charged).
#include "meshlayout/array/array_view.h"

#include <gtest/gtest.h>

#include <cstring>

#include "meshlayout/array/array_test_util.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/runtime/runtime.h"

namespace meshlayout {
namespace {

HostTensor reshaped(const HostTensor& t, const Shape& shape) {
  HostTensor out(t.dtype(), shape);
  if (t.num_bytes() > 0) std::memcpy(out.data(), t.data(), static_cast<size_t>(t.num_bytes()));
  return out;
}

TEST(ArrayViewTest, HeadsSplitEvenlyAreColumnsOfTheFlatKernel) {
  DeviceMesh mesh({2, 4}, {"batch", "model"});
  const TensorLayout layout({None, "model", None}, mesh);
  const auto flat = local_reshape_layout(layout, {16, 8, 4}, {16, 32});
  ASSERT_TRUE(flat.has_value());
  EXPECT_EQ(*flat, TensorLayout({None, "model"}, mesh));
  // And back: columns split into (heads, head_dim).
  const auto back = local_reshape_layout(*flat, {16, 32}, {16, 8, 4});
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(*back, layout);
  // Batch and sequence merged, batch split: rows of the flat matrix.
  EXPECT_EQ(local_reshape_layout(TensorLayout({"batch", None, None}, mesh), {4, 6, 8}, {24, 8}),
            TensorLayout({"batch", None}, mesh));
}

TEST(ArrayViewTest, UnevenOrInnerSplitsAreNotViews) {
  DeviceMesh mesh({2, 4}, {"batch", "model"});
  // 3 heads over 4 devices: [0:1] [1:2] [2:3] [3:3] against 12 columns cut [0:3] [3:6] ….
  EXPECT_FALSE(
      local_reshape_layout(TensorLayout({None, "model", None}, mesh), {16, 3, 4}, {16, 12}));
  EXPECT_EQ(viewable_layout(TensorLayout({"batch", "model", None}, mesh), {16, 3, 4}, {16, 12}),
            TensorLayout({"batch", None, None}, mesh));
  // The inner dimension of a merged pair split: not contiguous.
  EXPECT_FALSE(
      local_reshape_layout(TensorLayout({None, None, "model"}, mesh), {16, 3, 8}, {16, 24}));
  // Element counts that differ.
  EXPECT_FALSE(local_reshape_layout(TensorLayout({None, None}, mesh), {4, 4}, {4, 5}));
}

TEST(ArrayViewTest, ViewBorrowsAndReshapeTakesTheBuffers) {
  DeviceMesh mesh({2, 4}, {"batch", "model"});
  const HostTensor x = HostTensor::random(DType::kF32, {6, 8, 4}, 7);
  Array a = distribute_tensor(x, TensorLayout({"batch", "model", None}, mesh));
  auto rt = default_runtime();
  const int64_t before = rt->device(0).memory().stats().bytes_live;
  const TensorLayout flat = *local_reshape_layout(a.layout(), a.shape(), {6, 32});
  {
    Array v = view_shards(a, {6, 32}, flat);
    EXPECT_EQ(rt->device(0).memory().stats().bytes_live, before);
    EXPECT_EQ(v.gather(), reshaped(x, {6, 32}));
    EXPECT_EQ(v.local_shards()[0].buffer.data(), a.local_shards()[0].buffer.data());
  }
  EXPECT_EQ(a.gather(), x);  // the view's end frees nothing
  const std::byte* data = a.local_shards()[0].buffer.data();
  Array r = reshape_shards(std::move(a), {6, 32}, flat);
  EXPECT_EQ(r.local_shards()[0].buffer.data(), data);
  EXPECT_EQ(r.gather(), reshaped(x, {6, 32}));
  EXPECT_THROW((void)view_shards(r, {6, 8, 4}, TensorLayout({"batch", None, "model"}, mesh)),
               ValueError);
}

TEST(ArrayViewTest, EveryViewGivenGathersToTheReshapedTensor) {
  testing::Random r(testing::test_seed(20261124));
  const std::vector<Shape> pairs[] = {
      {{4, 8, 2}, {32, 2}}, {{4, 8, 2}, {4, 16}}, {{4, 8, 2}, {64}}, {{8, 1, 3}, {8, 3}},
      {{2, 3, 4}, {6, 4}},  {{12, 5}, {3, 4, 5}}, {{16}, {4, 4}},    {{5, 6, 1}, {30}},
  };
  int views = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const DeviceMesh mesh = testing::random_mesh(r, 8, /*permute=*/true);
    const auto& p = pairs[r.uniform(static_cast<int64_t>(std::size(pairs)))];
    const Shape& from = p[0];
    const Shape& to = p[1];
    std::vector<DimSharding> axes(from.size());
    for (size_t a = 0; a < mesh.axis_names().size(); ++a) {
      const int64_t d = r.uniform(static_cast<int64_t>(from.size()) + 1);
      if (d < static_cast<int64_t>(from.size()) && !axes[static_cast<size_t>(d)].is_sharded()) {
        axes[static_cast<size_t>(d)] = DimSharding(mesh.axis_names()[a]);
      }
    }
    const TensorLayout layout(axes, mesh);
    const HostTensor x = HostTensor::random(DType::kF32, from, static_cast<uint64_t>(trial));
    const Array a = distribute_tensor(x, layout);
    if (const auto l = local_reshape_layout(layout, from, to)) {
      ++views;
      EXPECT_EQ(view_shards(a, to, *l).gather(), reshaped(x, to)) << layout.to_string();
    }
    // The fallback layout always views.
    const TensorLayout v = viewable_layout(layout, from, to);
    const auto lv = local_reshape_layout(v, from, to);
    ASSERT_TRUE(lv.has_value()) << layout.to_string() << " → " << v.to_string();
    EXPECT_EQ(view_shards(distribute_tensor(a, v), to, *lv).gather(), reshaped(x, to));
  }
  EXPECT_GT(views, 20);
}

}  // namespace
}  // namespace meshlayout
