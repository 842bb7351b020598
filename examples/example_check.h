// example_check.h — CHECK_EQ for the seed examples: each seed line `a == b` becomes
// SEED_CHECK_EQ(a, b), which prints the line and exits 1 if it does not hold.
#pragma once

#include <cstdlib>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>

#include "meshlayout/layout/tensor_layout.h"

namespace meshlayout::examples {

template <typename T>
std::string show(const T& value);

inline std::string show(std::nullopt_t) { return "None"; }

template <typename T>
std::string show(const std::optional<T>& value) {
  return value ? show(*value) : std::string("None");
}

template <typename T>
std::string show(const T& value) {
  if constexpr (requires(std::ostream & os) { os << value; }) {
    std::ostringstream out;
    out << value;
    return out.str();
  } else {
    std::string out = "[";
    for (const auto& item : value) out += (out.size() > 1 ? ", " : "") + show(item);
    return out + "]";
  }
}

inline int g_checks = 0;

#define SEED_CHECK_EQ(a, b)                                                                     \
  do {                                                                                          \
    ++::meshlayout::examples::g_checks;                                                         \
    if (!((a) == (b))) {                                                                        \
      std::cerr << __FILE__ << ":" << __LINE__ << ": check failed: " #a " == " #b << "\n  "     \
                << ::meshlayout::examples::show(a) << " != " << ::meshlayout::examples::show(b) \
                << "\n";                                                                        \
      std::exit(1);                                                                             \
    }                                                                                           \
    std::cout << "ok  " #a " == " #b "\n";                                                      \
  } while (0)

}  // namespace meshlayout::examples
