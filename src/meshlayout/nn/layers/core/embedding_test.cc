#include "meshlayout/nn/layers/core/embedding.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <optional>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/layout_map_scope.h"
#include "meshlayout/nn/model.h"

namespace meshlayout {
namespace {

class EmbeddingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_device_count(8);
    clear_session();
  }
  void TearDown() override { reset_device_count(); }
};

class EmbModel : public Model {
 public:
  EmbModel(int64_t vocab, int64_t dim) : Model("emb_model") {
    emb = track("emb", std::make_shared<Embedding>(vocab, dim));
  }
  Tensor call(const Tensor& x) override { return (*emb)(x); }
  std::shared_ptr<Embedding> emb;
};

HostTensor token_ids(DType dtype, const Shape& shape, int64_t vocab, uint64_t seed) {
  HostTensor t(dtype, shape);
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const int64_t id = static_cast<int64_t>((s >> 33) % static_cast<uint64_t>(vocab));
    if (dtype == DType::kI32) {
      t.data_as<int32_t>()[i] = static_cast<int32_t>(id);
    } else {
      t.data_as<int64_t>()[i] = id;
    }
  }
  return t;
}

int64_t id_of(const HostTensor& t, int64_t i) {
  return t.dtype() == DType::kI32 ? t.data_as<int32_t>()[i] : t.data_as<int64_t>()[i];
}

struct Case {
  const char* mesh;
  TensorLayout table;
  TensorLayout tokens;
  Shape token_shape;
  DType dtype;
  TensorLayout want_output;  // mesh attached in the test
};

TEST_F(EmbeddingTest, ShardedLookupsMatchAFloat64Reference) {
  const int64_t vocab = 13, dim = 10;  // uneven over 4 and 8 devices
  const std::vector<Case> cases = {
      // column-parallel: no communication, output split like the columns
      {"mesh[data=2,model=4]",
       {None, "model"},
       {"data", None},
       {4, 6},
       DType::kI32,
       {"data", None, "model"}},
      // vocab-parallel: partial sums all-reduced over 'model'
      {"mesh[data=2,model=4]",
       {"model", None},
       {"data", None},
       {4, 6},
       DType::kI64,
       {"data", None, None}},
      // both dims of the table split; tokens split on an axis the table uses are gathered
      {"mesh[data=2,model=4]",
       {"model", "data"},
       {"data", None},
       {5, 3},
       DType::kI32,
       {None, None, "data"}},
      {"mesh[data=2,model=4]",
       {None, None},
       {None, "model"},
       {2, 7},
       DType::kI32,
       {None, "model", None}},
      {"mesh[data=2,model=4]",
       {"model", None},
       {"model", None},
       {4, 6},
       DType::kI32,
       {None, None, None}},
      {"mesh[data=2,model=4]",
       {{"data", "model"}, None},
       {None, None, None},
       {2, 3, 4},
       DType::kI64,
       {None, None, None, None}},
      // 13 rows over 8 devices: blocks of 2, the last one empty
      {"mesh[x=8]", {"x", None}, {None, None}, {3, 5}, DType::kI32, {None, None, None}},
      {"mesh[x=8]", {None, "x"}, {None, None}, {3, 5}, DType::kI64, {None, None, "x"}},
      {"mesh[x=8]", {None, None}, {"x", None}, {6, 2}, DType::kI32, {"x", None, None}},
      {"mesh[x=8]", {None, None}, {"x"}, {11}, DType::kI32, {"x", None}},
  };
  int n = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(::testing::Message() << "case " << n++ << " " << c.mesh << " table " << c.table
                                      << " tokens " << c.tokens);
    clear_session();
    const DeviceMesh mesh = DeviceMesh::from_string(c.mesh);
    LayoutMap rules(mesh);
    rules["emb.embeddings"] = c.table;
    std::shared_ptr<EmbModel> model;
    {
      LayoutMapScope scope = rules.scope();
      model = std::make_shared<EmbModel>(vocab, dim);
    }
    const HostTensor ids = token_ids(c.dtype, c.token_shape, vocab, static_cast<uint64_t>(n));
    Tensor y = (*model)(distribute_tensor(ids, c.tokens.with_device_mesh(mesh)));
    EXPECT_EQ(model->emb->embeddings()->layout(), c.table.with_device_mesh(mesh));
    EXPECT_EQ(y.value().layout(), c.want_output.with_device_mesh(mesh));
    const HostTensor table = model->emb->embeddings()->value().gather();
    const HostTensor got = y.value().gather();
    Shape want_shape = c.token_shape;
    want_shape.push_back(dim);
    ASSERT_EQ(got.shape(), want_shape);
    ASSERT_EQ(got.dtype(), DType::kF32);
    for (int64_t t = 0; t < ids.num_elements(); ++t) {
      for (int64_t k = 0; k < dim; ++k) {
        const double want = static_cast<double>(table.data_as<float>()[id_of(ids, t) * dim + k]);
        ASSERT_NEAR(got.data_as<float>()[t * dim + k], want, 1e-5 * std::max(1.0, std::abs(want)))
            << "token " << t << " column " << k;
      }
    }
  }
}

TEST_F(EmbeddingTest, TableValuesAreTheSameOnEveryLayoutAndFollowTheKerasDefault) {
  std::optional<HostTensor> first;
  for (const char* spec : {"(None, None)", "(model, None)", "(None, model)"}) {
    clear_session();
    const DeviceMesh mesh = DeviceMesh::from_string("mesh[data=2,model=4]");
    LayoutMap rules(mesh);
    rules["emb.embeddings"] = std::string(spec) == "(None, None)" ? TensorLayout({None, None})
                              : std::string(spec) == "(model, None)"
                                  ? TensorLayout({"model", None})
                                  : TensorLayout({None, "model"});
    std::shared_ptr<EmbModel> model;
    {
      LayoutMapScope scope = rules.scope();
      model = std::make_shared<EmbModel>(50, 8);
    }
    (*model)(distribute_tensor(HostTensor(DType::kI32, {1, 1}), TensorLayout({None, None}, mesh)));
    HostTensor t = model->emb->embeddings()->value().gather();
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      ASSERT_GE(t.data_as<float>()[i], -0.05f);
      ASSERT_LT(t.data_as<float>()[i], 0.05f);
    }
    if (!first) first = t;
    EXPECT_EQ(t, *first) << spec;
  }
}

TEST_F(EmbeddingTest, PathsAndAutomaticNames) {
  const DeviceMesh mesh = DeviceMesh::from_string("mesh[data=2,model=4]");
  LayoutMap rules(mesh);
  rules["emb.embeddings"] = {None, "model"};
  std::shared_ptr<EmbModel> model;
  {
    LayoutMapScope scope = rules.scope();
    model = std::make_shared<EmbModel>(16, 8);
    EXPECT_TRUE(model->emb->embeddings() == nullptr);  // created at build
  }
  (*model)(distribute_tensor(HostTensor(DType::kI32, {2, 3}), TensorLayout({"data", None}, mesh)));
  EXPECT_EQ(model->emb->name(), "embedding");
  EXPECT_EQ(model->emb->embeddings()->object_path(), "emb.embeddings");
  EXPECT_EQ(model->emb->embeddings()->path(), "emb_model/embedding/embeddings");
  EXPECT_EQ(model->emb->embeddings()->shape(), (Shape{16, 8}));
  EXPECT_EQ(model->emb->embeddings()->layout(), TensorLayout({None, "model"}, mesh));

  auto second = std::make_shared<Embedding>(4, 2);
  EXPECT_EQ(second->name(), "embedding_1");
  EXPECT_EQ(second->compute_output_shape({3, 5}), (Shape{3, 5, 2}));
  Tensor sym = (*second)(Tensor::symbolic({3, 5}));
  EXPECT_EQ(sym.shape(), (Shape{3, 5, 2}));
  EXPECT_EQ(second->embeddings()->path(), "embedding_1/embeddings");
  auto named = std::make_shared<Embedding>(4, 2, EmbeddingOptions{.name = "token_embedding"});
  EXPECT_EQ(named->name(), "token_embedding");
}

TEST_F(EmbeddingTest, OutOfRangeIdIsRefusedWithItsPositionOnEveryLayout) {
  for (const TensorLayout& table : {TensorLayout({None, "model"}), TensorLayout({"model", None})}) {
    clear_session();
    const DeviceMesh mesh = DeviceMesh::from_string("mesh[data=2,model=4]");
    LayoutMap rules(mesh);
    rules["emb.embeddings"] = table;
    std::shared_ptr<EmbModel> model;
    {
      LayoutMapScope scope = rules.scope();
      model = std::make_shared<EmbModel>(13, 4);
    }
    HostTensor ids = token_ids(DType::kI32, {4, 6}, 13, 3);
    ids.data_as<int32_t>()[3 * 6 + 0] = -1;  // row 3: the second 'data' shard
    ids.data_as<int32_t>()[1 * 6 + 5] = 13;  // row 1: the first, and first in row-major order
    try {
      (*model)(distribute_tensor(ids, TensorLayout({"data", None}, mesh)));
      FAIL();
    } catch (const ValueError& e) {
      EXPECT_STREQ(e.what(),
                   "Embedding layer 'embedding': token id 13 at position (1, 5) of the input of "
                   "shape (4, 6) is out of range: input_dim is 13, so ids must be in [0, 13)");
    }
    ids.data_as<int32_t>()[1 * 6 + 5] = 0;
    try {
      (*model)(distribute_tensor(ids, TensorLayout({"data", "model"}, mesh)));
      FAIL();
    } catch (const ValueError& e) {
      EXPECT_STREQ(e.what(),
                   "Embedding layer 'embedding': token id -1 at position (3, 0) of the input of "
                   "shape (4, 6) is out of range: input_dim is 13, so ids must be in [0, 13)");
    }
  }
}

TEST_F(EmbeddingTest, WrongDtypeAndBadDimensionsAreRefused) {
  DeviceMesh one({1}, {"replica"}, std::vector<std::string>{"cpu:0"});
  auto emb = std::make_shared<Embedding>(10, 4);
  try {
    (*emb)(distribute_tensor(HostTensor(DType::kF32, {2, 3}), TensorLayout({None, None}, one)));
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "Embedding layer 'embedding' takes integer token ids (I32 or I64), got F32");
  }
  try {
    Embedding bad(0, 4);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(),
                 "Embedding input_dim and output_dim must be at least 1, got input_dim=0 and "
                 "output_dim=4");
  }
  // Outside a scope the table lives on cpu:0; an I64 lookup there works too.
  HostTensor ids(DType::kI64, {2});
  ids.data_as<int64_t>()[0] = 9;
  ids.data_as<int64_t>()[1] = 2;
  HostTensor got = (*emb)(distribute_tensor(ids, TensorLayout({None}, one))).value().gather();
  HostTensor table = emb->embeddings()->value().gather();
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(got.data_as<float>()[k], table.data_as<float>()[9 * 4 + k]);
    EXPECT_EQ(got.data_as<float>()[4 + k], table.data_as<float>()[2 * 4 + k]);
  }
}

}  // namespace
}  // namespace meshlayout
