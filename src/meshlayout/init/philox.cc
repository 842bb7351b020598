#include "meshlayout/init/philox.h"

#include "meshlayout/init/fill_kernels.h"
#include "meshlayout/init/simd_level.h"

namespace meshlayout {

// Random123 kat_vectors, checked at compile time as well as in philox_test.cc.
static_assert(philox4x32_10({0, 0, 0, 0}, {0, 0}) ==
              PhiloxBlock{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});

void philox4x32_10_blocks(uint64_t key, uint64_t first, uint64_t high, size_t n,
                          const PhiloxWords& words) {
  internal_init::philox_blocks(internal_init::best_simd_level(), key, first, high, n, words);
}

}  // namespace meshlayout
