// layout_map_bench.cc — LayoutMap lookup throughput, build cost and linear-time matching.
//
// Workload: 5,000 Keras 3 scope paths of a 312-layer Gemma-style decoder
// (`transformer/decoder_block_17/attention/query/kernel`, …) looked up one per iteration,
// cycling in model order, against rule sets of 8, 100, 1,000 and 10,000 rules in each match
// mode. The rules are written so that no path matches two of them (an ambiguous lookup
// throws in search/fullmatch mode; setup checks every path once) and no path is a stored key
// (so every lookup goes through the RE2::Set, not the exact-key hash):
//   8 generic Megatron-style rules   attention/(query|key|value)/kernel, ffw_linear/kernel, …
//   3 per-layer rules per layer      decoder_block_17/(pre|post)_attention_norm/scale, …
//   filler rules that never match    vision_tower_3/mlp_7/dense/kernel, …
// In fullmatch and first mode every rule starts with `.*` (as users write them there).
//
// Cold pass: the same 5,000 lookups once each on a fresh copy of the map (empty DFA cache),
// as when a model creates its variables; build cost: inserting the rules plus the first lookup.
//
// Baselines in the same run: std::unordered_map<std::string,int>::find over the same paths
// (the floor of any lookup) and a bare RE2::Set::Match over the same translated patterns
// (what LayoutMap adds on top of RE2).
//
// Run: build-*/bench/layout_map_bench --benchmark_min_time=0.2
#include <benchmark/benchmark.h>
#include <re2/re2.h>
#include <re2/set.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/device_mesh.h"
#include "meshlayout/layout/tensor_layout.h"
#include "meshlayout/layout_map/layout_map.h"
#include "meshlayout/layout_map/python_regex.h"

namespace {

using meshlayout::DeviceMesh;
using meshlayout::DimSharding;
using meshlayout::LayoutMap;
using meshlayout::MatchMode;
using meshlayout::None;

constexpr int kLayers = 312;  // 312 layers × 16 + 8 globals = 5,000 paths
constexpr int kRuleCounts[] = {8, 100, 1000, 10000};
constexpr MatchMode kModes[] = {MatchMode::kSearch, MatchMode::kFullmatch, MatchMode::kFirst};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "layout_map_bench: setup failed: %s\n", what.c_str());
  std::abort();
}

// ---------------------------------------------------------------------------------------
// The workload.

const std::vector<std::string>& all_paths() {
  static const std::vector<std::string> paths = [] {
    std::vector<std::string> p;
    for (const char* g :
         {"token_embedding/embeddings", "position_embedding/embeddings",
          "transformer/embedding_norm/scale", "transformer/final_norm/scale", "lm_head/kernel",
          "lm_head/bias", "seed_generator/seed_generator_state", "optimizer/iterations"}) {
      p.emplace_back(g);
    }
    for (int layer = 0; layer < kLayers; ++layer) {
      const std::string block = "transformer/decoder_block_" + std::to_string(layer) + "/";
      p.push_back(block + "pre_attention_norm/scale");
      for (const char* proj : {"query", "key", "value", "attention_output"}) {
        for (const char* var : {"kernel", "bias"}) {
          p.push_back(block + "attention/" + proj + "/" + var);
        }
      }
      p.push_back(block + "post_attention_norm/scale");
      p.push_back(block + "pre_ffw_norm/scale");
      p.push_back(block + "mlp/ffw_gating/kernel");
      p.push_back(block + "mlp/ffw_gating_2/kernel");
      p.push_back(block + "mlp/ffw_linear/kernel");
      p.push_back(block + "mlp/ffw_linear/bias");
      p.push_back(block + "post_ffw_norm/scale");
    }
    return p;
  }();
  return paths;
}

using Rule = std::pair<std::string, std::vector<DimSharding>>;

// The first `n` rules of the workload for `mode` (see the file comment).
std::vector<Rule> make_rules(MatchMode mode, int n) {
  const std::string any = mode == MatchMode::kSearch ? "" : ".*";
  std::vector<Rule> all;
  // Megatron-style tensor parallelism: column-parallel in, row-parallel out.
  all.push_back({any + "attention/(query|key|value)/kernel", {None, "model"}});
  all.push_back({any + "attention/(query|key|value)/bias", {"model"}});
  all.push_back({any + "attention_output/kernel", {"model", None}});
  all.push_back({any + "attention_output/bias", {None}});
  all.push_back({any + "ffw_gating(_2)?/kernel", {None, "model"}});
  all.push_back({any + "ffw_linear/kernel", {"model", None}});
  all.push_back({any + "(token|position)_embedding/embeddings", {"model", None}});
  all.push_back({any + "lm_head/kernel$", {None, "model"}});
  const std::string block = mode == MatchMode::kSearch ? "decoder_block_" : ".*/decoder_block_";
  for (int layer = 0; layer < kLayers && static_cast<int>(all.size()) < n; ++layer) {
    const std::string b = block + std::to_string(layer) + "/";
    all.push_back({b + "(pre|post)_attention_norm/scale", {None}});
    all.push_back({b + "(pre|post)_ffw_norm/scale", {"data"}});
    all.push_back({b + "mlp/ffw_linear/bias", {None}});
  }
  for (int i = 0; static_cast<int>(all.size()) < n; ++i) {
    const std::string j = std::to_string(i / 32);
    const std::string k = std::to_string(i % 32);
    switch (i % 3) {
      case 0:
        all.push_back({any + "vision_tower_" + j + "/mlp_" + k + "/dense/kernel", {None, "model"}});
        break;
      case 1:
        all.push_back(
            {any + "vision_tower_" + j + "/encoder_layer_" + k + "/self_attn/(q|k|v)_proj/kernel",
             {None, "model"}});
        break;
      default:
        all.push_back({any + "audio_encoder_" + j + "/conv_" + k + "/(kernel|bias)", {"model"}});
        break;
    }
  }
  all.resize(static_cast<size_t>(n));
  return all;
}

const DeviceMesh& mesh() {
  static const DeviceMesh m({2, 4}, {"data", "model"});
  return m;
}

LayoutMap build_map(MatchMode mode, const std::vector<Rule>& rules) {
  LayoutMap map(mesh(), mode);
  for (const Rule& r : rules) map.set(r.first, r.second);
  return map;
}

// One map per (mode, rule count), built and checked once and shared by every run.
struct LookupFixture {
  LayoutMap map;
  size_t hits = 0;  // paths (of all_paths()) some rule decides
};

const LookupFixture& lookup_fixture(MatchMode mode, int n) {
  static std::map<std::pair<MatchMode, int>, std::unique_ptr<LookupFixture>> cache;
  std::unique_ptr<LookupFixture>& slot = cache[{mode, n}];
  if (slot) return *slot;
  auto f = std::make_unique<LookupFixture>(LookupFixture{build_map(mode, make_rules(mode, n))});
  // Once per fixture: no path is a stored key, and in search/fullmatch mode no path is
  // ambiguous (match_index would throw). This also warms the DFA cache.
  for (const std::string& path : all_paths()) {
    if (f->map.contains(path)) die("path '" + path + "' is a stored key");
    try {
      if (f->map.match_index(path)) ++f->hits;
    } catch (const meshlayout::Error& e) {
      die(e.what());
    }
  }
  slot = std::move(f);
  return *slot;
}

std::string mode_name(MatchMode mode) { return std::string(meshlayout::match_mode_name(mode)); }

// ---------------------------------------------------------------------------------------
// Benchmarks.

void BM_Lookup(benchmark::State& state, MatchMode mode) {
  const LookupFixture& f = lookup_fixture(mode, static_cast<int>(state.range(0)));
  const std::vector<std::string>& paths = all_paths();
  size_t i = 0;
  int64_t hits = 0;
  for (auto _ : state) {
    std::optional<size_t> r = f.map.match_index(paths[i]);
    benchmark::DoNotOptimize(r);
    hits += r.has_value();
    if (++i == paths.size()) i = 0;
  }
  benchmark::DoNotOptimize(hits);
  state.SetItemsProcessed(state.iterations());
  state.counters["lookups_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["hits"] = static_cast<double>(f.hits);
  state.counters["hit_pct"] =
      100.0 * static_cast<double>(f.hits) / static_cast<double>(paths.size());
}

// Cold pass: a fresh copy of the map (empty DFA cache) looks up every path once — what a
// model pays when it creates its variables, each looked up once. Time is per 5,000-path pass.
void BM_ColdPass(benchmark::State& state, MatchMode mode) {
  const LookupFixture& f = lookup_fixture(mode, static_cast<int>(state.range(0)));
  const std::vector<std::string>& paths = all_paths();
  int64_t hits = 0;
  for (auto _ : state) {
    state.PauseTiming();
    std::optional<LayoutMap> map(f.map);  // a copy starts without a built RE2::Set
    state.ResumeTiming();
    for (const std::string& path : paths) hits += map->match_index(path).has_value();
    state.PauseTiming();
    map.reset();
    state.ResumeTiming();
  }
  benchmark::DoNotOptimize(hits);
  const double lookups =
      static_cast<double>(state.iterations()) * static_cast<double>(paths.size());
  state.SetItemsProcessed(static_cast<int64_t>(lookups));
  state.counters["lookups_per_s"] = benchmark::Counter(lookups, benchmark::Counter::kIsRate);
}

// Baseline: the floor any lookup can reach — a hash-map find of the same path.
void BM_BaselineUnorderedMapFind(benchmark::State& state) {
  const std::vector<std::string>& paths = all_paths();
  std::unordered_map<std::string, int> map;
  for (size_t k = 0; k < paths.size(); ++k) map.emplace(paths[k], static_cast<int>(k));
  size_t i = 0;
  int64_t hits = 0;
  for (auto _ : state) {
    auto it = map.find(paths[i]);
    benchmark::DoNotOptimize(it);
    hits += it != map.end();
    if (++i == paths.size()) i = 0;
  }
  benchmark::DoNotOptimize(hits);
  state.SetItemsProcessed(state.iterations());
  state.counters["lookups_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// Baseline: RE2::Set::Match alone over the same translated patterns, same anchoring as
// LayoutMap uses per mode (what the map costs beyond the regex engine itself).
void BM_BaselineRE2Set(benchmark::State& state, MatchMode mode) {
  const int n = static_cast<int>(state.range(0));
  RE2::Options options;
  options.set_log_errors(false);
  options.set_max_mem(int64_t{256} << 20);
  RE2::Anchor anchor = mode == MatchMode::kSearch      ? RE2::UNANCHORED
                       : mode == MatchMode::kFullmatch ? RE2::ANCHOR_BOTH
                                                       : RE2::ANCHOR_START;
  RE2::Set set(options, anchor);
  for (const Rule& r : make_rules(mode, n)) {
    if (set.Add(meshlayout::python_regex_to_re2(r.first), nullptr) < 0) die("RE2::Set::Add");
  }
  if (!set.Compile()) die("RE2::Set::Compile");
  const std::vector<std::string>& paths = all_paths();
  std::vector<int> out;
  for (const std::string& p : paths) set.Match(p, &out);  // warm the DFA
  size_t i = 0;
  int64_t hits = 0;
  for (auto _ : state) {
    bool m = set.Match(paths[i], &out);
    benchmark::DoNotOptimize(out.data());
    hits += m;
    if (++i == paths.size()) i = 0;
  }
  benchmark::DoNotOptimize(hits);
  state.SetItemsProcessed(state.iterations());
  state.counters["lookups_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

// Build cost: insert n rules (each checked and translated) and build the RE2::Set through
// the first lookup (whose DFA states are built on demand: see BM_ColdPass for the rest).
void BM_Build(benchmark::State& state, MatchMode mode) {
  const int n = static_cast<int>(state.range(0));
  const std::vector<Rule> rules = make_rules(mode, n);
  const std::string& first_path = all_paths()[8];
  for (auto _ : state) {
    LayoutMap map = build_map(mode, rules);
    std::optional<size_t> r = map.match_index(first_path);
    benchmark::DoNotOptimize(r);
  }
  state.counters["rules_per_s"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * n, benchmark::Counter::kIsRate);
}

// Pathological regex: `(a+)+$` against 'a' * n + '!' in search mode. Python's re backtracks
// exponentially (~1 s at n = 24, ×4 per 2 more characters); RE2 stays linear, so ns per
// lookup grows with n and bytes/s stays flat.
void BM_Pathological(benchmark::State& state) {
  const size_t n = static_cast<size_t>(state.range(0));
  LayoutMap map(mesh(), MatchMode::kSearch);
  map.set("(a+)+$", {None});
  const std::string path = std::string(n, 'a') + "!";
  if (map.match_index(path)) die("(a+)+$ matched a path ending in '!'");
  for (auto _ : state) {
    std::optional<size_t> r = map.match_index(path);
    benchmark::DoNotOptimize(r);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) *
                          static_cast<int64_t>(path.size()));
  state.counters["path_bytes"] = static_cast<double>(path.size());
}

void register_benchmarks() {
  benchmark::RegisterBenchmark("BM_BaselineUnorderedMapFind", BM_BaselineUnorderedMapFind);
  for (MatchMode mode : kModes) {
    auto* b =
        benchmark::RegisterBenchmark(("BM_Lookup/" + mode_name(mode)).c_str(), BM_Lookup, mode);
    for (int n : kRuleCounts) b->Arg(n);
    b->ArgName("rules");
  }
  for (MatchMode mode : kModes) {
    auto* b = benchmark::RegisterBenchmark(("BM_BaselineRE2Set/" + mode_name(mode)).c_str(),
                                           BM_BaselineRE2Set, mode);
    for (int n : kRuleCounts) b->Arg(n);
    b->ArgName("rules");
  }
  for (MatchMode mode : kModes) {
    auto* b =
        benchmark::RegisterBenchmark(("BM_ColdPass/" + mode_name(mode)).c_str(), BM_ColdPass, mode);
    for (int n : kRuleCounts) b->Arg(n);
    b->ArgName("rules")->Unit(benchmark::kMillisecond);
  }
  for (MatchMode mode : kModes) {
    auto* b = benchmark::RegisterBenchmark(("BM_Build/" + mode_name(mode)).c_str(), BM_Build, mode);
    for (int n : kRuleCounts) b->Arg(n);
    b->ArgName("rules")->Unit(benchmark::kMillisecond);
  }
  auto* p = benchmark::RegisterBenchmark("BM_Pathological/search", BM_Pathological);
  for (int n : {24, 26, 1000, 10000, 100000}) p->Arg(n);
  p->ArgName("n");
}

}  // namespace

int main(int argc, char** argv) {
  register_benchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("paths", std::to_string(all_paths().size()));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
