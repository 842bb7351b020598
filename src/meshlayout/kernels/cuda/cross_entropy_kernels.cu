// cross_entropy_kernels.cu — the CUDA implementations of kernels/cross_entropy.h: the
// vocab-parallel cross-entropy's per-row statistics (cross_entropy_stats, and the second round
// cross_entropy_stats2 of categorical probabilities), the loss from the gathered statistics
// (cross_entropy_loss_sum, a host total; cross_entropy_row_losses, one value per row) and the
// gradient (cross_entropy_grad). All arithmetic in double as cpu/cross_entropy.cc: one block per
// row for the sums over a class block (tree sums instead of the CPU's left-to-right ones), one
// thread per row, in the CPU's order, for the combination of the k gathered blocks; the host
// total adds the rows' losses in row order on the host. cross_entropy_stats reports the shard's
// first bad label or non-finite prediction into *failure (so it synchronizes the stream), as the
// CPU does: the lowest (kind, flat).
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "meshlayout/kernels/cross_entropy.h"
#include "meshlayout/kernels/cuda/layer_kernel_util.cuh"
#include "meshlayout/kernels/cuda/register.h"

namespace meshlayout::layer_cuda {
namespace {

constexpr double kEpsilon = 1e-7;  // keras.config.epsilon()

// What the kernels read of the spec and the targets.
struct Spec {
  bool sparse, from_logits;
  double smoothing;
  int64_t classes;   // for the smoothing
  bool labels_i64;   // sparse labels: I64 (else I32)
  bool targets_f64;  // categorical targets: F64 (else F32)
  __host__ __device__ bool two_rounds() const { return !sparse && !from_logits; }
};

Spec spec_of(const CrossEntropySpec& s, DType target_dtype, int64_t classes) {
  return Spec{s.sparse,
              s.from_logits,
              s.smoothing,
              classes,
              target_dtype == DType::kI64,
              target_dtype == DType::kF64};
}

__device__ __forceinline__ int64_t label_at(const Spec& sp, const void* ts, int64_t i) {
  return sp.labels_i64 ? static_cast<const int64_t*>(ts)[i]
                       : static_cast<int64_t>(static_cast<const int32_t*>(ts)[i]);
}

// The target of class j (global) of row `row` / element i of the targets' box.
__device__ __forceinline__ double target(const Spec& sp, const void* ts, int64_t row, int64_t i,
                                         int64_t j) {
  if (sp.sparse) return label_at(sp, ts, row) == j ? 1.0 : 0.0;
  const double t = sp.targets_f64 ? static_cast<const double*>(ts)[i]
                                  : static_cast<double>(static_cast<const float*>(ts)[i]);
  return sp.smoothing == 0.0
             ? t
             : add(mul(t, sub(1.0, sp.smoothing)), div(sp.smoothing, double(sp.classes)));
}

__device__ __forceinline__ double clip(double q) {
  const double lo = q < kEpsilon ? kEpsilon : q;  // std::max(q, eps)
  return (1.0 - kEpsilon) < lo ? (1.0 - kEpsilon) : lo;
}
__device__ __forceinline__ bool in_band(double q) { return q >= kEpsilon && q <= 1.0 - kEpsilon; }

struct Row {
  double lse = 0, sum = 0, t = 0, u = 0;
};

// A row's combined first-round statistics over its k blocks, in block order (as the CPU).
__device__ Row combine(bool from_logits, const double* st, int64_t k) {
  Row r;
  if (from_logits) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t b = 0; b < k; ++b) m = max_e(m, st[4 * b]);
    double s = 0;
    for (int64_t b = 0; b < k; ++b) {
      if (st[4 * b + 1] > 0) s = add(s, mul(st[4 * b + 1], ::exp(sub(st[4 * b], m))));
      r.t = add(r.t, st[4 * b + 2]);
      r.u = add(r.u, st[4 * b + 3]);
    }
    r.lse = add(m, ::log(s));
  } else {
    for (int64_t b = 0; b < k; ++b) {
      r.sum = add(r.sum, st[2 * b]);
      r.t = add(r.t, st[2 * b + 1]);
    }
  }
  return r;
}

__device__ double row_loss(const Spec& sp, int64_t k, const double* s1, const double* s2) {
  if (sp.two_rounds()) {
    double l = 0;
    for (int64_t b = 0; b < k; ++b) l = add(l, s2[2 * b]);
    return l;
  }
  const Row r = combine(sp.from_logits, s1, k);
  if (sp.from_logits) return sub(mul(r.lse, r.t), r.u);
  return -::log(clip(div(r.t, r.sum)));
}

// ---- First round ----

// Slots of the failure scratch: the first bad label's row, the first non-finite prediction's
// local index (both ~0 when none), the label read there, the prediction's bits.
constexpr int kFailureSlots = 4;

template <typename T>
__global__ void stats_kernel(const T* x, const void* ts, double* out, Spec sp, int64_t nv,
                             int64_t v0, int64_t V, unsigned long long* failure) {
  __shared__ long long reduce_i[32];
  __shared__ double reduce_d[32];
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const int64_t r = blockIdx.x;
  const T* row = x + r * nv;
  int64_t label = -1;
  if (sp.sparse) {
    label = label_at(sp, ts, r);
    if ((label < 0 || label >= V) && threadIdx.x == 0) {
      atomicMin(&failure[0], static_cast<unsigned long long>(r));
    }
  }
  // The first non-finite prediction of the row; the max over the ones before it.
  long long bad = nv;
  for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
    if (!isfinite(double(row[j]))) {
      bad = j;
      break;
    }
  }
  bad = block_min(bad, reduce_i);
  const bool finite = bad == nv;
  if (!finite && threadIdx.x == 0) {
    atomicMin(&failure[1], static_cast<unsigned long long>(r * nv + bad));
  }
  double m = -kInf;
  for (int64_t j = threadIdx.x; j < bad; j += blockDim.x) m = max_e(m, double(row[j]));
  m = block_max(m, reduce_d);
  const bool owner = label >= v0 && label < v0 + nv;
  double* o = out + r * (sp.from_logits ? 4 : 2);
  if (sp.from_logits) {
    double s = 0, t = 0, u = 0;
    if (nv > 0 && finite) {
      double part = 0;
      for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
        part = add(part, ::exp(sub(double(row[j]), m)));
      }
      s = block_sum(part, reduce_d);
      if (sp.sparse) {
        t = owner ? 1.0 : 0.0;
        u = owner ? double(row[label - v0]) : 0.0;
      } else {
        double pt = 0, pu = 0;
        for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
          const double tj = target(sp, ts, r, r * nv + j, v0 + j);
          pt = add(pt, tj);
          pu = add(pu, mul(tj, double(row[j])));
        }
        t = block_sum(pt, reduce_d);
        u = block_sum(pu, reduce_d);
      }
    }
    if (threadIdx.x == 0) {
      o[0] = nv > 0 ? m : -kInf;
      o[1] = s;
      o[2] = t;
      o[3] = u;
    }
  } else {
    double part = 0;
    for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) part = add(part, double(row[j]));
    const double s = block_sum(part, reduce_d);
    if (threadIdx.x == 0) {
      o[0] = s;
      o[1] = owner ? double(row[label - v0]) : 0.0;
    }
  }
}

// Reads the label and the prediction at the failures found (one thread).
template <typename T>
__global__ void failure_values_kernel(const T* x, const void* ts, Spec sp,
                                      unsigned long long* failure) {
  if (failure[0] != ~0ull) {
    const int64_t label = label_at(sp, ts, static_cast<int64_t>(failure[0]));
    failure[2] = static_cast<unsigned long long>(label);
  }
  if (failure[1] != ~0ull) {
    failure[3] = static_cast<unsigned long long>(__double_as_longlong(double(x[failure[1]])));
  }
}

// The global coordinates of local row `row` of a box's leading `dims` dimensions.
Shape row_coords(const Box& box, size_t dims, int64_t row) {
  Shape c(dims);
  for (size_t d = dims; d-- > 0;) {
    c[d] = box.offset[d] + row % box.shape[d];
    row /= box.shape[d];
  }
  return c;
}

int64_t ravel(const Shape& coords, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + coords[d];
  return flat;
}

void keep_first(std::optional<CrossEntropyFailure>& slot, CrossEntropyFailure f) {
  if (!slot || f.before(*slot)) slot = std::move(f);
}

template <typename T>
void stats(const CrossEntropyStats& a, cudaStream_t s) {
  const Array::Shard& xs = *a.pred;
  const int64_t id = xs.device_id;
  const Shape& pshape = *a.pred_shape;
  const size_t lead = pshape.size() - 1;
  const int64_t nv = xs.box.shape[lead], v0 = xs.box.offset[lead];
  const int64_t rows = num_elements(Shape(xs.box.shape.begin(), xs.box.shape.end() - 1));
  if (rows == 0) return;
  const Spec sp = spec_of(a.spec, a.target_dtype, pshape.back());
  StreamScratch scratch(kFailureSlots * sizeof(unsigned long long), s,
                        "cross_entropy_stats scratch", id);
  auto* failure = scratch.as<unsigned long long>();
  cuda::check(cudaMemsetAsync(failure, 0xFF, kFailureSlots * sizeof(unsigned long long), s),
              "cross_entropy_stats memset", id);
  const void* ts = a.targets->buffer.data();
  stats_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, s>>>(
      device_ptr<T>(&xs), ts, device_ptr<double>(a.stats), sp, nv, v0, pshape.back(), failure);
  failure_values_kernel<T><<<1, 1, 0, s>>>(device_ptr<T>(&xs), ts, sp, failure);
  cuda::check_launch("cross_entropy_stats", id);
  unsigned long long host[kFailureSlots];
  cuda::check(cudaMemcpyAsync(host, failure, sizeof host, cudaMemcpyDeviceToHost, s),
              "cross_entropy_stats download", id);
  cuda::check(cudaStreamSynchronize(s), "cross_entropy_stats sync", id);
  const Shape lshape(pshape.begin(), pshape.end() - 1);
  if (host[0] != ~0ull) {  // a bad label (kind 0) comes before any non-finite prediction
    const Shape at = row_coords(xs.box, lead, static_cast<int64_t>(host[0]));
    int64_t label = 0;
    std::memcpy(&label, &host[2], sizeof label);
    keep_first(*a.failure, {.kind = 0, .flat = ravel(at, lshape), .at = at, .label = label});
  } else if (host[1] != ~0ull) {
    const auto k = static_cast<int64_t>(host[1]);
    Shape at = row_coords(xs.box, lead, k / nv);
    at.push_back(v0 + k % nv);
    double value = 0;
    std::memcpy(&value, &host[3], sizeof value);
    keep_first(*a.failure, {.kind = 1, .flat = ravel(at, pshape), .at = at, .value = value});
  }
}

void cross_entropy_stats_cuda(const CrossEntropyStats& a) {
  const int64_t id = a.pred->device_id;
  cudaStream_t s = cuda::enter_device(id);
  dispatch_float(a.pred_dtype, "cross_entropy_stats", id, [&]<typename T>(T*) { stats<T>(a, s); });
}

// ---- Second round (categorical probabilities) ----

template <typename T>
__global__ void stats2_kernel(const T* x, const void* ts, const double* s1, double* out, Spec sp,
                              int64_t k, int64_t nv, int64_t v0) {
  __shared__ double reduce_d[32];
  const int64_t r = blockIdx.x;
  const double sum = combine(false, s1 + r * 2 * k, k).sum;
  double l = 0, band = 0;
  for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
    const double t = target(sp, ts, r, r * nv + j, v0 + j);
    const double q = div(double(x[r * nv + j]), sum);
    l = sub(l, mul(t, ::log(clip(q))));
    if (in_band(q)) band = add(band, t);
  }
  l = block_sum(l, reduce_d);
  band = block_sum(band, reduce_d);
  if (threadIdx.x == 0) {
    out[2 * r] = l;
    out[2 * r + 1] = band;
  }
}

void cross_entropy_stats2_cuda(const CrossEntropyStats2& a) {
  const Array::Shard& xs = *a.pred;
  const int64_t id = xs.device_id;
  cudaStream_t s = cuda::enter_device(id);
  const size_t lead = xs.box.shape.size() - 1;
  const int64_t nv = xs.box.shape[lead], v0 = xs.box.offset[lead];
  const int64_t rows = num_elements(Shape(xs.box.shape.begin(), xs.box.shape.end() - 1));
  if (rows == 0) return;
  const Spec sp = spec_of(a.spec, a.target_dtype, a.classes);
  dispatch_float(a.pred_dtype, "cross_entropy_stats2", id, [&]<typename T>(T*) {
    stats2_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, s>>>(
        device_ptr<T>(&xs), a.targets->buffer.data(), device_ptr<double>(a.stats1),
        device_ptr<double>(a.out), sp, a.k, nv, v0);
  });
  cuda::check_launch("cross_entropy_stats2", id);
}

// ---- Losses ----

// out[r] = the loss of row r (double), or into `f32` (float) when it is not null.
__global__ void row_loss_kernel(const double* s1, const double* s2, double* out, float* f32,
                                Spec sp, int64_t k, int64_t rows) {
  const int64_t w1 = sp.from_logits ? 4 : 2;
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; r < rows;
       r += int64_t{gridDim.x} * blockDim.x) {
    const double v = row_loss(sp, k, s1 + r * w1 * k, s2 ? s2 + r * 2 * k : nullptr);
    if (f32) {
      f32[r] = static_cast<float>(v);
    } else {
      out[r] = v;
    }
  }
}

void cross_entropy_loss_sum_cuda(const CrossEntropyLossSum& a) {
  const int64_t id = a.stats1->device_id;
  cudaStream_t s = cuda::enter_device(id);
  const int64_t w1 = a.spec.width();
  const int64_t rows = a.k <= 0 ? 0 : a.stats1->box.num_elements() / (w1 * a.k);
  if (rows == 0) return;
  const Spec sp = spec_of(a.spec, DType::kI32, 0);
  StreamScratch losses(static_cast<size_t>(rows) * sizeof(double), s,
                       "cross_entropy_loss_sum scratch", id);
  row_loss_kernel<<<grid_for(rows), kThreads, 0, s>>>(
      device_ptr<double>(a.stats1), sp.two_rounds() ? device_ptr<double>(a.stats2) : nullptr,
      losses.as<double>(), nullptr, sp, a.k, rows);
  cuda::check_launch("cross_entropy_loss_sum", id);
  std::vector<double> host(static_cast<size_t>(rows));
  cuda::check(cudaMemcpyAsync(host.data(), losses.as<double>(), host.size() * sizeof(double),
                              cudaMemcpyDeviceToHost, s),
              "cross_entropy_loss_sum download", id);
  cuda::check(cudaStreamSynchronize(s), "cross_entropy_loss_sum sync", id);
  double& total = *a.total;
  for (double v : host) total += v;  // in row order, as the CPU
}

void cross_entropy_row_losses_cuda(const CrossEntropyRowLosses& a) {
  Array::Shard& o = *a.out;
  const int64_t id = o.device_id;
  cudaStream_t s = cuda::enter_device(id);
  const int64_t rows = o.box.num_elements();
  if (rows == 0) return;
  if (a.dtype != DType::kF32 && a.dtype != DType::kF64) {
    throw ValueError("cross_entropy_row_losses on gpu:" + std::to_string(id) +
                     " needs an F32 or F64 output, got " + std::string(dtype_name(a.dtype)));
  }
  const Spec sp = spec_of(a.spec, DType::kI32, 0);
  const bool f32 = a.dtype == DType::kF32;
  row_loss_kernel<<<grid_for(rows), kThreads, 0, s>>>(
      device_ptr<double>(a.stats1), sp.two_rounds() ? device_ptr<double>(a.stats2) : nullptr,
      f32 ? nullptr : device_ptr<double>(&o), f32 ? device_ptr<float>(&o) : nullptr, sp, a.k, rows);
  cuda::check_launch("cross_entropy_row_losses", id);
}

// ---- Gradient ----

template <typename T>
__global__ void grad_kernel(T* g, const T* x, const void* ts, const double* s1, const double* s2,
                            Spec sp, int64_t k, int64_t nv, int64_t v0, double coef) {
  const int64_t r = blockIdx.x;
  const int64_t w1 = sp.from_logits ? 4 : 2;
  const Row row = combine(sp.from_logits, s1 + r * w1 * k, k);  // every thread: the same values
  const T* xr = x + r * nv;
  T* gr = g + r * nv;
  if (sp.from_logits) {
    for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
      const double p = mul(::exp(sub(double(xr[j]), row.lse)), row.t);
      gr[j] = static_cast<T>(mul(sub(p, target(sp, ts, r, r * nv + j, v0 + j)), coef));
    }
  } else if (sp.sparse) {
    const int64_t label = label_at(sp, ts, r);
    const double q = div(row.t, row.sum);
    const bool band = in_band(q);
    for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
      const double d = band ? div(sub(1.0, v0 + j == label ? div(1.0, q) : 0.0), row.sum) : 0.0;
      gr[j] = static_cast<T>(mul(d, coef));
    }
  } else {
    double b = 0;
    for (int64_t blk = 0; blk < k; ++blk) b = add(b, s2[r * 2 * k + 2 * blk + 1]);
    for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) {
      const double q = div(double(xr[j]), row.sum);
      const double gj = in_band(q) ? div(-target(sp, ts, r, r * nv + j, v0 + j), q) : 0.0;
      gr[j] = static_cast<T>(mul(div(add(gj, b), row.sum), coef));
    }
  }
}

void cross_entropy_grad_cuda(const CrossEntropyGrad& a) {
  const Array::Shard& xs = *a.pred;
  const int64_t id = xs.device_id;
  cudaStream_t s = cuda::enter_device(id);
  const size_t lead = xs.box.shape.size() - 1;
  const int64_t nv = xs.box.shape[lead], v0 = xs.box.offset[lead];
  if (nv == 0) return;
  const int64_t rows = xs.box.num_elements() / nv;
  if (rows == 0) return;
  const Spec sp = spec_of(a.spec, a.target_dtype, a.classes);
  dispatch_float(a.pred_dtype, "cross_entropy_grad", id, [&]<typename T>(T*) {
    grad_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, s>>>(
        device_ptr<T>(a.grad), device_ptr<T>(&xs), a.targets->buffer.data(),
        device_ptr<double>(a.stats1), sp.two_rounds() ? device_ptr<double>(a.stats2) : nullptr, sp,
        a.k, nv, v0, a.coef);
  });
  cuda::check_launch("cross_entropy_grad", id);
}

}  // namespace
}  // namespace meshlayout::layer_cuda

namespace meshlayout::internal_cuda {

void register_cuda_cross_entropy_kernels() {
  cross_entropy_stats.define(DeviceKind::kCuda, &layer_cuda::cross_entropy_stats_cuda);
  cross_entropy_stats2.define(DeviceKind::kCuda, &layer_cuda::cross_entropy_stats2_cuda);
  cross_entropy_loss_sum.define(DeviceKind::kCuda, &layer_cuda::cross_entropy_loss_sum_cuda);
  cross_entropy_row_losses.define(DeviceKind::kCuda, &layer_cuda::cross_entropy_row_losses_cuda);
  cross_entropy_grad.define(DeviceKind::kCuda, &layer_cuda::cross_entropy_grad_cuda);
}

}  // namespace meshlayout::internal_cuda
