// Embedding::backward: d embeddings against float64 central differences of the lookup
// y[t] = E[id[t]] (repeated ids included, so rows get several contributions), for replicated,
// vocab-parallel, column-parallel and 2-D tables with tokens replicated or split over 'data';
// the gradient is in the table's layout and the table is never gathered for it. The same with
// the table in float64 (built under FloatxScope F64): lookup and gradient exact (1e-14).
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/nn/backward_test_util.h"
#include "meshlayout/nn/floatx.h"
#include "meshlayout/nn/layers/core/embedding.h"
#include "meshlayout/nn/nn_test_util.h"

namespace meshlayout {
namespace {

using testing::expect_close;
using testing::gathered_f64;
using testing::numeric_gradient;
using testing::Params;

const DimSharding kNone;

class EmbeddingBackwardTest : public NnTest {
 protected:
  TensorLayout layout(std::vector<DimSharding> axes) const {
    return TensorLayout(std::move(axes), mesh_);
  }

  void check(const TensorLayout& table_layout, const TensorLayout& token_layout,
             DType dtype = DType::kF32) {
    SCOPED_TRACE("table " + table_layout.to_string() + " tokens " + token_layout.to_string() + " " +
                 std::string(dtype_name(dtype)));
    const int64_t vocab = 11, dim = 6;
    const bool f64 = dtype == DType::kF64;
    std::shared_ptr<Embedding> emb;
    {
      FloatxScope floatx(dtype);
      emb = std::make_shared<Embedding>(vocab, dim,
                                        EmbeddingOptions{.embeddings_layout = table_layout});
    }
    HostTensor ids(DType::kI32, {4, 5});
    for (int64_t i = 0; i < ids.num_elements(); ++i)
      ids.data_as<int32_t>()[i] = static_cast<int32_t>((i * 7 + 3) % 9);
    const Array tokens = distribute_tensor(ids, token_layout);
    const Tensor y = (*emb)(Tensor(distribute_tensor(tokens, tokens.layout())));
    const std::vector<double> w = testing::random_values(y.shape(), 51);
    EXPECT_EQ(y.value().dtype(), dtype);
    const Array dy = distribute_tensor(testing::to_dtype(y.shape(), w, dtype), y.value().layout());
    Params p{{"table", gathered_f64(emb->embeddings()->value())}};
    auto forward = [&](const Params& q) {
      std::vector<double> out;
      for (int64_t t = 0; t < ids.num_elements(); ++t) {
        const int64_t id = ids.data_as<int32_t>()[t];
        for (int64_t c = 0; c < dim; ++c)
          out.push_back(q.at("table")[static_cast<size_t>(id * dim + c)]);
      }
      return out;
    };
    expect_close(gathered_f64(y.value()), forward(p), "forward y", f64 ? 1e-15 : 1e-4);
    Gradients grads;
    const Array none = emb->backward(tokens, dy, grads);
    EXPECT_EQ(none.shape(), Shape{0});
    const Array* g = grads.find(*emb->embeddings());
    ASSERT_NE(g, nullptr);
    EXPECT_EQ(g->layout(), emb->embeddings()->value().layout());
    EXPECT_EQ(g->dtype(), dtype);
    // The lookup is linear in the table: F64 takes a step of 1 (exact but for rounding).
    const std::vector<double> want = numeric_gradient(forward, p, "table", w, f64 ? 1.0 : 1e-5);
    const std::vector<double> got = gathered_f64(*g);
    expect_close(got, want, "d embeddings", f64 ? 1e-14 : 1e-4);
    // Ids 9 and 10 never occur: their rows are exactly zero.
    for (int64_t k = 9 * dim; k < vocab * dim; ++k)
      EXPECT_EQ(got[static_cast<size_t>(k)], 0.0) << k;
  }
};

TEST_F(EmbeddingBackwardTest, EveryTableLayout) {
  for (const TensorLayout& tokens : {layout({kNone, kNone}), layout({{"data"}, kNone})}) {
    check(layout({kNone, kNone}), tokens);
    check(layout({{"model"}, kNone}), tokens);  // vocab-parallel (11 rows over 4: uneven)
    check(layout({kNone, {"model"}}), tokens);  // column-parallel
    check(layout({{"model"}, {"data"}}), layout({kNone, kNone}));
  }
  // Tokens split over an axis the table uses (gathered off it, as the call does).
  check(layout({{"data"}, kNone}), layout({{"data"}, {"model"}}));
  check(layout({{"model", "data"}, kNone}), layout({{"data"}, kNone}));
}

TEST_F(EmbeddingBackwardTest, EveryTableLayoutInFloat64) {
  for (const TensorLayout& tokens : {layout({kNone, kNone}), layout({{"data"}, kNone})}) {
    check(layout({kNone, kNone}), tokens, DType::kF64);
    check(layout({{"model"}, kNone}), tokens, DType::kF64);  // vocab-parallel: F64 partial sums
    check(layout({kNone, {"model"}}), tokens, DType::kF64);
    check(layout({{"model"}, {"data"}}), layout({kNone, kNone}), DType::kF64);
  }
}

TEST_F(EmbeddingBackwardTest, RefusesBadDyAndBadIds) {
  auto emb = std::make_shared<Embedding>(
      5, 3, EmbeddingOptions{.embeddings_layout = layout({kNone, kNone})});
  HostTensor ids(DType::kI32, {2, 2});
  for (int i = 0; i < 4; ++i) ids.data_as<int32_t>()[i] = i;
  const Array tokens = distribute_tensor(ids, layout({kNone, kNone}));
  (void)(*emb)(Tensor(distribute_tensor(tokens, tokens.layout())));
  Gradients grads;
  const Array bad = distribute_tensor(HostTensor::random(DType::kF32, {2, 2, 4}, 1),
                                      layout({kNone, kNone, kNone}));
  EXPECT_THROW((void)emb->backward(tokens, bad, grads), ValueError);
  ids.data_as<int32_t>()[3] = 7;
  const Array out_of_range = distribute_tensor(ids, layout({kNone, kNone}));
  const Array dy = distribute_tensor(HostTensor::random(DType::kF32, {2, 2, 3}, 1),
                                     layout({kNone, kNone, kNone}));
  EXPECT_THROW((void)emb->backward(out_of_range, dy, grads), ValueError);
  EXPECT_EQ(grads.size(), 0u);
}

}  // namespace
}  // namespace meshlayout
