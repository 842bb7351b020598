#include "meshlayout/io/array_io.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/io/device_staging.h"
#include "meshlayout/io/mapped_read.h"
#include "meshlayout/io/save_target.h"
#include "meshlayout/io/vectored_io.h"
#include "meshlayout/layout/box_ops.h"
#include "meshlayout/runtime/operation_agreement.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;

// Forwards byte counts from worker threads to a ProgressFn, one call at a time.
class ProgressCounter {
 public:
  ProgressCounter(const ProgressFn& fn, uint64_t total) : fn_(fn), total_(total) {}
  void add(uint64_t bytes) {
    if (!fn_) return;
    std::lock_guard lock(mu_);
    done_ += bytes;
    fn_(done_, total_);
  }
  std::function<void(uint64_t)> callback() {
    if (!fn_) return {};
    return [this](uint64_t bytes) { add(bytes); };
  }

 private:
  const ProgressFn& fn_;
  uint64_t total_;
  std::mutex mu_;
  uint64_t done_ = 0;
};

const std::shared_ptr<Runtime>& common_runtime(const std::vector<const Array*>& arrays) {
  static const std::shared_ptr<Runtime> kNone;
  if (arrays.empty()) return kNone;
  for (const Array* a : arrays) {
    if (a->runtime_ptr() != arrays.front()->runtime_ptr()) {
      throw ValueError(
          "the arrays to save or load live on different runtimes; one call handles "
          "the arrays of one runtime");
    }
  }
  return arrays.front()->runtime_ptr();
}

// Runs `step` in this process, then agrees with the others (DESIGN §4): every process throws
// the first failure, after `cleanup` ran, or none does.
template <typename Step, typename Cleanup>
void agreed_step(Communicator& comm, Step&& step, Cleanup&& cleanup) {
  std::exception_ptr error;
  try {
    step();
  } catch (...) {
    error = std::current_exception();
  }
  try {
    agree_on_failure(comm, error);
  } catch (...) {
    cleanup();
    throw;
  }
}

// Process `root`'s `text` on every process.
void broadcast_string(Communicator& comm, std::string& text, int root) {
  uint64_t size = text.size();
  comm.broadcast(&size, sizeof size, root);
  text.resize(size);
  if (size > 0) comm.broadcast(text.data(), size, root);
}

[[noreturn]] void throw_errno(std::string_view what, const std::string& path) {
  throw Error(fmt::format("{} '{}' failed: {}", what, path, std::strerror(errno)));
}

// For each block of a tensor, the mesh position whose device writes it: of the devices holding
// the block, the one whose process has been given the fewest bytes so far (ties: the first).
// A pure function of replicated metadata, so every process computes the same choice.
std::vector<int64_t> choose_writers(const ShardGeometry& g, const Runtime& runtime,
                                    size_t element_size, std::vector<uint64_t>& process_load) {
  std::vector<int64_t> writers;
  const std::vector<int64_t>& ids = g.mesh().device_ids();
  for (const std::vector<int64_t>& group : g.shard_groups()) {
    int64_t best = group.front();
    int best_process = runtime.process_of(ids[static_cast<size_t>(best)]);
    for (int64_t p : group) {
      const int proc = runtime.process_of(ids[static_cast<size_t>(p)]);
      if (process_load[static_cast<size_t>(proc)] <
          process_load[static_cast<size_t>(best_process)]) {
        best = p;
        best_process = proc;
      }
    }
    process_load[static_cast<size_t>(best_process)] +=
        static_cast<uint64_t>(g.box(best).num_elements()) * element_size;
    writers.push_back(best);
  }
  return writers;
}

}  // namespace

SaveReport save_arrays(const std::string& path, std::span<const NamedArray> arrays,
                       const SaveOptions& options) {
  std::vector<const Array*> list;
  std::vector<TensorSpec> specs;
  for (const NamedArray& a : arrays) {
    list.push_back(a.array);
    specs.push_back(TensorSpec{a.name, a.array->dtype(), a.array->shape()});
  }
  std::shared_ptr<Runtime> runtime = common_runtime(list);
  if (!runtime) runtime = default_runtime();
  Communicator& comm = runtime->comm();
  const bool leader = comm.rank() == 0;
  // The same verdict on bad names in every process; then a check that every process saves
  // the same tensors in the same layouts to the same path (else they would wait for each
  // other's writes forever).
  SafetensorsHeader header;
  std::string header_bytes;
  std::exception_ptr failure;
  try {
    header = make_safetensors_header(specs, options.metadata);
    header_bytes = safetensors_header_bytes(header);
  } catch (...) {
    failure = std::current_exception();
  }
  agree_on_failure(comm, failure);
  if (comm.size() > 1) {
    std::string description = fmt::format("path={}", path);
    for (const NamedArray& a : arrays) {
      description += fmt::format("; tensor {} {} {} as {} on {}", quote(a.name),
                                 dtype_name(a.array->dtype()), shape_to_string(a.array->shape()),
                                 a.array->layout().to_string(), a.array->mesh().to_string());
    }
    agree_on_operation(comm, "save_arrays", description);
  }

  // The temporary file, next to the target so that rename() is atomic. Process 0 checks the
  // target (no device node or FIFO is ever replaced; a symlink keeps pointing at the new
  // file), clears temporaries of dead earlier saves, and tells every process the names.
  std::string names[2];  // target, token
  agreed_step(
      comm,
      [&] {
        if (!leader) return;
        names[0] = resolve_save_target(path).string();
        remove_stale_temporaries(names[0]);
        names[1] = make_save_token();
      },
      [] {});
  for (std::string& name : names) broadcast_string(comm, name, 0);
  const fs::path target(names[0]);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string tmp = temporary_save_name(target, names[1]);

  int fd = -1;
  bool created = false;
  auto cleanup = [&] {
    if (fd >= 0) ::close(fd);
    fd = -1;
    if (leader && created) ::unlink(tmp.c_str());
  };
  agreed_step(
      comm,
      [&] {
        if (!leader) return;
        fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) throw_errno("creating the checkpoint's temporary file", tmp);
        created = true;
        if (::ftruncate(fd, static_cast<off_t>(header.file_bytes())) != 0) {
          throw_errno("sizing", tmp);
        }
        std::vector<IoPiece> head{IoPiece{fd, 0, reinterpret_cast<std::byte*>(header_bytes.data()),
                                          header_bytes.size(), "the header", tmp}};
        run_vectored_io(head, IoDirection::kWrite, {});
      },
      cleanup);
  agreed_step(
      comm,
      [&] {
        if (leader) return;
        fd = ::open(tmp.c_str(), O_WRONLY | O_CLOEXEC);
        if (fd < 0) throw_errno("opening the checkpoint's temporary file", tmp);
      },
      cleanup);

  // This process's pieces: the boxes of the blocks its devices were chosen to write.
  SaveReport report{.file_bytes = header.file_bytes()};
  std::vector<IoPiece> pieces;
  std::vector<uint64_t> process_load(static_cast<size_t>(comm.size()), 0);
  std::vector<std::pair<const TensorInfo*, const Array::Shard*>> writes;
  size_t runs = 0;
  const bool device = io_internal::on_device(*runtime);  // GPU shards: through staging
  std::vector<io_internal::DeviceWrite> device_writes;
  for (const NamedArray& a : arrays) {
    const TensorInfo& info = *header.find(a.name);
    const Box whole{Shape(info.shape.size(), 0), info.shape};
    for (int64_t position :
         choose_writers(a.array->geometry(), *runtime, info.element_size, process_load)) {
      const Array::Shard* shard = a.array->shard_at(position);
      if (shard == nullptr) continue;  // another process writes it
      if (device) {
        device_writes.push_back({&info, header.data_start() + info.begin, shard->box,
                                 &io_internal::memory_of(*runtime, *shard), shard->buffer.data()});
        report.bytes_written +=
            static_cast<uint64_t>(shard->box.num_elements()) * info.element_size;
        continue;
      }
      writes.emplace_back(&info, shard);
      runs += static_cast<size_t>(count_contiguous_runs(shard->box, whole, shard->box));
    }
  }
  pieces.reserve(runs);
  for (const auto& [info, shard] : writes) {
    const Box whole{Shape(info->shape.size(), 0), info->shape};
    const uint64_t base = header.data_start() + info->begin;
    std::byte* data = const_cast<std::byte*>(shard->buffer.data());
    for_each_contiguous_run(
        shard->box, whole, shard->box, info->element_size,
        [&](size_t mem_off, size_t file_off, size_t bytes) {
          pieces.push_back(IoPiece{fd, base + file_off, data + mem_off, bytes, info->name, tmp});
          report.bytes_written += bytes;
        });
  }
  ProgressCounter progress(options.progress, report.bytes_written);
  agreed_step(
      comm,
      [&] {
        if (device) {
          io_internal::save_from_device(
              fd, tmp, device_writes, runtime->pool(), runtime->staging(),
              {.max_staging_bytes = options.max_staging_bytes, .on_bytes = progress.callback()});
        } else {
          run_vectored_io(pieces, IoDirection::kWrite,
                          {.pool = &runtime->pool(), .on_bytes = progress.callback()});
        }
        if (::fdatasync(fd) != 0) throw_errno("flushing", tmp);
        const int closing = fd;
        fd = -1;
        if (::close(closing) != 0) throw_errno("closing", tmp);
      },
      cleanup);
  // Every process has written and flushed its part: publish the file.
  agreed_step(
      comm,
      [&] {
        if (!leader) return;
        if (::rename(tmp.c_str(), target.c_str()) != 0) {
          throw_errno("renaming the new checkpoint to", target.string());
        }
        created = false;
        const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dir_fd >= 0) {  // make the rename durable; best effort where directories cannot sync
          ::fsync(dir_fd);
          ::close(dir_fd);
        }
      },
      cleanup);
  return report;
}

LoadReport load_arrays(const Checkpoint& checkpoint, std::span<const LoadTarget> targets,
                       const LoadOptions& options) {
  std::vector<const Array*> list;
  for (const LoadTarget& t : targets) list.push_back(t.array);
  const std::shared_ptr<Runtime>& runtime = common_runtime(list);
  if (!runtime) return {};

  // Checks on replicated metadata: every process reaches the same verdict.
  std::vector<std::string> missing;
  for (const LoadTarget& t : targets) {
    if (checkpoint.find(t.name).second == nullptr) missing.push_back("'" + t.name + "'");
  }
  if (!missing.empty()) {
    throw NotFoundError(fmt::format("checkpoint '{}' has no tensor {} (it holds {} tensors)",
                                    checkpoint.path(), fmt::join(missing, ", "),
                                    checkpoint.tensors().size()));
  }
  for (const LoadTarget& t : targets) {
    const TensorInfo& info = *checkpoint.find(t.name).second;
    if (!info.dtype) {
      throw ValueError(
          fmt::format("tensor '{}' in '{}' has dtype {}, which meshlayout cannot "
                      "load (loadable: F32, F64, BF16, F16, I8, I16, I32, I64, U8, "
                      "BOOL)",
                      t.name, checkpoint.path(), info.dtype_name));
    }
    if (info.shape != t.array->shape()) {
      throw ValueError(fmt::format("tensor '{}' in '{}' has shape {}, the target has shape {}",
                                   t.name, checkpoint.path(), shape_to_string(info.shape),
                                   shape_to_string(t.array->shape())));
    }
    if (*info.dtype != t.array->dtype() &&
        !(options.convert_dtypes && is_floating(*info.dtype) && is_floating(t.array->dtype()))) {
      throw ValueError(fmt::format("tensor '{}' in '{}' is {}, the target is {}{}", t.name,
                                   checkpoint.path(), info.dtype_name, dtype_name(t.array->dtype()),
                                   is_floating(*info.dtype) && is_floating(t.array->dtype())
                                       ? "; pass convert_dtypes to convert on load"
                                       : " (only floating dtypes convert)"));
    }
  }

  // Each distinct local box is read once, by the first local shard holding it.
  struct Job {
    const SafetensorsFile* file;
    const TensorInfo* info;
    Array* array;
    Array::Shard* reader;
    std::vector<Array::Shard*> copies;  // local replicas of the same box
    bool two_phase;                     // read by load_two_phase instead
    bool mapped;                        // copied from a mapping of the file (mapped_read.h)
    bool direct() const { return !two_phase && !mapped; }
  };
  std::vector<Job> jobs;
  LoadReport report;
  std::vector<io_internal::TwoPhaseTensor> two_phase;
  for (const LoadTarget& t : targets) {
    const auto [file, info] = checkpoint.find(t.name);
    const bool slabs =
        io_internal::wants_two_phase(*t.array, *info, options.two_phase, options.map);
    if (slabs) two_phase.push_back({file, info, t.array});
    const bool mapped = !slabs && io_internal::wants_mapped(*t.array, *info, options.map);
    const size_t first_job = jobs.size();  // this target's jobs start here
    for (Array::Shard& shard : t.array->local_shards()) {
      if (shard.box.empty()) continue;
      auto same = std::find_if(jobs.begin() + static_cast<ptrdiff_t>(first_job), jobs.end(),
                               [&](const Job& j) { return j.reader->box == shard.box; });
      if (same != jobs.end()) {
        same->copies.push_back(&shard);
        continue;
      }
      jobs.push_back(Job{file, info, t.array, &shard, {}, slabs, mapped});
      report.shard_bytes += static_cast<uint64_t>(shard.box.num_elements()) * info->element_size;
    }
  }

  ProgressCounter progress(options.progress, report.shard_bytes);
  if (io_internal::on_device(*runtime)) {  // GPU shards: through page-locked staging
    std::vector<io_internal::DeviceBox> boxes;
    for (const Job& j : jobs) {
      // Mapped unless asked otherwise: no box merges with another in a staging slot.
      boxes.push_back({j.file,
                       j.info,
                       j.array->dtype(),
                       j.reader->box,
                       options.map != MapMode::kNever,
                       {{&io_internal::memory_of(*runtime, *j.reader), j.reader->buffer.data()}}});
      for (Array::Shard* copy : j.copies) {
        boxes.back().destinations.push_back(
            {&io_internal::memory_of(*runtime, *copy), copy->buffer.data()});
      }
    }
    agreed_step(
        runtime->comm(),
        [&] {
          const io_internal::DeviceLoadReport d = io_internal::load_to_device(
              boxes, runtime->pool(), runtime->staging(),
              {.max_staging_bytes = options.max_staging_bytes, .on_bytes = progress.callback()});
          report.bytes_read = d.bytes_read;
          report.mapped_bytes = d.mapped_bytes;
          report.staging_bytes = d.staging_bytes;
        },
        [] {});
    return report;
  }
  agreed_step(
      runtime->comm(),
      [&] {
        ThreadPool& pool = runtime->pool();
        ReadBatch batch;
        size_t runs = 0;
        std::vector<io_internal::MappedBox> mapped;
        for (const Job& j : jobs) {
          if (j.mapped) {
            mapped.push_back({j.file, j.info, j.reader->box, {j.reader->buffer.data()}});
            for (Array::Shard* copy : j.copies)
              mapped.back().destinations.push_back(copy->buffer.data());
          }
          if (!j.direct()) continue;
          const Box whole{Shape(j.info->shape.size(), 0), j.info->shape};
          runs += static_cast<size_t>(count_contiguous_runs(j.reader->box, whole, j.reader->box));
        }
        batch.reserve(runs);
        std::vector<DeviceBuffer> staging;
        std::vector<size_t> staged_jobs;  // jobs read into staging[i], converted after the read
        size_t batch_begin = 0;
        uint64_t staged_bytes = 0;
        auto flush = [&](size_t batch_end) {
          report.bytes_read += batch.bytes();
          batch.run({.pool = &pool, .on_bytes = progress.callback()});
          pool.parallel_for(staged_jobs.size(), [&](size_t i) {
            const Job& j = jobs[staged_jobs[i]];
            convert_floats(staging[i].data(), *j.info->dtype, j.reader->buffer.data(),
                           j.array->dtype(), static_cast<size_t>(j.reader->box.num_elements()));
          });
          pool.parallel_for(batch_end - batch_begin, [&](size_t i) {
            const Job& j = jobs[batch_begin + i];
            if (!j.direct()) return;
            for (Array::Shard* copy : j.copies) {
              std::memcpy(copy->buffer.data(), j.reader->buffer.data(), j.reader->buffer.size());
            }
          });
          staging.clear();
          staged_jobs.clear();
          staged_bytes = 0;
          batch_begin = batch_end;
        };
        for (size_t k = 0; k < jobs.size(); ++k) {
          const Job& j = jobs[k];
          if (!j.direct()) continue;
          if (*j.info->dtype == j.array->dtype()) {
            batch.add(*j.file, *j.info, j.reader->box, j.reader->buffer.data());
          } else {
            const size_t bytes =
                static_cast<size_t>(j.reader->box.num_elements()) * j.info->element_size;
            staging.emplace_back(runtime->staging(), bytes);
            staged_jobs.push_back(k);
            batch.add(*j.file, *j.info, j.reader->box, staging.back().data());
            staged_bytes += bytes;
            if (staged_bytes >= options.max_staging_bytes) flush(k + 1);
          }
        }
        flush(jobs.size());
        const io_internal::MappedReadReport m =
            io_internal::read_mapped(mapped, pool, progress.callback());
        report.bytes_read += m.bytes_read;
        report.mapped_bytes = m.mapped_bytes;
      },
      [] {});
  // Agrees on its own failures (every process leaves at the same point).
  const io_internal::TwoPhaseReport slabs = io_internal::load_two_phase(
      two_phase, *runtime,
      {.max_staging_bytes = options.max_staging_bytes, .on_bytes = progress.callback()});
  report.bytes_read += slabs.bytes_read;
  report.two_phase_bytes = slabs.shard_bytes;
  report.staging_bytes = slabs.staging_bytes;
  return report;
}

}  // namespace meshlayout
