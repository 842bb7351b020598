#include "meshlayout/cli/inspect_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <iostream>
#include <map>

#include "meshlayout/core/strings.h"
#include "meshlayout/io/safetensors_file.h"
#include "meshlayout/plan/text_format.h"

namespace meshlayout::cli {
namespace {

struct DTypeTotal {
  size_t tensors = 0;
  uint64_t bytes = 0;
};

struct Totals {
  uint64_t bytes = 0;
  uint64_t file_bytes = 0;
  std::map<std::string_view, DTypeTotal> dtypes;
};

Totals totals_of(const Checkpoint& checkpoint) {
  Totals t;
  for (const auto& file : checkpoint.files()) t.file_bytes += file->header().file_bytes();
  for (const auto& [file, info] : checkpoint.tensors()) {
    t.bytes += info->num_bytes();
    DTypeTotal& d = t.dtypes[info->dtype_name];
    ++d.tensors;
    d.bytes += info->num_bytes();
  }
  return t;
}

// Names and paths come from the file: printed with control characters escaped, so a tensor
// named "a\nb" or "\x1b]0;…" cannot forge lines or drive the terminal.
std::string file_name(const std::string& path) {
  return escape_controls(std::filesystem::path(path).filename().string());
}

}  // namespace

std::string render_inspect_text(const Checkpoint& checkpoint, std::string_view source) {
  std::string out;
  const Totals totals = totals_of(checkpoint);
  const auto& files = checkpoint.files();
  const auto& tensors = checkpoint.tensors();
  put(out, "checkpoint {}: {} in {} ({}), {} ({} bytes) of tensor data\n", quote(source),
      plural(tensors.size(), "tensor"), plural(files.size(), "file"),
      format_bytes(totals.file_bytes), format_bytes(totals.bytes), totals.bytes);
  out += "\nfiles:\n";
  for (const auto& file : files) {
    const SafetensorsHeader& h = file->header();
    put(out, "  {}  {}, header {} bytes, data {} bytes, file {} bytes\n",
        escape_controls(file->path()), plural(h.tensors.size(), "tensor"), h.header_bytes,
        h.data_bytes, h.file_bytes());
  }
  const auto& metadata = checkpoint.metadata();
  if (!metadata.empty()) {
    out += "\nmetadata:\n";
    for (const auto& [key, value] : metadata) {
      put(out, "  {}: {}\n", escape_controls(key), escape_controls(value));
    }
  }

  // One aligned line per tensor; columns: tensor, file, dtype, shape, bytes, data_offsets.
  const bool show_file = files.size() > 1;
  std::vector<std::string> names;  // file names, by file
  std::map<const SafetensorsFile*, size_t> file_index;
  for (size_t i = 0; i < files.size(); ++i) {
    names.push_back(file_name(files[i]->path()));
    file_index[files[i].get()] = i;
  }
  std::vector<std::string> shapes, tensor_names;
  shapes.reserve(tensors.size());
  tensor_names.reserve(tensors.size());
  std::array<size_t, 6> width = {6, 4, 5, 5, 5, 12};
  const SafetensorsFile* last = nullptr;
  size_t last_index = 0;
  std::vector<size_t> tensor_file(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [file, info] = tensors[i];
    if (file != last) last = file, last_index = file_index.at(file);
    tensor_file[i] = last_index;
    shapes.push_back(shape_to_string(info->shape));
    tensor_names.push_back(escape_controls(info->name));
    width[0] = std::max(width[0], tensor_names.back().size());
    width[1] = std::max(width[1], names[last_index].size());
    width[2] = std::max(width[2], info->dtype_name.size());
    width[3] = std::max(width[3], shapes.back().size());
    width[4] = std::max(width[4], fmt::formatted_size("{}", info->num_bytes()));
  }
  out += '\n';
  auto line = [&](std::string_view name, std::string_view file, std::string_view dtype,
                  std::string_view shape, std::string_view bytes, std::string_view offsets) {
    put(out, "{:<{}}  ", name, width[0]);
    if (show_file) put(out, "{:<{}}  ", file, width[1]);
    put(out, "{:<{}}  {:<{}}  {:>{}}  {}\n", dtype, width[2], shape, width[3], bytes, width[4],
        offsets);
  };
  line("tensor", "file", "dtype", "shape", "bytes", "data_offsets");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& info = *tensors[i].second;
    put(out, "{:<{}}  ", tensor_names[i], width[0]);
    if (show_file) put(out, "{:<{}}  ", names[tensor_file[i]], width[1]);
    put(out, "{:<{}}  {:<{}}  {:>{}}  [{}, {})\n", info.dtype_name, width[2], shapes[i], width[3],
        info.num_bytes(), width[4], info.begin, info.end);
  }

  out += "\ndtypes:\n";
  for (const auto& [dtype, t] : totals.dtypes) {
    put(out, "  {:<7}  {}  {} ({} bytes)\n", dtype, plural(t.tensors, "tensor"),
        format_bytes(t.bytes), t.bytes);
  }
  put(out, "\ntotal: {}, {} ({} bytes) of tensor data; {} in {} ({} bytes)\n",
      plural(tensors.size(), "tensor"), format_bytes(totals.bytes), totals.bytes,
      format_bytes(totals.file_bytes), plural(files.size(), "file"), totals.file_bytes);
  return out;
}

std::string render_inspect_json(const Checkpoint& checkpoint, std::string_view source) {
  const Totals totals = totals_of(checkpoint);
  const auto& files = checkpoint.files();
  const auto& tensors = checkpoint.tensors();
  std::string out;
  append_json(out, Json{{"source", source}});
  out.pop_back();  // the lists follow inside the same object
  append_json_list(out, "files", files.size(), [&](size_t i) {
    const SafetensorsHeader& h = files[i]->header();
    return Json{{"path", files[i]->path()},
                {"header_bytes", h.header_bytes},
                {"data_bytes", h.data_bytes},
                {"file_bytes", h.file_bytes()},
                {"tensors", h.tensors.size()}};
  });
  out += ",\n\"metadata\":";
  append_json(out, Json(checkpoint.metadata()));
  append_json_list(out, "tensors", tensors.size(), [&](size_t i) {
    const auto& [file, info] = tensors[i];
    return Json{{"name", info->name},
                {"file", file->path()},
                {"dtype", info->dtype_name},
                {"shape", info->shape},
                {"bytes", info->num_bytes()},
                {"data_offsets", {info->begin, info->end}},
                {"file_offset", file->header().data_start() + info->begin}};
  });
  Json dtypes = Json::object();
  for (const auto& [dtype, t] : totals.dtypes) {
    dtypes[std::string(dtype)] = {{"tensors", t.tensors}, {"bytes", t.bytes}};
  }
  out += ",\n\"totals\":";
  append_json(out, Json{{"tensors", tensors.size()},
                        {"bytes", totals.bytes},
                        {"files", files.size()},
                        {"file_bytes", totals.file_bytes},
                        {"dtypes", std::move(dtypes)}});
  out += "}\n";
  return out;
}

int run_inspect(const InspectOptions& options, std::ostream& out) {
  const Checkpoint checkpoint = Checkpoint::open(options.path);
  const std::string text = options.json ? render_inspect_json(checkpoint, options.path)
                                        : render_inspect_text(checkpoint, options.path);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.flush();
  return 0;
}

void add_inspect_command(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand(
      "inspect",
      "List a safetensors checkpoint's tensors (dtype, shape, bytes, offsets), metadata and "
      "totals; reads the header(s) only.");
  cmd->add_option("file", options->path,
                  "a .safetensors file, a *.safetensors.index.json, or a directory holding "
                  "model.safetensors.index.json or model.safetensors")
      ->required();
  cmd->add_flag("--json", options->json, "print one JSON object instead of text");
  cmd->callback([options, exit_code] { *exit_code = run_inspect(*options, std::cout); });
}

}  // namespace meshlayout::cli
