// cuda_context.cc — see cuda_context.h.
#include "meshlayout/runtime/cuda/cuda_context.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "meshlayout/core/errors.h"

namespace meshlayout::cuda {
namespace {

constexpr int kMaxPhysicalGpus = 64;

struct Context {
  int count = 0;
  std::string reason;
  std::array<cudaStream_t, kMaxPhysicalGpus> streams{};
  std::array<std::once_flag, kMaxPhysicalGpus> stream_once;
};

Context& context() {
  // Never destroyed: streams stay valid while static destructors of other files free memory.
  static Context* const c = [] {
    auto* ctx = new Context;
    int n = 0;
    const cudaError_t status = cudaGetDeviceCount(&n);
    if (status != cudaSuccess) {
      ctx->reason = fmt::format("{} ({})", cudaGetErrorString(status), cudaGetErrorName(status));
      cudaGetLastError();  // clear it: no later call should see it
      n = 0;
    } else if (n == 0) {
      ctx->reason = "the CUDA driver reports no device";
    }
    ctx->count = n > kMaxPhysicalGpus ? kMaxPhysicalGpus : n;
    return ctx;
  }();
  return *c;
}

std::string device_label(int64_t device_id) {
  return device_id < 0 ? std::string("the GPU") : fmt::format("gpu:{}", device_id);
}

}  // namespace

int physical_gpu_count() { return context().count; }

std::string_view no_gpu_reason() { return context().reason; }

int physical_gpu_of(int64_t device_id) {
  const int n = physical_gpu_count();
  if (n == 0) {
    throw FailedPreconditionError(fmt::format(
        "gpu:{} needs a CUDA GPU, and this process has none: {}", device_id, no_gpu_reason()));
  }
  if (device_id < 0) throw ValueError(fmt::format("gpu:{} is not a device", device_id));
  return static_cast<int>(device_id % n);
}

cudaStream_t stream_of(int64_t device_id) {
  const int gpu = physical_gpu_of(device_id);
  Context& c = context();
  std::call_once(c.stream_once[static_cast<size_t>(gpu)], [&] {
    int previous = 0;
    cudaGetDevice(&previous);
    check(cudaSetDevice(gpu), "cudaSetDevice", device_id);
    check(cudaStreamCreateWithFlags(&c.streams[static_cast<size_t>(gpu)], cudaStreamNonBlocking),
          "cudaStreamCreateWithFlags", device_id);
    cudaSetDevice(previous);
  });
  return c.streams[static_cast<size_t>(gpu)];
}

cudaStream_t enter_device(int64_t device_id) {
  const cudaStream_t stream = stream_of(device_id);
  check(cudaSetDevice(physical_gpu_of(device_id)), "cudaSetDevice", device_id);
  return stream;
}

void synchronize_device(int64_t device_id) {
  const cudaStream_t stream = enter_device(device_id);
  check(cudaStreamSynchronize(stream), "cudaStreamSynchronize", device_id);
}

void check(cudaError_t status, std::string_view what, int64_t device_id) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  const std::string message =
      fmt::format("CUDA error on {} in {}: {}: {}", device_label(device_id), what,
                  cudaGetErrorName(status), cudaGetErrorString(status));
  if (status == cudaErrorMemoryAllocation) throw ResourceExhaustedError(message);
  throw InternalError(message);
}

void check_launch(std::string_view kernel, int64_t device_id) {
  check(cudaGetLastError(), kernel, device_id);
}

namespace {

constexpr size_t kPinnedUploadMax = size_t{4} << 20;
constexpr size_t kPinnedSlots = 64;  // per GPU; beyond it an upload waits for the oldest slot

struct PinnedSlot {
  void* block = nullptr;
  size_t capacity = 0;
  cudaEvent_t done = nullptr;  // recorded after the slot's last copy
};

struct PinnedPool {
  std::mutex mu;
  std::vector<PinnedSlot> slots;
  size_t next_wait = 0;  // round robin over full pools
};

PinnedPool& pinned_pool(int gpu) {
  static std::array<PinnedPool, kMaxPhysicalGpus>* const pools =
      new std::array<PinnedPool, kMaxPhysicalGpus>;  // never destroyed (used at exit)
  return (*pools)[static_cast<size_t>(gpu)];
}

}  // namespace

void upload_async(void* dst, const void* host, size_t bytes, int64_t device_id, cudaStream_t s) {
  if (bytes == 0) return;
  if (bytes > kPinnedUploadMax) {
    check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync upload",
          device_id);
    return;
  }
  const int gpu = physical_gpu_of(device_id);
  PinnedPool& pool = pinned_pool(gpu);
  std::lock_guard<std::mutex> lock(pool.mu);
  PinnedSlot* slot = nullptr;
  for (PinnedSlot& candidate : pool.slots) {  // a finished slot that is large enough
    if (candidate.capacity >= bytes && cudaEventQuery(candidate.done) == cudaSuccess) {
      slot = &candidate;
      break;
    }
  }
  cudaGetLastError();  // cudaEventQuery's cudaErrorNotReady is not an error
  if (slot == nullptr && pool.slots.size() < kPinnedSlots) {
    PinnedSlot fresh;
    fresh.capacity = std::max<size_t>(bytes, size_t{64} << 10);
    check(cudaHostAlloc(&fresh.block, fresh.capacity, cudaHostAllocPortable),
          "cudaHostAlloc (upload slot)", device_id);
    check(cudaEventCreateWithFlags(&fresh.done, cudaEventDisableTiming),
          "cudaEventCreate (upload slot)", device_id);
    pool.slots.push_back(fresh);
    slot = &pool.slots.back();
  }
  if (slot == nullptr) {  // every slot busy: wait for one, growing it if it is too small
    slot = &pool.slots[pool.next_wait++ % pool.slots.size()];
    check(cudaEventSynchronize(slot->done), "cudaEventSynchronize (upload slot)", device_id);
    if (slot->capacity < bytes) {
      check(cudaFreeHost(slot->block), "cudaFreeHost (upload slot)", device_id);
      slot->block = nullptr;
      slot->capacity = 0;
      check(cudaHostAlloc(&slot->block, bytes, cudaHostAllocPortable),
            "cudaHostAlloc (upload slot)", device_id);
      slot->capacity = bytes;
    }
  }
  std::memcpy(slot->block, host, bytes);
  check(cudaMemcpyAsync(dst, slot->block, bytes, cudaMemcpyHostToDevice, s),
        "cudaMemcpyAsync upload", device_id);
  check(cudaEventRecord(slot->done, s), "cudaEventRecord (upload slot)", device_id);
}

}  // namespace meshlayout::cuda
