#include "meshlayout/kernels/cpu/blas.h"

#include <cblas.h>
#include <fmt/format.h>

#include <climits>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "meshlayout/core/errors.h"

namespace meshlayout::cpu_kernels {
namespace {

int checked_int(int64_t value, const char* what) {
  if (value < 0 || value > INT_MAX) {
    throw ValueError(fmt::format(
        "matmul: a local product has {} = {}, beyond the BLAS's 32-bit int (at most {})", what,
        value, INT_MAX));
  }
  return static_cast<int>(value);
}

}  // namespace

void use_single_threaded_blas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

template <typename T>
void gemm_impl(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, const T* a,
               int64_t lda, const T* b, int64_t ldb, T* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i) std::memset(c + i * ldc, 0, static_cast<size_t>(n) * sizeof(T));
    return;
  }
  const int im = checked_int(m, "m"), in = checked_int(n, "n"), ik = checked_int(k, "k");
  const int ilda = checked_int(lda, "lda"), ildb = checked_int(ldb, "ldb"),
            ildc = checked_int(ldc, "ldc");
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
                transpose_b ? CblasTrans : CblasNoTrans, im, in, ik, 1.0f, a, ilda, b, ildb, 0.0f,
                c, ildc);
  } else {
    cblas_dgemm(CblasRowMajor, transpose_a ? CblasTrans : CblasNoTrans,
                transpose_b ? CblasTrans : CblasNoTrans, im, in, ik, 1.0, a, ilda, b, ildb, 0.0, c,
                ildc);
  }
}

template <typename T>
void gemm(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
          int64_t ldc) {
  gemm_impl(false, false, m, n, k, a, lda, b, ldb, c, ldc);
}

template <typename T>
void gemm_nt(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
             T* c, int64_t ldc) {
  gemm_impl(false, true, m, n, k, a, lda, b, ldb, c, ldc);
}

template <typename T>
void gemm_tn(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
             T* c, int64_t ldc) {
  gemm_impl(true, false, m, n, k, a, lda, b, ldb, c, ldc);
}

template void gemm<float>(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t,
                          float*, int64_t);
template void gemm<double>(int64_t, int64_t, int64_t, const double*, int64_t, const double*,
                           int64_t, double*, int64_t);
template void gemm_nt<float>(int64_t, int64_t, int64_t, const float*, int64_t, const float*,
                             int64_t, float*, int64_t);
template void gemm_nt<double>(int64_t, int64_t, int64_t, const double*, int64_t, const double*,
                              int64_t, double*, int64_t);
template void gemm_tn<float>(int64_t, int64_t, int64_t, const float*, int64_t, const float*,
                             int64_t, float*, int64_t);
template void gemm_tn<double>(int64_t, int64_t, int64_t, const double*, int64_t, const double*,
                              int64_t, double*, int64_t);

}  // namespace meshlayout::cpu_kernels
