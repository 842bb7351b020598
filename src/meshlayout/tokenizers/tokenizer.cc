#include "meshlayout/tokenizers/tokenizer.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cerrno>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/input_file.h"
#include "meshlayout/core/json_input.h"
#include "meshlayout/core/strings.h"
#include "meshlayout/tokenizers/hf_tokenizer.h"
#include "meshlayout/tokenizers/sentencepiece_tokenizer.h"

namespace meshlayout::tokenizers {
namespace {

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& model_dir) {
  struct stat st;
  if (::stat(model_dir.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      throw NotFoundError(fmt::format(
          "model directory {} does not exist (looked for tokenizer.json and tokenizer.model in "
          "it)",
          quote(model_dir)));
    }
    throw ValueError(describe_open_error("model directory", model_dir, errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    throw ValueError(fmt::format("model directory {} is {}, not a directory", quote(model_dir),
                                 file_kind(st.st_mode)));
  }
  const std::string json_path = model_dir + "/tokenizer.json";
  const std::string model_path = model_dir + "/tokenizer.model";
  if (exists(json_path)) {
    const std::string text = read_regular_file(json_path, kMaxJsonFileBytes, "tokenizer file");
    nlohmann::json config;
    const std::string config_path = model_dir + "/tokenizer_config.json";
    if (exists(config_path)) {
      try {
        config = parse_json_checked(
            read_regular_file(config_path, kMaxJsonFileBytes, "tokenizer config file"));
      } catch (const ValueError& e) {
        throw ValueError(fmt::format("{}: {}", quote(config_path), e.what()));
      }
    }
    return HfTokenizer::from_json(text, quote(json_path), config.is_null() ? nullptr : &config);
  }
  if (exists(model_path)) return SentencePieceTokenizer::load(model_path);
  throw NotFoundError(fmt::format(
      "model directory {} has no tokenizer: looked for tokenizer.json (Hugging Face) and "
      "tokenizer.model (SentencePiece)",
      quote(model_dir)));
}

}  // namespace meshlayout::tokenizers
