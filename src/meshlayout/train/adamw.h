// adamw.h — keras.optimizers.AdamW (keras/src/optimizers/adamw.py): Adam (adam.h: the same
// options, update and slots) with weight_decay defaulting to 0.004, applied first by the base
// (θ ← θ − θ·wd·lr on the pre-update θ). Registered as "adamw"; auto-named "adam_w".
//
// Example:
//   AdamW opt({.learning_rate = 1e-3, .weight_decay = 0.1});
//   opt.exclude_from_weight_decay({"bias"});
#pragma once

#include "meshlayout/train/adam.h"

namespace meshlayout {

class AdamW : public Adam {
 public:
  explicit AdamW(const OptimizerOptions& options = {});
};

}  // namespace meshlayout
