#include "meshlayout/core/json_input.h"

#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

std::string message_of(std::string_view text) {
  try {
    parse_json_checked(text);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "(no error)";
}

// Fault 4: 100,000 nested '[' used to overflow the stack when the value was quoted.
TEST(JsonInputTest, RefusesDeepNestingNamingLimitAndPlace) {
  const std::string deep = "{\"rules\": [[\"a\", " + std::string(100000, '[') + "]]}";
  EXPECT_EQ(message_of(deep),
            "lists and objects are nested deeper than the limit of 64 levels, at line 1, column "
            "79 (byte 78)");
  const std::string ok = std::string(64, '[') + std::string(64, ']');
  EXPECT_NO_THROW(parse_json_checked(ok));
  EXPECT_NE(message_of(std::string(65, '[') + std::string(65, ']')).find("limit of 64"),
            std::string::npos);
  // Brackets inside strings do not count.
  EXPECT_NO_THROW(parse_json_checked("[\"" + std::string(1000, '[') + "\\\"[\"]"));
}

TEST(JsonInputTest, RefusesDuplicateKeysAtAnyLevel) {
  EXPECT_EQ(message_of(R"({"rules": [], "rules": [["a", [null]]]})"),
            "the key 'rules' appears twice in the top-level object; each key may appear once");
  EXPECT_EQ(message_of(R"({"mesh": {"shape": [2], "shape": [4]}, "rules": []})"),
            "the key 'shape' appears twice in the object \"mesh\"; each key may appear once");
  EXPECT_EQ(message_of(R"({"a": [{"b": {"c": 1, "c": 2}}]})"),
            "the key 'c' appears twice in the object \"a\"[…].\"b\"; each key may appear once");
  EXPECT_NO_THROW(
      parse_json_checked(R"({"a": {"x": 1}, "b": {"x": 1}, "c": [{"x": 1}, {"x": 2}]})"));
}

TEST(JsonInputTest, RefusesNulAndBadJsonShortly) {
  EXPECT_EQ(message_of(std::string("{}\0garbage", 10)),
            "not valid JSON: a raw NUL byte at line 1, column 3 (byte 2)");
  const std::string bad = message_of("{\"rules\": [\"" + std::string(1 << 20, 'a') + "\x01\"]}");
  EXPECT_TRUE(bad.starts_with("not valid JSON: parse error at line 1")) << bad.substr(0, 200);
  EXPECT_LT(bad.size(), 400u);
  EXPECT_LT(message_of("[" + std::string(1 << 20, '1') + "]").size(), 400u);
  EXPECT_TRUE(message_of("[1e400]").starts_with("not valid JSON: number overflow"))
      << message_of("[1e400]");
}

TEST(JsonInputTest, ExcerptIsShortAndNeedsNoRecursion) {
  EXPECT_EQ(json_excerpt(nlohmann::json::parse(R"({"a": [1, null, "x"]})")),
            R"({"a":[1,null,"x"]})");
  // Built without the parser: 100,000 levels, far more than a recursive dump survives.
  nlohmann::json deep = nlohmann::json::array();
  for (int i = 0; i < 100000; ++i) {
    nlohmann::json outer = nlohmann::json::array();
    outer.push_back(std::move(deep));
    deep = std::move(outer);
  }
  const std::string e = json_excerpt(deep);
  EXPECT_EQ(e, std::string(57, '[') + "...");
  EXPECT_EQ(json_excerpt(nlohmann::json(std::string(1000, 'x'))).size(), 60u);
}

}  // namespace
}  // namespace meshlayout
