// ReversibleEmbedding (keras-hub): tied, reverse() is x · embeddingsᵀ and no other weight
// exists; untied, a reverse_embeddings (d, V) weight of its own ("<name>/reverse_embeddings")
// and reverse() is x · reverse_embeddings. reverse_backward against float64 references of the
// linear map (dx = dlogits · kernelᵀ, d kernel = xᵀ · dlogits, tied: transposed into the
// table's gradient and added to the lookup's), on replicated and sharded layouts.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "meshlayout/nn/backward_test_util.h"
#include "meshlayout/nn/distribution.h"
#include "meshlayout/nn/layers/core/reversible_embedding.h"
#include "meshlayout/nn/nn_test_util.h"
#include "meshlayout/nn/transformer_reference.h"

namespace meshlayout {
namespace {

using testing::expect_close;
using testing::gathered_f64;
using testing::ref_matmul;
using testing::Vec;

const DimSharding kNone;

class ReversibleEmbeddingTest : public NnTest {
 protected:
  static constexpr int64_t kVocab = 11, kDim = 8, kB = 2, kT = 3;

  // A ReversibleEmbedding named token_embedding built under `rules`.
  std::shared_ptr<ReversibleEmbedding> make(bool tie, const LayoutMap& rules) {
    set_distribution(std::make_shared<ModelParallel>(rules));
    auto emb = std::make_shared<ReversibleEmbedding>(kVocab, kDim, tie, "token_embedding");
    emb->build_standalone({kB, kT});
    return emb;
  }

  // (rows, cols) → (cols, rows).
  static Vec transposed(const Vec& m, int64_t rows, int64_t cols) {
    Vec out(m.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = m[r * cols + c];
    return out;
  }

  void check(bool tie, const LayoutMap& rules, const std::string& what) {
    SCOPED_TRACE(what + (tie ? " tied" : " untied"));
    clear_session();
    const auto emb = make(tie, rules);
    EXPECT_EQ(emb->tie_weights(), tie);
    EXPECT_EQ(emb->embeddings()->path(), "token_embedding/embeddings");
    EXPECT_EQ(emb->embeddings()->shape(), (Shape{kVocab, kDim}));
    if (tie) {
      EXPECT_EQ(emb->reverse_embeddings(), nullptr);
      EXPECT_EQ(emb->variables().size(), 1u);
    } else {
      ASSERT_NE(emb->reverse_embeddings(), nullptr);
      EXPECT_EQ(emb->reverse_embeddings()->path(), "token_embedding/reverse_embeddings");
      EXPECT_EQ(emb->reverse_embeddings()->shape(), (Shape{kDim, kVocab}));
      EXPECT_EQ(emb->variables().size(), 2u);
    }
    // The (d, V) kernel in float64.
    const Vec kernel = tie ? transposed(gathered_f64(emb->embeddings()->value()), kVocab, kDim)
                           : gathered_f64(emb->reverse_embeddings()->value());
    const HostTensor xh = HostTensor::random(DType::kF32, {kB, kT, kDim}, 5);
    const Array x = distribute_tensor(xh, TensorLayout({"data", kNone, kNone}, mesh_));
    const Vec xv = testing::to_f64(xh);
    const Array logits = emb->reverse(x);
    EXPECT_EQ(logits.shape(), (Shape{kB, kT, kVocab}));
    expect_close(gathered_f64(logits), ref_matmul(xv, kernel, kB * kT, kDim, kVocab), "logits",
                 1e-5);
    std::optional<Array> storage;
    expect_close(gathered_f64(emb->reverse_kernel(storage)), kernel, "reverse_kernel", 0);

    const Vec w = testing::random_values({kB, kT, kVocab}, 9);
    const Array dlogits = distribute_tensor(testing::to_f32({kB, kT, kVocab}, w), logits.layout());
    Gradients grads;
    const Array dx = emb->reverse_backward(x, dlogits, grads);
    EXPECT_EQ(dx.layout(), x.layout());
    expect_close(gathered_f64(dx),
                 ref_matmul(w, transposed(kernel, kDim, kVocab), kB * kT, kVocab, kDim), "dx",
                 1e-5);
    const Vec dkernel = ref_matmul(transposed(xv, kB * kT, kDim), w, kDim, kB * kT, kVocab);
    if (tie) {
      const Array* g = grads.find(*emb->embeddings());
      ASSERT_NE(g, nullptr);
      EXPECT_EQ(g->layout(), emb->embeddings()->value().layout());
      expect_close(gathered_f64(*g), transposed(dkernel, kDim, kVocab), "d embeddings", 1e-5);
    } else {
      EXPECT_EQ(grads.find(*emb->embeddings()), nullptr);
      const Array* g = grads.find(*emb->reverse_embeddings());
      ASSERT_NE(g, nullptr);
      EXPECT_EQ(g->layout(), emb->reverse_embeddings()->value().layout());
      expect_close(gathered_f64(*g), dkernel, "d reverse_embeddings", 1e-5);
    }
    // The kernel the forward used gives the same gradients.
    Gradients again;
    std::optional<Array> kept;
    const Array dx2 = emb->reverse_backward(x, dlogits, again, &emb->reverse_kernel(kept));
    expect_close(gathered_f64(dx2), gathered_f64(dx), "dx with the kept kernel", 0);
  }
};

TEST_F(ReversibleEmbeddingTest, ReplicatedTiedAndUntied) {
  const LayoutMap rules(mesh_);
  check(true, rules, "replicated");
  check(false, rules, "replicated");
}

TEST_F(ReversibleEmbeddingTest, KerasHubLayoutsTiedAndUntied) {
  LayoutMap rules(mesh_);
  rules["token_embedding/embeddings"] = TensorLayout({"model", "data"});
  rules["token_embedding/reverse_embeddings"] = TensorLayout({"data", "model"});
  check(true, rules, "keras-hub");
  check(false, rules, "keras-hub");
}

TEST_F(ReversibleEmbeddingTest, TiedTableGradientAddsToTheLookups) {
  const auto emb = make(true, LayoutMap(mesh_));
  HostTensor ids(DType::kI32, {kB, kT});
  for (int64_t i = 0; i < ids.num_elements(); ++i) ids.data_as<int32_t>()[i] = int32_t(i % 4);
  const Array tokens = distribute_tensor(ids, TensorLayout({"data", kNone}, mesh_));
  const Array h = emb->call_on(tokens);
  const Vec dh = testing::random_values(h.shape(), 3);
  const Vec dl = testing::random_values({kB, kT, kVocab}, 4);
  Gradients lookup_only, both;
  (void)emb->backward(tokens, distribute_tensor(testing::to_f32(h.shape(), dh), h.layout()),
                      lookup_only);
  (void)emb->backward(tokens, distribute_tensor(testing::to_f32(h.shape(), dh), h.layout()), both);
  (void)emb->reverse_backward(
      h,
      distribute_tensor(testing::to_f32({kB, kT, kVocab}, dl), TensorLayout::replicated(3, mesh_)),
      both);
  Gradients reverse_only;
  (void)emb->reverse_backward(
      h,
      distribute_tensor(testing::to_f32({kB, kT, kVocab}, dl), TensorLayout::replicated(3, mesh_)),
      reverse_only);
  const Vec a = gathered_f64(*lookup_only.find(*emb->embeddings()));
  const Vec b = gathered_f64(*reverse_only.find(*emb->embeddings()));
  Vec sum(a.size());
  for (size_t i = 0; i < a.size(); ++i) sum[i] = a[i] + b[i];
  expect_close(gathered_f64(*both.find(*emb->embeddings())), sum, "lookup + reverse", 1e-6);
}

}  // namespace
}  // namespace meshlayout
