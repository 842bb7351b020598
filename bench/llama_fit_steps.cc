// The C++ side of bench/python_fit_overhead.py --llama: training steps of a Llama driven from
// C++ (train_llama, the Trainer's fit on a TokenDataset), timed call by call, so that the same
// steps driven from Python (meshlayout.models.CausalLM.train) can be compared in the same run.
//
//   build/bench/llama_fit_steps --config '<config.json text>' --rules FILE [--batch B] [--seq T]
//                               [--steps N] [--reps R] [--devices 8]
//
// Model: LlamaModel(config) under the rules file on a mesh batch=1,model=DEVICES, weights from
// the Keras initializers (the same values Python's CausalLM.from_config draws). Data: B·N rows
// of T + 1 tokens, row r position i = (131·r + 7919·i + 13) mod vocab (the Python side builds
// the same rows). Each of R calls: a fresh AdamW, N steps over the rows, as CausalLM.train does.
// Prints per call "seconds <s>" (the whole train_llama call) and "losses <l0> … <lN-1>" (%.17g,
// so the Python side can check it ran the same steps bit for bit).
#include <fmt/format.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include "bench_util.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/rules_file.h"
#include "meshlayout/models/llama_train.h"
#include "meshlayout/models/random_llama.h"

using namespace meshlayout;

int main(int argc, char** argv) {
  const int batch = bench::arg(argc, argv, "--batch", 1),
            seq = bench::arg(argc, argv, "--seq", 128);
  const int steps = bench::arg(argc, argv, "--steps", 3),
            reps = bench::arg(argc, argv, "--reps", 3);
  const int devices = bench::arg(argc, argv, "--devices", 8);
  const std::string config_text = bench::string_arg(argc, argv, "--config", "");
  const std::string rules_path = bench::string_arg(argc, argv, "--rules", "");
  if (config_text.empty() || rules_path.empty()) {
    fmt::print(stderr,
               "usage: llama_fit_steps --config JSON --rules FILE [--batch B] [--seq T] "
               "[--steps N] [--reps R] [--devices D]\n");
    return 2;
  }
  set_device_count(devices);
  const LlamaConfig config = LlamaConfig::from_json(config_text, "--config");
  RulesFile file = load_rules_file(rules_path);
  file.mesh = DeviceMesh({1, devices}, {"batch", "model"});
  LlamaModel model(config, file.to_layout_map());
  const int64_t rows = int64_t{batch} * steps;
  HostTensor tokens(DType::kI32, {rows, seq + 1});
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i <= seq; ++i) {
      tokens.data_as<int32_t>()[r * (seq + 1) + i] =
          static_cast<int32_t>((131 * r + 7919 * i + 13) % config.vocab_size);
    }
  }
  const std::string path =
      (std::filesystem::temp_directory_path() /
       fmt::format("llama_fit_steps-{}.safetensors", static_cast<long>(::getpid())))
          .string();
  write_token_file(path, tokens);
  const TokenDataset data = TokenDataset::open(path);
  for (int r = 0; r < reps; ++r) {
    LlamaTrainResult result;
    const double s = bench::seconds([&] {
      auto optimizer = make_optimizer("adamw");
      result = train_llama(model, data, *optimizer, {.batch_size = batch, .steps = steps});
    });
    fmt::print("seconds {:.6f}\nlosses", s);
    for (double loss : result.losses) fmt::print(" {:.17g}", loss);
    fmt::print("\n");
    std::fflush(stdout);
  }
  std::filesystem::remove(path);
  return 0;
}
