// A transformer MLP block with Megatron-style rules: the up-projection is column-parallel
// (kernel split on its output dim), the down-projection row-parallel (kernel split on its input
// dim: each device computes a partial sum, completed by an all-reduce). The block is created
// under LayoutMap::scope(), born sharded on a 2x4 mesh, run on a batch split over 'data', and
// checked against a float64 reference computed on the host. Prints every variable's layout.
#include <cmath>
#include <iostream>

#include "example_check.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/layers/core/dense.h"
#include "meshlayout/nn/model.h"

using namespace meshlayout;

class MlpBlock : public Model {
 public:
  MlpBlock() : Model("mlp") {
    up = track("up", std::make_shared<Dense>(256, DenseOptions{.activation = Activation::kGelu}));
    down = track("down", std::make_shared<Dense>(64));
  }
  Tensor call(const Tensor& x) override { return (*down)((*up)(x)); }
  std::shared_ptr<Dense> up, down;
};

int main() {
  set_device_count(8);
  DeviceMesh mesh({2, 4}, {"data", "model"});
  LayoutMap rules(mesh);
  rules["up.kernel"] = {None, "model"};
  rules["up.bias"] = {"model"};
  rules["down.kernel"] = {"model", None};
  std::shared_ptr<MlpBlock> block;
  {
    LayoutMapScope scope = rules.scope();
    block = std::make_shared<MlpBlock>();
  }
  HostTensor x = HostTensor::random(DType::kF32, {32, 64}, 7);
  HostTensor y =
      (*block)(distribute_tensor(x, TensorLayout({"data", None}, mesh))).value().gather();
  for (const VariablePtr& v : block->variables()) {
    std::cout << v->object_path() << "  " << shape_to_string(v->shape()) << "  "
              << v->layout()->to_string() << "\n";
  }
  // float64 reference
  auto dense = [](const std::vector<double>& in, int64_t rows, const Variable& w, const Variable& b,
                  bool gelu) {
    HostTensor wk = w.value().gather(), bk = b.value().gather();
    const int64_t k = wk.shape()[0], n = wk.shape()[1];
    std::vector<double> out(static_cast<size_t>(rows * n));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < n; ++c) {
        double s = bk.data_as<float>()[c];
        for (int64_t i = 0; i < k; ++i)
          s += in[static_cast<size_t>(r * k + i)] * wk.data_as<float>()[i * n + c];
        out[static_cast<size_t>(r * n + c)] =
            gelu ? 0.5 * s * (1 + std::erf(s / std::sqrt(2.0))) : s;
      }
    }
    return out;
  };
  std::vector<double> in(x.data_as<float>(), x.data_as<float>() + x.num_elements());
  std::vector<double> want = dense(dense(in, 32, *block->up->kernel(), *block->up->bias(), true),
                                   32, *block->down->kernel(), *block->down->bias(), false);
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    worst = std::max(worst,
                     std::abs(y.data_as<float>()[i] - want[i]) / std::max(1.0, std::abs(want[i])));
  }
  std::cout << "largest relative error against float64: " << worst << "\n";
  SEED_CHECK_EQ(worst <= 1e-5, true);
  SEED_CHECK_EQ(block->down->kernel()->layout(), TensorLayout({"model", None}, mesh));
  std::cout << examples::g_checks << " checks passed\n";
  return 0;
}
