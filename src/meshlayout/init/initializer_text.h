// initializer_text.h — number formatting shared by the initializer messages and text form
// (internal to the init module).
//
// Example:
//   repr_float(1.0)    // "1.0", as Python's repr(1.0)
//   repr_float(0.05)   // "0.05" (shortest text that reads back as the same double)
// IWYU pragma: private, include "meshlayout/init/initializers.h"
#pragma once

#include <string>

namespace meshlayout::internal_init {

/// Python's repr() of a float: shortest round-trip digits, ".0" added to integral values,
/// "inf", "-inf", "nan".
std::string repr_float(double v);

}  // namespace meshlayout::internal_init
