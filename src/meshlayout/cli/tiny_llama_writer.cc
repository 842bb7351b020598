// tiny_llama_writer — (test-only) writes the tiny random Llama of generate_test_util.h to a
// directory, for the `cli.generate*` end-to-end ctests.
//
//   tiny_llama_writer DIR [NUM_SHARDS]
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "meshlayout/cli/generate_test_util.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::cerr << "usage: tiny_llama_writer DIR [NUM_SHARDS]\n";
    return 2;
  }
  try {
    std::filesystem::create_directories(argv[1]);
    meshlayout::testing::write_tiny_llama(argv[1], argc == 3 ? std::atoi(argv[2]) : 1);
  } catch (const std::exception& e) {
    std::cerr << "tiny_llama_writer: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
