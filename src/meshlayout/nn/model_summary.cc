#include "meshlayout/nn/model_summary.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "meshlayout/core/strings.h"
#include "meshlayout/layout/devices.h"
#include "meshlayout/layout/shard_geometry.h"
#include "meshlayout/nn/model.h"

namespace meshlayout {
namespace {

// 1234567 → "1,234,567" (Keras prints parameter counts so).
std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// Python's repr of a sorted tuple of axis names: ('model',), ('data', 'model').
std::string tuple_repr(const std::set<std::string>& axes) {
  std::vector<std::string> quoted;
  for (const std::string& a : axes) quoted.push_back("'" + a + "'");
  return fmt::format("({}{})", fmt::join(quoted, ", "), axes.size() == 1 ? "," : "");
}

}  // namespace

std::string readable_memory_size(double bytes) {
  static const char* const kUnits[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  for (const char* unit : kUnits) {
    if (bytes / 1024 < 1) return fmt::format("{:.2f} {}", bytes, unit);
    bytes /= 1024;
  }
  return fmt::format("{:.2f} {}", bytes, kUnits[5]);
}

std::string Model::summary() const {
  struct Row {
    std::string path, shape, dtype, layout, per_device;
  };
  std::vector<Row> rows;
  int64_t total = 0, trainable = 0;
  double total_bytes = 0, trainable_bytes = 0;
  // Keras 2 DTensor summary: params grouped by the sorted set of mesh axes they are split on.
  std::map<std::set<std::string>, std::pair<int64_t, double>> by_spec;
  std::map<std::set<std::string>, int64_t> spec_factor;
  std::map<int64_t, double> device_bytes;  // exact, per global device id
  // RNG state (Dropout's seed_generator_state) is listed and held in memory, but, as Keras
  // counts model.weights only, it is no parameter.
  int64_t rng_count = 0;
  double rng_bytes = 0;
  for (const VariablePtr& v : variables()) {
    const int64_t n = num_elements(v->shape());
    const double bytes = static_cast<double>(n) * static_cast<double>(dtype_size(v->dtype()));
    const bool weight = !v->is_rng_state();
    if (weight) {
      total += n;
      total_bytes += bytes;
    } else {
      rng_count += n;
      rng_bytes += bytes;
    }
    if (weight && v->trainable()) {
      trainable += n;
      trainable_bytes += bytes;
    }
    Row row{v->path(), shape_to_string(v->shape()), std::string(dtype_name(v->dtype())), "(lazy)",
            "-"};
    if (std::optional<TensorLayout> layout = v->layout()) {
      ShardGeometry geometry(*layout, v->shape());
      row.layout = layout->to_string();
      row.per_device =
          with_commas(geometry.max_box_elements() * static_cast<int64_t>(dtype_size(v->dtype())));
      std::set<std::string> spec;
      for (const DimSharding& d : layout->axes()) spec.insert(d.axes().begin(), d.axes().end());
      int64_t factor = 1;
      for (const std::string& a : spec) factor *= geometry.mesh().axis_size(a);
      if (weight) {
        by_spec[spec].first += n;
        by_spec[spec].second += bytes;
        spec_factor[spec] = factor;
      }
      for (int64_t p = 0; p < geometry.mesh().size(); ++p) {
        device_bytes[geometry.mesh().device_ids()[static_cast<size_t>(p)]] +=
            static_cast<double>(geometry.box(p).num_elements()) *
            static_cast<double>(dtype_size(v->dtype()));
      }
    }
    rows.push_back(std::move(row));
  }
  Row head{"Variable path", "Shape", "DType", "Layout", "Bytes/device"};
  size_t w[5] = {head.path.size(), head.shape.size(), head.dtype.size(), head.layout.size(),
                 head.per_device.size()};
  for (const Row& r : rows) {
    w[0] = std::max(w[0], r.path.size());
    w[1] = std::max(w[1], r.shape.size());
    w[2] = std::max(w[2], r.dtype.size());
    w[3] = std::max(w[3], r.layout.size());
    w[4] = std::max(w[4], r.per_device.size());
  }
  std::string out = fmt::format("Model: \"{}\"\n", name());
  auto line = [&](const Row& r) {
    out += fmt::format("{:<{}}  {:<{}}  {:<{}}  {:<{}}  {:>{}}\n", r.path, w[0], r.shape, w[1],
                       r.dtype, w[2], r.layout, w[3], r.per_device, w[4]);
  };
  line(head);
  out += std::string(w[0] + w[1] + w[2] + w[3] + w[4] + 8, '-') + "\n";
  for (const Row& r : rows) line(r);
  out +=
      fmt::format("Total params: {} ({})\n", with_commas(total), readable_memory_size(total_bytes));
  out += fmt::format("Trainable params: {} ({})\n", with_commas(trainable),
                     readable_memory_size(trainable_bytes));
  out += fmt::format("Non-trainable params: {} ({})\n", with_commas(total - trainable),
                     readable_memory_size(total_bytes - trainable_bytes));
  if (rng_count > 0) {
    out += fmt::format("RNG state (not params, as Keras): {} ({})\n", with_commas(rng_count),
                       readable_memory_size(rng_bytes));
  }
  if (by_spec.empty()) return out;
  double per_device = 0;
  for (const auto& [spec, counts] : by_spec) {
    const auto& [count, bytes] = counts;
    if (count == 0) continue;
    if (spec.empty()) {
      out += fmt::format("{} / {} params ({}) are fully replicated\n", count, total,
                         readable_memory_size(bytes));
      per_device += bytes;
    } else {
      out += fmt::format(
          "{} / {} params ({}) are sharded based on spec '{}' and across {} devices.\n", count,
          total, readable_memory_size(bytes), tuple_repr(spec), spec_factor[spec]);
      per_device += bytes / static_cast<double>(spec_factor[spec]);
    }
  }
  out += fmt::format("Overall per device memory usage: {}\n", readable_memory_size(per_device));
  out += fmt::format("Overall sharding factor: {:.2f}\n",
                     per_device > 0 ? total_bytes / per_device : 1.0);
  out += "Memory per device (exact):";
  for (const auto& [id, bytes] : device_bytes) {
    out += fmt::format(" {} {}", device_name(id), readable_memory_size(bytes));
    out += id == device_bytes.rbegin()->first ? "\n" : ",";
  }
  return out;
}

}  // namespace meshlayout
