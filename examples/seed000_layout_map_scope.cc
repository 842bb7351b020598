// Seed 000 (tf.keras.dtensor.experimental.layout_map_scope) and the scope() examples of seeds
// 001/002: subclassed, functional and sequential models created under the scope get the
// layouts of their Keras 2 object paths ("d1.kernel", …), and their variables are born
// sharded. The seed's functional/sequential checks repeat `d1.kernel.layout == layout_3`
// (a typo in the original for d2); here both d1 and d2 are checked.
#include "example_check.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/layers/core/dense.h"
#include "meshlayout/nn/model.h"

using namespace meshlayout;

class SubclassModel : public Model {
 public:
  explicit SubclassModel(std::string name = "") : Model(std::move(name), "subclass_model") {
    d1 = track("d1", std::make_shared<Dense>(1000));
    d2 = track("d2", std::make_shared<Dense>(1000));
  }
  Tensor call(const Tensor& inputs) override {
    Tensor x = (*d1)(inputs);
    return (*d2)(x);
  }
  std::shared_ptr<Dense> d1, d2;
};

int main() {
  set_device_count(8);
  DeviceMesh mesh({2, 4}, {"batch", "model"});
  TensorLayout layout_1({None, "model"}, mesh);
  TensorLayout layout_2({"model"}, mesh);
  TensorLayout layout_3({"model", None}, mesh);
  TensorLayout layout_4({None}, mesh);

  // Keras 2 matching: re.match, first rule wins.
  LayoutMap layout_map(mesh, MatchMode::kFirst);
  layout_map["d1.kernel"] = layout_1;
  layout_map["d1.bias"] = layout_2;
  layout_map["d2.kernel"] = layout_3;
  layout_map["d2.bias"] = layout_4;

  // ## Subclassed model
  std::shared_ptr<SubclassModel> model;
  {
    LayoutMapScope scope = layout_map.scope();
    model = std::make_shared<SubclassModel>();
  }
  SEED_CHECK_EQ(model->d1->built(), false);  // weights come with the first call
  // Triggering the creation of weights within or outside of the scope works
  Tensor inputs =
      distribute_tensor(HostTensor(DType::kF32, {10, 10}), TensorLayout({None, None}, mesh));
  Tensor results = (*model)(inputs);
  SEED_CHECK_EQ(model->d1->kernel()->layout(), layout_1);
  SEED_CHECK_EQ(model->d1->bias()->layout(), layout_2);
  SEED_CHECK_EQ(model->d2->kernel()->layout(), layout_3);
  SEED_CHECK_EQ(model->d2->bias()->layout(), layout_4);
  SEED_CHECK_EQ(results.shape(), (Shape{10, 1000}));
  SEED_CHECK_EQ(model->d1->kernel()->object_path(), std::string("d1.kernel"));

  // ## Functional model
  std::shared_ptr<Model> functional;
  {
    LayoutMapScope scope = layout_map.scope();
    Tensor in = Input({10}, /*batch_size=*/10);
    Tensor x = (*std::make_shared<Dense>(20, DenseOptions{.name = "d1"}))(in);
    Tensor output = (*std::make_shared<Dense>(30, DenseOptions{.name = "d2"}))(x);
    functional = Model::functional(in, output);
  }
  auto d1 = std::dynamic_pointer_cast<Dense>(functional->layers()[1]);
  auto d2 = std::dynamic_pointer_cast<Dense>(functional->layers()[2]);
  SEED_CHECK_EQ(d1->kernel()->layout(), layout_1);
  SEED_CHECK_EQ(d1->bias()->layout(), layout_2);
  SEED_CHECK_EQ(d2->kernel()->layout(), layout_3);
  SEED_CHECK_EQ(d2->bias()->layout(), layout_4);
  SEED_CHECK_EQ(d1->kernel()->path(), std::string("d1/kernel"));  // Keras 3 scope path

  // ## Sequential model
  std::shared_ptr<Sequential> sequential;
  {
    LayoutMapScope scope = layout_map.scope();
    sequential = std::make_shared<Sequential>(
        std::vector<std::shared_ptr<Layer>>{
            std::make_shared<Dense>(20, DenseOptions{.name = "d1"}),
            std::make_shared<Dense>(30, DenseOptions{.name = "d2"})},
        SequentialOptions{.input_shape = Shape{10}});
  }
  d1 = std::dynamic_pointer_cast<Dense>(sequential->layers()[0]);
  d2 = std::dynamic_pointer_cast<Dense>(sequential->layers()[1]);
  SEED_CHECK_EQ(d1->kernel()->layout(), layout_1);
  SEED_CHECK_EQ(d1->bias()->layout(), layout_2);
  SEED_CHECK_EQ(d2->kernel()->layout(), layout_3);
  SEED_CHECK_EQ(d2->bias()->layout(), layout_4);
  SEED_CHECK_EQ(d2->kernel()->path(), std::string("sequential/d2/kernel"));

  std::cout << examples::g_checks << " checks passed\n";
  return 0;
}
