// bias.h — the bias addition of a layer's product (Conv2D, SeparableConv2D, EinsumDense): the
// shard's elements read as rows of `inner` elements, the bias block (`inner` elements, the
// shard's trailing extents) added to every row.
//
// Example (per local shard s of y, the bias distributed like y's trailing dimensions):
//   add_bias(kind, {.y = &s, .bias = b.shard_at(s.position), .inner = s.box.shape.back(),
//                   .dtype = y.dtype()});
#pragma once

#include <cstdint>

#include "meshlayout/array/array.h"
#include "meshlayout/kernels/kernel_op.h"

namespace meshlayout {

struct AddBias {
  Array::Shard* y;           // the product; the bias is added in place
  const Array::Shard* bias;  // the bias block matching the shard's trailing extents
  int64_t inner;             // elements per row (the bias block's); nothing for 0
  DType dtype;               // F32 or F64
};

void add_bias_cpu(const AddBias& args);

inline KernelOp<void(const AddBias&)> add_bias{"add_bias", &add_bias_cpu};

}  // namespace meshlayout
