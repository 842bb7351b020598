#include "meshlayout/layout/box_ops.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>

namespace meshlayout {
namespace {

TEST(BoxOpsTest, IntersectAndContains) {
  Box a{{0, 0}, {4, 6}}, b{{2, 3}, {4, 6}};
  EXPECT_EQ(intersect(a, b), (Box{{2, 3}, {2, 3}}));
  EXPECT_EQ(intersect(a, Box{{4, 0}, {1, 1}}), std::nullopt);
  EXPECT_TRUE(contains(a, Box{{1, 1}, {3, 5}}));
  EXPECT_FALSE(contains(a, Box{{1, 1}, {3, 6}}));
}

// Reference: element-by-element copy through global coordinates.
void reference_copy(const std::vector<int>& src, const Box& sb, std::vector<int>& dst,
                    const Box& db, const Box& piece) {
  const size_t rank = piece.shape.size();
  std::vector<int64_t> idx(rank, 0);
  for (int64_t n = 0; n < piece.num_elements(); ++n) {
    int64_t rem = n;
    for (size_t d = rank; d-- > 0;) {
      idx[d] = piece.offset[d] + rem % piece.shape[d];
      rem /= piece.shape[d];
    }
    int64_t so = 0, dof = 0;
    for (size_t d = 0; d < rank; ++d) {
      so = so * sb.shape[d] + (idx[d] - sb.offset[d]);
      dof = dof * db.shape[d] + (idx[d] - db.offset[d]);
    }
    dst[static_cast<size_t>(dof)] = src[static_cast<size_t>(so)];
  }
}

TEST(BoxOpsTest, CopyBoxMatchesElementwiseReferenceOnRandomBoxes) {
  uint64_t seed = 12345;
  auto rnd = [&](int64_t n) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<int64_t>((seed >> 33) % static_cast<uint64_t>(n));
  };
  for (int iter = 0; iter < 300; ++iter) {
    const size_t rank = static_cast<size_t>(1 + rnd(4));
    Box sb, db, piece;
    for (size_t d = 0; d < rank; ++d) {
      int64_t lo = rnd(3), hi = lo + 1 + rnd(4);  // the piece
      piece.offset.push_back(lo);
      piece.shape.push_back(hi - lo);
      int64_t s_lo = lo - rnd(lo + 1), d_lo = lo - rnd(lo + 1);
      sb.offset.push_back(s_lo);
      sb.shape.push_back(hi - s_lo + rnd(3));
      db.offset.push_back(d_lo);
      db.shape.push_back(hi - d_lo + rnd(3));
    }
    std::vector<int> src(static_cast<size_t>(sb.num_elements()));
    std::iota(src.begin(), src.end(), 1);
    std::vector<int> got(static_cast<size_t>(db.num_elements()), -1), want = got;
    copy_box(reinterpret_cast<const std::byte*>(src.data()), sb,
             reinterpret_cast<std::byte*>(got.data()), db, piece, sizeof(int));
    reference_copy(src, sb, want, db, piece);
    ASSERT_EQ(got, want) << "iteration " << iter << " src " << sb.to_string() << " dst "
                         << db.to_string() << " piece " << piece.to_string();
  }
}

TEST(BoxOpsTest, CopyBoxRankZeroAndEmpty) {
  int a = 7, b = 0;
  copy_box(reinterpret_cast<const std::byte*>(&a), Box{}, reinterpret_cast<std::byte*>(&b), Box{},
           Box{}, sizeof(int));
  EXPECT_EQ(b, 7);
  copy_box(nullptr, Box{{0}, {0}}, nullptr, Box{{0}, {0}}, Box{{0}, {0}}, 4);  // nothing to do
}

TEST(BoxOpsTest, SplitBoxCoversTheBoxWithBoundedPieces) {
  Box box{{1, 2, 3}, {5, 7, 3}};
  for (int64_t max : {1, 2, 5, 21, 22, 50, 105, 1000}) {
    std::vector<Box> parts = split_box(box, max);
    int64_t total = 0;
    for (const Box& p : parts) {
      EXPECT_LE(p.num_elements(), max);
      EXPECT_GT(p.num_elements(), 0);
      EXPECT_TRUE(contains(box, p));
      total += p.num_elements();
    }
    EXPECT_EQ(total, box.num_elements()) << "max " << max;
  }
  EXPECT_TRUE(split_box(Box{{0}, {0}}, 4).empty());
}

}  // namespace
}  // namespace meshlayout
