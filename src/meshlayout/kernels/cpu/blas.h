// blas.h — the one place meshlayout calls a BLAS (OpenBLAS's CBLAS): the local matrix product
// each CPU device runs on its shards, for the CPU kernels and the ops module's CPU paths.
//
// NOTE [BLAS threads]: a device's product runs on one thread of the runtime's pool, and the
// pool runs the devices (and row chunks of a device's product) in parallel. A multi-threaded
// BLAS inside each call would start its own threads on the same cores and oversubscribe them,
// so use_single_threaded_blas() sets OpenBLAS to one thread per call
// (openblas_set_num_threads(1)) once per process, at the first op. That setting is global to
// the process: a program that calls OpenBLAS itself afterwards gets one thread per call too
// (OPENBLAS_NUM_THREADS=1 in the environment has the same effect from the start).
//
// Example:
//   use_single_threaded_blas();
//   gemm<float>(m, n, k, a, /*lda=*/k, b, /*ldb=*/n, c, /*ldc=*/n);   // c = a · b
#pragma once

#include <cstdint>

namespace meshlayout::cpu_kernels {

/// Sets OpenBLAS to one thread per call, once per process (see NOTE [BLAS threads]).
void use_single_threaded_blas();

/// Row-major C (m × n, leading dimension ldc) = A (m × k, lda) · B (k × n, ldb), for T = float
/// (cblas_sgemm) or double (cblas_dgemm). k = 0 writes zeros; m = 0 or n = 0 does nothing.
/// ValueError if an extent or leading dimension exceeds the BLAS's int.
template <typename T>
void gemm(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
          int64_t ldc);

/// Row-major C (m × n, ldc) = A (m × k, lda) · Bᵀ, B stored n × k (ldb): attention's q · kᵀ.
template <typename T>
void gemm_nt(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
             T* c, int64_t ldc);

/// Row-major C (m × n, ldc) = Aᵀ · B, A stored k × m (lda): a weight gradient xᵀ · dy.
template <typename T>
void gemm_tn(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
             T* c, int64_t ldc);

}  // namespace meshlayout::cpu_kernels
