// reversible_embedding.h — keras-hub's ReversibleEmbedding: an Embedding whose table also maps
// hidden states back to logits (a language model's input and output projections in one layer).
//
//   call      tokens (…) I32 → (…, output_dim): the rows of `embeddings` (input_dim, output_dim)
//   reverse   x (…, output_dim) → logits (…, input_dim): x · embeddingsᵀ when tied, else
//             x · reverse_embeddings, its own (output_dim, input_dim) weight (keras-hub's
//             tie_weights=False), created beside the table with the same initializer
// Paths are keras-hub's: "<name>/embeddings", "<name>/reverse_embeddings". Tied, the reverse
// pass transposes the table shard by shard (no gather); its gradient goes to the table, added
// to the lookup's.
//
// Example:
//   auto emb = std::make_shared<ReversibleEmbedding>(32000, 512, /*tie_weights=*/true,
//                                                    "token_embedding");
//   Array h = emb->call_on(tokens);                 // (batch, seq) → (batch, seq, 512)
//   Array logits = emb->reverse(h);                 // (batch, seq, 32000)
//   Array dh = emb->reverse_backward(h, dlogits, grads);   // grads of the table, dL/dh
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "meshlayout/nn/layers/core/embedding.h"

namespace meshlayout {

/// keras-hub's token embedding (ReversibleEmbedding): the lookup, and the reverse projection to
/// logits with the table transposed (tied) or its own reverse_embeddings (d, V).
class ReversibleEmbedding : public Embedding {
 public:
  /// Both weights random_normal (keras-hub's default initializer for its backbones).
  ReversibleEmbedding(int64_t vocab, int64_t hidden, bool tie_weights, std::string name);
  bool tie_weights() const { return tie_; }
  /// Null when tied or not built.
  const VariablePtr& reverse_embeddings() const { return reverse_; }
  /// The (d, V) matrix reverse() multiplies by: reverse_embeddings' value, or (tied) the table
  /// transposed shard by shard into `storage`. Collective when tied.
  const Array& reverse_kernel(std::optional<Array>& storage) const;
  /// x (…, d) → logits (…, V). Collective.
  Array reverse(const Array& x) const;
  /// The backward of reverse(): dL/dx in x's layout; accumulates the table's gradient (tied: added
  /// to the lookup's) or reverse_embeddings'. `kernel`: the reverse_kernel() the forward used
  /// (null: made again). Collective.
  Array reverse_backward(const Array& x, const Array& dlogits, Gradients& grads,
                         const Array* kernel = nullptr) const;

 protected:
  void build(const Shape& input_shape) override;

 private:
  bool tie_;
  VariablePtr reverse_;
};

}  // namespace meshlayout
