// The mixture of experts' token dispatchers against each other on one MoE block (ops/moe.h):
// tokens (T, d) split over a mesh axis 'expert' of every global device, the experts split over
// the same axis, so tokens must travel to their experts and back:
//   all-to-all    each token goes only to the devices of its top-k experts (the default,
//                 ops/moe_dispatch.h); the outputs come back to it
//   all-gather    every device gathers the tokens of all the axis, computes the routed ones for
//                 its experts, and the outputs are reduce-scattered back (Megatron's all-gather
//                 dispatcher)
//   replicated    the baseline without any dispatch: every device holds every expert and runs
//                 its own tokens through them (the same FLOPs; E times the experts' memory)
// Times are the best of --reps runs, each from a barrier to a barrier (so by the slowest
// process), forward and forward+backward; `moved_MiB` is the token bytes each dispatcher moves
// between devices per forward (rows sent to another device plus the outputs sent back,
// counted from the routing), `between_MiB` those crossing processes.
//
//   build/bench/moe_dispatch_bench [--tokens T] [--d D] [--ff F] [--experts E] [--top-k K]
//                                  [--reps R]
//   mpirun --allow-run-as-root --oversubscribe -np 4 build/bench/moe_dispatch_bench
//   RESULT all_to_all_vs_all_gather_forward=… (all-gather time / all-to-all time) …
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "bench_util.h"
#include "meshlayout/array/array.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/ops/moe.h"
#include "meshlayout/runtime/mpi/initialize.h"
#include "meshlayout/runtime/mpi/mpi_runtime.h"
#include "meshlayout/runtime/runtime.h"

using namespace meshlayout;

namespace {

struct Times {
  double forward = 0, backward = 0;
};

Times time_mode(Runtime& rt, int reps, const Array& x, const ExpertRouting& r, const Array& gate,
                const Array& up, const Array& down, const Array& dy, MoeDispatch dispatch) {
  std::vector<double> f, b;
  for (int i = 0; i < reps + 1; ++i) {  // the first run warms up
    rt.comm().barrier();
    const double tf = bench::seconds([&] {
      Array y = expert_mixture(x, r.ids, r.weights, gate, up, down, GateFunction::kSilu, dispatch);
      rt.comm().barrier();
    });
    rt.comm().barrier();
    const double tb = bench::seconds([&] {
      ExpertMixtureGrads g = expert_mixture_backward(x, r.ids, r.weights, gate, up, down, dy,
                                                     GateFunction::kSilu, dispatch);
      rt.comm().barrier();
    });
    if (i > 0) {
      f.push_back(tf);
      b.push_back(tb);
    }
  }
  return {bench::best(f), bench::best(b)};
}

}  // namespace

int main(int argc, char** argv) {
  auto rt = initialize(&argc, &argv);
  const int64_t tokens = bench::arg(argc, argv, "--tokens", 1024);
  const int64_t d = bench::arg(argc, argv, "--d", 1024);
  const int64_t ff = bench::arg(argc, argv, "--ff", 704);
  const int64_t experts = bench::arg(argc, argv, "--experts", 8);
  const int64_t top_k = bench::arg(argc, argv, "--top-k", 2);
  const int reps = bench::arg(argc, argv, "--reps", 3);
  const int64_t n = rt->global_device_count();
  const bool root = rt->process_id() == 0;
  const DeviceMesh mesh({n}, {"expert"});
  const auto on = [&](const HostTensor& t, const std::string& layout) {
    return distribute_tensor(t, TensorLayout::from_string(layout).with_device_mesh(mesh),
                             {.runtime = rt});
  };
  const HostTensor hx = HostTensor::random(DType::kF32, {tokens, d}, 1);
  const HostTensor hg = HostTensor::random(DType::kF32, {experts, d, ff}, 2);
  const HostTensor hu = HostTensor::random(DType::kF32, {experts, d, ff}, 3);
  const HostTensor hd = HostTensor::random(DType::kF32, {experts, ff, d}, 4);
  const Array x = on(hx, "expert,None"),
              dy = on(HostTensor::random(DType::kF32, {tokens, d}, 5), "expert,None");
  const ExpertRouting r =
      route_experts(on(HostTensor::random(DType::kF32, {tokens, experts}, 6), "expert,None"), top_k,
                    /*normalize=*/true);

  // The bytes each dispatcher moves, from the routing (token t lives on device t·n/T; expert e
  // on device e·n/E; processes own consecutive devices).
  const HostTensor ids = r.ids.gather();
  const int64_t local = rt->local_device_count();
  const auto device_of_token = [&](int64_t t) { return t * n / tokens; };
  const auto device_of_expert = [&](int64_t e) { return e * n / experts; };
  double a2a_rows = 0, a2a_between = 0;
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<int64_t> devices;
    for (int64_t j = 0; j < top_k; ++j) {
      const int64_t dev = device_of_expert(ids.data_as<int32_t>()[t * top_k + j]);
      if (std::find(devices.begin(), devices.end(), dev) == devices.end()) devices.push_back(dev);
    }
    for (int64_t dev : devices) {
      if (dev == device_of_token(t)) continue;
      a2a_rows += 2;  // there and back
      if (dev / local != device_of_token(t) / local) a2a_between += 2;
    }
  }
  const double row_mib = double(d) * 4 / (1 << 20);
  // All-gather: every device receives the other devices' tokens, and sends back one partial row
  // per token of the other devices (the reduce-scatter).
  const double ag_rows = 2.0 * double(tokens) * double(n - 1);
  const double ag_between = 2.0 * double(tokens) * double(n - local);

  const Array gate = on(hg, "expert,None,None"), up = on(hu, "expert,None,None"),
              down = on(hd, "expert,None,None");
  const Times a2a = time_mode(*rt, reps, x, r, gate, up, down, dy, MoeDispatch::kAllToAll);
  const Times ag = time_mode(*rt, reps, x, r, gate, up, down, dy, MoeDispatch::kAllGather);
  const Array rgate = on(hg, "None,None,None"), rup = on(hu, "None,None,None"),
              rdown = on(hd, "None,None,None");
  const Times rep = time_mode(*rt, reps, x, r, rgate, rup, rdown, dy, MoeDispatch::kAllToAll);

  if (root) {
    fmt::print(
        "MoE block: T={} d={} F={} E={} top-{} F32 on {} devices ({} processes × {}), best of "
        "{}\n",
        tokens, d, ff, experts, top_k, n, rt->num_processes(), local, reps);
    fmt::print("{:<12} {:>11} {:>13} {:>10} {:>12}\n", "dispatcher", "forward_ms", "fwd+bwd_ms",
               "moved_MiB", "between_MiB");
    const auto line = [&](const char* name, const Times& t, double rows, double between) {
      fmt::print("{:<12} {:>11.1f} {:>13.1f} {:>10.1f} {:>12.1f}\n", name, t.forward * 1e3,
                 (t.forward + t.backward) * 1e3, rows * row_mib, between * row_mib);
    };
    line("all-to-all", a2a, a2a_rows, a2a_between);
    line("all-gather", ag, ag_rows, ag_between);
    line("replicated", rep, 0, 0);
    fmt::print(
        "RESULT all_to_all_vs_all_gather_forward={:.2f} all_to_all_vs_all_gather_step={:.2f} "
        "all_to_all_vs_replicated_forward={:.2f} moved_bytes_ratio={:.2f}\n",
        ag.forward / a2a.forward, (ag.forward + ag.backward) / (a2a.forward + a2a.backward),
        rep.forward / a2a.forward, ag_rows / std::max(1.0, a2a_rows));
  }
  return 0;
}
