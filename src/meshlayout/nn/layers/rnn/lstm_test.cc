#include "meshlayout/nn/layers/rnn/lstm.h"

#include <gtest/gtest.h>

#include <cmath>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/layers/rnn/lstm_test_util.h"
#include "meshlayout/nn/model.h"
#include "meshlayout/nn/nn_test_util.h"
#include "meshlayout/testing/test_util.h"

namespace meshlayout {
namespace {

using testing::ValueErrorMessage;

class LstmTest : public NnTest {};

class RnnModel : public Model {
 public:
  RnnModel() { rnn = track("rnn", std::make_shared<LSTM>(8)); }
  Tensor call(const Tensor& x) override { return (*rnn)(x); }
  std::shared_ptr<LSTM> rnn;
};

TEST_F(LstmTest, KerasPathsShapesAndInitialValues) {
  LayoutMap rules(mesh_);
  rules["lstm.cell.kernel"] = {None, "model"};
  std::shared_ptr<LSTM> lstm;
  std::shared_ptr<Model> model;
  {
    LayoutMapScope scope = rules.scope();
    Tensor in = Input({5, 3}, 4);
    lstm = std::make_shared<LSTM>(8);
    model = Model::functional(in, (*lstm)(in));
  }
  EXPECT_EQ(lstm->cell()->kernel()->layout(), TensorLayout({None, "model"}, mesh_));
  std::vector<std::string> paths, keys;
  for (const VariablePtr& v : model->variables()) {
    paths.push_back(v->path());
    keys.push_back(v->object_path());
  }
  EXPECT_EQ(paths,
            (std::vector<std::string>{"lstm/lstm_cell/kernel", "lstm/lstm_cell/recurrent_kernel",
                                      "lstm/lstm_cell/bias"}));
  EXPECT_EQ(keys, (std::vector<std::string>{"lstm.cell.kernel", "lstm.cell.recurrent_kernel",
                                            "lstm.cell.bias"}));
  EXPECT_EQ(lstm->cell()->kernel()->shape(), (Shape{3, 32}));
  EXPECT_EQ(lstm->cell()->recurrent_kernel()->shape(), (Shape{8, 32}));
  // unit_forget_bias: [0]*8 + [1]*8 + [0]*16.
  HostTensor bias = lstm->cell()->bias()->value().gather();
  for (int64_t i = 0; i < 32; ++i)
    EXPECT_EQ(bias.data_as<float>()[i], i >= 8 && i < 16 ? 1.0f : 0.0f) << i;
  // orthogonal: (8, 32) has orthonormal rows.
  HostTensor r = lstm->cell()->recurrent_kernel()->value().gather();
  for (int64_t a = 0; a < 8; ++a) {
    for (int64_t b = 0; b < 8; ++b) {
      double dot = 0;
      for (int64_t k = 0; k < 32; ++k)
        dot += double{r.data_as<float>()[a * 32 + k]} * r.data_as<float>()[b * 32 + k];
      EXPECT_NEAR(dot, a == b ? 1.0 : 0.0, 1e-6);
    }
  }
  EXPECT_EQ(model->layers()[1]->compute_output_shape({4, 5, 3}), (Shape{4, 8}));

  clear_session();
  auto sub = std::make_shared<RnnModel>();
  (void)(*sub)(distribute_tensor(
      HostTensor::random(DType::kF32, {2, 3, 4}, 1),
      TensorLayout({None, None, None},
                   DeviceMesh({1}, {"replica"}, std::vector<std::string>{"cpu:0"}))));
  EXPECT_EQ(sub->rnn->cell()->kernel()->path(), "rnn_model/lstm/lstm_cell/kernel");
}

TEST_F(LstmTest, MatchesTheFloat64ReferenceOnEveryLayout) {
  const HostTensor x = HostTensor::random(DType::kF32, {6, 5, 4}, 21);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"None,None,None", ""},       {"data,None,None", "model"}, {"(data,model),None,None", "data"},
      {"data,None,model", "model"},  // features split: gathered first
      {"model,data,None", ""},
  };
  for (bool sequences : {false, true}) {
    for (const auto& [input_layout, weight_axis] : cases) {
      SCOPED_TRACE(input_layout + " weights on " + weight_axis + (sequences ? " sequences" : ""));
      clear_session();
      LayoutMap rules(mesh_);
      if (!weight_axis.empty()) {
        rules["lstm.cell.kernel"] = {None, weight_axis};
        rules["lstm.cell.recurrent_kernel"] = {weight_axis, None};
        rules["lstm.cell.bias"] = {weight_axis};
      }
      std::shared_ptr<LSTM> lstm;
      std::shared_ptr<Model> model;
      {
        LayoutMapScope scope = rules.scope();
        Tensor in = Input({5, 4}, 6);
        lstm = std::make_shared<LSTM>(6, LSTMOptions{.return_sequences = sequences});
        model = Model::functional(in, (*lstm)(in));
      }
      const TensorLayout layout = TensorLayout::from_string(input_layout).with_device_mesh(mesh_);
      const Tensor y = (*model)(distribute_tensor(x, layout));
      EXPECT_EQ(y.value().layout().axes()[0], layout.axes()[0]);
      if (!weight_axis.empty()) {
        EXPECT_EQ(lstm->cell()->recurrent_kernel()->layout(),
                  TensorLayout({weight_axis, None}, mesh_));
      }
      const HostTensor bias = lstm->cell()->bias()->value().gather();
      const std::vector<double> want = testing::lstm_reference(
          x, lstm->cell()->kernel()->value().gather(),
          lstm->cell()->recurrent_kernel()->value().gather(), &bias, sequences);
      const HostTensor got = y.value().gather();
      ASSERT_EQ(static_cast<size_t>(got.num_elements()), want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_NEAR(got.data_as<float>()[i], want[i], 1e-5) << i;
      }
    }
  }
}

TEST_F(LstmTest, WithoutBiasMatchesTheReference) {
  LayoutMap rules(mesh_);
  std::shared_ptr<LSTM> lstm;
  std::shared_ptr<Model> model;
  {
    LayoutMapScope scope = rules.scope();
    Tensor in = Input({3, 2}, 4);
    lstm = std::make_shared<LSTM>(3, LSTMOptions{.use_bias = false, .return_sequences = true});
    model = Model::functional(in, (*lstm)(in));
  }
  EXPECT_EQ(lstm->cell()->bias(), nullptr);
  const HostTensor x = HostTensor::random(DType::kF32, {4, 3, 2}, 5);
  const HostTensor got =
      (*model)(distribute_tensor(x, TensorLayout({"data", None, None}, mesh_))).value().gather();
  const std::vector<double> want =
      testing::lstm_reference(x, lstm->cell()->kernel()->value().gather(),
                              lstm->cell()->recurrent_kernel()->value().gather(), nullptr, true);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got.data_as<float>()[i], want[i], 1e-5);
}

TEST_F(LstmTest, BadInputsAreRefusedWithKerasMessages) {
  EXPECT_EQ(ValueErrorMessage([] { LSTM(0); }),
            "Received an invalid value for argument `units`, expected a positive integer, got 0.");
  Tensor flat = Input({3}, 4);
  auto lstm = std::make_shared<LSTM>(2, LSTMOptions{.name = "rnn"});
  EXPECT_EQ(ValueErrorMessage([&] { (void)(*lstm)(flat); }),
            "Input 0 of layer 'rnn' is incompatible with the layer: expected ndim=3, found ndim=2. "
            "Full shape received: (4, 3)");
  EXPECT_EQ(
      ValueErrorMessage([] {
        VariableSpec spec{.name = "b",
                          .shape = {8},
                          .segments = {{2, Initializer::zeros()}, {3, Initializer::ones()}}};
        Variable v(spec);
      }),
      "variable 'b' of shape (8,): its initializer segments add up to 5, not to the last extent");
}

}  // namespace
}  // namespace meshlayout
