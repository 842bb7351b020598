// step_memory.cc — see step_memory.h. Each function below mirrors the op or layer of the same
// name (ops/, nn/layers/, models/llama.cc): what it allocates, in which layout, and when each
// array is freed (C++ scopes: a Sym frees its bytes when its last copy goes).
#include "meshlayout/plan/step_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>

#include "meshlayout/layout/shard_geometry.h"
#include "meshlayout/ops/attention.h"
#include "meshlayout/plan/allocation_replay.h"
#include "meshlayout/plan/moe_replay.h"

namespace meshlayout {
namespace {

using replay::add_into;
using replay::Hold;
using replay::matmul;
using replay::matmul_backward_input;
using replay::matmul_backward_weight;
using replay::PerDevice;
using replay::Replay;
using replay::rms;
using replay::rms_backward;
using replay::swiglu;
using replay::Sym;
using replay::transpose;
using replay::whole_rows;

// The decoder's weights and the layouts its ops see them in.
struct Weights {
  Sym query, key, value, output, gate, up, down, table, reverse;  // kernels as (k, n) matrices
  TensorLayout table_layout = TensorLayout::replicated(0);
};

// The sharding of dimensions (a, b) read as one of size n·…: a's when b is whole and a splits
// n evenly (reshaped_view's view); else whole.
DimSharding merged(const DimSharding& a, const DimSharding& b, int64_t n, const DeviceMesh& mesh) {
  if (b.is_sharded()) return DimSharding();
  int64_t k = 1;
  for (const std::string& axis : a.axes()) k *= mesh.axis_size(axis);
  return n % k == 0 ? a : DimSharding();
}

TensorLayout rule(const LayoutMap& map, const std::string& path, int rank, const DeviceMesh& mesh) {
  if (path.empty()) return TensorLayout::replicated(rank, mesh);
  const std::optional<TensorLayout> l = map.get(path);
  if (!l || l->rank() != rank) return TensorLayout::replicated(rank, mesh);
  return TensorLayout(l->axes(), mesh);
}

Weights weights_of(const DecoderShapes& s, const LayoutMap& map, const DeviceMesh& mesh) {
  const auto heads_kernel = [&](const std::string& path, int64_t heads) {
    const TensorLayout l = rule(map, path, 3, mesh);
    const auto& a = l.axes();
    const DimSharding& in = s.kernel_heads_first ? a[1] : a[0];
    const DimSharding& h = s.kernel_heads_first ? a[0] : a[1];
    return Sym{TensorLayout({in, merged(h, a[2], heads, mesh)}, mesh),
               {s.hidden, heads * s.head_dim}};
  };
  const TensorLayout o = rule(map, s.output, 3, mesh);
  Weights w{.query = heads_kernel(s.query, s.heads),
            .key = heads_kernel(s.key, s.kv_heads),
            .value = heads_kernel(s.value, s.kv_heads),
            .output = Sym{TensorLayout(
                              {merged(o.axes()[0], o.axes()[1], s.heads, mesh), o.axes()[2]}, mesh),
                          {s.heads * s.head_dim, s.hidden}},
            .gate = Sym{rule(map, s.gate, 2, mesh), {s.hidden, s.intermediate}},
            .up = Sym{rule(map, s.up, 2, mesh), {s.hidden, s.intermediate}},
            .down = Sym{rule(map, s.down, 2, mesh), {s.intermediate, s.hidden}},
            .table = Sym{rule(map, s.embeddings, 2, mesh), {s.vocab, s.hidden}},
            .table_layout = rule(map, s.embeddings, 2, mesh)};
  if (!s.reverse.empty()) w.reverse = Sym{rule(map, s.reverse, 2, mesh), {s.hidden, s.vocab}};
  return w;
}

// (B, T, H·D) as (B, T, H, D): a view when the split of H·D is one of H.
Sym heads_view(Replay& r, const Sym& x, int64_t heads, int64_t head_dim) {
  const auto& a = x.layout.axes();
  const DimSharding h = merged(a[2], DimSharding(), heads, r.mesh());
  const TensorLayout l({a[0], a[1], h, None}, r.mesh());
  const Shape shape{x.shape[0], x.shape[1], heads, head_dim};
  if (h == a[2]) return Sym{l, shape, x.hold};
  return r.alloc(l, shape);
}
Sym flat_view(const Sym& x) {
  const auto& a = x.layout.axes();
  return Sym{TensorLayout({a[0], a[1], a[2]}, x.layout.device_mesh()),
             {x.shape[0], x.shape[1], x.shape[2] * x.shape[3]},
             x.hold};
}

// apply_rotary_embedding(Array&&): in place when the head dimension is whole.
Sym rope(Replay& r, Sym x) {
  if (!x.layout.axes()[3].is_sharded()) return x;
  return r.reshard(x, whole_rows(x.layout));
}

struct Qkv {
  Sym q, k, v, q_projected, k_projected;
};

Qkv project_qkv(Replay& r, const DecoderShapes& s, const Weights& w, const Sym& n) {
  Qkv out;
  out.q = heads_view(r, matmul(r, n, w.query, {}, s.query), s.heads, s.head_dim);
  out.k = heads_view(r, matmul(r, n, w.key, {}, s.key), s.kv_heads, s.head_dim);
  if (s.qk_norm) {
    out.q_projected = out.q;
    out.k_projected = out.k;
    out.q = rms(r, out.q_projected);
    out.k = rms(r, out.k_projected);
  }
  out.v = heads_view(r, matmul(r, n, w.value, {}, s.value), s.kv_heads, s.head_dim);
  out.q = rope(r, out.q);
  out.k = rope(r, out.k);
  return out;
}

TensorLayout q_layout_of(const Sym& q) {
  const auto& a = q.layout.axes();
  return TensorLayout({a[0], None, a[2], None}, q.layout.device_mesh());
}

Sym attention(Replay& r, const DecoderShapes& s, const Qkv& x) {
  const TensorLayout ql = q_layout_of(x.q);
  const TensorLayout kvl = attention_kv_layout(ql, s.heads, s.kv_heads);
  const Sym q = r.reshard(x.q, ql), k = r.reshard(x.k, kvl), v = r.reshard(x.v, kvl);
  return r.alloc(ql, x.q.shape);
}

struct AttentionGrads {
  Sym dq, dk, dv;
};

AttentionGrads attention_backward(Replay& r, const DecoderShapes& s, const Qkv& x, const Sym& d_o) {
  const TensorLayout ql = q_layout_of(x.q);
  bool heads_replicated = false;
  const TensorLayout kvl = attention_kv_layout(ql, s.heads, s.kv_heads, &heads_replicated);
  const Sym q = r.reshard(x.q, ql), d = r.reshard(d_o, ql), k = r.reshard(x.k, kvl),
            v = r.reshard(x.v, kvl);
  AttentionGrads g{.dq = r.alloc(ql, x.q.shape)};
  if (heads_replicated) {  // partial sums over the head axes, then complete
    const Sym pk = r.alloc(kvl, x.k.shape), pv = r.alloc(kvl, x.v.shape);
    g.dk = r.alloc(kvl, x.k.shape);
    g.dv = r.alloc(kvl, x.v.shape);
  } else {
    g.dk = r.alloc(kvl, x.k.shape);
    g.dv = r.alloc(kvl, x.v.shape);
  }
  return g;
}

// EinsumDense::backward of a (B, T, d) → (B, T, H, D) projection: its kernel's gradient and
// dL/dx.
Sym projection_backward(Replay& r, const Sym& x, const Sym& dy, const Sym& w,
                        const std::string& kernel) {
  const Sym dz = flat_view(dy);
  r.gradient(kernel, matmul_backward_weight(r, x, dz, w.layout));
  return matmul_backward_input(r, dz, w, x.layout);
}

struct Saved {
  std::optional<Sym> h, gate, up, n, m;
  std::shared_ptr<Hold> experts;  // a mixture of experts' saved activations (the hook's)
  replay::MoeSaved moe;           // … or the replayed sparse block's (its router's choice)
  std::optional<Qkv> qkv;
  std::optional<Sym> o;
};

std::string block_path(const DecoderShapes& s, int64_t i, const std::string& block0_path) {
  const std::string zero = s.block_prefix + "0/";
  if (!block0_path.starts_with(zero)) return block0_path;
  return s.block_prefix + std::to_string(i) + "/" + block0_path.substr(zero.size());
}

// The hook's bytes of a mixture-of-experts feed-forward (saved per block or working), zero
// without a hook.
PerDevice expert_bytes(Replay& r, const DecoderShapes& s, const Sym& h, bool saved) {
  PerDevice out(static_cast<size_t>(r.mesh().size()));
  if (!s.expert_activations) return out;
  for (size_t p = 0; p < out.size(); ++p) {
    const ExpertActivationBytes e =
        s.expert_activations(h.shape[0], h.shape[1], static_cast<int64_t>(p));
    out[p] = saved ? e.saved_per_block : e.working;
  }
  return out;
}

// LlamaDecoderLayer::forward_for_training.
Sym block_forward(Replay& r, const DecoderShapes& s, const Weights& w, const Sym& x, Saved& saved,
                  Recompute recompute, bool experts, const replay::MoeWeights* moe) {
  {
    const Sym n = rms(r, x);
    const Qkv qkv = project_qkv(r, s, w, n);
    const Sym o = attention(r, s, qkv);
    saved.h = matmul(r, flat_view(o), w.output, {}, s.output);  // the residual fused
    if (recompute == Recompute::kNone) saved.n = n, saved.qkv = qkv, saved.o = o;
  }
  const Sym m = rms(r, *saved.h);
  if (moe) {  // SparseMoe::forward, its output added into h
    if (recompute == Recompute::kNone) saved.m = m;
    return add_into(r, replay::moe_forward(r, s, *moe, m, saved.moe), *saved.h);
  }
  if (experts) {  // a mixture of experts: the hook's bytes, or nothing (a note says so)
    const PerDevice bytes = expert_bytes(r, s, *saved.h, /*saved=*/true);
    if (recompute == Recompute::kNone) saved.m = m;
    saved.experts = r.charge(bytes);
    return add_into(r, r.alloc(saved.h->layout, saved.h->shape), *saved.h);
  }
  saved.gate = matmul(r, m, w.gate, {}, s.gate);
  saved.up = matmul(r, m, w.up, {}, s.up);
  if (recompute == Recompute::kNone) saved.m = m;
  const Sym y = [&] {
    const Sym a = swiglu(r, *saved.gate, *saved.up);
    return matmul(r, a, w.down, {}, s.down);
  }();
  return add_into(r, y, *saved.h);
}

// LlamaDecoderLayer::backward_saved (GatedFeedForward::backward_saved and
// MultiHeadAttention::backward inlined).
Sym block_backward(Replay& r, const DecoderShapes& s, const Weights& w, int64_t i, const Sym& x,
                   Saved& saved, const Sym& dy, Recompute recompute, bool experts,
                   const replay::MoeWeights* moe) {
  const auto path = [&](const std::string& p) { return block_path(s, i, p); };
  if (recompute == Recompute::kBlock) {
    block_forward(r, s, w, x, saved, Recompute::kAttention, experts, moe);
  }
  const Sym& h = *saved.h;
  const Sym m = saved.m ? *saved.m : rms(r, h);
  const Sym dm = [&] {
    if (moe) return replay::moe_backward(r, s, *moe, m, saved.moe, dy);
    if (experts) {
      const std::shared_ptr<Hold> working = r.charge(expert_bytes(r, s, h, /*saved=*/false));
      return r.alloc(m.layout, m.shape);
    }
    const Sym ff = swiglu(r, *saved.gate, *saved.up);
    r.gradient(path(s.down), matmul_backward_weight(r, ff, dy, w.down.layout));
    Sym dg, du;
    {
      const Sym dff = matmul_backward_input(r, dy, w.down, ff.layout);
      const Sym upm = r.reshard(*saved.up, saved.gate->layout), dffm = r.reshard(dff, ff.layout);
      dg = r.alloc(saved.gate->layout, saved.gate->shape);
      du = r.alloc(saved.gate->layout, saved.gate->shape);
    }
    r.gradient(path(s.gate), matmul_backward_weight(r, m, dg, w.gate.layout));
    r.gradient(path(s.up), matmul_backward_weight(r, m, du, w.up.layout));
    const Sym a = matmul_backward_input(r, dg, w.gate, m.layout);
    const Sym b = matmul_backward_input(r, du, w.up, m.layout);
    return add_into(r, a, b);
  }();
  const Sym dh = add_into(r, rms_backward(r, h, dm, path(s.feedforward_norm)), dy);
  const Sym n = saved.n ? *saved.n : rms(r, x);
  const Sym dn = [&] {
    const Qkv qkv = saved.qkv ? *saved.qkv : project_qkv(r, s, w, n);
    const Sym d_o = [&] {
      const Sym o = saved.o ? *saved.o : attention(r, s, qkv);
      r.gradient(path(s.output), matmul_backward_weight(r, flat_view(o), dh, w.output.layout));
      return heads_view(r, matmul_backward_input(r, dh, w.output, flat_view(o).layout), s.heads,
                        s.head_dim);
    }();
    AttentionGrads g = attention_backward(r, s, qkv, d_o);
    g.dq = rope(r, g.dq);
    g.dk = rope(r, g.dk);
    if (s.qk_norm) {
      g.dq = rms_backward(r, qkv.q_projected, g.dq, path(s.query) + "#norm");
      g.dk = rms_backward(r, qkv.k_projected, g.dk, path(s.key) + "#norm");
    }
    Sym dx = projection_backward(r, n, g.dq, w.query, path(s.query));
    dx = add_into(r, dx, projection_backward(r, n, g.dk, w.key, path(s.key)));
    return add_into(r, dx, projection_backward(r, n, g.dv, w.value, path(s.value)));
  }();
  return add_into(r, rms_backward(r, x, dn, path(s.attention_norm)), dh);
}

}  // namespace

StepMemory replay_training_step(const DecoderShapes& s, const LayoutMap& map,
                                const DeviceMesh& mesh, int64_t batch, int64_t seq,
                                Recompute recompute) {
  Replay r(mesh, s.dtype_size);
  const Weights w = weights_of(s, map, mesh);
  const DimSharding data(mesh.axis_names().front());
  const TensorLayout tokens({data, None}, mesh);
  // Embedding::call: a vocab-parallel lookup sums partial lookups; the output keeps the tokens'
  // batch split unless the table uses that axis, and the table's feature split.
  const auto embed = [&] {
    const auto& t = w.table_layout.axes();
    const bool clash =
        std::find(t[0].axes().begin(), t[0].axes().end(), data.axes()[0]) != t[0].axes().end() ||
        std::find(t[1].axes().begin(), t[1].axes().end(), data.axes()[0]) != t[1].axes().end();
    const TensorLayout product({clash ? DimSharding() : data, None, t[1]}, mesh);
    const Shape shape{batch, seq, s.hidden};
    std::shared_ptr<Hold> sums;
    if (t[0].is_sharded()) {
      sums = partials(r, product, shape, TensorLayout({t[1], t[0]}, mesh), {s.hidden, s.vocab});
    }
    return r.alloc(product, shape);
  };
  r.phase = "forward";
  std::vector<Sym> xs{embed()};
  std::vector<Saved> saved(static_cast<size_t>(s.layers));
  const auto experts = [&](int64_t i) {
    return std::find(s.expert_layers.begin(), s.expert_layers.end(), i) != s.expert_layers.end();
  };
  // The replayed sparse blocks' kernels, by layer (none without DecoderShapes::expert_blocks).
  std::map<int64_t, replay::MoeWeights> moe;
  bool worst_case = false;
  if (s.expert_blocks.size() == s.expert_layers.size()) {
    for (size_t e = 0; e < s.expert_blocks.size(); ++e) {
      replay::MoeWeights mw = replay::moe_weights(s, map, mesh, e);
      worst_case = worst_case || mw.dispatched;
      moe.emplace(s.expert_layers[e], std::move(mw));
    }
  }
  const auto moe_of = [&](int64_t i) -> const replay::MoeWeights* {
    auto it = moe.find(i);
    return it == moe.end() ? nullptr : &it->second;
  };
  for (size_t i = 0; i < saved.size(); ++i) {
    const auto layer = static_cast<int64_t>(i);
    xs.push_back(
        block_forward(r, s, w, xs.back(), saved[i], recompute, experts(layer), moe_of(layer)));
    if (recompute == Recompute::kBlock) saved[i] = {};
  }
  r.phase = "top of the backward";
  const Sym f = rms(r, xs.back());
  const Sym kernel = s.reverse.empty() ? transpose(r, w.table) : w.reverse;
  Sym dx = [&] {
    const Sym df = [&] {
      const Sym logits = matmul(r, f, kernel, {}, s.reverse.empty() ? s.embeddings : s.reverse);
      const Sym dlogits = r.alloc(logits.layout, logits.shape);
      if (s.reverse.empty()) {
        r.gradient(s.embeddings,
                   transpose(r, matmul_backward_weight(r, f, dlogits, kernel.layout)));
      } else {
        r.gradient(s.reverse, matmul_backward_weight(r, f, dlogits, kernel.layout));
      }
      return matmul_backward_input(r, dlogits, kernel, f.layout);
    }();
    return rms_backward(r, xs.back(), df, s.final_norm);
  }();
  for (int64_t i = s.layers; i-- > 0;) {
    r.phase = fmt::format("backward of block {}", i);
    dx = block_backward(r, s, w, i, xs[static_cast<size_t>(i)], saved[static_cast<size_t>(i)], dx,
                        recompute, experts(i), moe_of(i));
    saved[static_cast<size_t>(i)] = {};
    xs.pop_back();
  }
  r.phase = "embedding backward";
  r.gradient(s.embeddings, r.alloc(w.table_layout, {s.vocab, s.hidden}));
  StepMemory out = r.result();
  if (moe.empty() && !s.expert_activations) out.experts_left_out = s.expert_layers;
  out.experts_worst_case = worst_case;
  return out;
}

}  // namespace meshlayout
