// tiny_llama_writer — (test-only) writes the tiny random Llama of generate_test_util.h to a
// directory, and 64 rows of 9 random token ids as DIR/tokens.safetensors (training data), for
// the `cli.generate*` and `cli.train*` end-to-end ctests.
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
    meshlayout::write_token_file(
        std::string(argv[1]) + "/tokens.safetensors",
        meshlayout::random_token_rows(64, 9, meshlayout::testing::tiny_generate_config().vocab_size,
                                      1));
  } catch (const std::exception& e) {
    std::cerr << "tiny_llama_writer: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
