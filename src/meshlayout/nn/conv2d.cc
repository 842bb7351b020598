#include "meshlayout/nn/conv2d.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/ops/blas.h"

namespace meshlayout {

Conv2D::Conv2D(int64_t filters, Conv2DOptions options)
    : Layer("conv2d", options.name), filters_(filters), options_(std::move(options)) {
  if (filters < 1) throw ValueError(fmt::format("Conv2D filters must be at least 1, got {}", filters));
  for (int d = 0; d < 2; ++d) {
    if (options_.kernel_size[static_cast<size_t>(d)] < 1 || options_.strides[static_cast<size_t>(d)] < 1) {
      throw ValueError(fmt::format(
          "Conv2D kernel_size and strides must be at least 1, got kernel_size=({}, {}), "
          "strides=({}, {})",
          options_.kernel_size[0], options_.kernel_size[1], options_.strides[0], options_.strides[1]));
    }
  }
  if (options_.padding != "valid" && options_.padding != "same") {
    throw ValueError(fmt::format("Conv2D padding must be 'valid' or 'same', got {}",
                                 quote(options_.padding)));
  }
}

int64_t Conv2D::out_extent(int64_t in, int d) const {
  const int64_t k = options_.kernel_size[static_cast<size_t>(d)];
  const int64_t s = options_.strides[static_cast<size_t>(d)];
  if (options_.padding == "same") return (in + s - 1) / s;
  return in >= k ? (in - k) / s + 1 : 0;
}

// TF/Keras "same": total padding max((out-1)*s + k - in, 0), the smaller half before.
int64_t Conv2D::pad_before(int64_t in, int d) const {
  if (options_.padding != "same") return 0;
  const int64_t k = options_.kernel_size[static_cast<size_t>(d)];
  const int64_t s = options_.strides[static_cast<size_t>(d)];
  const int64_t total = std::max<int64_t>((out_extent(in, d) - 1) * s + k - in, 0);
  return total / 2;
}

void Conv2D::check_input(const Shape& input_shape) const {
  if (input_shape.size() != 4) {
    throw ValueError(fmt::format("Conv2D layer {} takes NHWC inputs of rank 4, got shape {}",
                                 quote(name()), shape_to_string(input_shape)));
  }
  if (kernel_ && input_shape[3] != kernel_->shape()[2]) {
    throw ValueError(fmt::format(
        "Conv2D layer {} was built for {} input channels, got an input of shape {}", quote(name()),
        kernel_->shape()[2], shape_to_string(input_shape)));
  }
}

Shape Conv2D::compute_output_shape(const Shape& s) const {
  check_input(s);
  return {s[0], out_extent(s[1], 0), out_extent(s[2], 1), filters_};
}

void Conv2D::build(const Shape& input_shape) {
  check_input(input_shape);
  kernel_ = add_weight({.name = "kernel",
                        .shape = {options_.kernel_size[0], options_.kernel_size[1], input_shape[3], filters_},
                        .initializer = options_.kernel_initializer,
                        .regularizer = options_.kernel_regularizer,
                        .layout = options_.kernel_layout});
  if (options_.use_bias) {
    bias_ = add_weight({.name = "bias",
                        .shape = {filters_},
                        .initializer = options_.bias_initializer,
                        .regularizer = options_.bias_regularizer,
                        .layout = options_.bias_layout});
  }
}

Array Conv2D::call(const Array& x) {
  check_input(x.shape());
  if (x.dtype() != DType::kF32) {
    throw ValueError(fmt::format("Conv2D layer {} takes F32 inputs, got {}", quote(name()),
                                 dtype_name(x.dtype())));
  }
  const Array& kernel_value = kernel_->value();
  const DeviceMesh& mesh = kernel_value.mesh();
  const DimSharding filter_axes = kernel_value.layout().axes()[3];
  // The input keeps its batch split when it is on the kernel's mesh and the split uses no
  // filter axis; everything else is gathered.
  DimSharding batch_axes;
  if (x.mesh() == mesh) {
    batch_axes = x.layout().axes()[0];
    for (const std::string& a : batch_axes.axes()) {
      for (const std::string& f : filter_axes.axes()) {
        if (a == f) batch_axes = DimSharding();
      }
    }
  }
  Array k = distribute_tensor(kernel_value, TensorLayout({None, None, None, filter_axes}, mesh));
  Array in = distribute_tensor(x, TensorLayout({batch_axes, None, None, None}, mesh));
  const Shape out_shape = compute_output_shape(x.shape());
  Array y = Array::allocate(TensorLayout({batch_axes, None, None, filter_axes}, mesh), out_shape,
                            DType::kF32, in.runtime_ptr());
  const int64_t H = x.shape()[1], W = x.shape()[2], C = x.shape()[3];
  const int64_t kh = options_.kernel_size[0], kw = options_.kernel_size[1];
  const int64_t sh = options_.strides[0], sw = options_.strides[1];
  const int64_t OH = out_shape[1], OW = out_shape[2];
  const int64_t top = pad_before(H, 0), left = pad_before(W, 1);
  const int64_t patch = kh * kw * C;
  internal_ops::use_single_threaded_blas();
  y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
    Array::Shard& out = y.local_shards()[i];
    const Array::Shard* xs = in.shard_at(out.position);
    const Array::Shard* ks = k.shard_at(out.position);
    const int64_t images = out.box.shape[0], nf = out.box.shape[3];
    if (images == 0 || nf == 0 || OH * OW == 0) return;
    std::vector<float> columns(static_cast<size_t>(OH * OW * patch));
    for (int64_t b = 0; b < images; ++b) {
      const float* image = reinterpret_cast<const float*>(xs->buffer.data()) + b * H * W * C;
      // im2col: row (oh, ow) holds the patch (i, j, c) in the kernel's row-major order.
      for (int64_t oh = 0; oh < OH; ++oh) {
        for (int64_t ow = 0; ow < OW; ++ow) {
          float* row = columns.data() + (oh * OW + ow) * patch;
          for (int64_t di = 0; di < kh; ++di) {
            const int64_t ih = oh * sh + di - top;
            for (int64_t dj = 0; dj < kw; ++dj) {
              const int64_t iw = ow * sw + dj - left;
              float* dst = row + (di * kw + dj) * C;
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) {
                std::fill(dst, dst + C, 0.0f);
              } else {
                std::memcpy(dst, image + (ih * W + iw) * C, static_cast<size_t>(C) * sizeof(float));
              }
            }
          }
        }
      }
      float* result = reinterpret_cast<float*>(out.buffer.data()) + b * OH * OW * nf;
      internal_ops::gemm<float>(OH * OW, nf, patch, columns.data(), patch,
                                reinterpret_cast<const float*>(ks->buffer.data()), nf, result, nf);
    }
  });
  if (bias_) {
    Array bias = distribute_tensor(bias_->value(), TensorLayout({filter_axes}, mesh));
    y.runtime().pool().parallel_for(y.local_shards().size(), [&](size_t i) {
      Array::Shard& s = y.local_shards()[i];
      const int64_t nf = s.box.shape[3];
      if (nf == 0) return;
      const float* b = reinterpret_cast<const float*>(bias.shard_at(s.position)->buffer.data());
      float* p = reinterpret_cast<float*>(s.buffer.data());
      for (int64_t r = 0; r < s.box.num_elements() / nf; ++r) {
        for (int64_t c = 0; c < nf; ++c) p[r * nf + c] += b[c];
      }
    });
  }
  if (options_.activation == Activation::kLinear) return y;
  return apply_activation(options_.activation, std::move(y));
}

}  // namespace meshlayout
