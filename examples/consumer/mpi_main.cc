// The install consumer with meshlayout::mpi: initialize() works in a plain (non-mpirun) run
// too, as one process holding every device; the array then round-trips as in main.cc.
#include <meshlayout/meshlayout.h>
#include <meshlayout/runtime/mpi/initialize.h>

#include <iostream>

using namespace meshlayout;

int main(int argc, char** argv) {
  initialize(&argc, &argv);
  DeviceMesh mesh({2, 4}, {"data", "model"});
  HostTensor x = HostTensor::random(DType::kBF16, {8, 6}, 2);
  Array a = distribute_tensor(x, TensorLayout({"data", "model"}, mesh));
  if (!(a.gather() == x)) {
    std::cerr << "consumer_mpi: FAILED gather\n";
    return 1;
  }
  std::cout << "consumer_mpi: " << num_processes() << " process(es), meshlayout::mpi works\n";
  return 0;
}
