// safetensors_header_reject_test.cc — every file the safetensors header parser refuses: a
// truncated file, a header longer than the file or over 100 MB, bad UTF-8 or JSON, wrong JSON
// types, unknown dtypes, shape/size mismatches, overlapping, gapped or trailing byte ranges,
// NUL, empty or duplicate names, a bad __metadata__. Each refusal must be a DataLossError whose
// message names the tensor or the byte offset. Ends with a mutation property test: a corrupted
// file is refused with a meshlayout::Error or, if accepted, satisfies the header invariants.
// Accepted files and the writer are in safetensors_header_test.cc.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <exception>
#include <string>

#include "meshlayout/core/errors.h"
#include "meshlayout/io/safetensors_header.h"
#include "meshlayout/io/safetensors_header_test_util.h"

namespace meshlayout {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace meshlayout::testing;  // NOLINT: test helpers

// ---------------------------------------------------------------------------------------------
// The length prefix and the framing

TEST(SafetensorsHeaderRejectTest, FileShorterThanEightBytes) {
  for (size_t n = 0; n < 8; ++n) {
    EXPECT_THAT(data_loss_message(to_bytes(std::string(n, '\x01'))),
                HasSubstr(fmt::format("'t.safetensors': the file is {} bytes, shorter than the "
                                      "8-byte header length",
                                      n)));
  }
}

TEST(SafetensorsHeaderRejectTest, HeaderLengthOverTheLimit) {
  EXPECT_THAT(data_loss_message(raw_file(100'000'001, "{}")),
              HasSubstr("the header length at byte 0 is 100000001, over the limit of 100000000"));
  EXPECT_THAT(data_loss_message(raw_file(UINT64_MAX, "{}")),
              HasSubstr("at byte 0 is 18446744073709551615, over the limit"));
  // A pickle, say: its first 8 bytes read as a huge length.
  EXPECT_THAT(data_loss_message(to_bytes(std::string("\x80\x02}q\0(X\x01\0\0\0aq", 14))),
              HasSubstr("the header length at byte 0 is"));
  // Exactly the limit is not over it; here it is past the end of the file.
  EXPECT_THAT(data_loss_message(raw_file(100'000'000, "{}")),
              HasSubstr("is 100000000, so the header ends at byte 100000008, past the end of "
                        "the 10-byte file"));
}

TEST(SafetensorsHeaderRejectTest, HeaderLongerThanTheFile) {
  const std::string header = R"({"x":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})";
  Bytes file = file_of(header, 3);
  file.resize(8 + header.size() - 1);  // truncated inside the header
  EXPECT_THAT(data_loss_message(file),
              HasSubstr(fmt::format("the header length at byte 0 is {}, so the header ends at "
                                    "byte {}, past the end of the {}-byte file: truncated file?",
                                    header.size(), 8 + header.size(), file.size())));
  EXPECT_THAT(data_loss_message(raw_file(1, "")), HasSubstr("past the end of the 8-byte file"));
  // The same check when the JSON is parsed on its own.
  std::string direct;
  try {
    parse_safetensors_header(header, header.size(), kSource);
  } catch (const DataLossError& e) {
    direct = e.what();
  }
  EXPECT_THAT(direct, HasSubstr(fmt::format("'t.safetensors': header of {} bytes does not fit a "
                                            "{}-byte file",
                                            header.size(), header.size())));
}

TEST(SafetensorsHeaderRejectTest, HeaderNotStartingWithABrace) {
  EXPECT_THAT(data_loss_message(file_of("[]")),
              HasSubstr("the header at byte 8 does not start with '{' (it starts with '[')"));
  EXPECT_THAT(data_loss_message(file_of(" {}")), HasSubstr("(it starts with ' ')"));
  EXPECT_THAT(data_loss_message(file_of("\x01{}")), HasSubstr("(it starts with '\\x01')"));
  EXPECT_THAT(data_loss_message(file_of("")),
              HasSubstr("does not start with '{' (it starts with nothing)"));
}

// ---------------------------------------------------------------------------------------------
// JSON syntax and UTF-8

TEST(SafetensorsHeaderRejectTest, TruncatedJson) {
  // N cuts the JSON short: the error is at the end of the header.
  const std::string msg = data_loss_message(file_of(R"({"x":{"dtype":"F32")"));
  EXPECT_THAT(msg, HasSubstr("'t.safetensors': the header is not valid JSON (near file byte 27)"));
  EXPECT_THAT(msg, HasSubstr("unexpected end of input"));
  // The 1-byte header "{" ends at file byte 9.
  EXPECT_THAT(data_loss_message(file_of("{")), HasSubstr("not valid JSON (near file byte 9)"));
  EXPECT_THAT(data_loss_message(file_of(R"({"x":{"dtype":"F3)")),
              HasSubstr("not valid JSON (near file byte"));
}

TEST(SafetensorsHeaderRejectTest, SyntaxErrors) {
  EXPECT_THAT(data_loss_message(file_of(R"({"x":{"dtype":"F32",}})")),
              HasSubstr("not valid JSON (near file byte 28)"));
  EXPECT_THAT(data_loss_message(file_of(R"({"x" {}})")),
              HasSubstr("not valid JSON (near file byte 13)"));
  EXPECT_THAT(data_loss_message(file_of(R"({'x':{}})")),
              HasSubstr("not valid JSON (near file byte 9)"));
  EXPECT_THAT(data_loss_message(file_of(R"({"x":{"shape":[01]}})")),
              HasSubstr("not valid JSON (near file byte"));
  // Comments are not JSON.
  EXPECT_THAT(data_loss_message(file_of(R"({/**/})")), HasSubstr("not valid JSON (near file byte"));
}

// Issue 11, fault 4 checked here too: the header parser is SAX-based and iterative, so 100,000
// nested lists (in an ignored field, in a shape, or never closed) are refused or skipped,
// never a stack overflow; the message quotes at most 200 bytes of a name.
TEST(SafetensorsHeaderRejectTest, DeepNestingAndHugeNumbers) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_THAT(data_loss_message(file_of(R"({"x":{"note":)" + deep + "}}")),
              HasSubstr("'t.safetensors': invalid safetensors header"));
  EXPECT_THAT(data_loss_message(file_of(R"({"a":{"dtype":"U8","shape":)" + deep + "}}")),
              HasSubstr("invalid safetensors header"));
  EXPECT_THAT(data_loss_message(file_of(R"({"x":{"note":)" + std::string(100000, '['))),
              HasSubstr("not valid JSON"));
  EXPECT_THAT(
      data_loss_message(file_of(
          R"({"a":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,1]}})", 1)),
      HasSubstr("expected a non-negative integer"));
  EXPECT_THAT(
      data_loss_message(file_of(R"({"a":{"dtype":"U8","shape":[1e400],"data_offsets":[0,1]}})", 1)),
      HasSubstr("not valid JSON"));
  const std::string long_name(1 << 20, 'n');
  const std::string msg = data_loss_message(
      file_of("{\"" + long_name + R"(":{"dtype":"X","shape":[],"data_offsets":[0,0]}})"));
  EXPECT_LT(msg.size(), 1000u) << msg.substr(0, 300);
}

TEST(SafetensorsHeaderRejectTest, GarbageAfterTheJson) {
  EXPECT_THAT(data_loss_message(file_of("{}  x")), HasSubstr("not valid JSON (near file byte 12)"));
  EXPECT_THAT(data_loss_message(file_of("{}{}")), HasSubstr("not valid JSON (near file byte 10)"));
  // NUL padding is not JSON whitespace (regression: nlohmann's lexer takes NUL for the end of
  // the input, so "{}\0" and anything after it, even invalid UTF-8, used to be accepted).
  EXPECT_THAT(data_loss_message(file_of(std::string("{}\0\0", 4))),
              HasSubstr("not valid JSON (near file byte 10)"));
  EXPECT_THAT(data_loss_message(file_of(std::string("{} \0\xff", 5))),
              HasSubstr("not valid JSON (near file byte 11)"));
}

TEST(SafetensorsHeaderRejectTest, InvalidUtf8) {
  // Byte 0xFF at file offset 8 + 2 = 10.
  const std::string msg = data_loss_message(file_of("{\"\xff\":{}}"));
  EXPECT_THAT(msg, HasSubstr("the header is not valid JSON (near file byte 10)"));
  EXPECT_THAT(msg, HasSubstr("UTF-8"));
  // A truncated two-byte sequence, an overlong encoding, an encoded surrogate, a bad value.
  for (const std::string header : {"{\"a\xc3\":{}}", "{\"\xc0\xaf\":{}}", "{\"\xed\xa0\x80\":{}}",
                                   "{\"__metadata__\":{\"k\":\"\xfe\"}}"}) {
    EXPECT_THAT(data_loss_message(file_of(header)), HasSubstr("not valid JSON (near file byte"))
        << header;
  }
  // Escaped lone surrogates are not Unicode either.
  EXPECT_THAT(data_loss_message(file_of(R"({"\ud800":{}})")),
              HasSubstr("not valid JSON (near file byte"));
  EXPECT_THAT(data_loss_message(file_of(R"({"\udc00x":{}})")),
              HasSubstr("not valid JSON (near file byte"));
}

TEST(SafetensorsHeaderRejectTest, WrongJsonTypes) {
  EXPECT_THAT(data_loss_message(file_of(R"({"x":[1]})")),
              HasSubstr("tensor 'x' is an array; expected an object"));
  EXPECT_THAT(data_loss_message(file_of(R"({"x":"F32"})")),
              HasSubstr("tensor 'x' is a string; expected an object"));
  EXPECT_THAT(data_loss_message(file_of(R"({"x":null})")),
              HasSubstr("tensor 'x' is null; expected an object"));
  EXPECT_THAT(data_loss_message(file_of(one_tensor("32", "[1]", "[0,4]"))),
              HasSubstr("field 'dtype' of tensor 'x' is a number; expected a dtype name string"));
  EXPECT_THAT(data_loss_message(file_of(one_tensor(R"(["F32"])", "[1]", "[0,4]"))),
              HasSubstr("field 'dtype' of tensor 'x' is an array"));
  EXPECT_THAT(data_loss_message(file_of(one_tensor(R"("F32")", R"("2")", "[0,4]"))),
              HasSubstr("field 'shape' of tensor 'x' is a string; expected an array of "
                        "non-negative integers"));
  EXPECT_THAT(data_loss_message(file_of(one_tensor(R"("F32")", "4", "[0,4]"))),
              HasSubstr("field 'shape' of tensor 'x' is a number"));
  EXPECT_THAT(data_loss_message(file_of(one_tensor(R"("F32")", "[1]", R"({"begin":0})"))),
              HasSubstr("field 'data_offsets' of tensor 'x' is an object"));
  EXPECT_THAT(data_loss_message(file_of(one_tensor(R"("F32")", R"([1,"2"])", "[0,4]"))),
              HasSubstr("shape of tensor 'x' holds a string; expected a non-negative integer"));
  EXPECT_THAT(data_loss_message(file_of(one_tensor(R"("F32")", "[[1]]", "[0,4]"))),
              HasSubstr("shape of tensor 'x' holds an array"));
  EXPECT_THAT(data_loss_message(file_of(one_tensor(R"("F32")", "[1]", "[0,true]"))),
              HasSubstr("data_offsets of tensor 'x' holds a boolean"));
  EXPECT_THAT(data_loss_message(file_of(one_tensor(R"("F32")", "[1]", "[null,4]"))),
              HasSubstr("data_offsets of tensor 'x' holds null"));
}

TEST(SafetensorsHeaderRejectTest, DeeplyNestedJsonIsAnErrorNotAStackOverflow) {
  const std::string deep_arrays(100'000, '[');
  std::string deep_objects;
  for (int i = 0; i < 100'000; ++i) deep_objects += R"({"a":)";
  // As a tensor's value, inside an ignored field, as a metadata value, and in the shape.
  EXPECT_THAT(data_loss_message(file_of(R"({"x":)" + deep_arrays)),
              HasSubstr("tensor 'x' is an array"));
  EXPECT_THAT(data_loss_message(file_of(R"({"x":{"extra":)" + deep_arrays)),
              HasSubstr("not valid JSON (near file byte 100022)"));
  EXPECT_THAT(data_loss_message(file_of(R"({"x":{"extra":)" + deep_objects)),
              HasSubstr("not valid JSON (near file byte"));
  EXPECT_THAT(data_loss_message(file_of(R"({"__metadata__":{"k":)" + deep_arrays)),
              HasSubstr("__metadata__['k'] is an array"));
  EXPECT_THAT(data_loss_message(file_of(R"({"x":{"shape":)" + deep_arrays)),
              HasSubstr("shape of tensor 'x' holds an array"));
}

// ---------------------------------------------------------------------------------------------
// Names

TEST(SafetensorsHeaderRejectTest, NulByteInAName) {
  EXPECT_THAT(data_loss_message(
                  file_of(R"({"a\u0000b":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1)),
              HasSubstr("invalid safetensors header: tensor name 'a\\x00b' contains a NUL byte"));
  EXPECT_THAT(data_loss_message(file_of(R"({"\u0000":{}})")),
              HasSubstr("tensor name '\\x00' contains a NUL byte"));
}

TEST(SafetensorsHeaderRejectTest, EmptyName) {
  EXPECT_THAT(
      data_loss_message(file_of(R"({"":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1)),
      HasSubstr("invalid safetensors header: a tensor has an empty name"));
}

TEST(SafetensorsHeaderRejectTest, DuplicateNames) {
  EXPECT_THAT(data_loss_message(file_of(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                                        R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                                        2)),
              HasSubstr("duplicate tensor name 'a' in the header"));
  EXPECT_THAT(data_loss_message(file_of(R"({"__metadata__":{},"__metadata__":{}})")),
              HasSubstr("duplicate tensor name '__metadata__'"));
}

TEST(SafetensorsHeaderRejectTest, LongAndControlNamesAreQuotedSafely) {
  const std::string long_name(300, 'n');
  EXPECT_THAT(data_loss_message(file_of(
                  "{\"" + long_name + R"(":{"dtype":"F32","shape":[1],"data_offsets":[0,3]}})", 3)),
              HasSubstr("tensor '" + std::string(200, 'n') + "… (300 bytes)'"));
  EXPECT_THAT(
      data_loss_message(file_of(R"({"a\nb":{"dtype":"F32","shape":[1],"data_offsets":[0,3]}})", 3)),
      HasSubstr("tensor 'a\\x0ab'"));
}

// ---------------------------------------------------------------------------------------------
// Tensor fields

TEST(SafetensorsHeaderRejectTest, DuplicateFieldInATensor) {
  for (const std::string field : {"dtype", "shape", "data_offsets"}) {
    const std::string value = field == "dtype" ? R"("U8")" : field == "shape" ? "[1]" : "[0,1]";
    EXPECT_THAT(
        data_loss_message(file_of(R"({"x":{"dtype":"U8","shape":[1],"data_offsets":[0,1],")" +
                                      field + "\":" + value + "}}",
                                  1)),
        HasSubstr("tensor 'x' has the field '" + field + "' twice"));
  }
}

TEST(SafetensorsHeaderRejectTest, MissingFields) {
  EXPECT_THAT(data_loss_message(file_of(R"({"x":{"shape":[1],"data_offsets":[0,1]}})", 1)),
              HasSubstr("tensor 'x' has no 'dtype'"));
  EXPECT_THAT(data_loss_message(file_of(R"({"x":{"dtype":"U8","data_offsets":[0,1]}})", 1)),
              HasSubstr("tensor 'x' has no 'shape'"));
  EXPECT_THAT(data_loss_message(file_of(R"({"x":{"dtype":"U8","shape":[1]}})", 1)),
              HasSubstr("tensor 'x' has no 'data_offsets'"));
}

TEST(SafetensorsHeaderRejectTest, UnknownDType) {
  EXPECT_THAT(data_loss_message(file_of(one_tensor(R"("F33")", "[1]", "[0,4]"), 4)),
              HasSubstr("tensor 'x' has the unknown dtype 'F33'; expected one of BOOL, U8, I8, "
                        "F8_E5M2, F8_E4M3, F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, F64, "
                        "I64, U64, C64"));
  // Names are case-sensitive and NumPy names are not safetensors names.
  for (const std::string dtype : {"f32", "float32", "", "F32\\u0000"}) {
    EXPECT_THAT(data_loss_message(file_of(one_tensor('"' + dtype + '"', "[1]", "[0,4]"), 4)),
                HasSubstr("tensor 'x' has the unknown dtype '"))
        << dtype;
  }
}

TEST(SafetensorsHeaderRejectTest, ShapeTimesDTypeSizeMustMatchTheByteRange) {
  EXPECT_THAT(data_loss_message(file_of(one_tensor(R"("F32")", "[2,3]", "[0,20]"), 20)),
              HasSubstr("tensor 'x' of shape (2, 3) and dtype F32 needs 24 bytes, but its "
                        "data_offsets [0, 20] hold 20"));
  EXPECT_THAT(data_loss_message(file_of(one_tensor(R"("BF16")", "[]", "[0,4]"), 4)),
              HasSubstr("tensor 'x' of shape () and dtype BF16 needs 2 bytes"));
  EXPECT_THAT(data_loss_message(file_of(one_tensor(R"("U8")", "[0]", "[0,1]"), 1)),
              HasSubstr("tensor 'x' of shape (0,) and dtype U8 needs 0 bytes, but its "
                        "data_offsets [0, 1] hold 1"));
}

TEST(SafetensorsHeaderRejectTest, DataOffsetsNeedExactlyTwoEntries) {
  EXPECT_THAT(data_loss_message(file_of(one_tensor(R"("U8")", "[1]", "[1]"), 1)),
              HasSubstr("data_offsets of tensor 'x' has 1 entries; expected [begin, end]"));
  EXPECT_THAT(data_loss_message(file_of(one_tensor(R"("U8")", "[0]", "[]"))),
              HasSubstr("data_offsets of tensor 'x' has 0 entries"));
  EXPECT_THAT(data_loss_message(file_of(one_tensor(R"("U8")", "[1]", "[0,1,2]"), 2)),
              HasSubstr("data_offsets of tensor 'x' has more than 2 entries"));
}

TEST(SafetensorsHeaderRejectTest, NegativeAndFloatNumbers) {
  EXPECT_THAT(data_loss_message(file_of(one_tensor(R"("U8")", "[-1]", "[0,1]"), 1)),
              HasSubstr("shape of tensor 'x' holds the negative number -1; expected a "
                        "non-negative integer"));
  EXPECT_THAT(
      data_loss_message(file_of(one_tensor(R"("U8")", "[1]", "[0,-9223372036854775808]"))),
      HasSubstr("data_offsets of tensor 'x' holds the negative number -9223372036854775808"));
  // -0 is a float for the reference (serde_json), a negative integer for nlohmann: refused.
  EXPECT_THAT(data_loss_message(file_of(one_tensor(R"("U8")", "[-0]", "[0,0]"))),
              HasSubstr("shape of tensor 'x' holds the negative number -0"));
  EXPECT_THAT(data_loss_message(file_of(one_tensor(R"("U8")", "[2.0]", "[0,2]"), 2)),
              HasSubstr("shape of tensor 'x' holds 2.0; expected a non-negative integer"));
  EXPECT_THAT(data_loss_message(file_of(one_tensor(R"("U8")", "[2]", "[0,2.5]"), 2)),
              HasSubstr("data_offsets of tensor 'x' holds 2.5"));
  EXPECT_THAT(data_loss_message(file_of(one_tensor(R"("U8")", "[1e0]", "[0,1]"), 1)),
              HasSubstr("shape of tensor 'x' holds 1e0"));
  // Integers past 2^64 - 1 arrive as floats: refused, not wrapped.
  EXPECT_THAT(
      data_loss_message(file_of(one_tensor(R"("U8")", "[1]", "[18446744073709551616,0]"), 1)),
      HasSubstr("data_offsets of tensor 'x' holds 18446744073709551616"));
}

TEST(SafetensorsHeaderRejectTest, ShapeOverflowIsAnErrorNotUndefinedBehaviour) {
  // Element count 2^64.
  EXPECT_THAT(data_loss_message(file_of(one_tensor(R"("U8")", "[4294967296,4294967296]", "[0,0]"))),
              HasSubstr("tensor 'x' has the shape (4294967296, 4294967296), whose size "
                        "overflows 64 bits"));
  // The element count fits, the bytes do not: 2^62 * 8.
  EXPECT_THAT(data_loss_message(file_of(one_tensor(R"("F64")", "[4611686018427387904]", "[0,0]"))),
              HasSubstr("tensor 'x' has the shape (4611686018427387904,), whose size overflows"));
  // A dimension over 2^63 - 1.
  EXPECT_THAT(data_loss_message(file_of(one_tensor(R"("U8")", "[9223372036854775808]", "[0,0]"))),
              HasSubstr("shape of tensor 'x' has the dimension 9223372036854775808, too large"));
  // The partial product (2^63 - 1) * 2 overflows int64 before the 0 arrives: refused, so that
  // TensorInfo::num_elements() can never overflow.
  EXPECT_THAT(
      data_loss_message(file_of(one_tensor(R"("U8")", "[9223372036854775807,2,0]", "[0,0]"))),
      HasSubstr("tensor 'x' has the shape (9223372036854775807, 2, 0), whose size overflows"));
}

// ---------------------------------------------------------------------------------------------
// Byte ranges

TEST(SafetensorsHeaderRejectTest, BeginAfterEnd) {
  EXPECT_THAT(data_loss_message(file_of(one_tensor(R"("U8")", "[1]", "[2,1]"), 2)),
              HasSubstr("tensor 'x' has data_offsets [2, 1]: end before begin"));
}

TEST(SafetensorsHeaderRejectTest, RangePastTheEndOfTheFile) {
  const std::string header = one_tensor(R"("F32")", "[2]", "[0,8]");
  const uint64_t start = 8 + header.size();
  EXPECT_THAT(data_loss_message(file_of(header, 6)),
              HasSubstr(fmt::format("tensor 'x' spans data bytes [0, 8) (file bytes [{}, {})), "
                                    "past the end of the file at byte {}: truncated file?",
                                    start, start + 8, start + 6)));
  // Offsets near 2^64 cannot wrap.
  EXPECT_THAT(data_loss_message(file_of(
                  one_tensor(R"("U8")", "[1]", "[18446744073709551614,18446744073709551615]"), 1)),
              HasSubstr("tensor 'x' spans data bytes [18446744073709551614, "
                        "18446744073709551615)"));
}

TEST(SafetensorsHeaderRejectTest, OverlappingRanges) {
  EXPECT_THAT(data_loss_message(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                        12)),
              HasSubstr("tensors 'a' [0, 8) and 'b' [4, 12) overlap (data offsets)"));
  // The same bytes declared twice (the memory DoS of the attacks README).
  EXPECT_THAT(data_loss_message(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                                        8)),
              HasSubstr("tensors 'a' [0, 8) and 'b' [0, 8) overlap"));
  // An empty tensor inside another one.
  EXPECT_THAT(data_loss_message(file_of(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                        R"("e":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
                                        8)),
              HasSubstr("tensors 'a' [0, 8) and 'e' [4, 4) overlap"));
}

TEST(SafetensorsHeaderRejectTest, GapBetweenRanges) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  const uint64_t start = 8 + header.size();
  EXPECT_THAT(data_loss_message(file_of(header, 12)),
              HasSubstr(fmt::format("data bytes [4, 8) (file bytes [{}, {})) belong to no tensor "
                                    "(after tensor 'a'); the format requires the tensors to "
                                    "cover the data contiguously",
                                    start + 4, start + 8)));
  // A gap before the first tensor follows no tensor.
  const std::string first = one_tensor(R"("U8")", "[1]", "[3,4]");
  const std::string msg = data_loss_message(file_of(first, 4));
  EXPECT_THAT(msg, HasSubstr(fmt::format("data bytes [0, 3) (file bytes [{}, {})) belong to no "
                                         "tensor;",
                                         8 + first.size(), 8 + first.size() + 3)));
  EXPECT_THAT(msg, Not(HasSubstr("after tensor")));
}

TEST(SafetensorsHeaderRejectTest, TrailingBytesAfterTheLastTensor) {
  // A polyglot: valid tensors, then something else appended.
  const std::string header = one_tensor(R"("U8")", "[2]", "[0,2]");
  const uint64_t start = 8 + header.size();
  EXPECT_THAT(data_loss_message(file_of(header, 5)),
              HasSubstr(fmt::format("the file has 3 bytes after the last tensor's data (file "
                                    "bytes [{}, {})); the format allows none",
                                    start + 2, start + 5)));
  // Data after a header without tensors.
  EXPECT_THAT(data_loss_message(file_of("{}", 3)),
              HasSubstr("the file has 3 bytes after the last tensor's data (file bytes [10, 13))"));
}

// ---------------------------------------------------------------------------------------------
// __metadata__

TEST(SafetensorsHeaderRejectTest, MetadataMustBeAMapOfStrings) {
  EXPECT_THAT(data_loss_message(file_of(R"({"__metadata__":{"k":1}})")),
              HasSubstr("__metadata__['k'] is a number; expected a string (__metadata__ maps "
                        "strings to strings)"));
  EXPECT_THAT(data_loss_message(file_of(R"({"__metadata__":{"k":-1.5}})")),
              HasSubstr("__metadata__['k'] is a number"));
  EXPECT_THAT(data_loss_message(file_of(R"({"__metadata__":{"k":{"a":"b"}}})")),
              HasSubstr("__metadata__['k'] is an object"));
  EXPECT_THAT(data_loss_message(file_of(R"({"__metadata__":{"k":["a"]}})")),
              HasSubstr("__metadata__['k'] is an array"));
  EXPECT_THAT(data_loss_message(file_of(R"({"__metadata__":{"k":null}})")),
              HasSubstr("__metadata__['k'] is null"));
  EXPECT_THAT(data_loss_message(file_of(R"({"__metadata__":{"k":true}})")),
              HasSubstr("__metadata__['k'] is a boolean"));
  EXPECT_THAT(data_loss_message(file_of(R"({"__metadata__":1})")),
              HasSubstr("__metadata__ is a number; expected an object"));
  EXPECT_THAT(data_loss_message(file_of(R"({"__metadata__":"pt"})")),
              HasSubstr("__metadata__ is a string; expected an object"));
  EXPECT_THAT(data_loss_message(file_of(R"({"__metadata__":[]})")),
              HasSubstr("__metadata__ is an array; expected an object"));
}

TEST(SafetensorsHeaderRejectTest, MetadataDuplicateKeys) {
  EXPECT_THAT(data_loss_message(file_of(R"({"__metadata__":{"k":"a","k":"b"}})")),
              HasSubstr("duplicate key 'k' in __metadata__"));
}

// ---------------------------------------------------------------------------------------------
// Property: corrupted files

TEST(SafetensorsHeaderRejectTest, RandomMutationsAreRefusedOrValid) {
  const uint64_t seed = test_seed(20260513);
  SCOPED_TRACE("MESHLAYOUT_TEST_SEED=" + std::to_string(seed));
  Random rng(seed);
  size_t accepted = 0, refused = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::string text = file_text(random_header(rng));
    const size_t at = rng.index(text.size());
    switch (rng.index(6)) {
      case 0:
        text[at] = static_cast<char>(rng.index(256));
        break;
      case 1:
        text[at] = static_cast<char>(text[at] ^ (1 << rng.index(8)));
        break;
      case 2:
        text.resize(at);
        break;
      case 3:
        text.insert(at, 1, static_cast<char>(rng.index(256)));
        break;
      case 4:
        text.erase(at, 1);
        break;
      default:
        text[at] = "{}[]\",:0-9e. \\u"[rng.index(16)];
        break;
    }
    SCOPED_TRACE("iteration " + std::to_string(iter));
    try {
      const SafetensorsHeader h = parse(to_bytes(text));
      ++accepted;
      expect_header_invariants(h, text.size());
    } catch (const Error&) {
      ++refused;
    } catch (const std::exception& e) {
      FAIL() << "not a meshlayout::Error: " << e.what();
    }
  }
  // Both outcomes occur, so the loop exercised both paths.
  EXPECT_GT(accepted, 0u);
  EXPECT_GT(refused, 0u);
}

}  // namespace
}  // namespace meshlayout
