#include "meshlayout/cli/reshard_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <sstream>

#include "meshlayout/array/array.h"
#include "meshlayout/cli/cli_checks.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/core/memory_budget.h"
#include "meshlayout/layout/box_ops.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/runtime/operation_agreement.h"

namespace meshlayout::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string mib(int64_t bytes) {
  return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1 << 20));
}

// Number of local shards that differ from their box of `x`.
int64_t count_wrong_shards(const Array& a, const HostTensor& x) {
  const Box whole{Shape(x.shape().size(), 0), x.shape()};
  int64_t wrong = 0;
  std::vector<std::byte> want;
  for (const Array::Shard& s : a.local_shards()) {
    want.resize(s.buffer.size());
    copy_box(x.data(), whole, want.data(), s.box, s.box, dtype_size(x.dtype()));
    if (!std::equal(want.begin(), want.end(), s.buffer.data())) ++wrong;
  }
  return wrong;
}

// What every local device will hold (source + target shards) and what this process needs in
// all (those plus the whole random input); refused before anything is allocated.
void check_reshard_fits(const ShardGeometry& from, const ShardGeometry& to, DType dtype,
                        Runtime& runtime) {
  const std::string what =
      fmt::format("reshard of {} {}", shape_to_string(from.shape()), dtype_name(dtype));
  int64_t process_bytes = num_bytes(from.shape(), dtype);  // the random input, whole
  for (int64_t p = 0; p < from.mesh().size(); ++p) {
    const int64_t id = from.mesh().device_ids()[static_cast<size_t>(p)];
    if (!runtime.is_local(id)) continue;
    const int64_t device_bytes =
        num_bytes(from.box(p).shape, dtype) + num_bytes(to.box(p).shape, dtype);
    MemoryAccount& memory = runtime.device(id).memory();
    check_device_allocation(memory.name(), memory.stats().bytes_live, device_bytes,
                            what + " (source and target shards)");
    process_bytes += device_bytes;  // each term <= 2x the input: no overflow for <= 2^20 devices
  }
  check_host_allocation(
      fmt::format("{} (the input, whole, plus source and target shards of {} local devices)", what,
                  runtime.local_device_count()),
      process_bytes);
}

}  // namespace

int run_reshard(const ReshardCommandOptions& options, const std::shared_ptr<Runtime>& runtime,
                std::ostream& out) {
  const bool leader = runtime->process_id() == 0;
  std::ostringstream log;  // printed by process 0
  // Every process parses and checks its own arguments; all fail together if one does, and
  // all fail with one message if they were given different commands (no rank left waiting).
  std::optional<ShardGeometry> from, to;
  DType dtype = DType::kF32;
  std::exception_ptr failure;
  try {
    DeviceMesh mesh = DeviceMesh::from_string(options.mesh);
    TensorLayout from_layout = TensorLayout::from_string(options.from);
    TensorLayout to_layout = TensorLayout::from_string(options.to);
    if (!from_layout.device_mesh()) from_layout.set_device_mesh(mesh);
    if (!to_layout.device_mesh()) to_layout.set_device_mesh(mesh);
    const Shape shape = parse_shape(options.shape);
    dtype = parse_dtype(options.dtype);
    if (options.repeat < 1)
      throw ValueError(fmt::format("--repeat must be at least 1, got {}", options.repeat));
    from.emplace(from_layout, shape, GeometryOptions{}, "--from");
    to.emplace(to_layout, shape, GeometryOptions{}, "--to");
  } catch (...) {
    failure = std::current_exception();
  }
  agree_or_rethrow(*runtime, failure);
  agree_on_operation(
      runtime->comm(), "the reshard command",
      describe_fields(
          {fmt::format("--shape={}", shape_to_string(from->shape())),
           fmt::format("--dtype={}", dtype_name(dtype)),
           fmt::format("--mesh={}", from->mesh().to_string()),
           fmt::format("--from={}", from->layout().to_string()),
           fmt::format("--to={}", to->layout().to_string()), fmt::format("--seed={}", options.seed),
           fmt::format("--repeat={}", options.repeat),
           fmt::format("local devices per process={}", runtime->local_device_count())}));
  try {
    check_reshard_fits(*from, *to, dtype, *runtime);
  } catch (...) {
    failure = std::current_exception();
  }
  agree_or_rethrow(*runtime, failure);
  const DeviceMesh& mesh = from->mesh();
  const Shape& shape = from->shape();

  const int64_t bytes = num_bytes(shape, dtype);
  log << fmt::format("tensor {} {} ({}) on {}, {} process{} x {} local devices\n",
                     shape_to_string(shape), dtype_name(dtype), mib(bytes), mesh.to_string(),
                     runtime->num_processes(), runtime->num_processes() == 1 ? "" : "es",
                     runtime->local_device_count());
  log << "from " << from->layout().to_string() << "\nto   " << to->layout().to_string() << "\n";

  HostTensor x = HostTensor::random(dtype, shape, options.seed);
  Array a = distribute_tensor(x, from->layout(), {.runtime = runtime});
  ReshardPlan plan = plan_distribute(a, to->layout());
  log << (options.show_transfers ? plan.to_string() : plan.summary());

  double best = 1e300;
  std::optional<Array> b;
  for (int r = 0; r < options.repeat; ++r) {
    b.reset();  // free the previous result first: memory stays at source + target
    for (VirtualDevice* d : runtime->local_devices()) d->memory().reset_peak();
    runtime->comm().barrier();
    auto start = std::chrono::steady_clock::now();
    b.emplace(distribute_tensor(a, to->layout()));
    runtime->comm().barrier();
    best = std::min(best, seconds_since(start));
  }
  const double gibps = static_cast<double>(plan.bytes_moved) / best / (1 << 30);
  log << fmt::format("reshard: {:.4f} s (best of {}), {:.2f} GiB/s of bytes moved\n", best,
                     options.repeat, gibps);

  int64_t wrong = count_wrong_shards(*b, x);
  runtime->comm().all_reduce_sum(&wrong, 1, DType::kI64);
  if (wrong == 0) {
    log << "check: every shard equals its box of the input, bit for bit\n";
  } else {
    log << fmt::format("check FAILED: {} shards differ from the input\n", wrong);
  }
  // Per-device memory: peak during the last reshard, as seen by each process.
  std::string mem;
  for (VirtualDevice* d : runtime->local_devices()) {
    mem += fmt::format(" {}={}", d->name(), mib(d->memory().stats().peak_bytes));
  }
  std::vector<char> all(static_cast<size_t>(runtime->num_processes()) * 512, 0);
  std::vector<char> mine(512, 0);
  std::copy_n(mem.begin(), std::min<size_t>(mem.size(), 511), mine.begin());
  runtime->comm().all_gather(mine.data(), mine.size(), all.data());
  log << "peak memory per device:";
  for (int p = 0; p < runtime->num_processes(); ++p) log << (all.data() + p * 512);
  log << "\n";
  if (leader) out << log.str() << std::flush;
  return wrong == 0 ? 0 : 1;
}

void add_reshard_command(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<ReshardCommandOptions>();
  CLI::App* cmd = app.add_subcommand(
      "reshard",
      "Plan a layout change of a tensor, run it on random data, check it and time it (works "
      "under mpirun: each process holds only its devices' shards).");
  cmd->add_option("--shape", o->shape, "tensor shape, e.g. 4096,4096")->required();
  cmd->add_option("--dtype", o->dtype, "F32, BF16, I8, … (default f32)");
  cmd->add_option("--mesh", o->mesh, "mesh, e.g. data=2,model=4")->required();
  cmd->add_option("--from", o->from, "source layout, e.g. \"data,None\"")->required();
  cmd->add_option("--to", o->to, "target layout, e.g. \"None,model\"")->required();
  cmd->add_option("--seed", o->seed, "seed of the random data (default 1)")
      ->check(kUint64Text);  // CLI11 alone wraps -1 and 2^64
  cmd->add_option("--repeat", o->repeat, "runs; the best time is printed (default 3)");
  cmd->add_flag("--show-transfers", o->show_transfers, "print every transfer of the plan");
  cmd->callback([o, exit_code] { *exit_code = run_reshard(*o, default_runtime(), std::cout); });
}

}  // namespace meshlayout::cli
