// Seed 001 (tf.keras.dtensor.experimental.LayoutMap, Keras 2): the docstring example, line
// for line. Keras 2 matches with re.match — anchored at the start, first rule in insertion
// order wins — which is MatchMode::kFirst.
//
//   map = LayoutMap(mesh=None)
//   map['.*dense.*kernel'] = layout_2d
//   ...
//   layout_1 = map['dense_1.kernel']             # layout_1 == layout_2d
#include "example_check.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/layout_map.h"

using namespace meshlayout;

int main() {
  set_device_count(8);
  DeviceMesh mesh({2, 4}, {"batch", "model"});
  // Keras 2 layouts (dtensor.Layout) always carry their mesh.
  TensorLayout layout_2d({None, "model"}, mesh);
  TensorLayout layout_1d({"model"}, mesh);
  TensorLayout layout_4d({None, None, None, "model"}, mesh);

  LayoutMap map(/*mesh=*/std::nullopt, MatchMode::kFirst);
  map[".*dense.*kernel"] = layout_2d;
  map[".*dense.*bias"] = layout_1d;
  map[".*conv2d.*kernel"] = layout_4d;
  map[".*conv2d.*bias"] = layout_1d;

  std::optional<TensorLayout> layout_1 = map["dense_1.kernel"];
  std::optional<TensorLayout> layout_2 = map["dense_1.bias"];
  std::optional<TensorLayout> layout_3 = map["dense_2.kernel"];
  std::optional<TensorLayout> layout_4 = map["dense_2.bias"];
  std::optional<TensorLayout> layout_5 = map["my_model/conv2d_123/kernel"];
  std::optional<TensorLayout> layout_6 = map["my_model/conv2d_123/bias"];

  SEED_CHECK_EQ(layout_1, layout_2d);
  SEED_CHECK_EQ(layout_2, layout_1d);
  SEED_CHECK_EQ(layout_3, layout_2d);
  SEED_CHECK_EQ(layout_4, layout_1d);
  SEED_CHECK_EQ(layout_5, layout_4d);
  SEED_CHECK_EQ(layout_6, layout_1d);

  // get_default_mesh() returns the mesh given at creation (None here).
  SEED_CHECK_EQ(map.get_default_mesh().has_value(), false);
  // "Return None if there isn't any match found."
  SEED_CHECK_EQ(map.get("my_model/conv3d_1/kernel"), std::nullopt);
  // The Mapping methods: len, iteration in insertion order, pop, popitem, clear.
  SEED_CHECK_EQ(map.size(), 4u);
  SEED_CHECK_EQ(map.keys().front(), std::string(".*dense.*kernel"));
  SEED_CHECK_EQ(map.pop(".*conv2d.*bias", std::nullopt), layout_1d);
  SEED_CHECK_EQ(map.popitem().pattern, std::string(".*conv2d.*kernel"));
  map.clear();
  SEED_CHECK_EQ(map.size(), 0u);
  std::cout << examples::g_checks << " checks passed\n";
  return 0;
}
