// embedding.h — keras.layers.Embedding on distributed arrays: integer token ids (..., ) →
// rows of the `embeddings` table (input_dim, output_dim), output (..., output_dim) in the
// table's dtype (F32, or F64 under floatx F64).
//
// How the lookup runs depends on the table's layout (tokens may be sharded on any dimension,
// usually the batch):
//   (None, axes)   column-parallel: each device gathers the rows of its column block; the
//                  output is sharded like the tokens and, on its last dim, like the columns.
//                  No communication beyond the token reshard below.
//   (axes, …)      vocab-parallel (Megatron): each device looks up the ids in its row range
//                  and writes zeros for the others; the partial outputs are summed across the
//                  vocab axes with the matmul partial-sum machinery (NOTE [Partial sums] in
//                  ops/partial_sum.h), an all-reduce: the output is replicated over the vocab
//                  axes. Cost: each process receives (p - 1) × its output block, p = processes
//                  in a vocab group; the table is never gathered (a vocab of 256k × 2048 stays
//                  split), against |table| × (k - 1) / k per device to reshard it to (None, …).
// Token dimensions sharded over an axis the table uses are gathered first (a mesh axis can
// appear once in the output layout); tokens on another mesh of the same devices are replicated
// onto the table's mesh, as Dense does with its input.
//
// Ids are checked before anything moves: each process checks its own shards, the first bad id
// (row-major) is agreed with one all-gather of 16 bytes, so every process throws the same
// ValueError naming the id, its position and input_dim.
//
// Example:
//   auto emb = std::make_shared<Embedding>(32000, 512);
//   Tensor y = (*emb)(tokens);   // tokens I32 (batch, seq) → y F32 (batch, seq, 512)
//   (void)emb->backward(tokens, dy, grads);   // grads.find(*emb->embeddings()): (32000, 512)
#pragma once

#include <cstdint>
#include <string>

#include "meshlayout/nn/layer.h"

namespace meshlayout {

struct EmbeddingOptions {
  std::string name;  // automatic ("embedding", "embedding_1", …) when empty
  Initializer embeddings_initializer = Initializer::random_uniform();  // uniform(-0.05, 0.05)
  // Keras 2 DTensor per-layer layouts (explicit: they win over LayoutMap rules and
  // distributions; a layout without a mesh takes the model's).
  std::optional<TensorLayout> embeddings_layout;
};

class Embedding : public Layer {
 public:
  /// ValueError unless input_dim >= 1 and output_dim >= 1.
  Embedding(int64_t input_dim, int64_t output_dim, EmbeddingOptions options = {});
  int64_t input_dim() const { return input_dim_; }
  int64_t output_dim() const { return output_dim_; }
  const VariablePtr& embeddings() const { return embeddings_; }
  /// input_shape + (output_dim,).
  Shape compute_output_shape(const Shape& input_shape) const override;
  /// The backward of a call (Layer::backward): d embeddings, the scatter-add of dy's rows into
  /// the rows of their ids, in the table's layout without gathering it — each device adds the
  /// tokens it holds whose ids fall in its row block (vocab-parallel) into its column block
  /// (column-parallel), and the blocks of different tokens (batch over 'data', other
  /// processes) are summed by the partial-sum machinery. Integer tokens have no gradient: it
  /// returns an empty F32 array of shape (0,) that callers ignore. Nothing is accumulated for a
  /// non-trainable table. Collective.
  /// \error ValueError if x is not I32/I64, dy not of the table's dtype and the call's output
  ///   shape, or an id is out of range (every process alike).
  Array backward(const Array& x, const Array& dy, Gradients& grads) override;

 protected:
  void build(const Shape& input_shape) override;
  /// \error ValueError if x is not I32/I64, or (every process alike) for an id outside
  ///   [0, input_dim).
  Array call(const Array& x) override;

 private:
  int64_t input_dim_, output_dim_;
  EmbeddingOptions options_;
  VariablePtr embeddings_;
};

}  // namespace meshlayout
