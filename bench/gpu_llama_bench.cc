// gpu_llama_bench — a Llama-3-8B-shaped model on one GPU (issue 26): meshlayout's prefill and
// decode through generate() on a mesh of one device gpu:0 (MESHLAYOUT_GPU_DEVICES=1: the whole
// GPU), against the GPU's own ceilings measured in the same run with cuBLAS and cudaMemcpy.
// bench/gpu_llama_torch.py runs the same model in PyTorch (transformers) for comparison.
//
//   build-cuda/bench/gpu_llama_bench [--layers L] [--prompt T] [--decode-prompt P] [--new N]
//                                    [--reps R] [--json FILE]
//
// Model: hidden 4096, intermediate 14336, 32 heads, 8 key-value heads, head_dim 128, vocab
// 128256, RoPE theta 500000, RMSNorm eps 1e-5, untied embeddings, L layers (default 32: 8.03B
// parameters, 32 GB in F32; the per-layer cost is what matters, so a short check runs fewer).
// F32 weights and computation: LlamaModel takes F32 or F64 only (LlamaOptions::dtype), so there
// is no BF16 row here (PyTorch's BF16 row is its own). The weights are the model's random
// initial values, filled on the GPU by the initializers when the model is built (no disk).
//
// Measured (the median of R runs, default 3, after one warm-up run of each):
//   prefill: generate() of a T-token prompt (default 2048, batch 1), one new token; its
//     prefill_seconds (host clock; the logits come back to the host, so it ends synchronized).
//     FLOPs = 2·(linear-map parameters of the blocks)·T + 2·hidden·vocab (the logits of the last
//     position only, as generate() computes them) + attention 4·head_dim·heads·T(T+1)/2 per layer
//     (QKᵀ and PV over the causal pairs). Norms, RoPE, softmax and the lookup are not counted.
//   decode: generate() of a P-token prompt (default 128) and N+1 new tokens (default N = 32):
//     N decode steps; tokens/s = N / decode_seconds (each step includes the host's argmax over
//     the gathered logits, as in any use of generate()).
// Baselines, same process, same GPU:
//   cuBLAS: cublasSgemm (CUBLAS_DEFAULT_MATH: no TF32) of every linear map of the prefill with
//     the model's shapes (m = T: q and o 4096→4096, k and v 4096→1024, gate and up 4096→14336,
//     down 14336→4096, per layer; the logits 1×4096→128256 once), timed with CUDA events;
//     gemm_f32_mix_tflops = their FLOPs / their time. gemm_f32_2048x4096x14336_tflops is the
//     single largest shape alone (m = T).
//   copy: cudaMemcpyAsync device-to-device of 1 GiB, GB/s counting bytes read and written.
// Ratios (the targets):
//   prefill_vs_cublas = prefill TFLOP/s / gemm_f32_mix_tflops                  (target >= 0.5)
//   decode_vs_bandwidth = decode tokens/s / (copy GB/s / weight bytes read per token)
//                                                                               (target >= 0.7)
//   where weight bytes per token = every variable but the input embedding table (a decode step
//   reads one row of it): the blocks, the final norm and the reverse embeddings.
// Output: `name value unit` lines on stdout (the model and device description on stderr);
// --json FILE writes the same figures. Without a GPU: "skipped: no GPU" and exit 0.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "bench_util.h"
#include "gpu_bench_util.h"
#include "meshlayout/core/dtype.h"
#include "meshlayout/core/shape.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/models/generation.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/runtime/device_memory.h"
#include "meshlayout/runtime/runtime.h"

using namespace meshlayout;

namespace {

using bench::median;
using gpu_bench::check;
using gpu_bench::Figure;
using gpu_bench::time_runs;
using gpu_bench::write_json;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A row-major (m×k)·(k×n) product; `count` of them per pass.
struct Gemm {
  int64_t m, k, n, count;
};

// The linear maps of one prefill of T tokens through `c` (per layer, times the layers; the
// logits of the last position once).
std::vector<Gemm> prefill_gemms(const LlamaConfig& c, int64_t T) {
  const int64_t d = c.hidden_size, q = c.num_attention_heads * c.head_dim,
                kv = c.num_key_value_heads * c.head_dim, ff = c.intermediate_size,
                L = c.num_hidden_layers;
  return {{T, d, q, L},      {T, d, kv, 2 * L}, {T, q, d, L},
          {T, d, ff, 2 * L}, {T, ff, d, L},     {1, d, c.vocab_size, 1}};
}

double gemm_flops(const std::vector<Gemm>& gemms) {
  double f = 0;
  for (const Gemm& g : gemms) f += 2.0 * g.m * g.k * g.n * g.count;
  return f;
}

// cuBLAS F32 products with the model's shapes on device buffers of random values: one weight
// buffer per distinct (k, n) (larger than the L2 cache but the k/v ones, as the model's are),
// one input and one output buffer of the largest size.
class CublasBaseline {
 public:
  CublasBaseline(cudaStream_t s, const std::vector<Gemm>& gemms) : s_(s) {
    check(cublasCreate(&h_), "cublasCreate");
    check(cublasSetStream(h_, s_), "cublasSetStream");
    check(cublasSetMathMode(h_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    size_t max_a = 0, max_c = 0;
    for (const Gemm& g : gemms) {
      max_a = std::max(max_a, static_cast<size_t>(g.m * g.k));
      max_c = std::max(max_c, static_cast<size_t>(g.m * g.n));
      auto key = std::make_pair(g.k, g.n);
      if (!weights_.count(key)) weights_[key] = random_block(static_cast<size_t>(g.k * g.n));
    }
    a_ = random_block(max_a);
    c_ = random_block(max_c);
  }
  ~CublasBaseline() {
    for (auto& [key, p] : weights_) cudaFree(p);
    cudaFree(a_);
    cudaFree(c_);
    cublasDestroy(h_);
  }
  /// Enqueues every product of `gemms` (count times each) on the stream.
  void enqueue(const std::vector<Gemm>& gemms) {
    const float one = 1, zero = 0;
    for (const Gemm& g : gemms) {
      float* w = weights_.at({g.k, g.n});
      for (int64_t i = 0; i < g.count; ++i) {
        // Row-major C (m×n) = A (m×k) · W (k×n) is column-major Cᵀ = Wᵀ·Aᵀ.
        check(
            cublasSgemm(h_, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(g.n), static_cast<int>(g.m),
                        static_cast<int>(g.k), &one, w, static_cast<int>(g.n), a_,
                        static_cast<int>(g.k), &zero, c_, static_cast<int>(g.n)),
            "cublasSgemm");
      }
    }
  }

 private:
  // A device block of n floats, uniform in [-1, 1): 16 MiB of host values uploaded and tiled.
  float* random_block(size_t n) {
    constexpr size_t kChunk = size_t{1} << 22;
    if (chunk_.empty()) {
      chunk_.resize(kChunk);
      uint64_t x = 0x9E3779B97F4A7C15ull;
      for (float& v : chunk_) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        v = static_cast<float>(static_cast<int32_t>(x >> 40) - (1 << 23)) * 0x1p-23f;
      }
    }
    void* block = nullptr;
    check(cudaMalloc(&block, n * sizeof(float)), "cudaMalloc (cuBLAS baseline)");
    float* p = static_cast<float*>(block);
    const size_t first = std::min(n, kChunk);
    check(cudaMemcpyAsync(p, chunk_.data(), first * sizeof(float), cudaMemcpyHostToDevice, s_),
          "upload");
    for (size_t done = first; done < n;) {
      const size_t now = std::min(done, n - done);  // doubling copies of what is there
      check(cudaMemcpyAsync(p + done, p, now * sizeof(float), cudaMemcpyDeviceToDevice, s_),
            "tile");
      done += now;
    }
    check(cudaStreamSynchronize(s_), "upload");
    return p;
  }

  cudaStream_t s_;
  cublasHandle_t h_{};
  std::vector<float> chunk_;
  std::map<std::pair<int64_t, int64_t>, float*> weights_;
  float* a_ = nullptr;
  float* c_ = nullptr;
};

struct Args {
  int64_t layers = 32, prompt = 2048, decode_prompt = 128, new_tokens = 32;
  int reps = 3;
  std::string json;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "gpu_llama_bench: %s needs a value\n", flag.c_str());
      std::exit(2);
    }
    const char* value = argv[++i];
    auto number = [&](int64_t low) {
      char* end = nullptr;
      const long long v = std::strtoll(value, &end, 10);
      if (*value == '\0' || *end != '\0' || v < low) {
        std::fprintf(stderr, "gpu_llama_bench: %s must be a whole number >= %lld, not '%s'\n",
                     flag.c_str(), static_cast<long long>(low), value);
        std::exit(2);
      }
      return static_cast<int64_t>(v);
    };
    if (flag == "--layers") {
      a.layers = number(1);
    } else if (flag == "--prompt") {
      a.prompt = number(1);
    } else if (flag == "--decode-prompt") {
      a.decode_prompt = number(1);
    } else if (flag == "--new") {
      a.new_tokens = number(1);
    } else if (flag == "--reps") {
      a.reps = static_cast<int>(number(1));
    } else if (flag == "--json") {
      a.json = value;
    } else {
      std::fprintf(stderr,
                   "usage: %s [--layers L] [--prompt T] [--decode-prompt P] [--new N] [--reps R] "
                   "[--json FILE]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  return a;
}

std::vector<int32_t> prompt_of(int64_t length, int64_t vocab) {
  std::vector<int32_t> p(static_cast<size_t>(length));
  for (int64_t i = 0; i < length; ++i) p[static_cast<size_t>(i)] = (i * 7919 + 13) % vocab;
  return p;
}

}  // namespace

static int run(const Args& args) {
  if (physical_gpu_count() == 0) {
    std::printf("skipped: no GPU\n");
    if (!args.json.empty()) write_json(args.json, {}, "", "no GPU", {{"layers", args.layers}});
    return 0;
  }
  setenv(kGpuDevicesEnvVar, "1", 1);  // gpu:0 is the whole of physical GPU 0
  std::vector<Figure> figures;
  auto report = [&](const std::string& name, double value, const std::string& unit) {
    std::printf("%s %.4g %s\n", name.c_str(), value, unit.c_str());
    std::fflush(stdout);
    figures.push_back({name, value, unit});
  };

  LlamaConfig config{.vocab_size = 128256,
                     .hidden_size = 4096,
                     .intermediate_size = 14336,
                     .num_hidden_layers = args.layers,
                     .num_attention_heads = 32,
                     .num_key_value_heads = 8,
                     .head_dim = 128,
                     .rms_norm_eps = 1e-5,
                     .rope_theta = 500000.0,
                     .tie_word_embeddings = false,
                     .max_position_embeddings = 8192};
  // generate() needs prompt + new tokens within the context window.
  config.max_position_embeddings =
      std::max<int64_t>(8192, std::max(args.prompt + 1, args.decode_prompt + args.new_tokens + 1));
  config.validate();

  const DeviceMesh mesh({1, 1}, {"batch", "model"}, std::vector<std::string>{"gpu:0"});
  auto runtime = default_runtime(DeviceKind::kCuda);
  MemoryAccount& account = runtime->device(0).memory();
  DeviceMemory& gpu_memory = account.device_memory();

  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::optional<LlamaModel> model;
  auto start = std::chrono::steady_clock::now();
  model.emplace(config, LayoutMap(mesh));
  gpu_memory.synchronize();
  const double build_seconds = seconds_since(start);

  int64_t params = 0, bytes_per_token = 0, block_linear_params = 0;
  bool lookup_table_seen = false;
  for (const VariablePtr& v : model->variables()) {
    const int64_t n = num_elements(v->shape());
    params += n;
    if (v->path() == "token_embedding/embeddings") {
      lookup_table_seen = true;  // a decode step reads one row of it
    } else {
      bytes_per_token += n * static_cast<int64_t>(dtype_size(v->dtype()));
    }
    if (v->path().rfind("transformer_layer_", 0) == 0 && v->shape().size() >= 2) {
      block_linear_params += n;
    }
  }
  if (!lookup_table_seen) {
    std::fprintf(stderr,
                 "gpu_llama_bench: note: no variable token_embedding/embeddings; the "
                 "weight bytes per decode token count every variable\n");
  }
  std::fprintf(stderr,
               "device 0: %s, %d SMs, %.1f GiB; model: Llama-3-8B shapes, %lld layers, %.2fB "
               "parameters (F32, random initial values), mesh of one device gpu:0\n",
               prop.name, prop.multiProcessorCount,
               static_cast<double>(prop.totalGlobalMem) / (1ull << 30),
               static_cast<long long>(args.layers), static_cast<double>(params) / 1e9);
  std::printf("layers %lld layers\n", static_cast<long long>(args.layers));  // JSON: "layers": L
  report("parameters", static_cast<double>(params) / 1e9, "billion");
  report("weight_bytes_per_decode_token", static_cast<double>(bytes_per_token) / 1e9, "GB");
  report("build_and_init_seconds", build_seconds, "s");
  report("init_rate", static_cast<double>(params) * 4 / build_seconds / 1e9, "GB/s");

  // ---- meshlayout: prefill and decode through generate() ----
  const std::vector<int32_t> long_prompt = prompt_of(args.prompt, config.vocab_size);
  const std::vector<int32_t> short_prompt = prompt_of(args.decode_prompt, config.vocab_size);
  account.reset_peak();
  std::vector<double> prefill, decode;
  int64_t decode_tokens = 0;
  for (int r = 0; r <= args.reps; ++r) {  // run 0 is the warm-up
    const GenerateResult p = generate(*model, {long_prompt}, {.max_new_tokens = 1});
    const GenerateResult d =
        generate(*model, {short_prompt}, {.max_new_tokens = args.new_tokens + 1});
    decode_tokens = d.decode_tokens;
    std::fprintf(stderr,
                 "  run %d%s: prefill %.4f s (%lld tokens), decode %.4f s (%lld steps), "
                 "first tokens %d %d\n",
                 r, r == 0 ? " (warm-up)" : "", p.prefill_seconds,
                 static_cast<long long>(p.prefill_tokens), d.decode_seconds,
                 static_cast<long long>(d.decode_tokens), p.tokens[0][0], d.tokens[0][0]);
    if (r == 0) continue;
    prefill.push_back(p.prefill_seconds);
    decode.push_back(d.decode_seconds);
  }
  const double peak_gib = static_cast<double>(account.stats().peak_bytes) / (1ull << 30);

  const double T = static_cast<double>(args.prompt);
  const double attention_flops = 4.0 * static_cast<double>(config.head_dim) *
                                 static_cast<double>(config.num_attention_heads) * T * (T + 1) / 2 *
                                 static_cast<double>(args.layers);
  const std::vector<Gemm> gemms = prefill_gemms(config, args.prompt);
  const double linear_flops = gemm_flops(gemms);  // = 2·block_linear_params·T + 2·d·vocab
  const double prefill_flops = linear_flops + attention_flops;
  const double prefill_s = median(prefill);
  const double prefill_tflops = prefill_flops / prefill_s / 1e12;
  const double decode_tps = static_cast<double>(decode_tokens) / median(decode);
  report("prefill_tokens", T, "tokens");
  report("prefill_seconds", prefill_s, "s");
  report("prefill_tokens_per_s", T / prefill_s, "tokens/s");
  report("prefill_tflops", prefill_tflops, "TFLOP/s");
  report("prefill_attention_flop_share", attention_flops / prefill_flops, "fraction");
  report("decode_tokens_per_s", decode_tps, "tokens/s");
  report("decode_ms_per_token", 1e3 / decode_tps, "ms");
  report("meshlayout_peak_memory", peak_gib, "GiB");
  if (2.0 * static_cast<double>(block_linear_params) * T +
          2.0 * static_cast<double>(config.hidden_size * config.vocab_size) !=
      linear_flops) {
    std::fprintf(stderr,
                 "gpu_llama_bench: note: the model's block parameters (%lld) differ "
                 "from the baseline's shapes\n",
                 static_cast<long long>(block_linear_params));
  }
  model.reset();  // the baselines get the memory
  gpu_memory.synchronize();

  // ---- baselines: cuBLAS at the prefill's shapes, device-to-device copies ----
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  {
    CublasBaseline cublas(s, gemms);
    const std::vector<double> t =
        time_runs(s, 1, std::max(args.reps, 3), [&] { cublas.enqueue(gemms); });
    const double mix_tflops = linear_flops / median(t) / 1e12;
    report("gemm_f32_mix_seconds", median(t), "s");
    report("gemm_f32_mix_tflops", mix_tflops, "TFLOP/s");
    const std::vector<Gemm> big = {{args.prompt, config.hidden_size, config.intermediate_size, 1}};
    const std::vector<double> tb = time_runs(s, 3, 10, [&] { cublas.enqueue(big); });
    report("gemm_f32_2048x4096x14336_tflops", gemm_flops(big) / median(tb) / 1e12, "TFLOP/s");
    report("prefill_vs_cublas", prefill_tflops / mix_tflops, "ratio");
    report("prefill_linear_time_share", median(t) / prefill_s, "ratio");
  }
  {
    constexpr size_t kBytes = size_t{1} << 30;
    void *a = nullptr, *b = nullptr;
    check(cudaMalloc(&a, kBytes), "cudaMalloc");
    check(cudaMalloc(&b, kBytes), "cudaMalloc");
    check(cudaMemsetAsync(a, 1, kBytes, s), "cudaMemset");
    const std::vector<double> t = time_runs(s, 3, 10, [&] {
      check(cudaMemcpyAsync(b, a, kBytes, cudaMemcpyDeviceToDevice, s), "d2d copy");
    });
    const double bandwidth = 2.0 * kBytes / median(t);  // bytes read + written per second
    const double ideal_tps = bandwidth / static_cast<double>(bytes_per_token);
    report("d2d_copy_bandwidth", bandwidth / 1e9, "GB/s");
    report("decode_bandwidth_bound_tokens_per_s", ideal_tps, "tokens/s");
    report("decode_vs_bandwidth", decode_tps / ideal_tps, "ratio");
    cudaFree(a);
    cudaFree(b);
  }
  cudaStreamDestroy(s);
  if (!args.json.empty()) write_json(args.json, figures, prop.name, "", {{"layers", args.layers}});
  return 0;
}

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  try {
    return run(args);
  } catch (const std::exception& e) {  // meshlayout's errors (ValueError, CUDA failures, …)
    std::fprintf(stderr, "gpu_llama_bench: %s\n", e.what());
    return 1;
  }
}
