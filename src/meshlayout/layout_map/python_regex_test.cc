#include "meshlayout/layout_map/python_regex.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "meshlayout/core/errors.h"

namespace meshlayout {
namespace {

using ::testing::HasSubstr;

std::string refusal(std::string_view pattern) {
  try {
    python_regex_to_re2(pattern);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(PythonRegexTest, PassesPlainPatternsThrough) {
  EXPECT_EQ(python_regex_to_re2(".*dense.*kernel"), ".*dense.*kernel");
  EXPECT_EQ(python_regex_to_re2(R"(decoder_block_[0-9]+/attention/(query|key)/kernel)"),
            R"(decoder_block_[0-9]+/attention/(query|key)/kernel)");
  EXPECT_EQ(python_regex_to_re2(R"((?P<layer>[a-z]+)/kernel)"), R"((?P<layer>[a-z]+)/kernel)");
  EXPECT_EQ(python_regex_to_re2("a+?b*?"), "a+?b*?");
}

TEST(PythonRegexTest, RewritesPythonSpellings) {
  EXPECT_EQ(python_regex_to_re2(R"(kernel\Z)"), R"(kernel\z)");
  EXPECT_EQ(python_regex_to_re2("a{,3}"), "a{0,3}");
  EXPECT_EQ(python_regex_to_re2(R"(\u00e9)"), R"(\x{00e9})");
  EXPECT_EQ(python_regex_to_re2(R"(a\_b)"), "a_b");
  EXPECT_EQ(python_regex_to_re2("a(?#a comment)b"), "ab");
  EXPECT_EQ(python_regex_to_re2("x{a}"), R"(x\{a\})");
  EXPECT_EQ(python_regex_to_re2("[[:a]"), R"([\[:a])");
  EXPECT_EQ(python_regex_to_re2("(?u)a"), "a");
  EXPECT_EQ(python_regex_to_re2("(?i:A)b"), "(?i:A)b");
  EXPECT_EQ(python_regex_to_re2(R"(\0)"), R"(\x{0})");
}

TEST(PythonRegexTest, ClassEscapesAreUnicodeAsInPython) {
  EXPECT_EQ(python_regex_to_re2(R"(\d+)"), R"([\p{Nd}]+)");
  EXPECT_EQ(python_regex_to_re2(R"(\W)"), R"([^\p{L}\p{N}_])");
  EXPECT_EQ(python_regex_to_re2(R"([\w.])"), R"([\p{L}\p{N}_.])");
  EXPECT_EQ(python_regex_to_re2(R"([\D])"), R"([\P{Nd}])");
  EXPECT_EQ(python_regex_to_re2(R"((?a)\w\s)"), R"([0-9A-Za-z_][\t\n\v\f\r ])");
  EXPECT_EQ(python_regex_to_re2(R"([\s\S])"),
            R"((?:[\t\n\v\f\r\x1c-\x1f\x{85}\p{Z}]|[^\t\n\v\f\r\x1c-\x1f\x{85}\p{Z}]))");
  EXPECT_EQ(python_regex_to_re2(R"([\W]+)"), R"((?:[^\p{L}\p{N}_])+)");
  EXPECT_THAT(refusal(R"([^\Sx])"),
              HasSubstr("uses a negated class escape inside a negated character set"));
  EXPECT_THAT(refusal(R"(x(?a:\w))"), HasSubstr("uses a scoped ASCII flag"));
}

TEST(PythonRegexTest, RefusesSyntaxPythonDoesNotHave) {
  EXPECT_EQ(refusal(R"(kernel\z)"),
            "regex 'kernel\\\\z' has a bad escape '\\\\z' at position 6 (Python's re does not "
            "know it)");
  EXPECT_THAT(refusal(R"(\pL)"), HasSubstr("has a bad escape"));
  EXPECT_THAT(refusal(R"(\Qa.b\E)"), HasSubstr("has a bad escape"));
  EXPECT_THAT(refusal(R"(\x{41})"), HasSubstr("\\x takes exactly two hex digits"));
  EXPECT_THAT(refusal("(?U)a"), HasSubstr("unknown group extension '(?U'"));
  EXPECT_EQ(refusal("a(?i)b"),
            "regex 'a(?i)b' sets global flags '(?i)' at position 1; Python's re accepts them only "
            "at the start of the pattern (or use a scoped group like (?i:...))");
  EXPECT_EQ(python_regex_to_re2("(?i)(?s)a.b"), "(?i)(?s)a.b");
  EXPECT_EQ(python_regex_to_re2(R"(\x41\t)"), R"(\x41\t)");
}

TEST(PythonRegexTest, RefusesBackReferenceWithReason) {
  EXPECT_EQ(refusal(R"((a)\1)"),
            "regex '(a)\\\\1' uses a back-reference ('\\\\1' at position 3), which Python's re "
            "has but meshlayout refuses: rules run on RE2, whose matching time is linear in the "
            "path. Repeat the group's text explicitly or list the alternatives instead.");
  EXPECT_THAT(refusal("(?P<x>a)(?P=x)"), HasSubstr("a named back-reference ('(?P=' at"));
}

TEST(PythonRegexTest, RefusesLookAround) {
  EXPECT_THAT(refusal("dense(?=/kernel)"), HasSubstr("uses a look-ahead ('(?=' at position 5)"));
  EXPECT_THAT(refusal("dense(?!/bias)"), HasSubstr("uses a look-ahead ('(?!' at position 5)"));
  EXPECT_THAT(refusal("(?<=d1/)kernel"), HasSubstr("uses a look-behind ('(?<=' at position 0)"));
  EXPECT_THAT(refusal("(?<!d1/)kernel"), HasSubstr("uses a look-behind ('(?<!' at position 0)"));
}

TEST(PythonRegexTest, RefusesOtherBacktrackingFeatures) {
  EXPECT_THAT(refusal("(?>a+)b"), HasSubstr("uses an atomic group"));
  EXPECT_THAT(refusal("a++"), HasSubstr("uses a possessive quantifier ('++' at position 1)"));
  EXPECT_THAT(refusal("(a)?(?(1)b|c)"), HasSubstr("uses a conditional group"));
  EXPECT_THAT(refusal("(?x) a b"), HasSubstr("uses the verbose flag"));
  EXPECT_THAT(refusal(R"(\N{DIGIT ONE})"), HasSubstr("uses a named Unicode escape"));
}

TEST(PythonRegexTest, RejectsPatternsThatDoNotCompile) {
  EXPECT_EQ(refusal("dense[0-9"),
            "regex 'dense[0-9' does not compile: unterminated character set starting at "
            "position 5");
  EXPECT_THAT(refusal("(dense"), HasSubstr("regex '(dense' does not compile: missing )"));
  EXPECT_THAT(refusal("*kernel"), HasSubstr("does not compile"));
  EXPECT_THAT(refusal("kernel\\"), HasSubstr("ends with a lone backslash"));
  EXPECT_THAT(refusal("a**"), HasSubstr("does not compile"));
  EXPECT_THAT(refusal("(dense"), HasSubstr("missing ): '(dense'"));
}

// RE2's own message ends with the bad text raw: a NUL in it cut the message, a long pattern
// made a huge one.
TEST(PythonRegexTest, CompileErrorsQuoteTheBadTextSafely) {
  const std::string msg = refusal(std::string("a\0b(", 4));
  EXPECT_EQ(msg.find('\0'), std::string::npos);
  EXPECT_EQ(msg, "regex 'a\\x00b(' does not compile: missing ): 'a\\x00b('");
  EXPECT_LT(refusal(std::string(100000, 'a') + "(").size(), 700u);
}

// Was "invalid repetition": Python accepts {1001}, RE2 stops at 1000.
TEST(PythonRegexTest, RepetitionsOverRe2sLimitSayWhy) {
  EXPECT_EQ(refusal("a{1001}"),
            "regex 'a{1001}' has the repetition '{1001}' at position 1, over RE2's limit of 1000 "
            "repetitions (Python's re accepts it, but meshlayout matches with RE2)");
  EXPECT_THAT(refusal("a{2,99999999999999999999999}"), HasSubstr("over RE2's limit of 1000"));
  EXPECT_THAT(refusal("a{,1001}"), HasSubstr("'{,1001}' at position 1"));
  EXPECT_EQ(refusal("a{1000}"), "(accepted)");
  EXPECT_THAT(refusal("(a{100}){100}"),
              HasSubstr("its repetitions exceed RE2's limit of 1000 (nested repeats count "
                        "multiplied"));
}

}  // namespace
}  // namespace meshlayout
