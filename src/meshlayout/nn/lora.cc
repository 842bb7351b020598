#include "meshlayout/nn/lora.h"

#include <fmt/format.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/kernels/memory.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/distribution.h"
#include "meshlayout/nn/layer.h"
#include "meshlayout/ops/elementwise.h"
#include "meshlayout/ops/matmul.h"
#include "meshlayout/ops/matmul_backward.h"

namespace meshlayout {

void scale_in_place(Array& a, double factor) {
  const DeviceKind kind = kind_of(a);
  a.runtime().pool().parallel_for(a.local_shards().size(), [&](size_t i) {
    scale_shard(kind, {.shard = &a.local_shards()[i], .dtype = a.dtype(), .factor = factor});
  });
}

Array lora_effective_kernel(const Array& kernel, const LoraWeights& lora) {
  Array delta = matmul(lora.a->value(), lora.b->value());
  scale_in_place(delta, lora.scale());
  return add(kernel, delta);
}

void accumulate_lora_gradients(const Array& dk, const LoraWeights& lora, Gradients& grads) {
  const Array& a = lora.a->value();
  const Array& b = lora.b->value();
  if (lora.a->trainable()) {  // d(A@B)/dA: dk · Bᵀ
    Array da = matmul_backward_input(dk, b, a.layout());
    scale_in_place(da, lora.scale());
    grads.accumulate(*lora.a, std::move(da));
  }
  if (lora.b->trainable()) {  // Aᵀ · dk, summed over A's leading dimensions
    Array db = matmul_backward_weight(a, dk, b.layout());
    scale_in_place(db, lora.scale());
    grads.accumulate(*lora.b, std::move(db));
  }
}

LoraWeights Layer::add_lora_weights(const VariablePtr& kernel, const LoraWeights& current,
                                    int64_t rank, std::optional<double> lora_alpha,
                                    const Initializer& a_initializer,
                                    const Initializer& b_initializer,
                                    const std::optional<Regularizer>& regularizer) {
  if (!kernel) {
    throw ValueError(
        fmt::format("enable_lora on layer {}: the layer must be built first (Keras: "
                    "\"Cannot enable lora on a layer that isn't yet built\")",
                    quote(name())));
  }
  if (current.enabled()) {
    throw ValueError(
        fmt::format("enable_lora on layer {}: LoRA is already enabled", quote(name())));
  }
  if (rank < 1) {
    throw ValueError(
        fmt::format("enable_lora on layer {}: rank must be >= 1, got {}", quote(name()), rank));
  }
  NameScope scope = open_name_scope();
  Shape a_shape(kernel->shape().begin(), kernel->shape().end() - 1);
  a_shape.push_back(rank);
  const Shape b_shape{rank, kernel->shape().back()};
  LoraWeights out;
  out.rank = rank;
  out.alpha = lora_alpha.value_or(static_cast<double>(rank));
  if (kernel->is_lazy()) {  // materialised with the model's rules, as the kernel will be
    out.a = add_weight({.name = "lora_kernel_a",
                        .shape = a_shape,
                        .initializer = a_initializer,
                        .regularizer = regularizer});
    out.b = add_weight({.name = "lora_kernel_b",
                        .shape = b_shape,
                        .initializer = b_initializer,
                        .regularizer = regularizer});
  } else {  // after the model: laid out now, by the current rules or replicated on the kernel's
            // mesh
    const std::string& kernel_path = kernel->path();
    const std::string prefix = kernel_path.substr(0, kernel_path.size() - kernel->name().size());
    const DeviceMesh mesh = kernel->value().mesh();
    const auto layout_of = [&](const std::string& path, const Shape& shape) {
      std::optional<TensorLayout> l;
      if (auto d = distribution()) {
        if (auto mp = std::dynamic_pointer_cast<const ModelParallel>(d)) l = mp->layout_map()[path];
      } else if (const LayoutMap* map = current_layout_map()) {
        l = (*map)[path];
      }
      TensorLayout layout = l.value_or(TensorLayout::replicated(static_cast<int>(shape.size())));
      if (!layout.device_mesh()) layout.set_device_mesh(mesh);
      return layout;
    };
    for (auto [var, name, shape, init] :
         {std::tuple{&out.a, "lora_kernel_a", a_shape, &a_initializer},
          std::tuple{&out.b, "lora_kernel_b", b_shape, &b_initializer}}) {
      const TensorLayout layout = layout_of(prefix + name, shape);
      *var = add_weight({.name = name,
                         .shape = shape,
                         .initializer = *init,
                         .regularizer = regularizer,
                         .layout = layout});
      if ((*var)->is_lazy()) (*var)->materialize(layout);
    }
  }
  kernel->set_trainable(false);
  return out;
}

}  // namespace meshlayout
