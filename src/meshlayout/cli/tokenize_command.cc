#include "meshlayout/cli/tokenize_command.h"

#include <fmt/format.h>

#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "meshlayout/cli/cli_checks.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/core/json_input.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/tokenizers/tokenizer.h"

namespace meshlayout::cli {

std::vector<int64_t> parse_token_ids(std::string_view text) {
  std::vector<int64_t> ids;
  const std::string_view body = trim(text);
  if (body.starts_with('[')) {
    nlohmann::json j;
    try {
      j = parse_json_checked(text);
    } catch (const ValueError& e) {
      throw ValueError(fmt::format("the ids on standard input are not a JSON list: {}", e.what()));
    }
    if (!j.is_array()) {
      throw ValueError(
          fmt::format("the ids on standard input are {}; expected a list of ids", json_excerpt(j)));
    }
    for (size_t i = 0; i < j.size(); ++i) {
      if (!j[i].is_number_integer()) {
        throw ValueError(fmt::format(
            "the ids on standard input: item {} is {}; expected a whole number (a token id)", i,
            json_excerpt(j[i])));
      }
      ids.push_back(j[i].get<int64_t>());
    }
    return ids;
  }
  std::string item;
  const auto flush = [&] {
    if (item.empty()) return;
    try {
      ids.push_back(parse_int64(item, "token id"));
    } catch (const ValueError&) {
      throw ValueError(fmt::format(
          "the ids on standard input: {} is not a token id; expected whole numbers separated by "
          "commas or spaces, or a JSON list",
          quote(item)));
    }
    item.clear();
  };
  for (char c : text) {
    if (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      flush();
    } else {
      item += c;
    }
  }
  flush();
  return ids;
}

int run_tokenize(const TokenizeOptions& options, std::istream& in, std::ostream& out) {
  auto tokenizer = tokenizers::load_tokenizer(options.model_dir);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  check_read(in, options.decode ? "the ids on standard input" : "the text on standard input");
  if (options.decode) {
    out << tokenizer->decode(parse_token_ids(text), /*skip_special_tokens=*/options.no_special);
  } else {
    const std::vector<int64_t> ids = tokenizer->encode(text, !options.no_special);
    out << fmt::format("{{\"ids\": {}}}\n", repr_ints(ids));
  }
  out.flush();
  return 0;
}

void add_tokenize_command(CLI::App& app, int* exit_code) {
  auto options = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "tokenize",
      "Encode the text on stdin with a model's tokenizer (tokenizer.json or tokenizer.model) "
      "and print {\"ids\": [...]}; with --decode, read ids (a JSON list or numbers separated "
      "by commas/spaces) and print the text.");
  cmd->add_option("--model", options->model_dir,
                  "model directory holding tokenizer.json or tokenizer.model")
      ->required();
  cmd->add_flag("--decode", options->decode, "read token ids and print their text");
  cmd->add_flag("--no-special", options->no_special,
                "encode without the BOS / post-processor; decode without special tokens");
  cmd->callback([options, exit_code] { *exit_code = run_tokenize(*options, std::cin, std::cout); });
}

}  // namespace meshlayout::cli
