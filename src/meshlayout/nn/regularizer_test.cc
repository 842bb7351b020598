#include "meshlayout/nn/regularizer.h"
#include "meshlayout/nn/layers/core/dense.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/model.h"

namespace meshlayout {
namespace {

class RegularizerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(8);
    clear_session();
  }
  void TearDown() override { reset_device_count(); }
  DeviceMesh mesh_ = DeviceMesh::from_string("mesh[data=2,model=4]");
};

TEST_F(RegularizerTest, CountsEveryElementOnceWhateverTheLayout) {
  HostTensor t = HostTensor::random(DType::kF32, {13, 7}, 4);
  double l1 = 0, l2 = 0;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const double v = t.data_as<float>()[i];
    l1 += std::abs(v);
    l2 += v * v;
  }
  const Regularizer r = Regularizer::L1L2(0.5, 0.25);
  for (const TensorLayout& layout :
       {TensorLayout({None, None}, mesh_), TensorLayout({"data", None}, mesh_),
        TensorLayout({"model", "data"}, mesh_), TensorLayout({{"data", "model"}, None}, mesh_)}) {
    EXPECT_NEAR(r(distribute_tensor(t, layout)), 0.5 * l1 + 0.25 * l2, 1e-9) << layout.to_string();
  }
  EXPECT_THROW(r(distribute_tensor(HostTensor(DType::kI32, {4}), TensorLayout({None}, mesh_))),
               ValueError);
}

// Element i of t (F32 or F64) as a double, and set to v.
double element(const HostTensor& t, int64_t i) {
  return t.dtype() == DType::kF32 ? t.data_as<float>()[i] : t.data_as<double>()[i];
}
void set_element(HostTensor& t, int64_t i, double v) {
  if (t.dtype() == DType::kF32) {
    t.data_as<float>()[i] = static_cast<float>(v);
  } else {
    t.data_as<double>()[i] = v;
  }
}

// gradient() equals a central difference of operator() (both on the distributed array), on
// replicated and sharded layouts, F32 and F64, L1, L2 and L1L2; an exact 0 gets l1 * sign(0) = 0
// (the central difference of |w| at 0); the result has w's layout; accumulate_gradient adds.
TEST_F(RegularizerTest, GradientIsTheFiniteDifferenceOfThePenaltyInTheWeightsLayout) {
  for (const DType dtype : {DType::kF32, DType::kF64}) {
    HostTensor t(dtype, {12, 8});
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      set_element(
          t, i,
          std::sin(1.7 * static_cast<double>(i) + 0.3) * (1.0 + 0.01 * static_cast<double>(i)));
    }
    set_element(t, 5, 0.0);
    const double h = dtype == DType::kF32 ? 1e-2 : 1e-5;
    const double tol = dtype == DType::kF32 ? 2e-4 : 1e-7;
    for (const Regularizer& r :
         {Regularizer::L1(0.3), Regularizer::L2(0.7), Regularizer::L1L2(0.2, 0.45)}) {
      for (const TensorLayout& layout :
           {TensorLayout({None, None}, mesh_), TensorLayout({"data", "model"}, mesh_),
            TensorLayout({"model", None}, mesh_), TensorLayout({None, {"data", "model"}}, mesh_)}) {
        SCOPED_TRACE(fmt::format("{} {} {}", dtype_name(dtype), r.to_string(), layout.to_string()));
        const Array w = distribute_tensor(t, layout);
        const Array g = r.gradient(w);
        EXPECT_EQ(g.layout(), w.layout());
        EXPECT_EQ(g.dtype(), dtype);
        const HostTensor got = g.gather();
        std::vector<int64_t> checked = {5};  // the zero, then every third element
        for (int64_t i = 0; i < t.num_elements(); i += 3) checked.push_back(i);
        for (const int64_t k : checked) {
          const double v = element(t, k);
          if (v != 0.0 && std::abs(v) < 2 * h) continue;  // |w| is not smooth within h of 0
          HostTensor plus = t, minus = t;
          set_element(plus, k, v + h);
          set_element(minus, k, v - h);
          const double step = element(plus, k) - element(minus, k);  // as rounded to the dtype
          const double fd =
              (r(distribute_tensor(plus, layout)) - r(distribute_tensor(minus, layout))) / step;
          EXPECT_NEAR(element(got, k), fd, tol * (1.0 + std::abs(fd)))
              << "element " << k << " = " << v;
        }
        EXPECT_EQ(element(got, 5), 0.0);  // sign(0) = 0, and 2 * l2 * 0
        // accumulate_gradient adds to what is there: twice the gradient after two calls.
        Array acc = r.gradient(w);
        r.accumulate_gradient(w, acc);
        const HostTensor twice = acc.gather();
        for (int64_t i = 0; i < t.num_elements(); ++i) {
          EXPECT_NEAR(element(twice, i), 2.0 * element(got, i),
                      1e-12 + 1e-6 * std::abs(element(got, i)));
        }
      }
    }
  }
  const Regularizer r = Regularizer::L2(0.1);
  const Array w = distribute_tensor(HostTensor::random(DType::kF32, {8, 4}, 1),
                                    TensorLayout({"data", None}, mesh_));
  Array other_layout =
      distribute_tensor(HostTensor(DType::kF32, {8, 4}), TensorLayout({None, None}, mesh_));
  try {
    r.accumulate_gradient(w, other_layout);
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("layout"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)r.gradient(
                   distribute_tensor(HostTensor(DType::kI32, {4}), TensorLayout({None}, mesh_))),
               ValueError);
}

class Block : public Model {
 public:
  Block() : Model("block") {
    d = track(
        "d", std::make_shared<Dense>(8, DenseOptions{.kernel_regularizer = Regularizer::L2(0.01)}));
  }
  Tensor call(const Tensor& x) override { return (*d)(x); }
  std::shared_ptr<Dense> d;
};

TEST_F(RegularizerTest, AttachesAfterMaterialisationAndMatchesTheGatheredKernel) {
  LayoutMap rules(mesh_);
  rules["d.kernel"] = {None, "model"};
  std::shared_ptr<Block> block;
  {
    LayoutMapScope scope = rules.scope();
    block = std::make_shared<Block>();
  }
  (*block)(distribute_tensor(HostTensor(DType::kF32, {2, 4}), TensorLayout({None, None}, mesh_)));
  HostTensor k = block->d->kernel()->value().gather();
  double want = 0;
  for (int64_t i = 0; i < k.num_elements(); ++i)
    want += 0.01 * k.data_as<float>()[i] * k.data_as<float>()[i];
  const std::vector<double> losses = block->losses();
  ASSERT_EQ(losses.size(), 1u);
  EXPECT_NEAR(losses[0], want, 1e-9);
}

// Keras counts the regularisers of trainable weights only, each once: freezing the kernel drops
// its penalty, a weight shared by two sub-layers is counted once.
TEST_F(RegularizerTest, LossesCountTrainableWeightsOnceEach) {
  class Twice : public Model {
   public:
    Twice() : Model("twice") {
      d = track("d",
                std::make_shared<Dense>(4, DenseOptions{.kernel_regularizer = Regularizer::L2(0.01),
                                                        .bias_regularizer = Regularizer::L1(0.5)}));
      again = track("again", d);
    }
    Tensor call(const Tensor& x) override { return (*again)((*d)(x)); }
    std::shared_ptr<Dense> d, again;
  };
  LayoutMap rules(mesh_);
  rules["d.kernel"] = {None, "model"};
  std::shared_ptr<Twice> m;
  {
    LayoutMapScope scope = rules.scope();
    m = std::make_shared<Twice>();
  }
  (*m)(distribute_tensor(HostTensor::random(DType::kF32, {2, 4}, 3),
                         TensorLayout({None, None}, mesh_)));
  HostTensor k = m->d->kernel()->value().gather();
  double kernel_loss = 0;
  for (int64_t i = 0; i < k.num_elements(); ++i)
    kernel_loss += 0.01 * k.data_as<float>()[i] * k.data_as<float>()[i];
  ASSERT_EQ(m->losses().size(), 2u);  // kernel and bias, once each
  m->d->kernel()->set_trainable(false);
  const std::vector<double> frozen = m->losses();
  ASSERT_EQ(frozen.size(), 1u);  // the bias only
  EXPECT_NE(frozen[0], kernel_loss);
  m->d->kernel()->set_trainable(true);
  ASSERT_EQ(m->losses().size(), 2u);
  EXPECT_NEAR(m->losses()[0], kernel_loss, 1e-9);
}

TEST_F(RegularizerTest, ExplicitLayoutWinsOverTheMap) {
  class Custom : public Model {
   public:
    Custom() : Model("custom") { w = track("w", std::make_shared<Holder>()); }
    Tensor call(const Tensor& x) override { return (*w)(x); }
    struct Holder : Layer {
      Holder() : Layer("holder", "") {}
      Shape compute_output_shape(const Shape& s) const override { return s; }
      void build(const Shape&) override {
        v = add_weight({.name = "w", .shape = {8, 4}, .layout = TensorLayout({"data", None})});
      }
      Array call(const Array& x) override { return distribute_tensor(x, x.layout()); }
      VariablePtr v;
    };
    std::shared_ptr<Holder> w;
  };
  LayoutMap rules(mesh_);
  rules[".*"] = {None, "model"};
  std::shared_ptr<Custom> m;
  {
    LayoutMapScope scope = rules.scope();
    m = std::make_shared<Custom>();
  }
  (*m)(Tensor::symbolic({2, 4}));
  EXPECT_EQ(m->w->v->layout(), TensorLayout({"data", None}, mesh_));
}

}  // namespace
}  // namespace meshlayout
