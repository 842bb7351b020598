// errors.h — the exception types meshlayout throws.
//
// One small hierarchy that reads like Keras and maps one-to-one onto Python:
//   ValueError          bad mesh, layout, regex, rule, shape or option  (Python ValueError)
//   NotFoundError       a key, tensor or device that does not exist     (Python KeyError)
//   FailedPrecondition  an object used in a state that forbids it       (Python RuntimeError)
//   DataLossError       a corrupt or truncated file                     (Python RuntimeError)
//   ResourceExhaustedError  more memory than the machine or budget has  (Python MemoryError)
//   InternalError       a bug in meshlayout                             (Python RuntimeError)
// Every message says what is wrong, with the offending values quoted, and what was expected.
//
// Example:
//   try { DeviceMesh({2, 4}, {"data"}); }
//   catch (const meshlayout::ValueError& e) { std::cerr << e.what(); }
#pragma once

#include <stdexcept>
#include <string>

namespace meshlayout {

/// Base of every error meshlayout throws on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A value the user passed is malformed or does not fit (Python `ValueError`).
class ValueError : public Error {
 public:
  using Error::Error;
};

/// A key, tensor or device that does not exist (Python `KeyError`).
class NotFoundError : public Error {
 public:
  using Error::Error;
};

/// An object was used in a state that does not allow the operation.
class FailedPreconditionError : public Error {
 public:
  using Error::Error;
};

/// Stored data is corrupt or truncated.
class DataLossError : public Error {
 public:
  using Error::Error;
};

/// An allocation that the machine, or a configured budget, cannot satisfy (Python
/// `MemoryError`). Raised before anything is allocated when the need is known in advance.
class ResourceExhaustedError : public Error {
 public:
  using Error::Error;
};

/// A broken invariant inside meshlayout: always a bug, please report it.
class InternalError : public Error {
 public:
  using Error::Error;
};

}  // namespace meshlayout
