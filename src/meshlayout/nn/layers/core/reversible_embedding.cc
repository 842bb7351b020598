// reversible_embedding.cc — see reversible_embedding.h.
#include "meshlayout/nn/layers/core/reversible_embedding.h"

#include <utility>

#include "meshlayout/ops/matmul.h"
#include "meshlayout/ops/matmul_backward.h"

namespace meshlayout {

ReversibleEmbedding::ReversibleEmbedding(int64_t vocab, int64_t hidden, bool tie_weights,
                                         std::string name)
    : Embedding(vocab, hidden,
                EmbeddingOptions{.name = std::move(name),
                                 .embeddings_initializer = Initializer::random_normal()}),
      tie_(tie_weights) {}

void ReversibleEmbedding::build(const Shape& input_shape) {
  Embedding::build(input_shape);
  if (!tie_) {
    reverse_ = add_weight({.name = "reverse_embeddings",
                           .shape = {output_dim(), input_dim()},
                           .initializer = Initializer::random_normal()});
  }
}

const Array& ReversibleEmbedding::reverse_kernel(std::optional<Array>& storage) const {
  return tie_ ? storage.emplace(transpose(embeddings()->value())) : reverse_->value();
}

Array ReversibleEmbedding::reverse(const Array& x) const {
  std::optional<Array> storage;
  return matmul(x, reverse_kernel(storage));
}

Array ReversibleEmbedding::reverse_backward(const Array& x, const Array& dlogits, Gradients& grads,
                                            const Array* kernel) const {
  std::optional<Array> storage;
  const Array& w = kernel != nullptr ? *kernel : reverse_kernel(storage);
  if (!tie_) {
    grads.accumulate(*reverse_, matmul_backward_weight(x, dlogits, w.layout()));
  } else {
    // logits = x · Eᵀ: the table's gradient is (xᵀ · dlogits)ᵀ, computed in Eᵀ's layout and
    // transposed back shard by shard into E's.
    grads.accumulate(*embeddings(), transpose(matmul_backward_weight(x, dlogits, w.layout())));
  }
  return matmul_backward_input(dlogits, w, x.layout());
}

}  // namespace meshlayout
