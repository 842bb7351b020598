// device_memory.cc — see device_memory.h.
#include "meshlayout/runtime/device_memory.h"

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

#include <sys/mman.h>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

void check_strided(const StridedCopy& c) {
  if (c.dst_stride.size() != c.extent.size() || c.src_stride.size() != c.extent.size()) {
    throw ValueError(fmt::format(
        "copy_strided needs one dst and one src stride per extent: {} extents, {} dst strides, "
        "{} src strides",
        c.extent.size(), c.dst_stride.size(), c.src_stride.size()));
  }
  for (size_t d = 0; d < c.extent.size(); ++d) {
    if (c.extent[d] < 0) {
      throw ValueError(fmt::format("copy_strided: extent {} is {}, expected >= 0", d, c.extent[d]));
    }
  }
}

class HostMemory final : public DeviceMemory {
 public:
  std::string_view name() const override { return "host"; }

  std::byte* allocate(size_t bytes) override {
    const size_t alignment = bytes >= kHugePage ? kHugePage : 64;
    const size_t capacity = (bytes + alignment - 1) / alignment * alignment;
    void* p = std::aligned_alloc(alignment, capacity);
    if (p == nullptr) throw std::bad_alloc();
    if (capacity >= kHugePage) madvise(p, capacity, MADV_HUGEPAGE);  // best effort
    return static_cast<std::byte*>(p);
  }

  void free(std::byte* block, size_t /*bytes*/) override { std::free(block); }

  void copy_from_host(std::byte* dst, const std::byte* host_src, size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, host_src, bytes);
  }
  void copy_to_host(std::byte* host_dst, const std::byte* src, size_t bytes) override {
    if (bytes > 0) std::memcpy(host_dst, src, bytes);
  }
  void copy_on_device(std::byte* dst, const std::byte* src, size_t bytes) override {
    if (bytes > 0) std::memmove(dst, src, bytes);
  }

  void copy_strided(const StridedCopy& c) override {
    check_strided(c);
    if (c.run_bytes == 0) return;
    for_each_outer_offset(c, c.extent.size(), [&](int64_t dst_off, int64_t src_off) {
      std::memcpy(c.dst + dst_off, c.src + src_off, c.run_bytes);
    });
  }
};

}  // namespace

DeviceMemory& host_memory() {
  // Never destroyed: accounts that outlive main's locals (static ones) still free through it.
  static HostMemory* const memory = new HostMemory;
  return *memory;
}

}  // namespace meshlayout

namespace meshlayout {

BoxCopy plan_box_copy(CopyDirection direction, std::byte* dst, const Box& dst_box,
                      const std::byte* src, const Box& src_box, const Box& region, size_t elem) {
  const size_t rank = region.shape.size();
  BoxCopy out{.dst = dst, .src = src, .run_bytes = 0, .direction = direction};
  if (region.num_elements() == 0) return out;
  std::vector<int64_t> dst_stride(rank), src_stride(rank);
  int64_t ds = static_cast<int64_t>(elem), ss = static_cast<int64_t>(elem);
  for (size_t d = rank; d-- > 0;) {
    dst_stride[d] = ds;
    src_stride[d] = ss;
    ds *= dst_box.shape[d];
    ss *= src_box.shape[d];
  }
  int64_t dst_off = 0, src_off = 0;
  for (size_t d = 0; d < rank; ++d) {
    dst_off += (region.offset[d] - dst_box.offset[d]) * dst_stride[d];
    src_off += (region.offset[d] - src_box.offset[d]) * src_stride[d];
  }
  // The run: the innermost dimension, extended outwards while a dimension is whole in both boxes.
  size_t outer = rank;  // dimensions [0, outer) are looped over
  int64_t run = static_cast<int64_t>(elem);
  if (rank > 0) {
    run *= region.shape[rank - 1];
    outer = rank - 1;
    while (outer > 0 && region.shape[outer] == dst_box.shape[outer] &&
           region.shape[outer] == src_box.shape[outer]) {
      run *= region.shape[outer - 1];
      --outer;
    }
  }
  out.extent.assign(region.shape.begin(), region.shape.begin() + static_cast<ptrdiff_t>(outer));
  dst_stride.resize(outer);
  src_stride.resize(outer);
  out.dst_stride = std::move(dst_stride);
  out.src_stride = std::move(src_stride);
  out.dst = dst + dst_off;
  out.src = src + src_off;
  out.run_bytes = static_cast<size_t>(run);
  return out;
}

void copy_box_through(DeviceMemory& memory, CopyDirection direction, std::byte* dst,
                      const Box& dst_box, const std::byte* src, const Box& src_box,
                      const Box& region, size_t elem) {
  const BoxCopy c = plan_box_copy(direction, dst, dst_box, src, src_box, region, elem);
  if (c.run_bytes == 0) return;
  memory.copy_strided(c.copy());
}

}  // namespace meshlayout
