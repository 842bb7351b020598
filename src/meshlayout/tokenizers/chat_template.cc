#include "meshlayout/tokenizers/chat_template.h"

#include <fmt/format.h>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

namespace meshlayout::tokenizers {
namespace {

constexpr ChatFormat kFormats[] = {ChatFormat::kChatMl, ChatFormat::kLlama3, ChatFormat::kMistral,
                                   ChatFormat::kGemma, ChatFormat::kNone};

// Jinja's trim (Python's str.strip() of the whitespace a chat message holds).
std::string stripped(std::string_view text) {
  const auto space = [](char c) { return c == ' ' || (c >= '\t' && c <= '\r'); };
  while (!text.empty() && space(text.front())) text.remove_prefix(1);
  while (!text.empty() && space(text.back())) text.remove_suffix(1);
  return std::string(text);
}

std::vector<std::string> missing_tokens(const Tokenizer& tokenizer, ChatFormat format) {
  std::vector<std::string> missing;
  for (const std::string& t : chat_special_tokens(format)) {
    if (!tokenizer.token_to_id(t)) missing.push_back(t);
  }
  return missing;
}

bool has_format(const Tokenizer& tokenizer, ChatFormat format) {
  return missing_tokens(tokenizer, format).empty();
}

}  // namespace

std::string_view chat_format_name(ChatFormat format) {
  switch (format) {
    case ChatFormat::kChatMl:
      return "chatml";
    case ChatFormat::kLlama3:
      return "llama3";
    case ChatFormat::kMistral:
      return "mistral";
    case ChatFormat::kGemma:
      return "gemma";
    case ChatFormat::kNone:
      return "none";
  }
  return "?";
}

ChatFormat parse_chat_format(std::string_view name) {
  for (ChatFormat f : kFormats) {
    if (chat_format_name(f) == name) return f;
  }
  throw ValueError(fmt::format(
      "--template {} is not a chat format; expected chatml, llama3, mistral, gemma or none",
      quote(name)));
}

std::vector<std::string> chat_special_tokens(ChatFormat format) {
  switch (format) {
    case ChatFormat::kChatMl:
      return {"<|im_start|>", "<|im_end|>"};
    case ChatFormat::kLlama3:
      return {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
    case ChatFormat::kMistral:
      return {"<s>", "</s>"};
    case ChatFormat::kGemma:
      return {"<bos>", "<start_of_turn>", "<end_of_turn>"};
    case ChatFormat::kNone:
      return {};
  }
  return {};
}

std::string chat_end_of_turn(ChatFormat format) {
  switch (format) {
    case ChatFormat::kChatMl:
      return "<|im_end|>";
    case ChatFormat::kLlama3:
      return "<|eot_id|>";
    case ChatFormat::kMistral:
      return "</s>";
    case ChatFormat::kGemma:
      return "<end_of_turn>";
    case ChatFormat::kNone:
      return "";
  }
  return "";
}

std::vector<ChatSegment> render_chat(ChatFormat format, const std::vector<ChatMessage>& messages) {
  std::string system;  // for the formats without a system role
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role == "system" && i != 0) {
      throw ValueError(fmt::format("chat message {} has the role 'system'; only the first may", i));
    }
    if (role != "system" && role != "user" && role != "assistant") {
      throw ValueError(
          fmt::format("chat message {} has the role {}; expected 'system', 'user' or 'assistant'",
                      i, quote(role)));
    }
  }
  std::vector<ChatSegment> out;
  const auto text = [&](std::string t) {
    if (!t.empty()) out.push_back({std::move(t), false});
  };
  const auto special = [&](std::string t) { out.push_back({std::move(t), true}); };
  bool first_user = true;
  for (const ChatMessage& m : messages) {
    const bool trims = format == ChatFormat::kLlama3 || format == ChatFormat::kGemma;
    std::string content = trims ? stripped(m.content) : m.content;
    if ((format == ChatFormat::kMistral || format == ChatFormat::kGemma) && m.role == "system") {
      system = content;
      continue;
    }
    if (m.role == "user" && first_user && !system.empty()) content = system + "\n\n" + content;
    if (m.role == "user") first_user = false;
    switch (format) {
      case ChatFormat::kChatMl:
        special("<|im_start|>");
        text(m.role + "\n" + content);
        special("<|im_end|>");
        text("\n");
        break;
      case ChatFormat::kLlama3:
        if (out.empty()) special("<|begin_of_text|>");
        special("<|start_header_id|>");
        text(m.role);
        special("<|end_header_id|>");
        text("\n\n" + content);
        special("<|eot_id|>");
        break;
      case ChatFormat::kMistral:
        if (out.empty()) special("<s>");
        if (m.role == "user") {
          text("[INST] " + content + " [/INST]");
        } else {
          text(content);
          special("</s>");
        }
        break;
      case ChatFormat::kGemma:
        if (out.empty()) special("<bos>");
        special("<start_of_turn>");
        text((m.role == "assistant" ? "model" : m.role) + "\n" + content);
        special("<end_of_turn>");
        text("\n");
        break;
      case ChatFormat::kNone:
        text(content + "\n");
        break;
    }
  }
  switch (format) {  // the assistant's turn opens
    case ChatFormat::kChatMl:
      special("<|im_start|>");
      text("assistant\n");
      break;
    case ChatFormat::kLlama3:
      if (out.empty()) special("<|begin_of_text|>");
      special("<|start_header_id|>");
      text("assistant");
      special("<|end_header_id|>");
      text("\n\n");
      break;
    case ChatFormat::kMistral:
      if (out.empty()) special("<s>");
      break;
    case ChatFormat::kGemma:
      if (out.empty()) special("<bos>");
      special("<start_of_turn>");
      text("model\n");
      break;
    case ChatFormat::kNone:
      break;
  }
  return out;
}

void check_chat_format(const Tokenizer& tokenizer, ChatFormat format) {
  const std::vector<std::string> missing = missing_tokens(tokenizer, format);
  if (missing.empty()) return;
  std::vector<std::string> usable;
  for (ChatFormat f : kFormats) {
    if (has_format(tokenizer, f)) usable.emplace_back(chat_format_name(f));
  }
  throw ValueError(fmt::format(
      "--template {} needs the special token{} {}, which the tokenizer ({}) does not have; "
      "formats this tokenizer has: {}",
      chat_format_name(format), missing.size() == 1 ? "" : "s", repr_list(missing),
      tokenizer.describe(), join(usable, ", ")));
}

ChatFormat choose_chat_format(const std::optional<std::string>& name, std::string_view family,
                              const Tokenizer& tokenizer) {
  if (name) {
    const ChatFormat f = parse_chat_format(*name);
    check_chat_format(tokenizer, f);
    return f;
  }
  std::optional<ChatFormat> by_family;
  if (family.starts_with("qwen")) {
    by_family = ChatFormat::kChatMl;
  } else if (family == "llama") {
    by_family =
        has_format(tokenizer, ChatFormat::kLlama3) ? ChatFormat::kLlama3 : ChatFormat::kMistral;
  } else if (family == "mistral" || family == "mixtral") {
    by_family = ChatFormat::kMistral;
  } else if (family.starts_with("gemma")) {
    by_family = ChatFormat::kGemma;
  }
  if (by_family && has_format(tokenizer, *by_family)) return *by_family;
  for (ChatFormat f :
       {ChatFormat::kChatMl, ChatFormat::kLlama3, ChatFormat::kGemma, ChatFormat::kMistral}) {
    if (has_format(tokenizer, f)) return f;
  }
  return ChatFormat::kNone;
}

std::vector<int64_t> encode_chat(const Tokenizer& tokenizer, ChatFormat format,
                                 const std::vector<ChatMessage>& messages) {
  check_chat_format(tokenizer, format);
  const std::vector<ChatSegment> segments = render_chat(format, messages);
  if (format == ChatFormat::kNone) {
    std::string all;
    for (const ChatSegment& s : segments) all += s.text;
    return tokenizer.encode(all, /*add_special_tokens=*/true);
  }
  // Text and the special tokens the tokenizer finds in text are encoded together, as the
  // rendered string is in Hugging Face; a special token it does not find in text (a
  // SentencePiece control symbol such as <bos>) goes in by id.
  std::vector<int64_t> ids;
  std::string pending;
  const auto flush = [&] {
    if (pending.empty()) return;
    const std::vector<int64_t> more = tokenizer.encode(pending, /*add_special_tokens=*/false);
    ids.insert(ids.end(), more.begin(), more.end());
    pending.clear();
  };
  for (const ChatSegment& s : segments) {
    if (!s.special) {
      pending += s.text;
      continue;
    }
    const int64_t id = *tokenizer.token_to_id(s.text);
    if (tokenizer.encode(s.text, false) == std::vector<int64_t>{id}) {
      pending += s.text;
    } else {
      flush();
      ids.push_back(id);
    }
  }
  flush();
  return ids;
}

std::vector<int64_t> chat_stop_ids(const Tokenizer& tokenizer, ChatFormat format) {
  const std::string end = chat_end_of_turn(format);
  if (end.empty()) return {};
  check_chat_format(tokenizer, format);
  return {*tokenizer.token_to_id(end)};
}

}  // namespace meshlayout::tokenizers
