// A training step of a Llama on 8 virtual devices under the Megatron rules
// (examples/rules/llama_megatron.json, mesh batch=1,model=8), against raw cblas_sgemm of the
// step's per-device matmuls in the same run; bench/llama_train_bench.sh adds PyTorch.
//
//   build/bench/llama_train_bench [--reps R] [--batch B] [--seq T] [--layers L]
//
// Model: the one of llama_bench.cc (d=1024, 8 layers, 16 heads / 8 key-value heads, ff 2816,
// vocab 32000, untied, F32, 159M parameters). One step = llama_train_step: logits of every
// position, vocab-parallel cross-entropy, backward (each block's norms and attention
// recomputed), AdamW (Keras defaults) on every shard. One warm-up step, then the best of R
// (default 3); tokens/s = B·T / step time.
//
// Baseline: the step's linear maps as per-device cblas_sgemm calls of the Megatron shards
// (forward, input gradient and weight gradient of q, k, v, attention_output, gate, up, down and
// the reverse embedding: 3× the forward's matmul FLOPs), OpenBLAS at 1 thread per call, the 8
// devices on the runtime's pool. Attention scores, norms, the optimizer and collectives are
// not in it; ratio = baseline time / step time.
//
// Last line, for bench/llama_train_bench.sh:
//   RESULT train_tokens_per_s=… train_ratio=…
#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench_util.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/rules_file.h"
#include "meshlayout/models/llama_train.h"
#include "meshlayout/runtime/runtime.h"

using namespace meshlayout;
using bench::arg;
using bench::seconds;

namespace {

constexpr int kDevices = 8;

struct Gemm {  // one device's (m x k) @ (k x n)
  int k, n;
};

// The per-device matmul shapes of one forward: Megatron column- and row-split linear maps and
// the column-split reverse embedding.
std::vector<Gemm> per_device_gemms(const LlamaConfig& c) {
  const int d = static_cast<int>(c.hidden_size),
            q = static_cast<int>(c.num_attention_heads * c.head_dim);
  const int kv = static_cast<int>(c.num_key_value_heads * c.head_dim),
            ff = static_cast<int>(c.intermediate_size);
  std::vector<Gemm> g;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (const Gemm& x : {Gemm{d, q / kDevices}, Gemm{d, kv / kDevices}, Gemm{d, kv / kDevices},
                          Gemm{q / kDevices, d}, Gemm{d, ff / kDevices}, Gemm{d, ff / kDevices},
                          Gemm{ff / kDevices, d}}) {
      g.push_back(x);
    }
  }
  g.push_back({d, static_cast<int>((c.vocab_size + kDevices - 1) / kDevices)});
  return g;
}

// Forward (m x k)(k x n), input gradient (m x n)(n x k) and weight gradient (k x m)(m x n) of
// every gemm on every device; best of `reps`.
double run_baseline(const LlamaConfig& c, int m, int reps, double* flops) {
  openblas_set_num_threads(1);
  const std::vector<Gemm> gemms = per_device_gemms(c);
  size_t most = 0;
  for (const Gemm& g : gemms)
    most = std::max({most, static_cast<size_t>(g.k) * g.n, static_cast<size_t>(m) * g.k,
                     static_cast<size_t>(m) * g.n});
  struct Buffers {
    std::vector<float> w, a, b, out;
  };
  std::vector<Buffers> dev(kDevices);
  Runtime& rt = *default_runtime();
  rt.pool().parallel_for(kDevices, [&](size_t p) {
    dev[p].w.assign(most, 0.01f);
    dev[p].a.assign(most, 0.5f);
    dev[p].b.assign(most, 0.25f);
    dev[p].out.assign(most, 0.0f);
  });
  *flops = 0;
  for (const Gemm& g : gemms) *flops += 3 * 2.0 * m * g.k * g.n * kDevices;
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    best = std::min(best, seconds([&] {
                      rt.pool().parallel_for(kDevices, [&](size_t p) {
                        Buffers& x = dev[p];
                        for (const Gemm& g : gemms) {
                          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, g.n, g.k, 1.0f,
                                      x.a.data(), g.k, x.w.data(), g.n, 0.0f, x.out.data(), g.n);
                          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, g.k, g.n, 1.0f,
                                      x.b.data(), g.n, x.w.data(), g.n, 0.0f, x.out.data(), g.k);
                          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, g.k, g.n, m, 1.0f,
                                      x.a.data(), g.k, x.b.data(), g.n, 0.0f, x.out.data(), g.n);
                        }
                      });
                    }));
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = arg(argc, argv, "--reps", 3), batch = arg(argc, argv, "--batch", 1);
  const int seq = arg(argc, argv, "--seq", 128), layers = arg(argc, argv, "--layers", 8);
  set_device_count(kDevices);
  const LlamaConfig config{.vocab_size = 32000,
                           .hidden_size = 1024,
                           .intermediate_size = 2816,
                           .num_hidden_layers = layers,
                           .num_attention_heads = 16,
                           .num_key_value_heads = 8,
                           .head_dim = 64,
                           .rms_norm_eps = 1e-5,
                           .max_position_embeddings = 2048};
  RulesFile file =
      load_rules_file(std::string(MESHLAYOUT_SOURCE_DIR) + "/examples/rules/llama_megatron.json");
  file.mesh = DeviceMesh({1, kDevices}, {"batch", "model"});
  LlamaModel model(config, file.to_layout_map());
  auto optimizer = make_optimizer("adamw");
  HostTensor x(DType::kI32, {batch, seq}), y(DType::kI32, {batch, seq});
  for (int r = 0; r < batch; ++r) {
    for (int i = 0; i <= seq; ++i) {
      const int32_t t = static_cast<int32_t>((r * 131 + i * 7919 + 13) % 32000);
      if (i < seq) x.data_as<int32_t>()[r * seq + i] = t;
      if (i > 0) y.data_as<int32_t>()[r * seq + i - 1] = t;
    }
  }
  const Array inputs = model.distribution()->distribute_process_batch(x, batch);
  const Array targets = model.distribution()->distribute_process_batch(y, batch);
  fmt::print(
      "llama: d=1024 layers={} heads=16 kv_heads=8 ff=2816 vocab=32000, mesh[batch=1,model=8] "
      "Megatron "
      "rules, batch {} x {} tokens, AdamW; runtime pool {} threads, OpenBLAS 1 thread per call\n",
      layers, batch, seq, default_runtime()->pool().size());
  double best = 1e300;
  for (int r = 0; r <= reps; ++r) {
    double loss = 0;
    const double s = seconds([&] { loss = llama_train_step(model, *optimizer, inputs, targets); });
    fmt::print("  step {}{}: {:.3f} s, loss {:.4f}\n", r, r == 0 ? " (warm-up)" : "", s, loss);
    if (r > 0) best = std::min(best, s);
  }
  double flops = 0;
  const double base = run_baseline(config, batch * seq, reps, &flops);
  const double tps = batch * seq / best;
  fmt::print(
      "train step: meshlayout {:.1f} tokens/s ({:.3f} s, {:.1f} GFLOP/s of the linear maps); "
      "cblas_sgemm "
      "of the same per-device matmuls {:.3f} s ({:.1f} GFLOP/s); ratio {:.2f}\n",
      tps, best, flops / best / 1e9, base, flops / base / 1e9, base / best);
  fmt::print("RESULT train_tokens_per_s={:.2f} train_ratio={:.3f}\n", tps, base / best);
  return 0;
}
