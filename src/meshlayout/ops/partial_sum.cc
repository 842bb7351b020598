#include "meshlayout/ops/partial_sum.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>

#include "meshlayout/core/errors.h"
#include "meshlayout/kernels/device_kind.h"
#include "meshlayout/kernels/matmul.h"
#include "meshlayout/kernels/message_base.h"
#include "meshlayout/layout/box_ops.h"

namespace meshlayout::internal_ops {
namespace {

// Pieces are cut so one message stays below 1 GiB (MPI counts are ints); both sides cut alike.
constexpr int64_t kMaxMessageBytes = int64_t{1} << 30;
// Outputs of at least this many bytes per process are written with non-temporal stores.
constexpr int64_t kStreamBytes = int64_t{16} << 20;
// Work items of the sums: small enough to spread over the pool, large enough to amortise.
constexpr int64_t kChunkElements = int64_t{1} << 16;

int process_of(const DeviceMesh& mesh, int64_t position, int64_t local_device_count) {
  return static_cast<int>(mesh.device_ids()[static_cast<size_t>(position)] / local_device_count);
}

}  // namespace

int64_t PartialLayout::k_blocks() const {
  int64_t n = 1;
  for (int a : k_axes) n *= product.mesh().shape()[static_cast<size_t>(a)];
  return n;
}

int64_t PartialLayout::k_block_of(int64_t position) const {
  const std::vector<int64_t> c = product.mesh().coords(position);
  int64_t kb = 0;
  for (int a : k_axes) {
    kb = kb * product.mesh().shape()[static_cast<size_t>(a)] + c[static_cast<size_t>(a)];
  }
  return kb;
}

bool PartialLayout::k_block_empty(int64_t kb) const {
  auto [start, end] = block_range(k_extent, k_blocks(), kb);
  return start == end;
}

std::vector<int64_t> PartialLayout::product_block_of(int64_t position) const {
  std::vector<int64_t> block(static_cast<size_t>(product.rank()));
  for (int d = 0; d < product.rank(); ++d) {
    block[static_cast<size_t>(d)] = product.block_index(position, d);
  }
  return block;
}

ReductionPlan plan_reduction(const PartialLayout& partials, const ShardGeometry& target,
                             size_t element_size, int64_t local_device_count) {
  const DeviceMesh& mesh = target.mesh();
  const ShardGeometry& product = partials.product;
  if (!(product.mesh() == mesh) || product.shape() != target.shape()) {
    throw InternalError(fmt::format(
        "plan_reduction: products of shape {} on {} cannot be summed into shape {} on {}",
        shape_to_string(product.shape()), product.mesh().to_string(),
        shape_to_string(target.shape()), mesh.to_string()));
  }
  // Compute-replica axes: used neither by the products nor by the split of K.
  std::vector<bool> used(static_cast<size_t>(mesh.rank()), false);
  for (const DimSharding& d : product.layout().axes()) {
    for (const std::string& a : d.axes()) used[static_cast<size_t>(*mesh.axis_index(a))] = true;
  }
  for (int a : partials.k_axes) used[static_cast<size_t>(a)] = true;
  auto replica_coords = [&](int64_t position) {
    std::vector<int64_t> c = mesh.coords(position), out;
    for (size_t a = 0; a < c.size(); ++a) {
      if (!used[a]) out.push_back(c[a]);
    }
    return out;
  };
  // (product block, K block, replica coordinates) → the one device holding that partial.
  std::map<std::vector<int64_t>, int64_t> holder;
  for (int64_t p = 0; p < mesh.size(); ++p) {
    std::vector<int64_t> key = partials.product_block_of(p);
    key.push_back(partials.k_block_of(p));
    for (int64_t c : replica_coords(p)) key.push_back(c);
    holder.emplace(std::move(key), p);
  }
  const int64_t max_elements =
      std::max<int64_t>(1, kMaxMessageBytes / static_cast<int64_t>(element_size));
  const int64_t k_blocks = partials.k_blocks();
  const int rank = target.rank();

  ReductionPlan plan;
  std::map<std::pair<int, std::vector<int64_t>>, int64_t> primary;  // (process, block) → q
  for (int64_t q = 0; q < mesh.size(); ++q) {
    const int process = process_of(mesh, q, local_device_count);
    std::vector<int64_t> target_block(static_cast<size_t>(rank));
    for (int d = 0; d < rank; ++d) target_block[static_cast<size_t>(d)] = target.block_index(q, d);
    auto [it, first] = primary.emplace(std::make_pair(process, target_block), q);
    if (!first) {
      plan.replicas.emplace_back(q, it->second);
      continue;
    }
    const Box box = target.box(q);
    if (box.empty()) continue;
    const std::vector<int64_t> rc = replica_coords(q);
    // The product blocks meeting `box`: a range of block indices per dimension.
    std::vector<int64_t> lo(static_cast<size_t>(rank)), hi(static_cast<size_t>(rank));
    for (int d = 0; d < rank; ++d) {
      const auto i = static_cast<size_t>(d);
      const int64_t n = product.shape()[i], k = product.num_blocks(d), c = ceil_div(n, k);
      lo[i] = box.offset[i] / c;
      hi[i] = (box.offset[i] + box.shape[i] - 1) / c;
    }
    std::set<int> processes;
    std::vector<int64_t> nb = lo;
    while (true) {
      if (std::optional<Box> piece = intersect(box, product.block_box(nb))) {
        std::map<int, std::vector<int64_t>> by_process;
        for (int64_t kb = 0; kb < k_blocks; ++kb) {
          if (partials.k_block_empty(kb)) continue;
          std::vector<int64_t> key = nb;
          key.push_back(kb);
          key.insert(key.end(), rc.begin(), rc.end());
          const int64_t h = holder.at(key);
          by_process[process_of(mesh, h, local_device_count)].push_back(kb);
        }
        std::vector<Term> terms;
        for (auto& [s, kbs] : by_process) {
          processes.insert(s);
          terms.push_back(Term{s, std::move(kbs)});
        }
        for (Box& sub : split_box(*piece, max_elements)) {
          plan.pieces.push_back(Piece{q, process, nb, std::move(sub), terms});
        }
      }
      int d = rank - 1;  // next product block, row-major
      while (d >= 0 && nb[static_cast<size_t>(d)] == hi[static_cast<size_t>(d)]) {
        nb[static_cast<size_t>(d)] = lo[static_cast<size_t>(d)];
        --d;
      }
      if (d < 0) break;
      ++nb[static_cast<size_t>(d)];
    }
    plan.max_processes = std::max(plan.max_processes, static_cast<int>(processes.size()));
  }
  return plan;
}

namespace {

// A reduction piece to run: sum_piece's arguments, with the terms and replicas it points to.
struct Job {
  Array::Shard* dst;
  Box region;
  std::vector<std::vector<const Array::Shard*>> terms;
  std::vector<Array::Shard*> also;
  bool stream = false;  // non-temporal stores
};

void run_jobs(ThreadPool& pool, DeviceKind kind, DType dtype, const std::vector<Job>& jobs,
              const std::function<void()>& first = nullptr) {
  // Cut the jobs into chunks so the pool's threads share big blocks.
  std::vector<Job> chunks;
  for (const Job& job : jobs) {
    if (job.region.num_elements() <= kChunkElements) {
      chunks.push_back(job);
      continue;
    }
    for (Box& sub : split_box(job.region, kChunkElements)) {
      Job c = job;
      c.region = std::move(sub);
      chunks.push_back(std::move(c));
    }
  }
  auto run = [&](size_t i) {
    const Job& c = chunks[i];
    sum_piece(kind, {.dst = c.dst,
                     .region = c.region,
                     .terms = c.terms,
                     .also = c.also,
                     .stream = c.stream,
                     .dtype = dtype});
  };
  if (first) {
    pool.parallel_for_after(first, chunks.size(), run);
  } else {
    pool.parallel_for(chunks.size(), run);
  }
}

}  // namespace

void reduce_partials(const LocalPartials& partials, const ReductionPlan& plan, Array& out) {
  Runtime& rt = out.runtime();
  const int me = rt.process_id();
  const DType dtype = out.dtype();
  if (dtype != DType::kF32 && dtype != DType::kF64) {
    throw InternalError(fmt::format("reduce_partials: dtype {} is not summed", dtype_name(dtype)));
  }
  const size_t elem = dtype_size(dtype);
  const bool stream = out.local_bytes() >= kStreamBytes;
  auto find = [&](const std::vector<int64_t>& block, int64_t kb) -> const LocalPartial& {
    for (const LocalPartial& p : partials) {
      if (p.k_block == kb && p.block == block) return p;
    }
    throw InternalError(
        fmt::format("reduce_partials: process {} has no partial for K block {}", me, kb));
  };
  // Replicas of each local primary: they receive every tile of their primary's sum.
  std::map<int64_t, std::vector<Array::Shard*>> replicas;
  for (const auto& [q, primary] : plan.replicas) {
    if (Array::Shard* s = out.shard_at(q)) replicas[primary].push_back(s);
  }
  // Staged pieces (received, or several local summands summed before a send): staging memory
  // held as shards of their piece's box, at stable addresses.
  std::deque<Array::Shard> staging;
  std::vector<BoxRegion> sends, recvs;
  std::vector<Job> presums, local_jobs, remote_jobs;
  auto sources = [&](const Piece& piece, const Term& term) {
    std::vector<const Array::Shard*> out_sources;
    for (int64_t kb : term.k_blocks) out_sources.push_back(&find(piece.block, kb));
    return out_sources;
  };
  auto stage = [&](const Box& box) -> Array::Shard& {
    return staging.emplace_back(Array::Shard{
        -1, -1, box, DeviceBuffer(rt.staging(), static_cast<size_t>(box.num_elements()) * elem)});
  };
  for (const Piece& piece : plan.pieces) {
    if (piece.process == me) {
      Array::Shard* shard = out.shard_at(piece.target);
      Job job{shard, piece.box, {}, {}, stream};
      if (auto r = replicas.find(piece.target); r != replicas.end()) job.also = r->second;
      bool remote = false;
      for (const Term& term : piece.terms) {
        if (term.process == me) {
          job.terms.push_back(sources(piece, term));
        } else {
          Array::Shard& buf = stage(piece.box);
          recvs.push_back(BoxRegion{term.process, message_base(buf), piece.box, piece.box});
          job.terms.push_back({&buf});
          remote = true;
        }
      }
      (remote ? remote_jobs : local_jobs).push_back(std::move(job));
      continue;
    }
    for (const Term& term : piece.terms) {
      if (term.process != me) continue;
      if (term.k_blocks.size() == 1) {
        const LocalPartial& p = find(piece.block, term.k_blocks[0]);
        sends.push_back(BoxRegion{piece.process, message_base(p), p.box, piece.box});
      } else {
        Array::Shard& buf = stage(piece.box);
        presums.push_back(Job{&buf, piece.box, {sources(piece, term)}, {}});
        sends.push_back(BoxRegion{piece.process, message_base(buf), piece.box, piece.box});
      }
    }
  }
  ThreadPool& pool = rt.pool();
  const DeviceKind kind = kind_of(out);
  run_jobs(pool, kind, dtype, presums);
  if (rt.num_processes() > 1) {
    // The exchange runs on this thread while the pool's workers do the in-process sums.
    run_jobs(pool, kind, dtype, local_jobs, [&] { rt.comm().exchange_boxes(sends, recvs, elem); });
  } else {
    run_jobs(pool, kind, dtype, local_jobs);
  }
  run_jobs(pool, kind, dtype, remote_jobs);
}

LocalPartials allocate_local_partials(const PartialLayout& layout, const Array& operand,
                                      size_t element_size) {
  Runtime& rt = operand.runtime();
  LocalPartials partials;
  std::exception_ptr failure;
  try {
    for (const Array::Shard& s : operand.local_shards()) {
      std::vector<int64_t> block = layout.product_block_of(s.position);
      const int64_t kb = layout.k_block_of(s.position);
      if (layout.k_block_empty(kb)) continue;
      const bool known = std::any_of(partials.begin(), partials.end(), [&](const auto& p) {
        return p.k_block == kb && p.block == block;
      });
      if (known) continue;
      Box box = layout.product.box(s.position);
      const size_t bytes = static_cast<size_t>(box.num_elements()) * element_size;
      partials.push_back(LocalPartial{{s.position, s.device_id, std::move(box),
                                       DeviceBuffer(rt.device(s.device_id).memory(), bytes)},
                                      std::move(block),
                                      kb});
    }
  } catch (...) {
    failure = std::current_exception();
  }
  agree_on_failure(rt.comm(), failure);
  return partials;
}

}  // namespace meshlayout::internal_ops
