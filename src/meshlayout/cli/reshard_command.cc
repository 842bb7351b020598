#include "meshlayout/cli/reshard_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <sstream>

#include "meshlayout/array/array.h"
#include "meshlayout/cli/cli_checks.h"
#include "meshlayout/layout/box_ops.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/layout/devices.h"

namespace meshlayout::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string mib(int64_t bytes) { return fmt::format("{:.2f} MiB", static_cast<double>(bytes) / (1 << 20)); }

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

}  // namespace

int run_reshard(const ReshardCommandOptions& options, const std::shared_ptr<Runtime>& runtime,
                std::ostream& out) {
  const bool leader = runtime->process_id() == 0;
  std::ostringstream log;  // printed by process 0
  DeviceMesh mesh = DeviceMesh::from_string(options.mesh);
  TensorLayout from = TensorLayout::from_string(options.from);
  TensorLayout to = TensorLayout::from_string(options.to);
  if (!from.device_mesh()) from.set_device_mesh(mesh);
  if (!to.device_mesh()) to.set_device_mesh(mesh);
  const Shape shape = parse_shape(options.shape);
  const DType dtype = parse_dtype(options.dtype);
  if (options.repeat < 1) throw ValueError(fmt::format("--repeat must be at least 1, got {}", options.repeat));

  const int64_t bytes = num_elements(shape) * static_cast<int64_t>(dtype_size(dtype));
  log << fmt::format("tensor {} {} ({}) on {}, {} process{} x {} local devices\n",
                     shape_to_string(shape), dtype_name(dtype), mib(bytes), mesh.to_string(),
                     runtime->num_processes(), runtime->num_processes() == 1 ? "" : "es",
                     runtime->local_device_count());
  log << "from " << from.to_string() << "\nto   " << to.to_string() << "\n";

  HostTensor x = HostTensor::random(dtype, shape, options.seed);
  Array a = distribute_tensor(x, from, {.runtime = runtime});
  ReshardPlan plan = plan_distribute(a, to);
  log << (options.show_transfers ? plan.to_string() : plan.summary());

  double best = 1e300;
  std::optional<Array> b;
  for (int r = 0; r < options.repeat; ++r) {
    b.reset();  // free the previous result first: memory stays at source + target
    for (VirtualDevice* d : runtime->local_devices()) d->memory().reset_peak();
    runtime->comm().barrier();
    auto start = std::chrono::steady_clock::now();
    b.emplace(distribute_tensor(a, to));
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
