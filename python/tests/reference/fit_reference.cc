// fit_reference.cc — the C++ side of test_training.py's bit-for-bit check: the training a
// Python session runs with meshlayout.Sequential / compile / fit, written in C++ against the
// library (trainer.h), printing each epoch's loss and the predictions as C99 hex floats ("%a"),
// which the test compares with float.hex() of the Python run's.
//
//   python_fit_reference            # prints "loss <hex>" per epoch, then "pred <hex>" per row
//
// The model: Sequential "ref" [Dense(8, relu, name d1), Dense(1, name d2)] on input (4,), built
// under a LayoutMap on a 2x4 mesh (d1.kernel (None, model), d2.kernel (model, None));
// adam / mse; x[i, j] = ((31 i + 17 j) mod 23 − 11) / 8, y[i] = ((13 i) mod 7 − 3) / 4 for 16
// rows (exact in float32); fit(batch_size=4, epochs=3, shuffle, shuffle_seed=5).
#include <cstdio>
#include <memory>

#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/layers/core/dense.h"
#include "meshlayout/nn/model.h"
#include "meshlayout/train/trainer.h"

using namespace meshlayout;

int main() {
  constexpr int64_t kRows = 16, kIn = 4;
  HostTensor x(DType::kF32, {kRows, kIn}), y(DType::kF32, {kRows, 1});
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t j = 0; j < kIn; ++j) {
      x.data_as<float>()[i * kIn + j] = static_cast<float>((31 * i + 17 * j) % 23 - 11) / 8.0f;
    }
    y.data_as<float>()[i] = static_cast<float>((13 * i) % 7 - 3) / 4.0f;
  }
  DeviceMesh mesh({2, 4}, {"batch", "model"});
  LayoutMap rules(mesh);
  rules["d1.kernel"] = {None, "model"};
  rules["d2.kernel"] = {"model", None};
  std::shared_ptr<Sequential> model;
  {
    LayoutMapScope scope = rules.scope();
    model = std::make_shared<Sequential>(
        std::vector<std::shared_ptr<Layer>>{
            std::make_shared<Dense>(8, DenseOptions{.name = "d1", .activation = Activation::kRelu}),
            std::make_shared<Dense>(1, DenseOptions{.name = "d2"})},
        SequentialOptions{.name = "ref", .input_shape = Shape{kIn}});
  }
  Trainer trainer = compile(model, {.optimizer = "adam", .loss = "mse"});
  const History h = trainer.fit(
      x, y, {.batch_size = 4, .epochs = 3, .shuffle = true, .shuffle_seed = 5, .verbose = 0});
  for (double loss : h.loss) std::printf("loss %a\n", loss);
  const HostTensor pred = trainer.predict(x, {.batch_size = 4});
  for (int64_t i = 0; i < kRows; ++i) {
    std::printf("pred %a\n", static_cast<double>(pred.data_as<float>()[i]));
  }
  return 0;
}
