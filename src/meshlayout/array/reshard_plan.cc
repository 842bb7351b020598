#include "meshlayout/array/reshard_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/layout/box_ops.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout {
namespace {

std::string human_bytes(int64_t b) {
  if (b >= (int64_t{1} << 30)) return fmt::format("{:.2f} GiB", static_cast<double>(b) / (1 << 30));
  if (b >= (int64_t{1} << 20)) return fmt::format("{:.2f} MiB", static_cast<double>(b) / (1 << 20));
  if (b >= 1024) return fmt::format("{:.1f} KiB", static_cast<double>(b) / 1024);
  return fmt::format("{} B", b);
}

}  // namespace

ReshardPlan plan_to_destinations(const ShardGeometry& src, const std::vector<Destination>& dsts,
                                 size_t element_size, int64_t local_device_count) {
  const DeviceMesh& mesh = src.mesh();
  const int rank = src.rank();
  // Holders of each source block, by row-major block index.
  std::vector<int64_t> block_count(static_cast<size_t>(rank));
  int64_t num_blocks = 1;
  for (int d = 0; d < rank; ++d) {
    block_count[static_cast<size_t>(d)] = src.num_blocks(d);
    num_blocks *= src.num_blocks(d);
  }
  std::vector<std::vector<int64_t>> holders(static_cast<size_t>(num_blocks));
  for (int64_t p = 0; p < mesh.size(); ++p) {
    int64_t b = 0;
    for (int d = 0; d < rank; ++d)
      b = b * block_count[static_cast<size_t>(d)] + src.block_index(p, d);
    holders[static_cast<size_t>(b)].push_back(p);
  }
  auto process_of = [&](int64_t device) { return static_cast<int>(device / local_device_count); };
  std::vector<int64_t> sent(static_cast<size_t>(mesh.size()), 0);

  ReshardPlan plan;
  const Shape& shape = src.shape();
  for (const Destination& dst : dsts) {
    if (dst.box.num_elements() == 0) continue;
    // Source blocks overlapping the destination box, per dimension.
    std::vector<int64_t> lo(static_cast<size_t>(rank)), hi(static_cast<size_t>(rank));
    for (int d = 0; d < rank; ++d) {
      const size_t du = static_cast<size_t>(d);
      const int64_t c = ceil_div(shape[du], block_count[du]);
      lo[du] = dst.box.offset[du] / c;
      hi[du] = (dst.box.offset[du] + dst.box.shape[du] - 1) / c;
    }
    std::vector<int64_t> block = lo;
    while (true) {
      std::optional<Box> piece = intersect(dst.box, src.block_box(block));
      if (piece) {
        int64_t b = 0;
        for (int d = 0; d < rank; ++d)
          b = b * block_count[static_cast<size_t>(d)] + block[static_cast<size_t>(d)];
        const std::vector<int64_t>& hs = holders[static_cast<size_t>(b)];
        int64_t chosen = -1;
        for (int64_t p : hs) {
          if (mesh.device_ids()[static_cast<size_t>(p)] == dst.device) chosen = p;
        }
        if (chosen < 0) {
          auto better = [&](int64_t a, int64_t c) {  // is holder a better than c?
            bool a_local = process_of(mesh.device_ids()[static_cast<size_t>(a)]) == dst.process;
            bool c_local = process_of(mesh.device_ids()[static_cast<size_t>(c)]) == dst.process;
            if (a_local != c_local) return a_local;
            if (sent[static_cast<size_t>(a)] != sent[static_cast<size_t>(c)]) {
              return sent[static_cast<size_t>(a)] < sent[static_cast<size_t>(c)];
            }
            return a < c;
          };
          chosen = hs.front();
          for (int64_t p : hs) {
            if (better(p, chosen)) chosen = p;
          }
        }
        Transfer t;
        t.src_position = chosen;
        t.src_device = mesh.device_ids()[static_cast<size_t>(chosen)];
        t.src_process = process_of(t.src_device);
        t.dst_index = dst.index;
        t.dst_device = dst.device;
        t.dst_process = dst.process;
        t.bytes = piece->num_elements() * static_cast<int64_t>(element_size);
        t.box = std::move(*piece);
        if (t.kept()) {
          plan.bytes_kept += t.bytes;
        } else {
          plan.bytes_moved += t.bytes;
          sent[static_cast<size_t>(chosen)] += t.bytes;
          if (t.src_process != t.dst_process) plan.bytes_between_processes += t.bytes;
        }
        plan.transfers.push_back(std::move(t));
      }
      int d = rank - 1;
      while (d >= 0) {
        const size_t du = static_cast<size_t>(d);
        if (++block[du] <= hi[du]) break;
        block[du] = lo[du];
        --d;
      }
      if (d < 0) break;
    }
  }
  // The least any plan can move, computed independently of the pieces: every destination
  // byte that its device does not already hold in the source layout.
  for (const Destination& dst : dsts) {
    int64_t missing = dst.box.num_elements();
    if (dst.device >= 0) {
      if (std::optional<int64_t> p = mesh.position_of_device(dst.device)) {
        if (std::optional<Box> held = intersect(dst.box, src.box(*p)))
          missing -= held->num_elements();
      }
    }
    plan.minimum_bytes += missing * static_cast<int64_t>(element_size);
  }
  return plan;
}

int64_t reshard_bytes_moved(const ShardGeometry& src, const ShardGeometry& dst,
                            size_t element_size) {
  if (src.shape() != dst.shape()) {
    throw ValueError(fmt::format("cannot reshard a tensor of shape {} into shape {}",
                                 shape_to_string(src.shape()), shape_to_string(dst.shape())));
  }
  int64_t moved = 0;
  for (int64_t q = 0; q < dst.mesh().size(); ++q) {
    const Box want = dst.box(q);
    int64_t kept = 0;
    const int64_t device = dst.mesh().device_ids()[static_cast<size_t>(q)];
    if (std::optional<int64_t> p = src.mesh().position_of_device(device)) {
      if (std::optional<Box> overlap = intersect(src.box(*p), want)) {
        kept = overlap->num_elements();
      }
    }
    moved += want.num_elements() - kept;
  }
  return moved * static_cast<int64_t>(element_size);
}

ReshardPlan plan_reshard(const ShardGeometry& src, const ShardGeometry& dst, size_t element_size,
                         int64_t local_device_count) {
  if (src.shape() != dst.shape()) {
    throw ValueError(fmt::format("cannot reshard a tensor of shape {} into shape {}",
                                 shape_to_string(src.shape()), shape_to_string(dst.shape())));
  }
  std::vector<int64_t> a = src.mesh().device_ids(), b = dst.mesh().device_ids();
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  if (a != b) {
    std::vector<std::string> only_src, only_dst;
    std::set<int64_t> sa(a.begin(), a.end()), sb(b.begin(), b.end());
    for (int64_t d : a)
      if (!sb.count(d)) only_src.push_back(device_name(d));
    for (int64_t d : b)
      if (!sa.count(d)) only_dst.push_back(device_name(d));
    throw ValueError(fmt::format(
        "Mismatched meshes: cannot reshard from {} to {}: they must span the same devices; "
        "only the source has {}, only the target has {}",
        src.mesh().to_string(), dst.mesh().to_string(), repr_list(only_src), repr_list(only_dst)));
  }
  std::vector<Destination> dsts;
  for (int64_t q = 0; q < dst.mesh().size(); ++q) {
    int64_t device = dst.mesh().device_ids()[static_cast<size_t>(q)];
    dsts.push_back({q, device, static_cast<int>(device / local_device_count), dst.box(q)});
  }
  ReshardPlan plan = plan_to_destinations(src, dsts, element_size, local_device_count);
  bool dst_replicated = dst.layout().used_axes().empty();
  if (plan.bytes_moved == 0) {
    plan.pattern = src.layout().axes() == dst.layout().axes() && src.mesh() == dst.mesh()
                       ? "identity"
                       : "local slice";
  } else if (dst_replicated) {
    plan.pattern = "all-gather";
  } else if (plan.bytes_kept > 0 || !src.layout().used_axes().empty()) {
    plan.pattern = "all-to-all";
  } else {
    plan.pattern = "general";
  }
  return plan;
}

std::string ReshardPlan::summary() const {
  return fmt::format(
      "plan: {} ({} transfers); moves {} ({} bytes), minimum possible {} ({} bytes); keeps {} "
      "in place; {} between processes\n",
      pattern, transfers.size(), human_bytes(bytes_moved), bytes_moved, human_bytes(minimum_bytes),
      minimum_bytes, human_bytes(bytes_kept), human_bytes(bytes_between_processes));
}

std::string ReshardPlan::to_string() const {
  std::string out = summary();
  for (const Transfer& t : transfers) {
    out += fmt::format("  {} -> {}  {}  {}{}\n", device_name(t.src_device),
                       t.dst_device >= 0 ? device_name(t.dst_device)
                                         : fmt::format("host of process {}", t.dst_process),
                       t.box.to_string(), human_bytes(t.bytes), t.kept() ? "  (kept)" : "");
  }
  return out;
}

}  // namespace meshlayout
