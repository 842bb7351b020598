// Seed 003 (keras.distribution.LayoutMap, Keras 3): the docstring example, line for line.
// Keras 3.0–3.13 match with re.search and refuse a path two rules match: MatchMode::kSearch.
// A tuple of axis names is a layout (the shortcut), and layouts without a mesh get the
// map's mesh.
//
//   layout_map = LayoutMap(device_mesh=None)
//   layout_map['dense.*kernel'] = (None, 'model')         # layout_2d
//   ...
//   layout_7 = layout_map['my_model/conv3d_1/kernel']   # layout_7 == None
#include "example_check.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout_map/layout_map.h"

using namespace meshlayout;

int main() {
  set_device_count(8);
  {
    LayoutMap layout_map(/*device_mesh=*/std::nullopt);
    layout_map["dense.*kernel"] = {None, "model"};  // layout_2d
    layout_map["dense.*bias"] = {"model"};          // layout_1d
    layout_map["conv2d.*kernel"] = TensorLayout({None, None, None, "model"});
    layout_map["conv2d.*bias"] = TensorLayout({"model"});  // layout_1d
    const TensorLayout layout_2d({None, "model"});
    const TensorLayout layout_1d({"model"});
    const TensorLayout layout_4d({None, None, None, "model"});

    std::optional<TensorLayout> layout_1 = layout_map["dense_1.kernel"];
    std::optional<TensorLayout> layout_2 = layout_map["dense_1.bias"];
    std::optional<TensorLayout> layout_3 = layout_map["dense_2.kernel"];
    std::optional<TensorLayout> layout_4 = layout_map["dense_2.bias"];
    std::optional<TensorLayout> layout_5 = layout_map["my_model/conv2d_123/kernel"];
    std::optional<TensorLayout> layout_6 = layout_map["my_model/conv2d_123/bias"];
    std::optional<TensorLayout> layout_7 = layout_map["my_model/conv3d_1/kernel"];
    std::optional<TensorLayout> layout_8 = layout_map["my_model/conv3d_1/bias"];

    SEED_CHECK_EQ(layout_1, layout_2d);
    SEED_CHECK_EQ(layout_2, layout_1d);
    SEED_CHECK_EQ(layout_3, layout_2d);
    SEED_CHECK_EQ(layout_4, layout_1d);
    SEED_CHECK_EQ(layout_5, layout_4d);
    SEED_CHECK_EQ(layout_6, layout_1d);
    SEED_CHECK_EQ(layout_7, std::nullopt);
    SEED_CHECK_EQ(layout_8, std::nullopt);
  }
  {
    // device_mesh: "used to populate the TensorLayout.device_mesh if it is not set".
    DeviceMesh device_mesh({2, 4}, {"batch", "model"});
    LayoutMap layout_map(device_mesh);
    layout_map["dense.*kernel"] = {None, "model"};
    SEED_CHECK_EQ(layout_map["dense_1.kernel"].get()->device_mesh(), device_mesh);
    SEED_CHECK_EQ(layout_map.device_mesh(), device_mesh);
    // DeviceMesh(shape, axis_names, devices=None): devices default to list_devices().
    SEED_CHECK_EQ(device_mesh.devices(), list_devices());
    // TensorLayout(axes, device_mesh=None): the mesh can be attached later.
    TensorLayout layout({"batch", None});
    layout.set_device_mesh(device_mesh);
    SEED_CHECK_EQ(layout, TensorLayout({"batch", None}, device_mesh));
  }
  std::cout << examples::g_checks << " checks passed\n";
  return 0;
}
