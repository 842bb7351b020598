// array.h — Array: a tensor distributed over the devices of a mesh, one shard per local
// device (mesh devices owned by other processes hold theirs there), and distribute_tensor.
//
// distribute_tensor(host, layout) gives each device its box of a host tensor (no copy of
// the whole tensor is made on any device). distribute_tensor(array, layout) reshards: see
// reshard_plan.h for how the bytes are chosen and reshard.h for how they move. gather() is a
// collective that returns the whole tensor in every process.
//
// Example:
//   DeviceMesh mesh({2, 4}, {"data", "model"});
//   HostTensor x = HostTensor::random(DType::kF32, {8, 6}, 1);
//   Array a = distribute_tensor(x, TensorLayout({"data", None}, mesh));
//   Array b = distribute_tensor(a, TensorLayout({None, "model"}, mesh));   // reshard
//   b.gather() == x;
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "meshlayout/array/host_tensor.h"
#include "meshlayout/array/reshard_plan.h"
#include "meshlayout/layout/shard_geometry.h"
#include "meshlayout/runtime/runtime.h"

namespace meshlayout {

class Array {
 public:
  struct Shard {
    int64_t position;   // in the mesh
    int64_t device_id;  // global
    Box box;
    DeviceBuffer buffer;  // row-major bytes of `box`, charged to the device
  };

  /// Allocates (uninitialised) the local shards of a tensor of `shape` under `layout`, whose
  /// mesh must use only devices of `runtime`. ValueError naming the tensor, shape and layout
  /// otherwise (rank, strict divisibility, unknown devices).
  static Array allocate(const TensorLayout& layout, Shape shape, DType dtype,
                        std::shared_ptr<Runtime> runtime = nullptr,
                        const GeometryOptions& options = {});

  /// An array of `geometry` made of the given local shards (one per local device of the mesh,
  /// each holding its box): array_view.h's reshapes. ValueError if a shard's box is not the
  /// geometry's box at its position.
  static Array from_shards(ShardGeometry geometry, DType dtype, std::shared_ptr<Runtime> runtime,
                           std::vector<Shard> shards);

  /// Move-only: shards own device memory. Copy with distribute_tensor(a, a.layout()).
  Array(Array&&) = default;
  Array& operator=(Array&&) = default;
  Array(const Array&) = delete;
  Array& operator=(const Array&) = delete;

  const Shape& shape() const { return geometry_.shape(); }
  DType dtype() const { return dtype_; }
  const TensorLayout& layout() const { return geometry_.layout(); }
  const DeviceMesh& mesh() const { return geometry_.mesh(); }
  const ShardGeometry& geometry() const { return geometry_; }
  Runtime& runtime() const { return *runtime_; }
  const std::shared_ptr<Runtime>& runtime_ptr() const { return runtime_; }

  std::vector<Shard>& local_shards() { return shards_; }
  const std::vector<Shard>& local_shards() const { return shards_; }
  /// The local shard at mesh `position`, or nullptr if another process holds it.
  const Shard* shard_at(int64_t position) const;
  Shard* shard_at(int64_t position);
  /// Bytes of all local shards.
  int64_t local_bytes() const;

  /// The whole tensor, in every process (a collective under several processes).
  HostTensor gather() const;

 private:
  Array(ShardGeometry geometry, DType dtype, std::shared_ptr<Runtime> runtime)
      : geometry_(std::move(geometry)), dtype_(dtype), runtime_(std::move(runtime)) {}
  ShardGeometry geometry_;
  DType dtype_;
  std::shared_ptr<Runtime> runtime_;
  std::vector<Shard> shards_;
  std::vector<int64_t> shard_index_;  // mesh position → index in shards_, or -1
};

struct DistributeOptions {
  std::shared_ptr<Runtime> runtime;  // default_runtime() when null
  bool strict = false;               // refuse uneven splits
};

/// NOTE [Reshard memory]: during a reshard a device holds its source shard and its target
/// shard, nothing more: pieces move straight from source shards into target shards, within a
/// process by copy_box and between processes by Communicator::exchange_boxes, so meshlayout
/// stages 0 bytes. (Open MPI packs non-contiguous pieces through its own fixed-size
/// shared-memory fragments; that memory is MPI's and does not grow with the tensor.)
struct ReshardOptions {
  bool strict = false;
  /// Testing: this process fails (as an I/O error would) before the data moves.
  std::optional<int> inject_failure_on_process;
  /// When set, receives the plan that was executed.
  ReshardPlan* plan_out = nullptr;
};

/// Host tensor → distributed Array under `layout` (keras.distribution.distribute_tensor).
Array distribute_tensor(const HostTensor& tensor, const TensorLayout& layout,
                        const DistributeOptions& options = {});

/// Array → a new Array under `layout`, moving the least data (a reshard).
Array distribute_tensor(const Array& array, const TensorLayout& layout,
                        const ReshardOptions& options = {});

/// Reshards `src` into the already allocated `dst` (same shape and dtype; ValueError naming
/// both otherwise).
void reshard_into(const Array& src, Array& dst, const ReshardOptions& options = {});

/// Array::allocate on every process of `runtime`, agreeing on a local failure (out of memory)
/// before going on, so no process is left waiting in a later collective (DESIGN §4): every
/// process throws the same error, or none does. Collective.
Array allocate_agreed(const TensorLayout& layout, const Shape& shape, DType dtype,
                      const std::shared_ptr<Runtime>& runtime, const GeometryOptions& options = {});

/// The plan distribute_tensor(array, layout) would execute, without moving anything.
ReshardPlan plan_distribute(const Array& array, const TensorLayout& layout, bool strict = false);

}  // namespace meshlayout
