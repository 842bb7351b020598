// meshlayout.h — the umbrella header: everything a program using meshlayout as a library
// needs (meshes, layouts, LayoutMap and its scope, arrays and distribute_tensor, checkpoints,
// the nn layers and models). The MPI runtime is separate: meshlayout/runtime/mpi/initialize.h,
// linked with meshlayout::mpi.
//
// Example (CMake: find_package(meshlayout CONFIG REQUIRED), link meshlayout::meshlayout):
//   #include <meshlayout/meshlayout.h>
//   meshlayout::LayoutMap layout_map(meshlayout::DeviceMesh({2, 4}, {"batch", "model"}));
//   layout_map["dense.*kernel"] = {meshlayout::None, "model"};
//   layout_map["dense_1.kernel"];     // layout[None,model]@mesh[batch=2,model=4]
#pragma once

#include "meshlayout/array/array.h"
#include "meshlayout/array/host_tensor.h"
#include "meshlayout/core/dtype.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/core/shape.h"
#include "meshlayout/init/initializers.h"
#include "meshlayout/io/array_io.h"
#include "meshlayout/io/safetensors_file.h"
#include "meshlayout/layout/device_mesh.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout/shard_geometry.h"
#include "meshlayout/layout/tensor_layout.h"
#include "meshlayout/layout_map/layout_map.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/layout_map/rules_file.h"
#include "meshlayout/nn/layers/core/dense.h"
#include "meshlayout/nn/model.h"
#include "meshlayout/nn/model_checkpoint.h"
#include "meshlayout/ops/matmul.h"
#include "meshlayout/runtime/runtime.h"
