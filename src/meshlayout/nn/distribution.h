// distribution.h — Keras 3's keras.distribution API: DataParallel, ModelParallel, the
// distribution scope and set_distribution().
//
//   DataParallel(mesh)     variables replicated; inputs split on the batch dimension
//   ModelParallel(map)     variable layout: map[variable.path()] (Keras 3 scope paths such as
//                          "sequential/d1/kernel"), else replicated; "<layer path>/output" keys
//                          relayout layer outputs; inputs split on batch_dim_name
// A model records the distribution current when it is constructed (a scope on this thread,
// else the global one from set_distribution()); its variables are then created lazily and
// materialised with these layouts, as under LayoutMap::scope(). A layer built outside any model
// under a distribution (its first call, symbolic or concrete, call_on or build_standalone)
// takes these layouts when it is built, as Keras 3 creates its variables.
//
// Example:
//   LayoutMap layout_map(mesh);
//   layout_map["d1/kernel"] = {None, "model"};
//   auto distribution = std::make_shared<ModelParallel>(layout_map, "data");
//   { DistributionScope scope = distribution->scope(); model = build_model(); }
//   Tensor y = (*model)(distribution->distribute_input(batch));
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshlayout/io/safetensors_file.h"
#include "meshlayout/layout_map/layout_map.h"
#include "meshlayout/nn/variable.h"

namespace meshlayout {

class DistributionScope;

/// Rows [begin, end) of a dataset.
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
  bool operator==(const RowRange&) const = default;
};

/// Keras 3.15 data sharding arithmetic (keras-semantics §A.4, §A.10), pure functions of the
/// replica count R, the process count P and the process id:
///   num_data_shards = min(R, P); data_shard_id = pid if R >= P, else pid / (P / R).
int64_t num_data_shards(int64_t num_model_replicas, int64_t num_processes);
int64_t data_shard_id(int64_t num_model_replicas, int64_t num_processes, int64_t process_id);
/// The rows of an in-memory dataset of `num_rows` rows, read in global batches of
/// `global_batch_size`, that process `process_id` reads (tf.data rebatch(g / S).shard(S, id)
/// with S = num_data_shards): one range per global batch, [k*g + id*g/S, k*g + (id+1)*g/S)
/// clipped to the dataset (possibly empty in the last batch). One process, one replica, or
/// `auto_shard` false: every row. ValueError (Keras' message) if g is not divisible by S, and
/// for g < 1 or num_rows < 0.
std::vector<RowRange> process_rows(int64_t num_rows, int64_t global_batch_size,
                                   int64_t num_model_replicas, int64_t num_processes,
                                   int64_t process_id, bool auto_shard = true);

class Distribution : public std::enable_shared_from_this<Distribution> {
 public:
  virtual ~Distribution() = default;
  const DeviceMesh& device_mesh() const { return mesh_; }
  const std::string& batch_dim_name() const { return batch_dim_name_; }
  bool auto_shard_dataset() const { return auto_shard_dataset_; }
  void set_auto_shard_dataset(bool value) { auto_shard_dataset_ = value; }

  /// This process and the process count (of default_runtime(); 0 and 1 in one process).
  int process_id() const;
  int num_processes() const;
  /// How many copies of the model the batch is split over (DataParallel: every device of the
  /// mesh; ModelParallel: the size of the batch axis).
  virtual int64_t num_model_replicas() const = 0;
  /// min(num_model_replicas, num_processes).
  int64_t num_data_shards() const;
  /// The shard this process reads: process_id, or process_id / (processes / replicas) when
  /// there are more processes than replicas (contiguous process groups share a shard).
  int64_t data_shard_id() const;

  /// The layout of an input batch: dimension 0 split over batch_dim_name, the rest whole.
  TensorLayout get_data_layout(const Shape& data_shape) const;
  /// The layout a variable is materialised with: its explicit layout (with this mesh if it
  /// has none) first; then (ModelParallel) map[variable.path()]; else replicated.
  virtual TensorLayout get_variable_layout(const Variable& variable) const;
  /// The layout of an intermediate tensor such as "d1/output", if the distribution has one.
  virtual std::optional<TensorLayout> get_tensor_layout(std::string_view path) const;
  /// A host batch laid out by get_data_layout().
  Array distribute_input(const HostTensor& batch, std::shared_ptr<Runtime> runtime = nullptr) const;
  /// Keras distribute_dataset for an in-memory array: this process's part of each global batch
  /// of `global_batch_size` rows (process_rows()), copying only those rows. ValueError (Keras'
  /// message) if the batch is not divisible by num_data_shards(), before anything is copied.
  std::vector<HostTensor> distribute_dataset(const HostTensor& data,
                                             int64_t global_batch_size) const;
  /// The same rows of tensor `name` of a checkpoint (a dataset on disk): this process reads
  /// only its rows of each batch, straight from the file, and nothing else. NotFoundError naming
  /// the tensor if the checkpoint lacks it; ValueError for a scalar or a dtype meshlayout
  /// cannot hold, or Keras' divisibility error, before anything is read.
  std::vector<HostTensor> distribute_dataset(const Checkpoint& dataset, std::string_view name,
                                             int64_t global_batch_size) const;

  /// The rows [begin, end) of one global batch of `global_batch_size` rows that this process
  /// feeds (Keras' rule, as distribute_dataset: the whole batch with one process or one replica).
  RowRange process_batch_rows(int64_t global_batch_size) const;
  /// This process's rows of a global batch (process_batch_rows, e.g. one element of
  /// distribute_dataset()) → the global batch (global_batch_size, …) laid out by
  /// get_data_layout, each device taking its rows from `local`
  /// (jax.make_array_from_process_local_data, as Keras' JAX backend feeds a batch). Collective.
  /// ValueError if `local` has another number of rows, or if a device of this process needs a
  /// row outside them (a mesh whose batch axis does not follow the processes as Keras assumes),
  /// naming the device and the rows.
  Array distribute_process_batch(const HostTensor& local, int64_t global_batch_size,
                                 std::shared_ptr<Runtime> runtime = nullptr) const;

  /// Makes this distribution current on this thread while the scope lives.
  DistributionScope scope() const;

 protected:
  Distribution(DeviceMesh mesh, std::string batch_dim_name, bool auto_shard_dataset);
  DeviceMesh mesh_;
  std::string batch_dim_name_;
  bool auto_shard_dataset_ = true;
};

/// keras.distribution.DataParallel(device_mesh=None, devices=None).
class DataParallel : public Distribution {
 public:
  /// Without a mesh: a 1-D mesh named "batch" over `devices` (default list_devices()).
  explicit DataParallel(std::optional<DeviceMesh> device_mesh = std::nullopt,
                        std::optional<std::vector<std::string>> devices = std::nullopt,
                        bool auto_shard_dataset = true);
  /// Every device of the mesh, whatever its rank.
  int64_t num_model_replicas() const override { return mesh_.size(); }
};

/// keras.distribution.ModelParallel(layout_map=…, batch_dim_name=None).
class ModelParallel : public Distribution {
 public:
  /// The mesh is the map's (ValueError if it has none); batch_dim_name defaults to the mesh's
  /// first axis (ValueError if the mesh has no such axis). Under several processes, more
  /// processes than replicas must be a multiple of them (ValueError in Keras' words).
  explicit ModelParallel(LayoutMap layout_map,
                         std::optional<std::string> batch_dim_name = std::nullopt,
                         bool auto_shard_dataset = true);
  const LayoutMap& layout_map() const { return layout_map_; }
  /// The size of the batch axis.
  int64_t num_model_replicas() const override;
  TensorLayout get_variable_layout(const Variable& variable) const override;
  std::optional<TensorLayout> get_tensor_layout(std::string_view path) const override;

 private:
  LayoutMap layout_map_;
};

/// RAII: the current distribution of this thread while it lives (scopes nest).
class [[nodiscard]] DistributionScope {
 public:
  explicit DistributionScope(std::shared_ptr<const Distribution> distribution);
  DistributionScope(DistributionScope&& other) noexcept;
  DistributionScope(const DistributionScope&) = delete;
  DistributionScope& operator=(const DistributionScope&) = delete;
  DistributionScope& operator=(DistributionScope&&) = delete;
  ~DistributionScope();

 private:
  std::shared_ptr<const Distribution> previous_;
  bool active_ = true;
};

/// keras.distribution.distribution(): the scope's distribution, else the global one, else null.
std::shared_ptr<const Distribution> distribution();
/// keras.distribution.set_distribution(); nullptr clears it.
void set_distribution(std::shared_ptr<const Distribution> distribution);

}  // namespace meshlayout
