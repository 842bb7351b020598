// device.h — virtual devices with their own memory accounting, and the buffers they own.
//
// A VirtualDevice is one `cpu:K` of list_devices() (or `gpu:K` of list_devices("gpu"), whose
// blocks are GPU memory: runtime/cuda/) that lives in this process. Every
// DeviceBuffer charges its bytes to one MemoryAccount (a device's, or a runtime's staging
// account) for as long as it lives, so tests and the CLI can read bytes live and the peak.
//
// Example:
//   VirtualDevice dev(3);                     // cpu:3
//   { DeviceBuffer b(dev.memory(), 1 << 20); dev.memory().stats().bytes_live; }  // 1 MiB
//   dev.memory().stats().peak_bytes;          // 1 MiB, until reset_peak()
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "meshlayout/layout/devices.h"

namespace meshlayout {

class DeviceMemory;

struct MemoryStats {
  int64_t bytes_live = 0;
  int64_t peak_bytes = 0;    // highest bytes_live since construction or reset_peak()
  int64_t allocations = 0;   // buffers allocated since construction
  int64_t bytes_cached = 0;  // freed blocks kept for reuse (not live; see MemoryAccount)
};

/// Thread-safe byte counter for one memory (a device's, or a staging area's), and its block
/// cache: as device allocators do (PyTorch's caching allocator, XLA's BFC), freed blocks of
/// 64 KiB or more are kept for reuse, up to `max_cached_bytes`, so a repeated reshard does not
/// pay page faults again. Cached bytes are not live; release_cache() returns them to the OS.
/// Blocks of 2 MiB or more are backed by transparent huge pages where the kernel allows.
class MemoryAccount {
 public:
  /// An account whose blocks come from `memory` (host memory when null: device_memory.h).
  explicit MemoryAccount(std::string name, int64_t max_cached_bytes = int64_t{1} << 30,
                         DeviceMemory* memory = nullptr);
  ~MemoryAccount();
  MemoryAccount(const MemoryAccount&) = delete;
  MemoryAccount& operator=(const MemoryAccount&) = delete;

  /// A block of at least `bytes` (64-byte aligned); nullptr for 0 bytes. Charges `bytes`.
  std::byte* allocate(size_t bytes);
  /// Returns a block from allocate(bytes); it is cached or freed.
  void deallocate(std::byte* block, size_t bytes);
  /// Frees every cached block.
  void release_cache();

  const std::string& name() const { return name_; }
  /// Where the blocks live (host_memory() for CPU devices and staging).
  DeviceMemory& device_memory() const { return *memory_; }
  MemoryStats stats() const;
  /// Sets the peak to the bytes live now.
  void reset_peak();

  void charge(int64_t bytes);
  void release(int64_t bytes);

 private:
  std::string name_;
  int64_t max_cached_;
  DeviceMemory* memory_;
  mutable std::mutex cache_mu_;
  std::multimap<size_t, std::byte*> cache_;  // capacity → block
  int64_t cached_bytes_ = 0;
  std::atomic<int64_t> live_{0};
  std::atomic<int64_t> peak_{0};
  std::atomic<int64_t> allocations_{0};
};

/// One virtual device of this process: cpu:K, or gpu:K over physical GPU K mod the GPU count.
class VirtualDevice {
 public:
  explicit VirtualDevice(int64_t global_id, DeviceKind kind = DeviceKind::kCpu);
  int64_t id() const { return id_; }
  DeviceKind kind() const { return kind_; }
  const std::string& name() const { return memory_.name(); }
  MemoryAccount& memory() { return memory_; }
  const MemoryAccount& memory() const { return memory_; }

 private:
  int64_t id_;
  DeviceKind kind_;
  MemoryAccount memory_;
};

/// A 64-byte-aligned, uninitialised byte buffer charged to an account. Move-only.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(MemoryAccount& account, size_t bytes);
  /// A buffer that borrows `size` bytes at `data` owned by another DeviceBuffer: never freed
  /// nor charged (array_view.h's views of shards). The owner must outlive it.
  static DeviceBuffer borrowed(std::byte* data, size_t size) {
    DeviceBuffer b;
    b.data_ = data;
    b.size_ = size;
    return b;
  }
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void reset();
  MemoryAccount* account_ = nullptr;
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace meshlayout
