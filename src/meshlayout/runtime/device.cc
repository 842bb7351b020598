#include "meshlayout/runtime/device.h"

#include <fmt/format.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/runtime/device_memory.h"
#ifdef MESHLAYOUT_WITH_CUDA
#include "meshlayout/runtime/cuda/cuda_memory.h"
#endif

namespace meshlayout {

// Blocks come from and return to the CPU kind's device memory (device_memory.h); the account
// charges, caches and reuses them.
namespace {

constexpr size_t kCacheMinBytes = size_t{64} << 10;
constexpr size_t kHugePage = size_t{2} << 20;

// Capacity actually reserved for a request: small blocks to 64 B, cached ones to 64 KiB, huge
// ones to 2 MiB, so that blocks of similar sizes are interchangeable in the cache.
size_t capacity_for(size_t bytes) {
  if (bytes >= kHugePage) return (bytes + kHugePage - 1) / kHugePage * kHugePage;
  if (bytes >= kCacheMinBytes)
    return (bytes + kCacheMinBytes - 1) / kCacheMinBytes * kCacheMinBytes;
  return (bytes + 63) / 64 * 64;
}

// The memory of a device of `kind` (GPU memory of gpu:K's physical GPU for kCuda).
DeviceMemory* memory_of_kind(DeviceKind kind, int64_t id) {
  if (kind == DeviceKind::kCpu) return &host_memory();
#ifdef MESHLAYOUT_WITH_CUDA
  return &cuda_device_memory(id);
#else
  throw FailedPreconditionError(
      fmt::format("{} is a GPU device, and this meshlayout was built without CUDA (configure with "
                  "-DMESHLAYOUT_CUDA=ON on a machine with nvcc)",
                  device_name(id, kind)));
#endif
}

}  // namespace

MemoryAccount::MemoryAccount(std::string name, int64_t max_cached_bytes, DeviceMemory* memory)
    : name_(std::move(name)),
      max_cached_(max_cached_bytes),
      memory_(memory != nullptr ? memory : &host_memory()) {}

MemoryAccount::~MemoryAccount() { release_cache(); }

std::byte* MemoryAccount::allocate(size_t bytes) {
  charge(static_cast<int64_t>(bytes));
  if (bytes == 0) return nullptr;
  const size_t capacity = capacity_for(bytes);
  if (capacity >= kCacheMinBytes) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(capacity);
    if (it != cache_.end()) {
      std::byte* block = it->second;
      cache_.erase(it);
      cached_bytes_ -= static_cast<int64_t>(capacity);
      return block;
    }
  }
  try {
    return memory_->allocate(capacity);
  } catch (...) {
    release_cache();  // give the cache back and try once more
    try {
      return memory_->allocate(capacity);
    } catch (const ResourceExhaustedError& e) {
      release(static_cast<int64_t>(bytes));
      throw ResourceExhaustedError(fmt::format("{}: {}", name_, e.what()));  // name the device
    } catch (...) {
      release(static_cast<int64_t>(bytes));
      throw;
    }
  }
}

void MemoryAccount::deallocate(std::byte* block, size_t bytes) {
  release(static_cast<int64_t>(bytes));
  if (block == nullptr) return;
  const size_t capacity = capacity_for(bytes);
  if (capacity >= kCacheMinBytes) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cached_bytes_ + static_cast<int64_t>(capacity) <= max_cached_) {
      cache_.emplace(capacity, block);
      cached_bytes_ += static_cast<int64_t>(capacity);
      return;
    }
  }
  memory_->free(block, capacity);
}

void MemoryAccount::release_cache() {
  std::lock_guard<std::mutex> lock(cache_mu_);
  for (auto& [capacity, block] : cache_) memory_->free(block, capacity);
  cache_.clear();
  cached_bytes_ = 0;
}

MemoryStats MemoryAccount::stats() const {
  std::lock_guard<std::mutex> lock(cache_mu_);
  return MemoryStats{live_.load(), peak_.load(), allocations_.load(), cached_bytes_};
}

void MemoryAccount::reset_peak() { peak_.store(live_.load()); }

void MemoryAccount::charge(int64_t bytes) {
  int64_t now = live_.fetch_add(bytes) + bytes;
  allocations_.fetch_add(1);
  int64_t peak = peak_.load();
  while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
  }
}

void MemoryAccount::release(int64_t bytes) { live_.fetch_sub(bytes); }

VirtualDevice::VirtualDevice(int64_t global_id, DeviceKind kind)
    : id_(global_id),
      kind_(kind),
      memory_(device_name(global_id, kind), int64_t{1} << 30, memory_of_kind(kind, global_id)) {}

DeviceBuffer::DeviceBuffer(MemoryAccount& account, size_t bytes)
    : account_(&account), data_(account.allocate(bytes)), size_(bytes) {}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : account_(other.account_), data_(other.data_), size_(other.size_) {
  other.account_ = nullptr;
  other.data_ = nullptr;
  other.size_ = 0;
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    reset();
    account_ = other.account_;
    data_ = other.data_;
    size_ = other.size_;
    other.account_ = nullptr;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { reset(); }

void DeviceBuffer::reset() {
  if (account_) account_->deallocate(data_, size_);
  account_ = nullptr;
  data_ = nullptr;
  size_ = 0;
}

}  // namespace meshlayout
