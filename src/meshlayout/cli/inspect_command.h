// inspect_command.h — `meshlayout inspect`: what a safetensors checkpoint holds, from its
// header(s) only: every tensor's dtype, shape, size in bytes and data offsets, the metadata,
// and totals (per file and per dtype).
//
//   meshlayout inspect model.safetensors [--json]
//   meshlayout inspect model.safetensors.index.json     (or the directory holding it)
//
// Text: a summary line, the files, the metadata, one aligned line per tensor
//   tensor  [file]  dtype  shape  bytes  data_offsets
// (data_offsets as the header has them, relative to the file's data section; the file column
// only for several files), then bytes per dtype and the totals. --json prints one object:
//   {"source", "files": [{"path", "header_bytes", "data_bytes", "file_bytes", "tensors"}],
//    "metadata": {…}, "tensors": [{"name", "file", "dtype", "shape", "bytes",
//    "data_offsets": [begin, end], "file_offset"}],
//    "totals": {"tensors", "bytes", "files", "file_bytes",
//               "dtypes": {"F32": {"tensors", "bytes"}, …}}}
// ("file_offset" is where the tensor's bytes start in its file: 8 + header bytes + begin.)
#pragma once

#include <CLI/CLI.hpp>
#include <iosfwd>
#include <string>
#include <string_view>

namespace meshlayout {
class Checkpoint;
}

namespace meshlayout::cli {

struct InspectOptions {
  std::string path;
  bool json = false;
};

/// Runs the command; returns the process exit code.
int run_inspect(const InspectOptions& options, std::ostream& out);

/// The text and JSON forms described above; `source` is the path the user gave.
std::string render_inspect_text(const Checkpoint& checkpoint, std::string_view source);
std::string render_inspect_json(const Checkpoint& checkpoint, std::string_view source);

void add_inspect_command(CLI::App& app, int* exit_code);

}  // namespace meshlayout::cli
