// io_save_child PATH MIB SEED [--pause]: saves one random f32 tensor "big" of MIB MiB (rows
// sharded over 8 virtual devices) to PATH with save_arrays. With --pause it prints "writing"
// after the first bytes reach the file and sleeps, so a test can kill it mid-save; without, it
// prints "saved" at the end. Test-only: array_io_test.cc's atomicity tests run it.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "meshlayout/io/array_io.h"

int main(int argc, char** argv) {
  using namespace meshlayout;
  if (argc < 4) {
    std::fprintf(stderr, "usage: io_save_child PATH MIB SEED [--pause]\n");
    return 2;
  }
  const std::string path = argv[1];
  const int64_t rows = std::atoll(argv[2]) * 1024;  // 256 f32 per row: 1 KiB
  const uint64_t seed = std::strtoull(argv[3], nullptr, 10);
  const bool pause = argc > 4 && std::string(argv[4]) == "--pause";
  auto runtime = Runtime::single_process(8);
  DeviceMesh mesh({8}, {"x"});
  Array big = distribute_tensor(HostTensor::random(DType::kF32, {rows, 256}, seed),
                                TensorLayout({"x", None}, mesh), {.runtime = runtime});
  bool announced = false;
  SaveOptions options;
  options.progress = [&](uint64_t, uint64_t) {
    if (!pause || announced) return;
    announced = true;
    std::printf("writing\n");
    std::fflush(stdout);
    ::sleep(60);
  };
  NamedArray arrays[] = {{"big", &big}};
  save_arrays(path, arrays, options);
  std::printf("saved\n");
  return 0;
}
