// allocation_replay.h — (internal to plan/) byte counters that replay what the ops allocate,
// per device, without allocating: a Sym is an array's layout and shape and the bytes it holds
// (freed when its last copy goes, as C++ scopes free arrays), and the functions below mirror
// the ops of the same name (ops/matmul.h and matmul_backward.h with matmul_plan's reshards and
// partial sums, RMSNormalization, SwiGLU, the in-place add). step_memory.cc replays a decoder's
// training step with them.
//
// Example:
//   replay::Replay r(mesh, /*element_size=*/4);
//   replay::Sym x = r.alloc(TensorLayout({"batch", None, None}, mesh), {8, 128, 512});
//   replay::Sym w{TensorLayout({None, "model"}, mesh), {512, 2048}};   // a weight: no bytes
//   { replay::Sym y = replay::matmul(r, x, w); }                       // charged, then freed
//   r.result().peak[0];
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "meshlayout/layout/device_mesh.h"
#include "meshlayout/layout/shard_geometry.h"
#include "meshlayout/layout/tensor_layout.h"
#include "meshlayout/ops/matmul_plan.h"
#include "meshlayout/plan/step_memory.h"

namespace meshlayout::replay {

using PerDevice = std::vector<uint64_t>;

class Replay;

// Bytes held until the last Sym sharing them goes.
struct Hold {
  Hold() = default;
  Hold(const Hold&) = delete;
  Hold& operator=(const Hold&) = delete;
  Replay* replay = nullptr;
  PerDevice bytes;
  bool gradient = false;
  ~Hold();
};

// A symbolic array: its layout and shape, and the bytes it holds (none for a weight or a view).
struct Sym {
  TensorLayout layout = TensorLayout::replicated(0);
  Shape shape;
  std::shared_ptr<Hold> hold;
};

class Replay {
 public:
  Replay(const DeviceMesh& mesh, size_t element_size)
      : mesh_(mesh),
        es_(element_size),
        n_(static_cast<size_t>(mesh.size())),
        live_(n_),
        grads_(n_),
        peak_(n_),
        grads_at_peak_(n_),
        reshard_(n_) {}

  const DeviceMesh& mesh() const { return mesh_; }
  size_t element_size() const { return es_; }
  DType dtype() const { return es_ == 8 ? DType::kF64 : DType::kF32; }
  std::string phase;

  /// Each device's bytes of an array (computed once per layout and shape: a decoder's blocks
  /// repeat the same arrays, and a mesh may have 16,384 devices).
  PerDevice bytes_of(const TensorLayout& layout, const Shape& shape) {
    auto [it, added] = bytes_cache_.try_emplace(cache_key(layout, shape));
    if (added) {
      const ShardGeometry g(layout, shape);
      it->second.resize(n_);
      for (size_t p = 0; p < n_; ++p) {
        it->second[p] = static_cast<uint64_t>(g.box(static_cast<int64_t>(p)).num_elements()) * es_;
      }
    }
    return it->second;
  }
  /// The replay's functions' results memoized by a key of their arguments (cache_key): the
  /// plans of matmul and the bytes of partials.
  std::map<std::string, MatmulPlan> matmul_plans;
  std::map<std::string, PerDevice> partial_bytes;
  static std::string cache_key(const TensorLayout& layout, const Shape& shape) {
    return fmt::format("{}({})", layout.to_string(), fmt::join(shape, ","));
  }
  Sym alloc(const TensorLayout& layout, const Shape& shape) {
    return Sym{layout, shape, charge(bytes_of(layout, shape))};
  }
  std::shared_ptr<Hold> charge(PerDevice bytes) {
    for (size_t p = 0; p < n_; ++p) {
      live_[p] += bytes[p];
      if (live_[p] > peak_[p]) {
        peak_[p] = live_[p];
        grads_at_peak_[p] = grads_[p];
        if (p == 0) peak_phase_ = phase;
      }
    }
    auto hold = std::make_shared<Hold>();  // made in place: a copy would release twice
    hold->replay = this;
    hold->bytes = std::move(bytes);
    return hold;
  }
  void release(const Hold& h) {
    for (size_t p = 0; p < n_; ++p) {
      live_[p] -= h.bytes[p];
      if (h.gradient) grads_[p] -= h.bytes[p];
    }
  }
  // distribute_tensor: the target shard, unless the layout is the same.
  Sym reshard(const Sym& a, const TensorLayout& layout, const std::string& what = "") {
    if (a.layout == layout) return a;
    Sym out = alloc(layout, a.shape);
    for (size_t p = 0; p < n_; ++p) {
      if (out.hold->bytes[p] > reshard_[p]) {
        reshard_[p] = out.hold->bytes[p];
        if (p == 0)
          reshard_text_ = fmt::format("{} to {}", what.empty() ? "an activation" : what,
                                      TensorLayout(layout.axes()).to_string());
      }
    }
    return out;
  }
  // Gradients::accumulate: the first gradient of a variable is kept, a second added into it.
  void gradient(const std::string& variable, Sym g) {
    if (kept_.count(variable) != 0 || !g.hold) return;
    g.hold->gradient = true;
    for (size_t p = 0; p < n_; ++p) grads_[p] += g.hold->bytes[p];
    kept_[variable] = std::move(g);
  }

  StepMemory result() const {
    return StepMemory{peak_, grads_at_peak_, reshard_, reshard_text_, peak_phase_};
  }

 private:
  DeviceMesh mesh_;
  size_t es_, n_;
  PerDevice live_, grads_, peak_, grads_at_peak_, reshard_;
  std::string peak_phase_, reshard_text_;
  std::map<std::string, Sym> kept_;
  std::map<std::string, PerDevice> bytes_cache_;
};

/// x (…, K) @ w (K, N) as matmul runs it: operand reshards, the partial sums of a split K, the
/// output (a reshard of the product when the plan says so). `what` names the weight for
/// StepMemory::largest_reshard_text.
Sym matmul(Replay& r, const Sym& x, const Sym& w, std::optional<TensorLayout> output = {},
           const std::string& what = "");
/// The partial sums of a contraction split over K (allocate_local_partials: one product block
/// per distinct K block and product block, on the first device holding it).
std::shared_ptr<Hold> partials(Replay& r, const TensorLayout& product, const Shape& shape,
                               const TensorLayout& x_layout, const Shape& x_shape);
/// a (…, C) read as rows (M, C): a view.
Sym as_rows(const Sym& a);
Sym transpose(Replay& r, const Sym& m);
Sym matmul_backward_input(Replay& r, const Sym& dy, const Sym& w, const TensorLayout& x_layout);
Sym matmul_backward_weight(Replay& r, const Sym& x, const Sym& dy, const TensorLayout& w_layout);
/// The layout with its last dimension whole.
TensorLayout whole_rows(const TensorLayout& l);
Sym rms(Replay& r, const Sym& x);
/// dx; the scale's gradient goes to `scale` (a key naming the variable).
Sym rms_backward(Replay& r, const Sym& x, const Sym& dy, const std::string& scale);
/// add(Array&&, b): into a (b moved to a's layout first).
Sym add_into(Replay& r, Sym a, const Sym& b);
Sym swiglu(Replay& r, const Sym& g, const Sym& u);

}  // namespace meshlayout::replay
