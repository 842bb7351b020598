#include "meshlayout/nn/model_checkpoint.h"
#include "meshlayout/nn/layers/core/dense.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/layout_map_scope.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class Mlp : public Model {
 public:
  Mlp() : Model("mlp") {
    up = track("up", std::make_shared<Dense>(32, DenseOptions{.activation = Activation::kGelu}));
    down = track("down", std::make_shared<Dense>(8));
  }
  Tensor call(const Tensor& x) override { return (*down)((*up)(x)); }
  std::shared_ptr<Dense> up, down;
};

class ModelCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(8);
    clear_session();
    dir_ = fs::temp_directory_path() /
           fmt::format("meshlayout_model_ckpt_{}_{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    fs::remove_all(dir_);
    reset_device_count();
  }

  // An Mlp built under `rules` (no rules: replicated on one device), its variables set from
  // `seed` so that two models built from different seeds differ.
  std::shared_ptr<Mlp> build(std::optional<LayoutMap> rules, uint64_t seed) {
    std::shared_ptr<Mlp> model;
    if (rules) {
      LayoutMapScope scope = rules->scope();
      model = std::make_shared<Mlp>();
    } else {
      model = std::make_shared<Mlp>();
    }
    (*model)(
        distribute_tensor(HostTensor(DType::kF32, {4, 16}), TensorLayout({None, None}, mesh_)));
    for (const VariablePtr& v : model->variables()) {
      v->assign(HostTensor::random(v->dtype(), v->shape(), seed++));
    }
    return model;
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  DeviceMesh mesh_ = DeviceMesh::from_string("mesh[data=2,model=4]");
  fs::path dir_;
};

LayoutMap megatron_rules(const DeviceMesh& mesh) {
  LayoutMap rules(mesh);
  rules["up.kernel"] = {None, "model"};
  rules["up.bias"] = {"model"};
  rules["down.kernel"] = {"model", None};
  return rules;
}

LayoutMap transposed_rules(const DeviceMesh& mesh) {
  LayoutMap rules(mesh);
  rules[".*kernel"] = {"data", "model"};
  rules["down.bias"] = {"data"};
  return rules;
}

void expect_same_values(const Model& a, const Model& b) {
  auto va = a.variables(), vb = b.variables();
  ASSERT_EQ(va.size(), vb.size());
  for (size_t i = 0; i < va.size(); ++i) {
    EXPECT_TRUE(va[i]->value().gather() == vb[i]->value().gather()) << va[i]->describe();
  }
}

TEST_F(ModelCheckpointTest, SavedUnderOneLayoutLoadsIntoAnother) {
  auto saved = build(megatron_rules(mesh_), 1);
  SaveReport s = save_model(*saved, path("m.safetensors"), {.metadata = {{"step", "7"}}});
  Checkpoint ckpt = Checkpoint::open(path("m.safetensors"));
  EXPECT_EQ(ckpt.metadata().at("step"), "7");
  ASSERT_NE(ckpt.find("up.kernel").second, nullptr);  // object paths by default
  EXPECT_EQ(ckpt.find("up.kernel").second->shape, (Shape{16, 32}));

  auto loaded = build(transposed_rules(mesh_), 100);
  EXPECT_EQ(loaded->up->kernel()->layout(), TensorLayout({"data", "model"}, mesh_));
  ModelLoadReport r = load_model(*loaded, ckpt);
  EXPECT_EQ(r.loaded, 4u);
  EXPECT_TRUE(r.missing.empty());
  EXPECT_TRUE(r.unexpected.empty());
  expect_same_values(*saved, *loaded);
  EXPECT_EQ(loaded->up->kernel()->layout(), TensorLayout({"data", "model"}, mesh_));  // kept

  // Same forward pass.
  HostTensor x = HostTensor::random(DType::kF32, {4, 16}, 9);
  HostTensor ya =
      (*saved)(distribute_tensor(x, TensorLayout({"data", None}, mesh_))).value().gather();
  HostTensor yb =
      (*loaded)(distribute_tensor(x, TensorLayout({None, None}, mesh_))).value().gather();
  for (int64_t i = 0; i < ya.num_elements(); ++i) {
    EXPECT_NEAR(ya.data_as<float>()[i], yb.data_as<float>()[i], 1e-5) << i;
  }
  EXPECT_EQ(s.file_bytes, fs::file_size(path("m.safetensors")));
}

TEST_F(ModelCheckpointTest, ScopePathsAndTheHintForTheOtherStyle) {
  auto saved = build(megatron_rules(mesh_), 1);
  save_model(*saved, path("scope.safetensors"), {.path_style = VariablePathStyle::kScope});
  Checkpoint ckpt = Checkpoint::open(path("scope.safetensors"));
  EXPECT_NE(ckpt.find("mlp/dense/kernel").second, nullptr);
  EXPECT_NE(ckpt.find("mlp/dense_1/bias").second, nullptr);
  // The same session names: loading into the same model by scope path works.
  EXPECT_EQ(load_model(*saved, ckpt, {.path_style = VariablePathStyle::kScope}).loaded, 4u);

  // A checkpoint keyed by object paths, loaded by scope paths: the error names what is missing
  // and says that the other style would match.
  save_model(*saved, path("object.safetensors"));
  try {
    load_model(*saved, Checkpoint::open(path("object.safetensors")),
               {.path_style = VariablePathStyle::kScope});
    FAIL();
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("lacks 4 of the model's 4 variables"));
    EXPECT_THAT(e.what(), HasSubstr("'mlp/dense/kernel'"));
    EXPECT_THAT(e.what(), HasSubstr("tensors no variable takes: 'down.bias'"));
    EXPECT_THAT(e.what(), HasSubstr("4 of them are in the checkpoint under object paths"));
  }
}

TEST_F(ModelCheckpointTest, NameMapRenamesBothWays) {
  auto saved = build(megatron_rules(mesh_), 1);
  const std::map<std::string, std::string> hf_names{{"up.kernel", "mlp.up_proj.weight"},
                                                    {"up.bias", "mlp.up_proj.bias"},
                                                    {"down.kernel", "mlp.down_proj.weight"},
                                                    {"down.bias", "mlp.down_proj.bias"}};
  save_model(*saved, path("hf.safetensors"), {.name_map = hf_names});
  Checkpoint ckpt = Checkpoint::open(path("hf.safetensors"));
  EXPECT_NE(ckpt.find("mlp.down_proj.weight").second, nullptr);
  EXPECT_EQ(ckpt.find("down.kernel").second, nullptr);
  auto loaded = build(transposed_rules(mesh_), 50);
  load_model(*loaded, ckpt, {.name_map = hf_names});
  expect_same_values(*saved, *loaded);

  // Two variables mapped to one name cannot be saved.
  try {
    save_model(*saved, path("dup.safetensors"),
               {.name_map = {{"up.bias", "b"}, {"down.bias", "b"}}});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'b'"));
    EXPECT_THAT(e.what(), HasSubstr("up.bias"));
    EXPECT_THAT(e.what(), HasSubstr("down.bias"));
  }
  EXPECT_FALSE(fs::exists(path("dup.safetensors")));
}

TEST_F(ModelCheckpointTest, MissingAndUnexpectedTensorsAreListedOrAllowed) {
  auto model = build(megatron_rules(mesh_), 1);
  // A checkpoint with the kernels only, plus a tensor the model does not have.
  HostTensor extra = HostTensor::random(DType::kF32, {3}, 5);
  Array extra_array = distribute_tensor(extra, TensorLayout({None}, mesh_));
  NamedArray arrays[] = {{"up.kernel", &model->up->kernel()->value()},
                         {"down.kernel", &model->down->kernel()->value()},
                         {"head.scale", &extra_array}};
  save_arrays(path("partial.safetensors"), arrays);
  Checkpoint ckpt = Checkpoint::open(path("partial.safetensors"));

  auto target = build(megatron_rules(mesh_), 40);
  const HostTensor bias_before = target->up->bias()->value().gather();
  try {
    load_model(*target, ckpt);
    FAIL();
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("lacks 2 of the model's 4 variables"));
    EXPECT_THAT(e.what(), HasSubstr("'up.bias', 'down.bias'"));
    EXPECT_THAT(e.what(), HasSubstr("allow_missing"));
  }
  try {
    load_model(*target, ckpt, {.allow_missing = true});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'head.scale'"));
    EXPECT_THAT(e.what(), HasSubstr("allow_unexpected"));
  }
  // Nothing was read by the refused loads.
  EXPECT_FALSE(target->up->kernel()->value().gather() == model->up->kernel()->value().gather());

  ModelLoadReport r = load_model(*target, ckpt, {.allow_missing = true, .allow_unexpected = true});
  EXPECT_EQ(r.loaded, 2u);
  EXPECT_EQ(r.missing, (std::vector<std::string>{"up.bias", "down.bias"}));
  EXPECT_EQ(r.unexpected, (std::vector<std::string>{"head.scale"}));
  EXPECT_TRUE(target->up->kernel()->value().gather() == model->up->kernel()->value().gather());
  EXPECT_TRUE(target->up->bias()->value().gather() == bias_before);  // kept
}

TEST_F(ModelCheckpointTest, HalfPrecisionCheckpointsLoadWithConvertDtypes) {
  auto model = build(megatron_rules(mesh_), 1);
  std::vector<Array> halves;
  std::vector<NamedArray> arrays;
  for (const VariablePtr& v : model->variables()) {
    HostTensor h = HostTensor::random(DType::kBF16, v->shape(), 3);
    halves.push_back(
        distribute_tensor(h, TensorLayout(std::vector<DimSharding>(v->shape().size()), mesh_)));
  }
  auto vars = model->variables();
  for (size_t i = 0; i < vars.size(); ++i) arrays.push_back({vars[i]->object_path(), &halves[i]});
  save_arrays(path("bf16.safetensors"), arrays);
  Checkpoint ckpt = Checkpoint::open(path("bf16.safetensors"));
  try {
    load_model(*model, ckpt);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("BF16"));
    EXPECT_THAT(e.what(), HasSubstr("convert_dtypes"));
  }
  load_model(*model, ckpt, {.convert_dtypes = true});
  HostTensor k = model->up->kernel()->value().gather();
  HostTensor want = halves[0].gather();
  for (int64_t i = 0; i < k.num_elements(); ++i) {
    uint16_t bits = want.data_as<uint16_t>()[i];
    uint32_t wide = uint32_t{bits} << 16;
    float f;
    std::memcpy(&f, &wide, 4);
    ASSERT_EQ(k.data_as<float>()[i], f) << i;
  }
}

TEST_F(ModelCheckpointTest, AnUnbuiltSubclassedModelTakesNoTensor) {
  auto model = std::make_shared<Mlp>();  // subclassed: no variables until the first call
  EXPECT_TRUE(model->variables().empty());
  auto built = build(megatron_rules(mesh_), 1);
  save_model(*built, path("m.safetensors"));
  // Nothing to fill: every checkpoint tensor is unexpected.
  EXPECT_THROW(load_model(*model, Checkpoint::open(path("m.safetensors"))), ValueError);
}

}  // namespace
}  // namespace meshlayout
