// Materialising a model born sharded (each device fills only its box) against the path Keras
// took for years: create every variable whole on one host buffer, then distribute it.
// Model: 4 Dense layers of 2048x2048 f32 (16 MiB kernels) on a 2x4 mesh, Megatron rules.
// Counters: peak_device_MiB = the most any device held (its shards only, measured by the device
// memory accounting); whole_variable_MiB = the size of the whole-variable host buffer the
// baseline allocates for each variable (what an OOM-prone load needs on one device).
#include <benchmark/benchmark.h>

#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/layers/core/dense.h"
#include "meshlayout/nn/model.h"

using namespace meshlayout;

namespace {

class Stack : public Model {
 public:
  Stack() : Model("stack") {
    layers =
        track_list("layers", std::vector<std::shared_ptr<Dense>>{
                                 std::make_shared<Dense>(2048), std::make_shared<Dense>(2048),
                                 std::make_shared<Dense>(2048), std::make_shared<Dense>(2048)});
  }
  Tensor call(const Tensor& x) override {
    Tensor t = x;
    for (auto& l : layers) t = (*l)(t);
    return t;
  }
  std::vector<std::shared_ptr<Dense>> layers;
};

LayoutMap rules(const DeviceMesh& mesh) {
  LayoutMap map(mesh, MatchMode::kSearch);
  map["layers\\.[02]\\.kernel"] = {None, "model"};
  map["layers\\.[13]\\.kernel"] = {"model", None};
  return map;
}

void BM_MaterialiseSharded(benchmark::State& state) {
  set_device_count(8);
  DeviceMesh mesh({2, 4}, {"data", "model"});
  LayoutMap map = rules(mesh);
  int64_t peak = 0;
  for (auto _ : state) {
    state.PauseTiming();
    clear_session();
    std::shared_ptr<Stack> model;
    {
      LayoutMapScope scope = map.scope();
      model = std::make_shared<Stack>();
    }
    for (VirtualDevice* d : default_runtime()->local_devices()) d->memory().reset_peak();
    state.ResumeTiming();
    (*model)(Tensor::symbolic({8, 2048}));  // builds and materialises; no forward pass
    state.PauseTiming();
    for (VirtualDevice* d : default_runtime()->local_devices()) {
      peak = std::max(peak, d->memory().stats().peak_bytes);
    }
    state.ResumeTiming();
  }
  state.counters["peak_device_MiB"] = static_cast<double>(peak) / (1 << 20);
}

void BM_CreateWholeThenDistribute(benchmark::State& state) {
  set_device_count(8);
  DeviceMesh mesh({2, 4}, {"data", "model"});
  const Initializer init = Initializer::glorot_uniform();
  const Shape shape{2048, 2048};
  size_t whole_bytes = 0;
  for (auto _ : state) {
    for (int l = 0; l < 4; ++l) {
      HostTensor whole(DType::kF32, shape);  // the whole variable on one host buffer
      whole_bytes = whole.num_bytes();
      fill_box(init, shape, Box{{0, 0}, shape}, DType::kF32, whole.data(),
               variable_key("stack/dense_" + std::to_string(l) + "/kernel"));
      Array a = distribute_tensor(whole,
                                  TensorLayout(l % 2 == 0 ? std::vector<DimSharding>{None, "model"}
                                                          : std::vector<DimSharding>{"model", None},
                                               mesh));
      benchmark::DoNotOptimize(a.local_shards().front().buffer.data());
    }
  }
  // The whole-variable buffer each step needs on one host, besides the devices' shards.
  state.counters["whole_variable_MiB"] = static_cast<double>(whole_bytes) / (1 << 20);
}

}  // namespace

BENCHMARK(BM_MaterialiseSharded)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_CreateWholeThenDistribute)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_MAIN();
