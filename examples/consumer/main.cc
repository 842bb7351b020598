// The install consumer: seed 003's LayoutMap, a distributed array and a checkpoint round trip
// through the installed umbrella header. Exits 1 with a message on any mismatch.
#include <meshlayout/meshlayout.h>

#include <cstdio>
#include <filesystem>
#include <iostream>

using namespace meshlayout;

int main() {
  int failures = 0;
  auto check = [&](bool ok, const char* what) {
    if (!ok) {
      std::cerr << "consumer: FAILED " << what << "\n";
      ++failures;
    }
  };
  DeviceMesh mesh({2, 4}, {"data", "model"});
  LayoutMap layout_map(mesh);
  layout_map["dense.*kernel"] = {None, "model"};
  layout_map["dense.*bias"] = {"model"};
  check(layout_map["dense_1.kernel"].get() == TensorLayout({None, "model"}, mesh), "lookup");
  check(!layout_map["my_model/conv3d_1/kernel"].get(), "no match is nullopt");

  HostTensor x = HostTensor::random(DType::kF32, {8, 6}, 1);
  Array a = distribute_tensor(x, TensorLayout({"data", None}, mesh));
  Array b = distribute_tensor(a, TensorLayout({None, "model"}, mesh));
  check(b.gather() == x, "reshard keeps the values");

  const auto path = std::filesystem::temp_directory_path() / "meshlayout_consumer.safetensors";
  const NamedArray named[] = {{"x", &b}};
  save_arrays(path.string(), named);
  Array c = Array::allocate(TensorLayout({"model", None}, mesh), {8, 6}, DType::kF32);
  const LoadTarget targets[] = {{"x", &c}};
  load_arrays(Checkpoint::open(path.string()), targets);
  check(c.gather() == x, "checkpoint round trip");
  std::filesystem::remove(path);

  if (failures) return 1;
  std::cout << "consumer: meshlayout works from an installed prefix\n";
  return 0;
}
