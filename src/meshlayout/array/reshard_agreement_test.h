// reshard_agreement_test.h — TESTONLY: what every process sees when the processes of a reshard
// disagree on its target, run by thread ranks (reshard_agreement_test.cc) and under mpirun
// (reshard_agreement_mpi_test.cc). Reshards into a fresh array agree while their pieces move
// (NOTE [One agreement per reshard], array.cc): pieces move only between processes whose
// plans agree, and every process must still throw the same error and stay usable.
//
// Example: std::string what = testing::disagreeing_reshard(rt);   // on every process
#pragma once

#include <memory>
#include <string>

#include "meshlayout/array/array.h"
#include "meshlayout/core/errors.h"

namespace meshlayout::testing {

/// Rows → columns on every process but the last, which asks for replicated (its plan would
/// post other sends and receives); returns the error text this process saw ("no error" if
/// none), after checking that a reshard the processes agree on still works.
inline std::string disagreeing_reshard(const std::shared_ptr<Runtime>& rt) {
  const int64_t n = rt->global_device_count();
  DeviceMesh mesh({n}, {"x"});
  HostTensor x = HostTensor::random(DType::kF32, {n * 6, n * 5}, 11);
  Array a = distribute_tensor(x, TensorLayout({"x", None}, mesh), {.runtime = rt});
  const bool last = rt->process_id() == rt->num_processes() - 1;
  std::string seen = "no error";
  try {
    Array b = distribute_tensor(a, last ? TensorLayout({None, None}) : TensorLayout({None, "x"}));
  } catch (const ValueError& e) {
    seen = e.what();
  }
  Array c = distribute_tensor(a, TensorLayout({None, "x"}));  // the group is still usable
  if (!(c.gather() == x)) throw InternalError("wrong data after a disagreeing reshard");
  return seen;
}

}  // namespace meshlayout::testing
