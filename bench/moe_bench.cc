// Mixtral-class prefill and decode on 8 virtual devices (issue 27's MoE benchmark): d=1024,
// 8 layers, 16 query / 8 key-value heads, 8 experts of 2816, top-2, vocab 32000, F32, on
// mesh[batch=1,model=8] with Megatron's attention (examples/rules/llama_megatron.json) and the
// experts placed three ways on the same mesh:
//   expert-parallel   experts split over 'model' (each device holds one expert, computes the
//                     tokens routed to it; the outputs are summed over 'model')
//   expert-tp         every expert's width split over 'model' (keras-hub's F split)
//   replicated        every device holds every expert (the dense-equivalent path: each device
//                     runs all routed tokens through all its experts)
// bench/moe_bench.sh runs it with bench/moe_torch.py (the same model in PyTorch, 2 threads) and
// prints the ratios.
//
//   build/bench/moe_bench [--reps R] [--prompt T] [--new N] [--layers L] [--experts E]
//                         [--top-k K] [--ff F] [--mode expert-parallel|expert-tp|replicated|all]
//   RESULT <mode>_prefill_tokens_per_s=… <mode>_decode_tokens_per_s=… (one pair per mode)
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
#include "meshlayout/models/generation.h"
#include "meshlayout/models/llama.h"
#include "meshlayout/runtime/runtime.h"

using namespace meshlayout;
using bench::arg;
using bench::best;
using bench::seconds;
using bench::string_arg;

namespace {

constexpr int kDevices = 8;

LayoutMap rules_for(const std::string& mode, const DeviceMesh& mesh) {
  RulesFile file =
      load_rules_file(std::string(MESHLAYOUT_SOURCE_DIR) + "/examples/rules/llama_megatron.json");
  file.mesh = mesh;
  LayoutMap rules = file.to_layout_map();
  if (mode == "expert-parallel") {
    rules["experts/expert_feedforward_.*"] = TensorLayout({"model", None, None});
  } else if (mode == "expert-tp") {
    rules["experts/expert_feedforward_(gate|intermediate)_dense"] =
        TensorLayout({None, None, "model"});
    rules["experts/expert_feedforward_output_dense"] = TensorLayout({None, "model", None});
  }
  return rules;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = arg(argc, argv, "--reps", 3);
  const int prompt_len = arg(argc, argv, "--prompt", 128);
  const int new_tokens = arg(argc, argv, "--new", 16);
  const std::string only = string_arg(argc, argv, "--mode", "all");
  set_device_count(kDevices);
  LlamaConfig config{.vocab_size = 32000,
                     .hidden_size = 1024,
                     .intermediate_size = arg(argc, argv, "--ff", 2816),
                     .num_hidden_layers = arg(argc, argv, "--layers", 8),
                     .num_attention_heads = 16,
                     .num_key_value_heads = 8,
                     .head_dim = 64,
                     .rms_norm_eps = 1e-5,
                     .max_position_embeddings = 2048};
  config.family = "mixtral";
  config.num_experts = arg(argc, argv, "--experts", 8);
  config.num_experts_per_tok = arg(argc, argv, "--top-k", 2);
  config.norm_topk_prob = true;
  config.validate();
  const DeviceMesh mesh({1, kDevices}, {"batch", "model"});
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
  for (int i = 0; i < prompt_len; ++i) prompt[static_cast<size_t>(i)] = (i * 7919 + 13) % 32000;
  fmt::print(
      "mixtral: d={} layers={} heads={} kv_heads={} experts={} top-{} expert ff={} vocab={} "
      "(F32), mesh[batch=1,model={}], Megatron attention; runtime pool {} threads, OpenBLAS 1 "
      "thread per call\n",
      config.hidden_size, config.num_hidden_layers, config.num_attention_heads,
      config.num_key_value_heads, config.num_experts, config.num_experts_per_tok,
      config.intermediate_size, config.vocab_size, kDevices, default_runtime()->pool().size());
  std::string result = "RESULT";
  std::vector<std::vector<int32_t>> first_tokens;
  for (const std::string mode : {"expert-parallel", "expert-tp", "replicated"}) {
    if (only != "all" && only != mode) continue;
    clear_session();
    std::optional<LlamaModel> model;
    const double build = seconds([&] { model.emplace(config, rules_for(mode, mesh)); });
    std::vector<double> prefill, decode;
    int64_t decode_tokens = 0;
    std::vector<int32_t> tokens;
    for (int r = 0; r < reps; ++r) {
      const GenerateResult g = generate(*model, {prompt}, {.max_new_tokens = new_tokens});
      prefill.push_back(g.prefill_seconds);
      decode.push_back(g.decode_seconds);
      decode_tokens = g.decode_tokens;
      tokens = g.tokens[0];
    }
    const double prefill_tps = prompt_len / best(prefill);
    const double decode_tps = static_cast<double>(decode_tokens) / best(decode);
    fmt::print(
        "{:<16} built in {:.2f} s; prefill ({} tokens) {:.1f} tokens/s ({:.3f} s); decode {:.1f} "
        "tokens/s ({:.1f} ms/token); first tokens {} {} {}\n",
        mode, build, prompt_len, prefill_tps, best(prefill), decode_tps,
        1e3 * best(decode) / static_cast<double>(std::max<int64_t>(1, decode_tokens)), tokens[0],
        tokens[1], tokens[2]);
    first_tokens.push_back(tokens);
    std::string key = mode;
    std::replace(key.begin(), key.end(), '-', '_');
    result += fmt::format(" {}_prefill_tokens_per_s={:.2f} {}_decode_tokens_per_s={:.2f}", key,
                          prefill_tps, key, decode_tps);
  }
  // Each placement is the same model (same seeds, same weights): the same tokens.
  for (const auto& t : first_tokens) {
    if (t != first_tokens.front())
      fmt::print("WARNING: the placements generated different tokens\n");
  }
  fmt::print("{}\n", result);
  return 0;
}
