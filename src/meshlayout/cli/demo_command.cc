#include "meshlayout/cli/demo_command.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "meshlayout/cli/checkpoint_plan.h"
#include "meshlayout/cli/plan_render.h"
#include "meshlayout/cli/progress_bar.h"
#include "meshlayout/cli/text_format.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout/layout_grid.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/embedding.h"
#include "meshlayout/nn/layer_normalization.h"
#include "meshlayout/nn/model_checkpoint.h"

namespace meshlayout::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// A small decoder-style model: token embedding, then per block a LayerNorm and a Megatron MLP
// (up-projection with GELU, down-projection), a final LayerNorm and the lm_head.
struct DemoConfig {
  int64_t vocab = 8192, d_model = 256, d_ff = 1024, blocks = 2, batch = 8, seq = 32;
};

class TinyTransformer : public Model {
 public:
  explicit TinyTransformer(const DemoConfig& c) : Model("tiny_transformer") {
    embed = track("embed", std::make_shared<Embedding>(c.vocab, c.d_model));
    for (int64_t b = 0; b < c.blocks; ++b) {
      const std::string block = fmt::format("blocks.{}.", b);
      norms.push_back(track(block + "norm", std::make_shared<LayerNormalization>()));
      ups.push_back(track(block + "up", std::make_shared<Dense>(c.d_ff, DenseOptions{.activation = Activation::kGelu})));
      downs.push_back(track(block + "down", std::make_shared<Dense>(c.d_model)));
    }
    final_norm = track("final_norm", std::make_shared<LayerNormalization>());
    lm_head = track("lm_head", std::make_shared<Dense>(c.vocab, DenseOptions{.use_bias = false}));
  }
  Tensor call(const Tensor& tokens) override {
    Tensor x = (*embed)(tokens);
    for (size_t b = 0; b < ups.size(); ++b) x = (*downs[b])((*ups[b])((*norms[b])(x)));
    return (*lm_head)((*final_norm)(x));
  }
  std::shared_ptr<Embedding> embed;
  std::vector<std::shared_ptr<LayerNormalization>> norms;
  std::vector<std::shared_ptr<Dense>> ups, downs;
  std::shared_ptr<LayerNormalization> final_norm;
  std::shared_ptr<Dense> lm_head;
};

// The model's variables (object paths, shapes) from the config alone: what `plan` sees.
std::vector<TensorInfo> planned_variables(const DemoConfig& c) {
  std::vector<TensorInfo> v;
  auto add = [&](std::string name, Shape shape) {
    TensorInfo t;
    t.name = std::move(name);
    t.dtype_name = "F32";
    t.dtype = DType::kF32;
    t.element_size = 4;
    t.shape = std::move(shape);
    t.end = static_cast<uint64_t>(num_elements(t.shape)) * 4;
    v.push_back(std::move(t));
  };
  add("embed.embeddings", {c.vocab, c.d_model});
  for (int64_t b = 0; b < c.blocks; ++b) {
    add(fmt::format("blocks.{}.norm.gamma", b), {c.d_model});
    add(fmt::format("blocks.{}.norm.beta", b), {c.d_model});
    add(fmt::format("blocks.{}.up.kernel", b), {c.d_model, c.d_ff});
    add(fmt::format("blocks.{}.up.bias", b), {c.d_ff});
    add(fmt::format("blocks.{}.down.kernel", b), {c.d_ff, c.d_model});
    add(fmt::format("blocks.{}.down.bias", b), {c.d_model});
  }
  add("final_norm.gamma", {c.d_model});
  add("final_norm.beta", {c.d_model});
  add("lm_head.kernel", {c.d_model, c.vocab});
  return v;
}

LayoutMap megatron_rules(const DeviceMesh& mesh) {
  LayoutMap rules(mesh, MatchMode::kSearch);
  rules["embed\\.embeddings"] = {"model", None};  // vocab-parallel
  rules["up\\.kernel"] = {None, "model"};         // column-parallel
  rules["up\\.bias"] = {"model"};
  rules["down\\.kernel"] = {"model", None};       // row-parallel
  rules["lm_head\\.kernel"] = {None, "model"};
  rules["attention.*kernel"] = {None, "model"};   // this model has no attention
  return rules;
}

// Another sharding of the same model, to reload the checkpoint into.
LayoutMap grid_rules(const DeviceMesh& mesh) {
  LayoutMap rules(mesh, MatchMode::kSearch);
  rules["kernel|embeddings"] = {"data", "model"};
  return rules;
}

HostTensor demo_tokens(const DemoConfig& c) {
  HostTensor tokens(DType::kI32, {c.batch, c.seq});
  for (int64_t i = 0; i < c.batch * c.seq; ++i) tokens.data_as<int32_t>()[i] = static_cast<int32_t>((i * 7919 + 13) % c.vocab);
  return tokens;
}

// A model built under `rules` and run once on `tokens` (which materialises it).
std::shared_ptr<TinyTransformer> build(const DemoConfig& c, const LayoutMap& rules, const HostTensor& tokens,
                                       const TensorLayout& token_layout, HostTensor* logits = nullptr) {
  std::shared_ptr<TinyTransformer> model;
  {
    LayoutMapScope scope = rules.scope();
    model = std::make_shared<TinyTransformer>(c);
  }
  Tensor y = (*model)(distribute_tensor(tokens, token_layout));
  if (logits) *logits = y.value().gather();
  return model;
}

double max_abs_diff(const HostTensor& a, const HostTensor& b) {
  double worst = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    worst = std::max(worst, static_cast<double>(std::abs(a.data_as<float>()[i] - b.data_as<float>()[i])));
  }
  return worst;
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

int run_demo(std::ostream& out, const DemoOptions& options) {
  const std::vector<std::string> devices = list_devices();
  out << fmt::format("devices: {} virtual CPU devices ({} … {})\n\n", devices.size(), devices.front(),
                     devices.back());
  if (devices.size() < 8) {
    out << fmt::format("the demo needs 8 devices; set {}=8 or more\n", kCpuDevicesEnvVar);
    return 1;
  }
  int failures = 0;
  auto check = [&](bool ok, const std::string& what) {
    out << fmt::format("   check: {}: {}\n", what, ok ? "ok" : "FAILED");
    if (!ok) ++failures;
  };
  const DemoConfig config;
  const DeviceMesh mesh({2, 4}, {"data", "model"}, std::vector<std::string>(devices.begin(), devices.begin() + 8));
  out << "1. A 2x4 mesh of virtual devices: " << mesh << "\n\n";

  const LayoutMap rules = megatron_rules(mesh);
  out << fmt::format("2. A LayoutMap of {} rules, keyed by object path (search mode, as Keras 3):\n", rules.size());
  for (size_t i = 0; i < rules.size(); ++i) {
    out << fmt::format("   [{}] {:<20} -> {}\n", i, rules.rule(i).pattern, rules.rule(i).layout.to_string());
  }

  out << "\n3. The plan, from shapes alone (nothing allocated yet; `meshlayout plan` does this for a checkpoint):\n";
  const std::vector<TensorInfo> specs = planned_variables(config);
  std::vector<const TensorInfo*> spec_ptrs;
  for (const TensorInfo& t : specs) spec_ptrs.push_back(&t);
  const CheckpointPlan plan = plan_tensors(spec_ptrs, rules);
  out << render_plan_text(plan);

  out << "\n4. How blocks.0.up.kernel (256, 1024) is cut:\n";
  out << render_layout_grid(ShardGeometry(*rules.get("blocks.0.up.kernel"), {config.d_model, config.d_ff}));

  const HostTensor tokens = demo_tokens(config);
  out << fmt::format("\n5. Materialise sharded and run: tokens {} on layout[data,None]\n", shape_to_string(tokens.shape()));
  clear_session();
  auto start = Clock::now();
  HostTensor logits;
  auto model = build(config, rules, tokens, TensorLayout({"data", None}, mesh), &logits);
  out << fmt::format("   built, materialised and ran in {:.1f} ms: logits {}\n", ms_since(start),
                     shape_to_string(logits.shape()));
  bool layouts_match = true;
  for (const VariablePtr& v : model->variables()) {
    const std::optional<TensorLayout> planned = rules.get(v->object_path());
    const TensorLayout want = planned ? *planned : TensorLayout::replicated(static_cast<int>(v->shape().size()), mesh);
    if (v->layout() != want) {
      out << fmt::format("   {} has {}, the plan said {}\n", v->describe(), v->layout()->to_string(), want.to_string());
      layouts_match = false;
    }
  }
  check(layouts_match && model->variables().size() == specs.size(), "every variable has the layout the plan gave it");
  out << "   bytes each device holds (the whole model is " << format_bytes(plan.total_bytes) << "):\n  ";
  bool memory_as_planned = true;
  std::vector<VirtualDevice*> local = default_runtime()->local_devices();
  for (size_t p = 0; p < 8; ++p) {
    const int64_t live = local[p]->memory().stats().bytes_live;
    out << fmt::format(" {}={}", local[p]->name(), format_bytes(static_cast<uint64_t>(live)));
    memory_as_planned = memory_as_planned && static_cast<uint64_t>(live) == plan.device_bytes[p];
  }
  out << "\n";
  check(memory_as_planned, "each device holds exactly the bytes the plan predicted");
  start = Clock::now();
  { Tensor again = (*model)(distribute_tensor(tokens, TensorLayout({"data", None}, mesh))); }
  out << fmt::format("   forward pass on 8 devices: {:.1f} ms\n", ms_since(start));
  const fs::path file = options.checkpoint.empty()
                            ? fs::temp_directory_path() / fmt::format("meshlayout-demo-{}.safetensors", ::getpid())
                            : fs::path(options.checkpoint);
  out << "\n6. Save a checkpoint, shard by shard, to " << file.string() << "\n";
  start = Clock::now();
  ProgressBar save_bar(std::cerr, "saving", options.progress);
  SaveReport saved = save_model(*model, file.string(), {.metadata = {{"format", "pt"}}, .progress = save_bar.callback()});
  save_bar.finish();
  out << fmt::format("   {} written ({} of tensors) in {:.1f} ms\n", format_bytes(saved.file_bytes),
                     format_bytes(saved.bytes_written), ms_since(start));

  out << "\n7. Check against one device: the same model on cpu:0 alone, loaded from the checkpoint\n";
  const DeviceMesh single({1}, {"single"}, std::vector<std::string>{devices.front()});
  auto reference = build(config, LayoutMap(single), tokens, TensorLayout({None, None}, single));
  Checkpoint checkpoint = Checkpoint::open(file.string());
  load_model(*reference, checkpoint);
  start = Clock::now();
  HostTensor want = (*reference)(distribute_tensor(tokens, TensorLayout({None, None}, single))).value().gather();
  out << fmt::format("   forward pass on 1 device: {:.1f} ms\n", ms_since(start));
  const double diff = max_abs_diff(logits, want);
  check(diff <= 1e-4, fmt::format("8-device logits equal the 1-device logits (max |diff| {:.2e}, tolerance 1e-4)", diff));

  out << "\n8. Reload the checkpoint into another sharding (every kernel on layout[data,model])\n";
  const LayoutMap other = grid_rules(mesh);
  auto resharded = build(config, other, tokens, TensorLayout({"data", None}, mesh));
  start = Clock::now();
  ProgressBar load_bar(std::cerr, "loading", options.progress);
  ModelLoadReport loaded = load_model(*resharded, checkpoint, {.progress = load_bar.callback()});
  load_bar.finish();
  out << fmt::format("   {} variables loaded in {:.1f} ms, reading {} (each distinct shard once)\n",
                     loaded.loaded, ms_since(start), format_bytes(loaded.io.bytes_read));
  HostTensor reloaded = (*resharded)(distribute_tensor(tokens, TensorLayout({"data", None}, mesh))).value().gather();
  const double diff2 = max_abs_diff(logits, reloaded);
  check(diff2 <= 1e-4, fmt::format("its logits equal the first model's (max |diff| {:.2e})", diff2));
  if (options.checkpoint.empty()) fs::remove(file);

  out << "\n9. Rules that match none of the model's variables (usually a typo or a renamed layer):\n";
  std::vector<std::string> paths;
  for (const TensorInfo& t : specs) paths.push_back(t.name);
  for (size_t i : rules.unused_rules(paths)) {
    out << fmt::format("   rule {} '{}' matches nothing\n", i, rules.rule(i).pattern);
  }
  out << (failures == 0 ? "\nall checks passed\n" : fmt::format("\n{} checks FAILED\n", failures));
  return failures == 0 ? 0 : 1;
}

void add_demo_command(CLI::App& app, int* exit_code) {
  CLI::App* cmd = app.add_subcommand(
      "demo",
      "The main job: a small transformer on a 2x4 mesh of virtual devices — plan, materialise "
      "sharded, run, check against one device, save and reload a checkpoint.");
  auto options = std::make_shared<DemoOptions>();
  options->progress = stderr_is_terminal();
  cmd->add_option("--checkpoint", options->checkpoint,
                  "Keep the checkpoint at this path (default: a temporary file, removed)");
  cmd->add_flag("--no-progress", [options](int64_t) { options->progress = false; },
                "No progress bars (they are drawn only when stderr is a terminal)");
  cmd->callback([exit_code, options] { *exit_code = run_demo(std::cout, *options); });
}

}  // namespace meshlayout::cli
