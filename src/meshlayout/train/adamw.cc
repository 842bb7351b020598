// adamw.cc — keras.optimizers.AdamW. See adamw.h.
#include "meshlayout/train/adamw.h"

namespace meshlayout {
namespace {

OptimizerOptions with_adamw_default(OptimizerOptions o) {
  if (!o.weight_decay) o.weight_decay = 0.004;
  return o;
}

}  // namespace

AdamW::AdamW(const OptimizerOptions& options)
    : Adam("AdamW", AdamOptions::from(options, "AdamW"), with_adamw_default(options)) {}

MESHLAYOUT_REGISTER_OPTIMIZER(adamw, AdamW, "adamw")

}  // namespace meshlayout
