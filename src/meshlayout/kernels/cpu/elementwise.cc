// cpu/elementwise.cc — the CPU implementation of kernels/elementwise.h (moved unchanged from
// ops/elementwise.cc).
#include "meshlayout/kernels/elementwise.h"

#include <cstring>

namespace meshlayout {
namespace {

template <typename Combine>
void combine_into(const CombineShards& args, Combine combine) {
  Array::Shard& o = *args.y;
  const Array::Shard* s = args.x;
  const int64_t n = o.box.num_elements();
  if (args.dtype == DType::kF32) {
    float* y = reinterpret_cast<float*>(o.buffer.data());
    const float* x = reinterpret_cast<const float*>(s->buffer.data());
    for (int64_t k = 0; k < n; ++k) y[k] = combine(y[k], x[k]);
  } else {
    double* y = reinterpret_cast<double*>(o.buffer.data());
    const double* x = reinterpret_cast<const double*>(s->buffer.data());
    for (int64_t k = 0; k < n; ++k) y[k] = combine(y[k], x[k]);
  }
}

constexpr auto kPlus = [](auto x, auto y) { return x + y; };
constexpr auto kTimes = [](auto x, auto y) { return x * y; };

}  // namespace

void combine_shards_cpu(const CombineShards& args) {
  if (args.function == Binary::kAdd) {
    combine_into(args, kPlus);
  } else {
    combine_into(args, kTimes);
  }
}

void concatenate_shards_cpu(const ConcatenateShards& args) {
  Array::Shard& o = *args.dst;
  const size_t ax = args.axis;
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < ax; ++d) outer *= o.box.shape[d];
  for (size_t d = ax + 1; d < o.box.shape.size(); ++d) inner *= o.box.shape[d];
  std::byte* dst = o.buffer.data();
  for (int64_t r = 0; r < outer; ++r) {
    for (const Array::Shard* s : args.inputs) {
      const size_t run = static_cast<size_t>(s->box.shape[ax] * inner) * args.elem;
      if (run == 0) continue;
      std::memcpy(dst, s->buffer.data() + static_cast<size_t>(r) * run, run);
      dst += run;
    }
  }
}

}  // namespace meshlayout
