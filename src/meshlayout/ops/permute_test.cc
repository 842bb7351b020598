// permute_dims against a host permutation written from its definition, for ranks 1–4, F32, F64
// and I32, on layouts that split the permuted dimensions (evenly and unevenly) over one and two
// axes; the layout follows the dimensions; the inverse restores the array; bad permutations are
// named.
#include "meshlayout/ops/permute.h"

#include <gtest/gtest.h>

#include <cstring>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout {
namespace {

class PermuteTest : public ::testing::Test {
 protected:
  void SetUp() override { set_device_count(8); }
  void TearDown() override { reset_device_count(); }
  DeviceMesh mesh_{{2, 4}, {"batch", "model"}};
};

// out[k] = x[v] with v[perm[i]] = k[i], elements of `size` bytes, row-major.
std::vector<std::byte> host_permute(const HostTensor& x, const std::vector<int>& perm) {
  const Shape& s = x.shape();
  const size_t rank = s.size(), es = dtype_size(x.dtype());
  std::vector<int64_t> strides(rank, 1);
  for (size_t i = rank; i-- > 1;) strides[i - 1] = strides[i] * s[i];
  Shape out_shape(rank);
  for (size_t i = 0; i < rank; ++i) out_shape[i] = s[static_cast<size_t>(perm[i])];
  std::vector<std::byte> out(x.num_bytes());
  std::vector<int64_t> k(rank, 0);
  for (int64_t n = 0; n < x.num_elements(); ++n) {
    int64_t from = 0;
    for (size_t i = 0; i < rank; ++i) from += k[i] * strides[static_cast<size_t>(perm[i])];
    std::memcpy(out.data() + static_cast<size_t>(n) * es,
                static_cast<const std::byte*>(x.data()) + static_cast<size_t>(from) * es, es);
    for (size_t i = rank; i-- > 0;) {
      if (++k[i] < out_shape[i]) break;
      k[i] = 0;
    }
  }
  return out;
}

TEST_F(PermuteTest, MatchesTheHostPermutationOnEveryLayout) {
  struct Case {
    Shape shape;
    std::vector<int> perm;
    std::vector<DimSharding> layout;
  };
  const Case cases[] = {
      {{8, 6, 5}, {1, 0, 2}, {"model", "batch", None}},   // Gemma's (heads, d, hd) → (d, …)
      {{3, 10, 4}, {1, 0, 2}, {"model", None, "batch"}},  // 3 heads on 4: uneven, empty boxes
      {{4, 6, 2, 3}, {3, 1, 0, 2}, {None, DimSharding({"batch", "model"}), None, None}},
      {{7, 5}, {1, 0}, {"batch", "model"}},
      {{9}, {0}, {"model"}},
      {{2, 3, 4, 5}, {0, 1, 2, 3}, {"batch", None, "model", None}},  // identity
  };
  for (const Case& c : cases) {
    for (const DType dtype : {DType::kF32, DType::kF64, DType::kI32}) {
      const HostTensor x = HostTensor::random(dtype, c.shape, 5);
      const TensorLayout layout(c.layout, mesh_);
      const Array xa = distribute_tensor(x, layout);
      const Array y = permute_dims(xa, c.perm);
      for (size_t i = 0; i < c.perm.size(); ++i) {
        EXPECT_EQ(y.shape()[i], c.shape[static_cast<size_t>(c.perm[i])]);
        EXPECT_EQ(y.layout().axes()[i], c.layout[static_cast<size_t>(c.perm[i])]);
      }
      const HostTensor got = y.gather();
      const std::vector<std::byte> want = host_permute(x, c.perm);
      ASSERT_EQ(got.num_bytes(), want.size());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0)
          << shape_to_string(c.shape) << " " << dtype_name(dtype) << " " << layout.to_string();
      const HostTensor back = permute_dims(y, inverse_permutation(c.perm)).gather();
      EXPECT_EQ(std::memcmp(back.data(), x.data(), x.num_bytes()), 0);
    }
  }
}

TEST_F(PermuteTest, BadPermutationsAreNamed) {
  const Array x = distribute_tensor(HostTensor::random(DType::kF32, {2, 3, 4}, 1),
                                    TensorLayout({None, None, None}, mesh_));
  for (const std::vector<int>& bad : {std::vector<int>{0, 1}, std::vector<int>{0, 1, 1},
                                      std::vector<int>{0, 1, 3}, std::vector<int>{-1, 0, 1}}) {
    try {
      (void)permute_dims(x, bad);
      ADD_FAILURE() << "no error";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("is not a permutation of the 3 dimensions of (2, 3, 4)"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace meshlayout
