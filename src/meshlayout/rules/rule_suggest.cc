#include "meshlayout/rules/rule_suggest.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/models/llama_split_notes.h"
#include "meshlayout/rules/rule_check.h"

namespace meshlayout {
namespace {

// How much a dimension's split is wanted by tensor parallelism: 0 the dimensions Megatron
// splits whole (vocabulary, experts), 1 heads and the feed-forward width, 2 the hidden size,
// 3 unknown, 4 head_dim (gathered whole before the rotary embedding and the scores).
int preference(const std::string& field) {
  if (field == "vocab_size" || field.find("expert") != std::string::npos) return 0;
  if (field == "num_attention_heads" || field == "num_key_value_heads" ||
      field.find("intermediate") != std::string::npos) {
    return 1;
  }
  if (field == "hidden_size") return 2;
  if (field == "head_dim") return 4;
  return 3;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The largest block over the whole, for an uneven split.
double largest_block(int64_t size, int64_t ways) {
  return static_cast<double>(ceil_div(size, ways)) / static_cast<double>(size);
}

std::string dim_text(const ModelTensor& t, int d) {
  const std::string& f = t.dims[static_cast<size_t>(d)];
  const int64_t n = t.shape[static_cast<size_t>(d)];
  if (f == "vocab_size") return fmt::format("the vocabulary ({})", n);
  if (f == "num_attention_heads") return fmt::format("the {} query heads", n);
  if (f == "num_key_value_heads") return fmt::format("the {} key/value heads", n);
  if (f.find("expert") != std::string::npos) return fmt::format("the {} experts", n);
  if (f.find("intermediate") != std::string::npos) {
    return fmt::format("the feed-forward width ({})", n);
  }
  if (f == "hidden_size") return fmt::format("the hidden size ({})", n);
  if (f == "head_dim") return fmt::format("head_dim ({})", n);
  return fmt::format("dimension {} ({})", d, n);
}

// What splitting dimension d means for the layer that holds the tensor.
std::string role(const ModelTensor& t, int d) {
  const int hf = t.hf_dims[static_cast<size_t>(d)];
  const std::string& name = t.hf_name;
  const bool linear = name.ends_with(".weight") && t.shape.size() >= 2;
  if (t.dims[static_cast<size_t>(d)].find("expert") != std::string::npos) {
    return hf < 0 ? "expert-parallel: each device holds whole experts and runs the tokens routed "
                    "to them"
                  : "each device scores its block of experts";
  }
  if (name.find("embed_tokens") != std::string::npos) {
    return hf == 0 ? "vocab-parallel embedding: each device looks up its block of rows"
                   : "each device holds a slice of every embedding vector";
  }
  if (name == "lm_head.weight" && hf == 0) {
    return "column-parallel over the vocabulary: each device computes its block of logits";
  }
  if (linear && hf == 0) {
    return "column-parallel (Megatron): each device computes its block of output features";
  }
  if (linear && hf == 1) {
    return "row-parallel (Megatron): each device holds a block of input features, and one "
           "all-reduce completes the partial sums";
  }
  if (name.ends_with(".bias") && hf == 0) return "split as its weight's output features";
  if (t.shape.size() == 1) return "a per-feature vector, split in blocks";
  return "";
}

std::string blocks(int64_t size, int64_t ways) {
  const int64_t c = ceil_div(size, ways);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < ways && out.size() < 8; ++i) {
    out.push_back(std::clamp<int64_t>(size - i * c, 0, c));
  }
  return fmt::format("{}{}", fmt::join(out, ", "), ways > 8 ? ", …" : "");
}

std::string axes_text(const std::vector<std::string>& axes, int64_t ways) {
  std::vector<std::string> q;
  for (const std::string& a : axes) q.push_back(quote(a));
  return fmt::format("{} ({})", fmt::join(q, " x "), ways);
}

struct Pick {
  int dim = -1;
  std::string why;
};

// The dimension tensor parallelism splits over `ways` devices (see the header).
Pick pick_megatron(const ModelTensor& t, int64_t ways, const std::string& axis_text) {
  const int rank = static_cast<int>(t.shape.size());
  std::vector<int> order;
  for (int d = 0; d < rank; ++d) order.push_back(d);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    const int pa = preference(t.dims[static_cast<size_t>(a)]);
    const int pb = preference(t.dims[static_cast<size_t>(b)]);
    if (pa != pb) return pa < pb;
    return t.shape[static_cast<size_t>(a)] > t.shape[static_cast<size_t>(b)];
  });
  const auto size = [&](int d) { return t.shape[static_cast<size_t>(d)]; };
  const auto pref = [&](int d) { return preference(t.dims[static_cast<size_t>(d)]); };
  const bool has_other =
      std::any_of(order.begin(), order.end(), [&](int d) { return pref(d) < 4; });
  const auto allowed = [&](int d) { return pref(d) < 4 || !has_other; };
  std::vector<std::string> skipped;
  Pick p;
  for (int d : order) {
    if (!allowed(d)) continue;
    if (size(d) % ways == 0) {
      p.dim = d;
      break;
    }
    if (size(d) > 1) skipped.push_back(dim_text(t, d));
  }
  bool uneven = false;
  if (p.dim < 0) {
    // No dimension divides: the most wanted one whose largest block is within 25% of an even
    // split, else the most even.
    uneven = true;
    double best = 2;
    for (int d : order) {
      if (!allowed(d) || size(d) < 2) continue;
      const double b = largest_block(size(d), ways);
      if (b <= 1.25 / static_cast<double>(ways)) {
        p.dim = d;
        break;
      }
      if (b < best) {
        best = b;
        p.dim = d;
      }
    }
    if (p.dim < 0) return p;
  }
  const std::string r = role(t, p.dim);
  p.why = fmt::format("megatron: {} over {}{}", dim_text(t, p.dim), axis_text,
                      r.empty() ? "" : ": " + r);
  if (uneven) {
    p.why += fmt::format(
        "; no dimension divides by {}, so uneven blocks of {} (the most even split of the wanted "
        "dimensions)",
        ways, blocks(size(p.dim), ways));
  } else if (!skipped.empty()) {
    p.why += fmt::format("; not {}: {} not divide by {}", fmt::join(skipped, " or "),
                         skipped.size() == 1 ? "does" : "they do", ways);
  }
  return p;
}

// The dimension FSDP splits over `ways` devices: the largest that divides (not `exclude`),
// head_dim last, else the most even uneven split; -1 when no dimension has 2 or more.
Pick pick_fsdp(const ModelTensor& t, int64_t ways, int exclude, const std::string& axis_text) {
  const int rank = static_cast<int>(t.shape.size());
  const auto size = [&](int d) { return t.shape[static_cast<size_t>(d)]; };
  const auto pref = [&](int d) { return preference(t.dims[static_cast<size_t>(d)]); };
  Pick p;
  for (bool head_dim_too : {false, true}) {
    for (int d = 0; d < rank; ++d) {
      if (d == exclude || size(d) % ways != 0 || (pref(d) == 4) != head_dim_too) continue;
      if (p.dim < 0 || size(d) > size(p.dim)) p.dim = d;
    }
    if (p.dim >= 0) break;
  }
  if (p.dim >= 0) {
    p.why = fmt::format(
        "fsdp: {}, the largest dimension {}divisible by {}, over {}: each device "
        "stores 1/{} of it",
        dim_text(t, p.dim), exclude >= 0 ? "left that is " : "", ways, axis_text, ways);
    return p;
  }
  double best = 2;
  for (int d = 0; d < rank; ++d) {
    if (d == exclude || size(d) < 2) continue;
    const double b = largest_block(size(d), ways) + (pref(d) == 4 ? 1 : 0);
    if (b < best) {
      best = b;
      p.dim = d;
    }
  }
  if (p.dim >= 0) {
    p.why = fmt::format("fsdp: {} over {} in uneven blocks of {}: no dimension {}divides by {}",
                        dim_text(t, p.dim), axis_text, blocks(size(p.dim), ways),
                        exclude >= 0 ? "left " : "", ways);
  }
  return p;
}

struct Axes {
  std::string model;  // "" when tensor parallelism is not used
  int64_t model_ways = 1;
  std::vector<std::string> data;
  int64_t data_ways = 1;
};

Axes resolve_axes(const DeviceMesh& mesh, const SuggestOptions& o,
                  std::vector<std::string>& notes) {
  const bool megatron = o.strategy != SuggestStrategy::kFsdp;
  const bool fsdp = o.strategy != SuggestStrategy::kMegatron;
  const std::string strategy(suggest_strategy_name(o.strategy));
  const auto axis_list = [&] {
    std::vector<std::string> out;
    for (size_t i = 0; i < mesh.axis_names().size(); ++i) {
      out.push_back(fmt::format("{}={}", mesh.axis_names()[i], mesh.shape()[i]));
    }
    return fmt::format("{}", fmt::join(out, ", "));
  };
  Axes a;
  if (megatron) {
    if (!mesh.axis_index(o.model_axis)) {
      throw ValueError(fmt::format(
          "mesh {} has no axis {}, the tensor-parallel axis --strategy {} splits over; name "
          "one of its axes ({}) with --model-axis, or add it to --mesh",
          mesh.to_string(), quote(o.model_axis), strategy, axis_list()));
    }
    a.model = o.model_axis;
    a.model_ways = mesh.axis_size(o.model_axis);
  }
  if (fsdp) {
    std::vector<std::string> wanted = o.data_axes;
    if (wanted.empty()) {
      for (const std::string& axis : mesh.axis_names()) {
        if (!megatron || axis != o.model_axis) wanted.push_back(axis);
      }
      if (wanted.empty()) {
        throw ValueError(fmt::format(
            "--strategy {} needs a data axis besides {}, but mesh {} has no other axis; add one "
            "to --mesh (e.g. data=2,{}=N)",
            strategy, quote(o.model_axis), mesh.to_string(), o.model_axis));
      }
    }
    for (size_t i = 0; i < wanted.size(); ++i) {
      const std::string& axis = wanted[i];
      if (!mesh.axis_index(axis)) {
        throw ValueError(fmt::format("data axis {} is not an axis of mesh {} ({})", quote(axis),
                                     mesh.to_string(), axis_list()));
      }
      if (megatron && axis == o.model_axis) {
        throw ValueError(fmt::format(
            "data axis {} is the tensor-parallel axis too; --strategy {} splits a tensor over "
            "each mesh axis at most once",
            quote(axis), strategy));
      }
      if (std::find(wanted.begin(), wanted.begin() + static_cast<ptrdiff_t>(i), axis) !=
          wanted.begin() + static_cast<ptrdiff_t>(i)) {
        throw ValueError(fmt::format("data axis {} is given twice", quote(axis)));
      }
      if (mesh.axis_size(axis) == 1) {
        notes.push_back(fmt::format("data axis {} has size 1: not used", quote(axis)));
        continue;
      }
      a.data.push_back(axis);
      a.data_ways *= mesh.axis_size(axis);
    }
  }
  if (megatron && a.model_ways == 1) {
    notes.push_back(
        fmt::format("the tensor-parallel axis {} has size 1: not used", quote(a.model)));
    a.model.clear();
  }
  if (a.model.empty() && a.data.empty()) {
    throw ValueError(
        fmt::format("--strategy {} on mesh {} has no axis of size > 1 to split over ({}{})",
                    strategy, mesh.to_string(), megatron ? "model axis " + quote(o.model_axis) : "",
                    fsdp ? std::string(megatron ? " and the data axes" : "the data axes") : ""));
  }
  std::vector<std::string> used = a.data;
  if (!a.model.empty()) used.push_back(a.model);
  std::vector<std::string> replicas;
  for (size_t i = 0; i < mesh.axis_names().size(); ++i) {
    const std::string& axis = mesh.axis_names()[i];
    if (mesh.shape()[i] > 1 && std::find(used.begin(), used.end(), axis) == used.end()) {
      replicas.push_back(fmt::format("{} ({})", quote(axis), mesh.shape()[i]));
    }
  }
  if (!replicas.empty()) {
    const bool one = replicas.size() == 1;
    notes.push_back(fmt::format("mesh ax{} {} split{} no tensor: {} replicas (data parallel)",
                                one ? "is" : "es", fmt::join(replicas, ", "), one ? "s" : "",
                                one ? "it holds" : "they hold"));
  }
  return a;
}

}  // namespace

SuggestStrategy parse_suggest_strategy(std::string_view name) {
  if (name == "megatron") return SuggestStrategy::kMegatron;
  if (name == "fsdp") return SuggestStrategy::kFsdp;
  if (name == "megatron+fsdp") return SuggestStrategy::kMegatronFsdp;
  throw ValueError(
      fmt::format("unknown strategy {}; expected megatron, fsdp or megatron+fsdp", quote(name)));
}

std::string_view suggest_strategy_name(SuggestStrategy strategy) {
  switch (strategy) {
    case SuggestStrategy::kMegatron:
      return "megatron";
    case SuggestStrategy::kFsdp:
      return "fsdp";
    case SuggestStrategy::kMegatronFsdp:
      return "megatron+fsdp";
  }
  return "?";
}

Suggestion suggest_rules(const ModelTensors& model, const DeviceMesh& mesh,
                         const SuggestOptions& options) {
  if (options.min_bytes < 0) {
    throw ValueError(fmt::format("--min-bytes {} must be >= 0", options.min_bytes));
  }
  Suggestion out;
  const Axes axes = resolve_axes(mesh, options, out.notes);
  const std::string model_text = axes.model.empty() ? "" : axes_text({axes.model}, axes.model_ways);
  const std::string data_text = axes.data.empty() ? "" : axes_text(axes.data, axes.data_ways);
  const DimSharding data_dim =
      axes.data.size() == 1 ? DimSharding(axes.data[0]) : DimSharding(axes.data);
  // Each variable glob (one per variable of every layer) with its tensors' layouts and reasons.
  struct Group {
    std::string glob;
    std::vector<std::pair<std::string, ConvertedRule>> members;  // path, rule
    bool all_split = true;
  };
  std::vector<Group> groups;
  std::map<std::string, size_t> group_of;
  std::vector<std::string> small;
  for (const ModelTensor& t : model.tensors) {
    const std::string glob = layer_glob(t.path);
    auto [it, fresh] = group_of.try_emplace(glob, groups.size());
    if (fresh) groups.push_back(Group{.glob = glob});
    Group& g = groups[it->second];
    if (t.bytes <= options.min_bytes) {
      g.all_split = false;
      if (std::find(small.begin(), small.end(), glob) == small.end()) small.push_back(glob);
      continue;
    }
    ConvertedRule r{.layout = std::vector<DimSharding>(t.shape.size())};
    std::vector<std::string> why;
    int model_dim = -1;
    if (!axes.model.empty()) {
      const Pick p = pick_megatron(t, axes.model_ways, model_text);
      if (p.dim >= 0) {
        model_dim = p.dim;
        r.layout[static_cast<size_t>(p.dim)] = DimSharding(axes.model);
        why.push_back(p.why);
      }
    }
    if (!axes.data.empty()) {
      const Pick p = pick_fsdp(t, axes.data_ways, model_dim, data_text);
      if (p.dim >= 0) {
        r.layout[static_cast<size_t>(p.dim)] = data_dim;
        why.push_back(p.why);
      } else if (model_dim >= 0) {
        why.push_back(fmt::format("not split over {} too: no other dimension", data_text));
      }
    }
    if (model_dim < 0 && why.empty()) {
      throw ValueError(fmt::format(
          "tensor {} of {} bytes has no dimension of size 2 or more to split (shape ({}))",
          quote(t.path), t.bytes, fmt::join(t.shape, ", ")));
    }
    r.reason = fmt::format("{}", fmt::join(why, "; "));
    g.members.emplace_back(t.path, std::move(r));
  }
  for (const Group& g : groups) {
    const bool same = std::all_of(g.members.begin(), g.members.end(), [&](const auto& m) {
      return m.second.layout == g.members[0].second.layout &&
             m.second.reason == g.members[0].second.reason;
    });
    if (g.all_split && same && !g.members.empty()) {
      ConvertedRule r = g.members[0].second;
      r.pattern = glob_to_regex(g.glob);
      r.origin = fmt::format("suggested {}", quote(g.glob));
      out.rules.rules.push_back(std::move(r));
      continue;
    }
    for (const auto& [path, rule] : g.members) {
      ConvertedRule r = rule;
      r.pattern = glob_to_regex(path);
      r.origin = fmt::format("suggested {}", quote(path));
      out.rules.rules.push_back(std::move(r));
    }
  }
  out.rules.mesh = mesh;
  out.rules.mode = MatchMode::kSearch;
  if (!small.empty()) {
    std::vector<std::string> shown(small.begin(),
                                   small.begin() + std::min<ptrdiff_t>(4, std::ssize(small)));
    out.notes.push_back(
        fmt::format("{} variable{} of at most {} bytes stay replicated (no rule): {}{}",
                    small.size(), small.size() == 1 ? "" : "s", options.min_bytes,
                    fmt::join(shown, ", "), small.size() > shown.size() ? ", …" : ""));
  }
  if (model.config) {
    for (const std::string& n : llama_split_notes(*model.config, out.rules.to_layout_map())) {
      out.notes.push_back("the model: " + n);
    }
  }
  // The suggestion proves itself: every tensor above the threshold split, no rule unused, no
  // path matched twice.
  const std::vector<std::string> problems =
      check_rules(out.rules, model.tensors, {.min_bytes = options.min_bytes});
  if (!problems.empty()) {
    throw InternalError(fmt::format("rules suggest made rules that fail rules check: {}",
                                    fmt::join(problems, "; ")));
  }
  return out;
}

}  // namespace meshlayout
