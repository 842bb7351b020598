#include "meshlayout/init/orthogonal.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "meshlayout/core/errors.h"
#include "meshlayout/init/init_test_util.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

// (Q^T Q)_ij for the columns (rows >= n) or (Q Q^T) for the rows: gain^2 times the identity.
void expect_orthonormal(const std::vector<double>& m, int64_t rows, int64_t n, double gain) {
  const bool by_columns = rows >= n;
  const int64_t count = by_columns ? n : rows, length = by_columns ? rows : n;
  auto at = [&](int64_t vec, int64_t i) {
    return by_columns ? m[static_cast<size_t>(i * n + vec)] : m[static_cast<size_t>(vec * n + i)];
  };
  for (int64_t a = 0; a < count; ++a) {
    for (int64_t b = 0; b < count; ++b) {
      double dot = 0;
      for (int64_t i = 0; i < length; ++i) dot += at(a, i) * at(b, i);
      EXPECT_NEAR(dot, a == b ? gain * gain : 0.0, 1e-12) << a << "," << b;
    }
  }
}

TEST(OrthogonalTest, TallWideSquareAndHigherRankAreOrthonormal) {
  const uint64_t key = variable_key("lstm/lstm_cell/recurrent_kernel");
  expect_orthonormal(internal_init::orthogonal_matrix(Initializer::orthogonal(), {40, 9}, key), 40,
                     9, 1.0);
  expect_orthonormal(internal_init::orthogonal_matrix(Initializer::orthogonal(2.0), {8, 32}, key),
                     8, 32, 2.0);
  expect_orthonormal(internal_init::orthogonal_matrix(Initializer::orthogonal(), {16, 16}, key), 16,
                     16, 1.0);
  // (2, 3, 5): rows = 6, n = 5.
  expect_orthonormal(internal_init::orthogonal_matrix(Initializer::orthogonal(), {2, 3, 5}, key), 6,
                     5, 1.0);
}

TEST(OrthogonalTest, BoxesAreSlicesAndSeedsAndPathsChangeTheMatrix) {
  const Shape shape{12, 20};
  const uint64_t key = variable_key("w");
  const auto all =
      testing::fill(Initializer::orthogonal(), shape, testing::whole(shape), DType::kF32, key);
  const Box box{{3, 5}, {4, 7}};
  const auto part = testing::fill(Initializer::orthogonal(), shape, box, DType::kF32, key);
  const auto whole = testing::decode(all, DType::kF32), got = testing::decode(part, DType::kF32);
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t c = 0; c < 7; ++c) {
      EXPECT_EQ(got[static_cast<size_t>(r * 7 + c)],
                whole[static_cast<size_t>((r + 3) * 20 + c + 5)]);
    }
  }
  EXPECT_NE(testing::fill(Initializer::orthogonal(1.0, 7), shape, testing::whole(shape),
                          DType::kF32, key),
            all);
  EXPECT_NE(testing::fill(Initializer::orthogonal(), shape, testing::whole(shape), DType::kF32,
                          variable_key("v")),
            all);
  set_global_seed(3);
  EXPECT_NE(
      testing::fill(Initializer::orthogonal(), shape, testing::whole(shape), DType::kF32, key),
      all);
  set_global_seed(0);
  EXPECT_EQ(
      testing::fill(Initializer::orthogonal(), shape, testing::whole(shape), DType::kF32, key),
      all);
}

TEST(OrthogonalTest, TextFormsAndErrors) {
  EXPECT_EQ(Initializer::from_name("Orthogonal"), Initializer::orthogonal());
  EXPECT_EQ(Initializer::orthogonal(2.0, 3).to_string(), "orthogonal(gain=2.0, seed=3)");
  EXPECT_EQ(Initializer::from_string("orthogonal(gain=0.5)"), Initializer::orthogonal(0.5));
  EXPECT_EQ(testing::ValueErrorMessage([] {
              (void)testing::fill(Initializer::orthogonal(), {5}, testing::whole({5}), DType::kF32,
                                  1);
            }),
            "The tensor to initialize must be at least two-dimensional. Received: shape=(5,) of "
            "rank 1.");
  EXPECT_THROW((void)Initializer::orthogonal(std::nan("")), ValueError);
}

}  // namespace
}  // namespace meshlayout
