#include "meshlayout/rules/yaml_subset.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

using json = nlohmann::ordered_json;
using ::testing::HasSubstr;

std::string error_of(std::string_view text) {
  try {
    parse_yaml_subset(text, "r.yml");
  } catch (const ValueError& e) {
    return e.what();
  }
  return "no error";
}

TEST(YamlSubset, MaxTextStyleDocument) {
  const char* text = R"(# MaxText-style rules
---
mesh_axes: ['data', 'fsdp', 'tensor']
logical_axis_rules: [
    ['activation_batch', ['data', 'fsdp']],   # a comment inside
    ['embed', 'fsdp'],
    ['norm', null],
    ['heads', "tensor"],
  ]
logical_axes:
  decoder/layers_*/query/kernel: [embed, heads, ~]
  "odd: key": []
  nested:
    - a
    - [b, c]
    -
      deeper: x
empty:
list_at_key_indent:
- one
- 'it''s'
last: plain value with spaces   # comment
)";
  json j = parse_yaml_subset(text, "r.yml");
  EXPECT_EQ(j["mesh_axes"], json({"data", "fsdp", "tensor"}));
  EXPECT_EQ(j["logical_axis_rules"].size(), 4u);
  EXPECT_EQ(j["logical_axis_rules"][0], json::parse(R"(["activation_batch", ["data", "fsdp"]])"));
  EXPECT_TRUE(j["logical_axis_rules"][2][1].is_null());
  EXPECT_EQ(j["logical_axis_rules"][3][1], "tensor");
  EXPECT_EQ(j["logical_axes"]["decoder/layers_*/query/kernel"],
            json::parse(R"(["embed", "heads", null])"));
  EXPECT_EQ(j["logical_axes"]["odd: key"], json::array());
  EXPECT_EQ(j["logical_axes"]["nested"], json::parse(R"(["a", ["b", "c"], {"deeper": "x"}])"));
  EXPECT_TRUE(j["empty"].is_null());
  EXPECT_EQ(j["list_at_key_indent"], json({"one", "it's"}));
  EXPECT_EQ(j["last"], "plain value with spaces");
  // Keys keep the file's order.
  std::vector<std::string> keys;
  for (const auto& [k, v] : j.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{"mesh_axes", "logical_axis_rules", "logical_axes",
                                            "empty", "list_at_key_indent", "last"}));
}

TEST(YamlSubset, WriteReadsBackEqual) {
  json v = json::parse(R"({"logical_axis_rules": [["embed", "fsdp"], ["heads", ["a", "b"]],
                            ["norm", null]], "logical_axes": {"x/y": ["embed", null],
                            "it's": []}, "s": "q'uote", "n": null})");
  std::string text = write_yaml_subset(v);
  EXPECT_EQ(parse_yaml_subset(text), v) << text;
}

TEST(YamlSubset, RefusesWhatItDoesNotKnowNamingTheLine) {
  EXPECT_THAT(error_of("a: 1\na: 2\n"), HasSubstr("r.yml:2:"));
  EXPECT_THAT(error_of("a: 1\na: 2\n"), HasSubstr("the key 'a' given twice"));
  EXPECT_THAT(error_of("a: [x, y\n"), HasSubstr("never closed with ']'"));
  EXPECT_THAT(error_of("a: &anchor x\n"), HasSubstr("an anchor"));
  EXPECT_THAT(error_of("a: *ref\n"), HasSubstr("an alias"));
  EXPECT_THAT(error_of("a: !!str x\n"), HasSubstr("a tag"));
  EXPECT_THAT(error_of("a: |\n  text\n"), HasSubstr("a block scalar"));
  EXPECT_THAT(error_of("a:\n\t- x\n"), HasSubstr("tab"));
  EXPECT_THAT(error_of("a: 1\n---\nb: 2\n"), HasSubstr("a second document"));
  EXPECT_THAT(error_of("a: 'open\n"), HasSubstr("runs past the end of its line"));
  EXPECT_THAT(error_of("a: [x,, y]\n"), HasSubstr("empty list item"));
  EXPECT_THAT(error_of("a: [x] y\n"), HasSubstr("expected the end of the line"));
  EXPECT_THAT(error_of("a:\n  b: 1\n    c: 2\n"), HasSubstr("r.yml:3:5: unexpected indentation"));
  EXPECT_THAT(error_of("a:\n  - k: v\n"), HasSubstr("a mapping inside a sequence item"));
  EXPECT_THAT(error_of("a: \"x\\q\"\n"), HasSubstr("the escape '\\q'"));
  EXPECT_THAT(error_of("just text\nmore: 1\n"), HasSubstr("r.yml:2:1"));
}

TEST(YamlSubset, ScalarsAndNulls) {
  json j = parse_yaml_subset("a: [null, Null, NULL, ~, 'null', \"\", 3, true]\n");
  EXPECT_EQ(j["a"], json::parse(R"([null, null, null, null, "null", "", "3", "true"])"));
  EXPECT_TRUE(parse_yaml_subset("# only a comment\n").is_null());
}

// Hostile input: every mutation of valid documents either parses, and then writes back to
// what reads the same, or is a ValueError; nothing else (no crash, hang or other exception).
TEST(YamlSubset, MutatedDocumentsParseOrFailCleanly) {
  const std::string seeds[] = {
      "a: [x, 'y', [z, null]]\nb:\n  - c\n  - {d: e}\n",
      "logical_axis_rules:\n  - ['embed', ['fsdp', 'tensor']]\nlogical_axes:\n  w: [embed]\n",
      "---\nk: \"v\\\"q\"  # c\nl:\n- 1\n- ~\n...\n"};
  const std::string alphabet = "[]{},:-#'\"\n \t~*&!|>?.a0";
  std::mt19937 rng(28);
  int parsed = 0, refused = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string text = seeds[static_cast<size_t>(i) % 3];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t at = rng() % text.size();
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0:
          text[at] = c;
          break;
        case 1:
          text.insert(at, 1, c);
          break;
        default:
          text.erase(at, 1);
      }
    }
    try {
      json j = parse_yaml_subset(text, "m.yml");
      ++parsed;
      std::string written;
      try {
        written = write_yaml_subset(j);
      } catch (const ValueError&) {
        continue;  // e.g. a key with a newline cannot be written on one line
      }
      EXPECT_EQ(parse_yaml_subset(written, "w.yml"), j) << text << "\n---\n" << written;
    } catch (const ValueError&) {
      ++refused;
    }
  }
  EXPECT_GT(parsed, 1000);
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace meshlayout
