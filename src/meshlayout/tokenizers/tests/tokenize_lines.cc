// tokenize_lines — the C++ side of tests/test_reference.py: for each line of standard input
// (the text in hex), prints one JSON line {"ids": [...], "plain": [...], "decoded": hex,
// "decoded_skip": hex, "decoded_plain": hex} (ids with and without special tokens, the
// decoded text of `ids` with and without the special tokens, and of `plain`), or
// {"error": "..."}.
//
// Example:
//   printf '68690a\n' | tokenize_lines /tmp/tok   # {"ids":[258,...],...}
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "meshlayout/core/errors.h"
#include "meshlayout/tokenizers/tokenizer.h"

namespace {

std::string hex(std::string_view s) {
  std::string out;
  for (unsigned char c : s) out += fmt::format("{:02x}", c);
  return out;
}

std::string unhex(std::string_view s) {
  std::string out;
  for (size_t i = 0; i + 1 < s.size(); i += 2) {
    out += static_cast<char>(std::stoi(std::string(s.substr(i, 2)), nullptr, 16));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: tokenize_lines MODEL_DIR < hex lines\n";
    return 2;
  }
  try {
    auto tok = meshlayout::tokenizers::load_tokenizer(argv[1]);
    for (std::string line; std::getline(std::cin, line);) {
      nlohmann::json out;
      try {
        const std::string text = unhex(line);
        const auto ids = tok->encode(text, true);
        out["ids"] = ids;
        const auto plain = tok->encode(text, false);
        out["plain"] = plain;
        out["decoded_plain"] = hex(tok->decode(plain, false));
        out["decoded"] = hex(tok->decode(ids, false));
        out["decoded_skip"] = hex(tok->decode(ids, true));
      } catch (const meshlayout::Error& e) {
        out = {{"error", e.what()}};
      }
      std::cout << out.dump(-1, ' ', true, nlohmann::json::error_handler_t::replace) << "\n";
    }
  } catch (const meshlayout::Error& e) {
    std::cerr << "tokenize_lines: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
