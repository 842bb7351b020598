// fit_reference.cc — the C++ side of test_training.py's bit-for-bit check: the training a
// Python session runs with meshlayout.Sequential / compile / fit, written in C++ against the
// library (trainer.h), printing each epoch's loss and the predictions as C99 hex floats ("%a"),
// which the test compares with float.hex() of the Python run's.
//
//   python_fit_reference            # prints "loss <hex>" per epoch, then "pred <hex>" per row
//   python_fit_reference --bench WIDTH BATCH STEPS REPS
//       bench/python_fit_overhead.py's C++ side: Sequential "bench" [Dense(WIDTH, relu, d1),
//       Dense(WIDTH, relu, d2), Dense(1, d3)] on input (WIDTH,) under the same 2x4 rules
//       (d1/d2 kernels (None, model) / (model, None)), adam / mse, x[i, j] = ((31 i + 17 j)
//       mod 23 − 11) / 8, y[i] = ((13 i) mod 7 − 3) / 4; one warm-up fit of one step, then REPS
//       fits of STEPS steps (one epoch, batch BATCH, no shuffle), printing "seconds <t>" each.
//
// The model: Sequential "ref" [Dense(8, relu, name d1), Dense(1, name d2)] on input (4,), built
// under a LayoutMap on a 2x4 mesh (d1.kernel (None, model), d2.kernel (model, None));
// adam / mse; x[i, j] = ((31 i + 17 j) mod 23 − 11) / 8, y[i] = ((13 i) mod 7 − 3) / 4 for 16
// rows (exact in float32); fit(batch_size=4, epochs=3, shuffle, shuffle_seed=5).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/layers/core/dense.h"
#include "meshlayout/nn/model.h"
#include "meshlayout/train/trainer.h"

using namespace meshlayout;

namespace {

void fill(HostTensor& x, HostTensor& y) {
  const int64_t rows = x.shape()[0], width = x.shape()[1];
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < width; ++j) {
      x.data_as<float>()[i * width + j] = static_cast<float>((31 * i + 17 * j) % 23 - 11) / 8.0f;
    }
    y.data_as<float>()[i] = static_cast<float>((13 * i) % 7 - 3) / 4.0f;
  }
}

int bench(int64_t width, int64_t batch, int64_t steps, int reps) {
  HostTensor x(DType::kF32, {batch * steps, width}), y(DType::kF32, {batch * steps, 1});
  fill(x, y);
  DeviceMesh mesh({2, 4}, {"batch", "model"});
  LayoutMap rules(mesh);
  rules["d1.kernel"] = {None, "model"};
  rules["d2.kernel"] = {"model", None};
  std::shared_ptr<Sequential> model;
  {
    LayoutMapScope scope = rules.scope();
    model = std::make_shared<Sequential>(
        std::vector<std::shared_ptr<Layer>>{
            std::make_shared<Dense>(width,
                                    DenseOptions{.name = "d1", .activation = Activation::kRelu}),
            std::make_shared<Dense>(width,
                                    DenseOptions{.name = "d2", .activation = Activation::kRelu}),
            std::make_shared<Dense>(1, DenseOptions{.name = "d3"})},
        SequentialOptions{.name = "bench", .input_shape = Shape{width}});
  }
  Trainer trainer = compile(model, {.optimizer = "adam", .loss = "mse"});
  HostTensor x1(DType::kF32, {batch, width}), y1(DType::kF32, {batch, 1});
  fill(x1, y1);
  (void)trainer.fit(x1, y1, {.batch_size = batch, .epochs = 1, .verbose = 0});  // warm-up
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    (void)trainer.fit(x, y, {.batch_size = batch, .epochs = 1, .verbose = 0});
    std::printf("seconds %.9f\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 6 && std::strcmp(argv[1], "--bench") == 0) {
    return bench(std::atoll(argv[2]), std::atoll(argv[3]), std::atoll(argv[4]), std::atoi(argv[5]));
  }
  constexpr int64_t kRows = 16, kIn = 4;
  HostTensor x(DType::kF32, {kRows, kIn}), y(DType::kF32, {kRows, 1});
  fill(x, y);
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
