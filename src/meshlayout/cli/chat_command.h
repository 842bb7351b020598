// chat_command.h — `meshlayout chat`: a plain chat with a Hugging Face Llama-style checkpoint
// (any family generate reads), born sharded on a mesh under a rules file. User lines come from
// standard input (one line, one turn; empty lines are skipped); the conversation is formatted
// in the model's chat format (tokenizers/chat_template.h: chatml, llama3, mistral, gemma or
// none, chosen by the family and the tokenizer's special tokens unless --template names one)
// and each reply streams to standard output as it is produced, ending at the format's
// end-of-turn token, an EOS id of generation_config.json, or --max-new-tokens, then a newline.
//
// Each turn recomputes the whole conversation (one prefill of every token so far, no key/value
// cache kept between turns): simple and exact, slower for long chats. A conversation that no
// longer fits the context window is an error naming its length; a reply is cut where the
// window ends. The header (model, mesh, rules, tokenizer, format, stop tokens) goes to the log
// stream (stderr); --print-prompt also logs each turn's prompt ids and text and the reply's
// ids. Sampling draws turn t with seed + t (the same replies on any mesh and process count).
// Works under mpirun: process 0 reads the lines and sends them to the others.
//
//   printf 'Hi\nTell me more\n' | meshlayout chat --model DIR [--system TEXT]
//       [--template chatml|llama3|mistral|gemma|none] [--max-new-tokens 256]
//       [--temperature 0.7] [--top-k 50] [--top-p 0.9] [--seed 1] [--rules FILE] [--mesh SPEC]
//
// Example:
//   ChatCommandOptions o{.model_dir = dir, .template_name = "chatml", .max_new_tokens = 8};
//   std::istringstream in("hi\nbye\n");
//   run_chat(o, in, std::cout, std::cerr);   // two replies, one per line
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

namespace meshlayout::cli {

struct ChatCommandOptions {
  std::string model_dir;
  std::string rules_path;                    // empty: every variable replicated
  std::optional<std::string> mesh;           // overrides the rules file's mesh
  std::string device = "cpu";                // cpu or gpu
  std::optional<std::string> template_name;  // --template; default: by family and tokens
  std::optional<std::string> system;         // --system: the system message
  int64_t max_new_tokens = 256;              // per reply
  std::optional<double> temperature;         // sampling when any of these four is given
  std::optional<int64_t> top_k;
  std::optional<double> top_p;
  std::optional<uint64_t> seed;
  bool print_prompt = false;
};

/// Runs the chat on the default runtime (every process calls it; process 0 reads `in` and
/// writes `out` and `log`); returns the exit code (0 when `in` ends). Bad options (an unknown
/// --template, a template whose special tokens the tokenizer lacks, decoding options out of
/// range), a missing model directory or tokenizer, and a conversation longer than the context
/// window are thrown as ValueError / NotFoundError naming the value, by every process alike.
int run_chat(const ChatCommandOptions& options, std::istream& in, std::ostream& out,
             std::ostream& log);

void add_chat_command(CLI::App& app, int* exit_code);

}  // namespace meshlayout::cli
