// output_file.h — writing a picture or report file (plan --html, layout --svg) whole or not at
// all: the text goes to a temporary file beside the target (io/save_target.h's name), then a
// rename replaces the target, so a failed or interrupted write never leaves a half-written
// page, and an existing file is only replaced by a complete one.
//
// Example:
//   write_output_file("plan.html", html, "--html");
//   // ValueError: cannot write --html 'out/plan.html': directory 'out' does not exist
#pragma once

#include <string>
#include <string_view>

namespace meshlayout {

/// Writes `text` to `path`. `what` names the file in errors (an option such as "--html").
/// ValueError naming `what`, the path and the reason when the path is empty or names a
/// directory or another non-regular file, when its directory does not exist or is not a
/// directory, or when the temporary file cannot be created there (permission denied,
/// read-only file system); Error when writing or renaming fails (disk full). The temporary
/// file is removed on every failure.
void write_output_file(const std::string& path, std::string_view text, std::string_view what);

}  // namespace meshlayout
