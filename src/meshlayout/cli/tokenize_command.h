// tokenize_command.h — `meshlayout tokenize`: text to token ids and back with a model
// directory's tokenizer (tokenizer.json, else tokenizer.model; tokenizers/tokenizer.h).
//
//   printf 'Hello world' | meshlayout tokenize --model DIR        # {"ids": [128000, 9906, 1917]}
//   printf 'Hello world' | meshlayout tokenize --model DIR --no-special   # {"ids": [9906, 1917]}
//   echo '[9906, 1917]' | meshlayout tokenize --model DIR --decode        # Hello world
//
// Encoding reads standard input whole and encodes it exactly (a trailing newline is text
// too). Decoding reads ids as a JSON list or separated by commas and/or whitespace, and
// writes the text with nothing added; --no-special leaves special tokens out (encode: no BOS
// or other post-processing; decode: special tokens dropped).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace meshlayout::cli {

struct TokenizeOptions {
  std::string model_dir;
  bool decode = false;
  bool no_special = false;
};

/// Token ids from `text`: a JSON list of whole numbers, or numbers separated by commas and/or
/// whitespace. ValueError naming the offending item and what was expected.
std::vector<int64_t> parse_token_ids(std::string_view text);

/// Runs the command; returns the process exit code.
int run_tokenize(const TokenizeOptions& options, std::istream& in, std::ostream& out);

/// Registers the subcommand on `app`.
void add_tokenize_command(CLI::App& app, int* exit_code);

}  // namespace meshlayout::cli
