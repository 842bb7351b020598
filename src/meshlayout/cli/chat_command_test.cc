// `meshlayout chat` on the tiny random Llama of the generate tests with the toy tokenizer's chat
// variant (chatml and llama3 special tokens): two user turns read from a stream give prompts
// equal to the chat format of the conversation so far (the first reply included) and replies
// equal to the library's greedy generation of those prompts, streamed; the system message; the
// format chosen by family; stopping on an EOS; and the refusals (unknown template, a template
// whose special tokens the tokenizer lacks, a conversation longer than the context window).
#include "meshlayout/cli/chat_command.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "meshlayout/cli/generate_command.h"
#include "meshlayout/cli/generate_test_util.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/models/generation.h"
#include "meshlayout/plan/text_format.h"
#include "meshlayout/testing/test_util.h"
#include "meshlayout/tokenizers/chat_template.h"
#include "meshlayout/tokenizers/tokenizer.h"

namespace meshlayout::cli {
namespace {

using ::testing::HasSubstr;
using testing::ValueErrorMessage;
using tokenizers::ChatFormat;
using tokenizers::ChatMessage;

struct ChatRun {
  std::vector<std::string> replies;  // the lines of the output
  std::string log;
};

class ChatCommandTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    set_device_count(4);
    dir_ = (std::filesystem::temp_directory_path() / ("chat_test_" + std::to_string(::getpid())))
               .string();
    testing::write_tiny_llama(dir_);
    tokenizers::write_toy_tokenizer(dir_, testing::tiny_generate_config().vocab_size,
                                    /*chat=*/true);
    reset_device_count();
  }
  static void TearDownTestSuite() { std::filesystem::remove_all(dir_); }
  void SetUp() override {
    set_device_count(4);
    clear_session();
  }
  void TearDown() override { reset_device_count(); }

  static ChatRun run(const ChatCommandOptions& o, const std::string& input) {
    std::istringstream in(input);
    std::ostringstream out, log;
    clear_session();
    EXPECT_EQ(run_chat(o, in, out, log), 0);
    ChatRun r{split(out.str(), '\n'), log.str()};
    EXPECT_EQ(r.replies.back(), "");  // every reply ends with a newline
    r.replies.pop_back();
    return r;
  }

  // The ids after "turn T prompt (N tokens): " in the log.
  static std::vector<int64_t> logged_prompt(const std::string& log, int turn) {
    const std::string key = fmt::format("turn {} prompt (", turn);
    const size_t at = log.find(key);
    EXPECT_NE(at, std::string::npos) << log;
    if (at == std::string::npos) return {};
    const size_t start = log.find("): ", at) + 3;
    std::vector<int64_t> ids;
    for (const std::string& item : split(log.substr(start, log.find('\n', start) - start), ','))
      ids.push_back(std::stoll(item));
    return ids;
  }

  // What the library generates greedily from `ids` on a replicated model, stopping on `eos`,
  // decoded (special tokens skipped).
  static std::string library_reply(const std::vector<int64_t>& ids, std::vector<int64_t> eos,
                                   int64_t max_new) {
    clear_session();
    LlamaModel model(testing::tiny_generate_config(), LayoutMap(default_generate_mesh()));
    load_hf_llama(HfLlamaCheckpoint::open(dir_), model.variables_by_path());
    const std::vector<int32_t> prompt(ids.begin(), ids.end());
    GenerateResult g = generate(model, {prompt}, {.max_new_tokens = max_new, .eos_token_ids = eos});
    std::vector<int64_t> tokens(g.tokens[0].begin(), g.tokens[0].end());
    return tokenizers::load_tokenizer(dir_)->decode(tokens, /*skip_special_tokens=*/true);
  }

  static inline std::string dir_;
};

TEST_F(ChatCommandTest, TwoTurnsFormatTheConversationAndStreamTheLibrarysReplies) {
  const ChatCommandOptions o{
      .model_dir = dir_, .template_name = "chatml", .max_new_tokens = 5, .print_prompt = true};
  const ChatRun r = run(o, "the cat\n\n  \nsat on\n");  // blank lines are not turns
  ASSERT_EQ(r.replies.size(), 2u) << r.log;
  EXPECT_THAT(r.log, HasSubstr("template: chatml; a reply stops on '<|im_end|>' (id 57) or after "
                               "5 new tokens\neach turn recomputes the whole conversation"));
  const auto tok = tokenizers::load_tokenizer(dir_);
  const int64_t im_end = *tok->token_to_id("<|im_end|>");
  std::vector<ChatMessage> chat = {{"user", "the cat"}};
  const std::vector<int64_t> p0 = tokenizers::encode_chat(*tok, ChatFormat::kChatMl, chat);
  EXPECT_EQ(logged_prompt(r.log, 0), p0);
  EXPECT_EQ(p0.front(), *tok->token_to_id("<|im_start|>"));
  EXPECT_EQ(r.replies[0], library_reply(p0, {im_end}, 5));
  // The second prompt holds the first reply as the assistant's message.
  chat.push_back({"assistant", r.replies[0]});
  chat.push_back({"user", "sat on"});
  const std::vector<int64_t> p1 = tokenizers::encode_chat(*tok, ChatFormat::kChatMl, chat);
  EXPECT_EQ(logged_prompt(r.log, 1), p1);
  EXPECT_EQ(r.replies[1], library_reply(p1, {im_end}, 5));
  EXPECT_THAT(r.log, HasSubstr("turn 1 prompt text: \"<|im_start|>user\\nthe cat<|im_end|>\\n"));
  EXPECT_THAT(r.log, HasSubstr("turn 1 reply ("));
}

TEST_F(ChatCommandTest, SystemMessageAndTheFormatOfTheFamily) {
  // The tiny model is a "llama" and the tokenizer has Llama 3's header tokens: llama3.
  const ChatRun r = run(
      {.model_dir = dir_, .system = "be kind", .max_new_tokens = 2, .print_prompt = true}, "hi\n");
  ASSERT_EQ(r.replies.size(), 1u);
  EXPECT_THAT(r.log, HasSubstr("template: llama3; a reply stops on '<|eot_id|>' (id 61)"));
  const auto tok = tokenizers::load_tokenizer(dir_);
  EXPECT_EQ(
      logged_prompt(r.log, 0),
      tokenizers::encode_chat(*tok, ChatFormat::kLlama3, {{"system", "be kind"}, {"user", "hi"}}));
  EXPECT_THAT(r.log,
              HasSubstr("<|start_header_id|>system<|end_header_id|>\\n\\nbe kind<|eot_id|>"));
}

TEST_F(ChatCommandTest, StopsOnAnEosOfGenerationConfig) {
  // The first token the model answers "the cat" with, made the EOS: every reply is empty.
  const auto tok = tokenizers::load_tokenizer(dir_);
  const std::vector<int64_t> p0 =
      tokenizers::encode_chat(*tok, ChatFormat::kMistral, {{"user", "the cat"}});
  clear_session();
  LlamaModel model(testing::tiny_generate_config(), LayoutMap(default_generate_mesh()));
  load_hf_llama(HfLlamaCheckpoint::open(dir_), model.variables_by_path());
  const int32_t first =
      generate(model, {std::vector<int32_t>(p0.begin(), p0.end())}, {.max_new_tokens = 1})
          .tokens[0][0];
  const std::string copy = dir_ + "_eos";
  std::filesystem::copy(dir_, copy);
  std::ofstream(copy + "/generation_config.json") << fmt::format("{{\"eos_token_id\": {}}}", first);
  const ChatRun r = run(
      {.model_dir = copy, .template_name = "mistral", .max_new_tokens = 4, .print_prompt = true},
      "the cat\n");
  std::filesystem::remove_all(copy);
  ASSERT_EQ(r.replies.size(), 1u);
  EXPECT_EQ(r.replies[0], "");
  EXPECT_THAT(r.log, HasSubstr(fmt::format("turn 0 reply (0 tokens, stopped on id {}): {}\n", first,
                                           first)));
}

TEST_F(ChatCommandTest, RefusesBadInputNamingIt) {
  EXPECT_THAT(ValueErrorMessage([&] { run({.model_dir = dir_, .template_name = "chatgpt"}, ""); }),
              HasSubstr("--template 'chatgpt' is not a chat format; expected chatml, llama3, "
                        "mistral, gemma or none"));
  EXPECT_THAT(
      ValueErrorMessage([&] { run({.model_dir = dir_, .template_name = "gemma"}, ""); }),
      HasSubstr("--template gemma needs the special token ['<bos>'], which the tokenizer "
                "(byte-level BPE from tokenizer.json (64 tokens, 11 added)) does not have"));
  EXPECT_THAT(ValueErrorMessage([&] { run({.model_dir = dir_, .top_p = 1.5}, ""); }),
              HasSubstr("--top-p must be in (0, 1]"));
  EXPECT_THAT(ValueErrorMessage([&] { run({.model_dir = dir_, .max_new_tokens = 0}, ""); }),
              HasSubstr("--max-new-tokens must be at least 1, got 0"));
  const std::string long_line(200, 'x');
  EXPECT_THAT(
      ValueErrorMessage([&] { run({.model_dir = dir_, .template_name = "chatml"}, long_line); }),
      HasSubstr("chat turn 0: the conversation is "));
  EXPECT_THAT(
      ValueErrorMessage([&] { run({.model_dir = dir_, .template_name = "chatml"}, long_line); }),
      HasSubstr("tokens, which leaves no room for a reply in the context window of 64 tokens"));
}

}  // namespace
}  // namespace meshlayout::cli
