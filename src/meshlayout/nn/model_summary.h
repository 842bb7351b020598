// model_summary.h — Model::summary(): Keras' model.summary() for a sharded model. One row per
// variable (Keras 3 path, shape, dtype, layout, bytes on the fullest device), Keras' totals,
// then the Keras 2 "DTensor summary" lines (params fully replicated / sharded per spec, overall
// per-device memory, sharding factor) and the exact memory of every device (uneven splits
// counted box by box). Parameters are Keras' model.weights: RNG state (Dropout's
// seed_generator_state) is listed and counted in the exact device memory, but not in the params
// nor the DTensor lines (a "RNG state (not params, as Keras)" line gives its size).
//
// Example:
//   std::cout << model->summary();
//   // Model: "my_model"
//   // Variable path        Shape     DType  Layout                Bytes/device
//   // my_model/d1/kernel   (10, 20)  F32    layout[None,model]    200
//   // …
//   // Total params: 230 (920.00 B)
#pragma once

#include <string>

namespace meshlayout {

/// Keras utils.readable_memory_size: "920.00 B", "15.70 KB", … (powers of 1024).
std::string readable_memory_size(double bytes);

}  // namespace meshlayout
