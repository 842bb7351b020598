// model_checkpoint.h — a model's variables to and from safetensors checkpoints, by variable path.
//
// Each variable is stored under its path: the Keras 2 object path ("d1.kernel", the default:
// it depends only on the model's structure, so a second instance of the model finds its
// tensors) or the Keras 3 scope path ("my_model/d1/kernel", which holds the session's unique
// layer names: "my_model_1/dense_3/kernel" in another instance), optionally renamed by a name
// map (variable path → tensor name, e.g. to read a checkpoint written by another framework). The
// file is a standard safetensors file whatever the layouts; a checkpoint saved under any layout
// loads into any layout, each process reading only the bytes of its devices' boxes (array_io.h).
//
// load_model checks, before reading any data, that the checkpoint holds a tensor for every
// variable (NotFoundError listing the missing ones, unless allow_missing) and that every tensor
// of the checkpoint is taken by a variable (ValueError listing the others, unless
// allow_unexpected); a shape or dtype mismatch is a ValueError naming the variable (dtypes
// convert between F32/F64/BF16/F16 with convert_dtypes). Both are collective, like the array I/O.
//
// Example:
//   save_model(*model, "ckpt/model.safetensors", {.metadata = {{"step", "1000"}}});
//   Checkpoint ckpt = Checkpoint::open("ckpt/model.safetensors");
//   ModelLoadReport r = load_model(*other_model, ckpt, {.convert_dtypes = true});
#pragma once

#include <map>
#include <string>
#include <vector>

#include "meshlayout/io/array_io.h"
#include "meshlayout/nn/model.h"

namespace meshlayout {

enum class VariablePathStyle {
  kObject,  // Keras 2: "d1.kernel" (Variable::object_path(), the LayoutMap::scope() key)
  kScope,   // Keras 3: "my_model/d1/kernel" (Variable::path())
};

struct ModelSaveOptions {
  VariablePathStyle path_style = VariablePathStyle::kObject;
  /// Variable path → tensor name in the file; variables not listed keep their path.
  std::map<std::string, std::string> name_map;
  std::map<std::string, std::string> metadata;  // the header's __metadata__
  ProgressFn progress;
};

struct ModelLoadOptions {
  VariablePathStyle path_style = VariablePathStyle::kObject;
  /// Variable path → tensor name in the checkpoint; variables not listed use their path.
  std::map<std::string, std::string> name_map;
  /// Variables the checkpoint lacks keep their current values (listed in the report).
  bool allow_missing = false;
  /// Tensors no variable takes are ignored (listed in the report).
  bool allow_unexpected = false;
  bool convert_dtypes = false;  // F32/F64/BF16/F16 into the variable's dtype
  ProgressFn progress;
};

struct ModelLoadReport {
  size_t loaded = 0;                    // variables filled from the checkpoint
  std::vector<std::string> missing;     // variable paths left as they were (allow_missing)
  std::vector<std::string> unexpected;  // checkpoint tensors ignored (allow_unexpected)
  LoadReport io;
};

/// The name each of the model's variables has in a checkpoint under `style` and `name_map`,
/// in variable order (each variable once). FailedPreconditionError naming a variable with no
/// path yet (a subclassed model not built).
std::vector<std::pair<VariablePtr, std::string>> checkpoint_names(
    const Model& model, VariablePathStyle style,
    const std::map<std::string, std::string>& name_map = {});

/// Saves every variable of `model` to `path` (one safetensors file, written atomically).
/// Collective. The variables must be materialised (FailedPreconditionError naming the first
/// lazy one); two variables given the same name are a ValueError naming both.
SaveReport save_model(const Model& model, const std::string& path,
                      const ModelSaveOptions& options = {});

/// Fills the model's variables from `checkpoint`, each in its own layout. Collective.
ModelLoadReport load_model(Model& model, const Checkpoint& checkpoint,
                           const ModelLoadOptions& options = {});

}  // namespace meshlayout
