// safetensors_header_test.cc — what the safetensors header parser accepts, and what the writer
// produces, to the byte: the 8-byte little-endian length, the JSON padded with spaces so the
// data starts at a multiple of 8, the dtype names, the reference writer's tensor order, and the
// round trip writer → parser (a property test over random headers).
// Every rejection is in safetensors_header_reject_test.cc.
#include "meshlayout/io/safetensors_header.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/io/safetensors_header_test_util.h"

namespace meshlayout {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace meshlayout::testing;  // NOLINT: test helpers

// ---------------------------------------------------------------------------------------------
// Accepted files

TEST(SafetensorsHeaderTest, ParsesAValidFile) {
  const std::string header = R"({"__metadata__":{"format":"pt","k":"v"},)"
                             R"("w":{"dtype":"BF16","shape":[1,3],"data_offsets":[8,14]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const SafetensorsHeader h = parse(file_of(header, 14));
  EXPECT_EQ(h.header_bytes, header.size());
  EXPECT_EQ(h.data_bytes, 14u);
  EXPECT_EQ(h.data_start(), 8 + header.size());
  EXPECT_EQ(h.file_bytes(), 8 + header.size() + 14);
  EXPECT_EQ(h.metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"k", "v"}}));
  // In data order, whatever the JSON order.
  EXPECT_THAT(describe(h), ElementsAre("b F32 F32 es=4 shape=(2,) [0, 8)",
                                       "w BF16 BF16 es=2 shape=(1, 3) [8, 14)"));
  ASSERT_NE(h.find("w"), nullptr);
  EXPECT_EQ(h.find("w")->num_bytes(), 6u);
  EXPECT_EQ(h.find("w")->num_elements(), 3);
  EXPECT_EQ(h.find("missing"), nullptr);
  EXPECT_EQ(h.find(""), nullptr);
}

TEST(SafetensorsHeaderTest, EmptyHeaderIsAFileWithoutTensors) {
  const SafetensorsHeader h = parse(file_of("{}"));
  EXPECT_TRUE(h.tensors.empty());
  EXPECT_TRUE(h.metadata.empty());
  EXPECT_EQ(h.data_bytes, 0u);
  EXPECT_EQ(h.file_bytes(), 10u);
}

TEST(SafetensorsHeaderTest, EveryDTypeNameAndSize) {
  const std::vector<std::pair<std::string, size_t>> all = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8},     {"C64", 8}};
  for (const auto& [name, size] : all) {
    SCOPED_TRACE(name);
    EXPECT_EQ(safetensors_dtype_size(name), size);
    EXPECT_THAT(std::string(safetensors_dtype_names()), HasSubstr(name));
    const SafetensorsHeader h = parse(
        file_of(one_tensor('"' + name + '"', "[3]", fmt::format("[0,{}]", 3 * size)), 3 * size));
    ASSERT_EQ(h.tensors.size(), 1u);
    EXPECT_EQ(h.tensors[0].element_size, size);
    EXPECT_EQ(h.tensors[0].dtype_name, name);
    // Only the dtypes meshlayout computes with map to a DType; the others can be inspected.
    const bool loadable = !(name.starts_with("F8") || name == "U16" || name == "U32" ||
                            name == "U64" || name == "C64");
    EXPECT_EQ(h.tensors[0].dtype.has_value(), loadable);
    if (loadable) {
      EXPECT_EQ(dtype_name(*h.tensors[0].dtype), name);
    }
  }
  EXPECT_EQ(safetensors_dtype_size("f32"), std::nullopt);
  EXPECT_EQ(safetensors_dtype_size(""), std::nullopt);
}

TEST(SafetensorsHeaderTest, NullOrEmptyMetadataIsNoMetadata) {
  const SafetensorsHeader h = parse(
      file_of(R"({"__metadata__":null,"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 2));
  EXPECT_TRUE(h.metadata.empty());
  EXPECT_EQ(h.tensors.size(), 1u);
  EXPECT_TRUE(parse(file_of(R"({"__metadata__":{}})")).metadata.empty());
}

TEST(SafetensorsHeaderTest, MetadataKeysAndValuesMayBeAnyString) {
  const SafetensorsHeader h =
      parse(file_of(R"({"__metadata__":{"":"","a\u0000":"\n\"\\","é":"日本"}})"));
  EXPECT_EQ(h.metadata, (std::map<std::string, std::string>{
                            {"", ""}, {std::string("a\0", 2), "\n\"\\"}, {"é", "日本"}}));
}

TEST(SafetensorsHeaderTest, EscapedNamesAreDecoded) {
  const SafetensorsHeader h =
      parse(file_of(R"({"\ud83d\ude00\t\/":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1));
  EXPECT_NE(h.find("\xf0\x9f\x98\x80\t/"), nullptr);
}

TEST(SafetensorsHeaderTest, UnknownTensorFieldsAreIgnored) {
  // Extra fields of every JSON kind, before, between and after the known ones; the ignored
  // object holds keys named like the real fields, which must not be taken for them.
  const SafetensorsHeader h = parse(
      file_of(R"({"x":{"note":"hi","dtype":"F32","n":1,"f":-2.5,"t":true,"z":null,"e":1,"e":2,)"
              R"("o":{"dtype":"I8","shape":[9],"data_offsets":[0,1],"deep":[[{"a":[]}]]},)"
              R"("shape":[2],"a":[1,[2,{"b":3}]],"data_offsets":[0,8],"tail":{}}})",
              8));
  EXPECT_THAT(describe(h), ElementsAre("x F32 F32 es=4 shape=(2,) [0, 8)"));
}

TEST(SafetensorsHeaderTest, DeeplyNestedIgnoredValueIsAccepted) {
  // The parser is iterative: 100,000 levels inside an ignored field cost no stack.
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  const SafetensorsHeader h = parse(file_of(
      R"({"x":{"extra":)" + deep + R"(,"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1));
  EXPECT_EQ(h.tensors.size(), 1u);
}

TEST(SafetensorsHeaderTest, ScalarsAndEmptyTensorsAreAccepted) {
  const SafetensorsHeader h =
      parse(file_of(R"({"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]},)"
                    R"("e1":{"dtype":"F32","shape":[0,3],"data_offsets":[8,8]},)"
                    R"("e0":{"dtype":"I8","shape":[4,0],"data_offsets":[8,8]},)"
                    R"("first":{"dtype":"BOOL","shape":[0],"data_offsets":[0,0]},)"
                    R"("b":{"dtype":"BOOL","shape":[1],"data_offsets":[8,9]}})",
                    9));
  // By begin, then end, then name.
  EXPECT_THAT(
      describe(h),
      ElementsAre("first BOOL BOOL es=1 shape=(0,) [0, 0)", "s F64 F64 es=8 shape=() [0, 8)",
                  "e0 I8 I8 es=1 shape=(4, 0) [8, 8)", "e1 F32 F32 es=4 shape=(0, 3) [8, 8)",
                  "b BOOL BOOL es=1 shape=(1,) [8, 9)"));
  EXPECT_EQ(h.find("s")->num_elements(), 1);
  EXPECT_EQ(h.find("e1")->num_elements(), 0);
  // A file holding only empty tensors has no data at all.
  EXPECT_EQ(parse(file_of(one_tensor(R"("F32")", "[0]", "[0,0]"))).data_bytes, 0u);
}

TEST(SafetensorsHeaderTest, HugeExtentsNextToAZeroAreAnEmptyTensor) {
  // 2^62 x 0 elements: no partial product overflows, so the reference accepts it.
  const SafetensorsHeader h =
      parse(file_of(one_tensor(R"("F64")", "[4611686018427387904,0]", "[0,0]")));
  ASSERT_EQ(h.tensors.size(), 1u);
  EXPECT_EQ(h.tensors[0].num_elements(), 0);
  EXPECT_EQ(h.tensors[0].num_bytes(), 0u);
}

TEST(SafetensorsHeaderTest, PaddingAndWhitespaceAreAccepted) {
  const std::string header = R"({"x":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})";
  for (size_t pad : {1, 7, 8, 100}) {
    SCOPED_TRACE(pad);
    const SafetensorsHeader h = parse(file_of(header + std::string(pad, ' '), 3));
    EXPECT_EQ(h.header_bytes, header.size() + pad);
    EXPECT_EQ(h.data_start(), 8 + header.size() + pad);
    EXPECT_EQ(h.tensors.size(), 1u);
  }
  // Whitespace inside the JSON is JSON's business.
  EXPECT_EQ(parse(file_of("{ \"x\" :\n {\"dtype\" : \"U8\",\t\"shape\":[ 3 ],\"data_offsets\":"
                          "[0 , 3] } }\r\n ",
                          3))
                .tensors.size(),
            1u);
}

TEST(SafetensorsHeaderTest, UnpaddedHeaderOfAnotherWriterIsAccepted) {
  // MLX writes the JSON with no padding, in its own key order: the data starts unaligned.
  const std::string header = R"({"z":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                             R"("a":{"dtype":"F32","shape":[2,1],"data_offsets":[1,9]}})";
  ASSERT_NE((8 + header.size()) % 8, 0u);
  const SafetensorsHeader h = parse(file_of(header, 9));
  EXPECT_EQ(h.header_bytes, header.size());
  EXPECT_THAT(describe(h),
              ElementsAre("z U8 U8 es=1 shape=(1,) [0, 1)", "a F32 F32 es=4 shape=(2, 1) [1, 9)"));
}

TEST(SafetensorsHeaderTest, TheTwoStepsOnTheirOwn) {
  // What a reader of a file on disk does: the prefix first, then the N header bytes.
  const std::string header = R"({"x":{"dtype":"I16","shape":[2],"data_offsets":[0,4]}})";
  const Bytes prefix = to_bytes(le64(header.size()));
  EXPECT_EQ(parse_safetensors_header_length(prefix, 8 + header.size() + 4, kSource), header.size());
  const SafetensorsHeader h = parse_safetensors_header(header, 8 + header.size() + 4, kSource);
  EXPECT_EQ(h.header_bytes, header.size());
  EXPECT_EQ(h.data_bytes, 4u);
  EXPECT_THAT(describe(h), ElementsAre("x I16 I16 es=2 shape=(2,) [0, 4)"));
}

TEST(SafetensorsHeaderTest, ACopyFindsInItsOwnTensors) {
  auto original = std::make_unique<SafetensorsHeader>(make_safetensors_header(
      std::vector<TensorSpec>{{"a_long_tensor_name_past_sso", DType::kF32, {2}}}));
  SafetensorsHeader copy = *original;
  SafetensorsHeader assigned;
  assigned = *original;
  original.reset();  // the copies must not point into it
  ASSERT_NE(copy.find("a_long_tensor_name_past_sso"), nullptr);
  EXPECT_EQ(copy.find("a_long_tensor_name_past_sso"), &copy.tensors[0]);
  EXPECT_EQ(assigned.find("a_long_tensor_name_past_sso"), &assigned.tensors[0]);
}

// ---------------------------------------------------------------------------------------------
// The writer

TEST(SafetensorsWriterTest, GoldenFile) {
  const std::vector<TensorSpec> specs = {{"b", DType::kBF16, {1, 3}}, {"a", DType::kF32, {2}}};
  const SafetensorsHeader h = make_safetensors_header(specs, {{"format", "pt"}});
  // By hand, from the format: the JSON is 142 bytes; 2 spaces pad it to N = 144 = 0x90 so the
  // data starts at byte 152 = 19 * 8. F32 before BF16 (larger alignment first).
  const std::string expected = std::string("\x90\x00\x00\x00\x00\x00\x00\x00", 8) +
                               R"({"__metadata__":{"format":"pt"},)"
                               R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                               R"("b":{"dtype":"BF16","shape":[1,3],"data_offsets":[8,14]}})"
                               "  ";
  ASSERT_EQ(expected.size(), 152u);
  EXPECT_EQ(safetensors_header_bytes(h), expected);
  EXPECT_EQ(serialize_safetensors_header(h), expected.substr(8));
  EXPECT_EQ(h.header_bytes, 144u);
  EXPECT_EQ(h.data_bytes, 14u);
  EXPECT_EQ(h.file_bytes(), 166u);
  EXPECT_EQ(h.find("b")->begin, 8u);
  // And it is a valid file once the 14 data bytes follow.
  const SafetensorsHeader back = parse(to_bytes(expected + std::string(14, '\0')));
  EXPECT_EQ(describe(back), describe(h));
  EXPECT_EQ(back.metadata, h.metadata);
}

TEST(SafetensorsWriterTest, OrdersByAlignmentDescendingThenName) {
  std::vector<TensorSpec> specs;
  for (DType d : {DType::kBool, DType::kU8, DType::kI8, DType::kI16, DType::kF16, DType::kBF16,
                  DType::kI32, DType::kF32, DType::kF64, DType::kI64}) {
    specs.push_back({"z_" + std::string(dtype_name(d)), d, {3}});
    specs.push_back({"a_" + std::string(dtype_name(d)), d, {1}});
  }
  const SafetensorsHeader h = make_safetensors_header(specs);
  std::vector<std::string> names;
  for (const TensorInfo& t : h.tensors) names.push_back(t.name);
  // The reference's Dtype enum order, descending: I64 > F64 > F32 > I32 > BF16 > F16 > I16 >
  // I8 > U8 > BOOL.
  EXPECT_THAT(names, ElementsAre("a_I64", "z_I64", "a_F64", "z_F64", "a_F32", "z_F32", "a_I32",
                                 "z_I32", "a_BF16", "z_BF16", "a_F16", "z_F16", "a_I16", "z_I16",
                                 "a_I8", "z_I8", "a_U8", "z_U8", "a_BOOL", "z_BOOL"));
  // Contiguous from 0, each tensor aligned to its element size.
  uint64_t at = 0;
  for (const TensorInfo& t : h.tensors) {
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.begin, at);
    EXPECT_EQ(t.num_bytes(), static_cast<uint64_t>(t.num_elements()) * t.element_size);
    EXPECT_EQ(t.begin % t.element_size, 0u);
    EXPECT_EQ(h.find(t.name), &t);
    at = t.end;
  }
  EXPECT_EQ(h.data_bytes, at);
}

TEST(SafetensorsWriterTest, NamesSortByteWise) {
  const std::vector<TensorSpec> specs = {{"b", DType::kF32, {}},   {"B", DType::kF32, {}},
                                         {"a/x", DType::kF32, {}}, {"a", DType::kF32, {}},
                                         {"é", DType::kF32, {}},   {"a.x", DType::kF32, {}}};
  const SafetensorsHeader h = make_safetensors_header(specs);
  std::vector<std::string> names;
  for (const TensorInfo& t : h.tensors) names.push_back(t.name);
  EXPECT_THAT(names, ElementsAre("B", "a", "a.x", "a/x", "b", "é"));
}

TEST(SafetensorsWriterTest, HeaderIsPaddedWithSpacesToAMultipleOfEight) {
  for (size_t len = 0; len < 24; ++len) {
    SCOPED_TRACE(len);
    const SafetensorsHeader h = make_safetensors_header(
        std::vector<TensorSpec>{{"t", DType::kU8, {2}}}, {{"k", std::string(len, 'v')}});
    const std::string json = serialize_safetensors_header(h);
    EXPECT_EQ(json.size() % 8, 0u);  // so the data, at 8 + N, is 8-byte aligned
    EXPECT_EQ(json.size(), h.header_bytes);
    const size_t close = json.rfind('}');
    EXPECT_LT(json.size() - close - 1, 8u);
    EXPECT_EQ(json.substr(close + 1), std::string(json.size() - close - 1, ' '));
  }
  // No tensors, no metadata: "{}" and 6 spaces.
  EXPECT_EQ(serialize_safetensors_header(make_safetensors_header({})), "{}      ");
}

TEST(SafetensorsWriterTest, LengthPrefixIsLittleEndian) {
  // A header of a few hundred bytes needs two prefix bytes.
  const SafetensorsHeader h = make_safetensors_header(
      std::vector<TensorSpec>{{std::string(300, 'w'), DType::kF32, {4, 4}}});
  const std::string bytes = safetensors_header_bytes(h);
  const uint64_t n = h.header_bytes;
  ASSERT_GT(n, 255u);
  ASSERT_EQ(bytes.size(), 8 + n);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(static_cast<uint8_t>(bytes[i]), (n >> (8 * i)) & 0xFF) << "prefix byte " << i;
  }
}

TEST(SafetensorsWriterTest, RoundTripsNamesThatNeedEscaping) {
  const std::vector<std::string> names = {"plain",        "with \"quotes\"",
                                          "back\\slash",  "slash/and.dots",
                                          "é日本😀",       "tab\there",
                                          "newline\n",    std::string("\x01\x1f\x7f", 3),
                                          "u\u2028x",     " ",
                                          "{}",           "__metadata",
                                          "__metadata__ "};
  std::vector<TensorSpec> specs;
  for (size_t i = 0; i < names.size(); ++i) {
    specs.push_back(
        {names[i], i % 2 ? DType::kF16 : DType::kI32, {static_cast<int64_t>(i) + 1, 2}});
  }
  const std::map<std::string, std::string> metadata = {
      {"\"k\"", "v\\"}, {"ctl\x02", "\n\r\t"}, {"ü", "😀"}, {"", ""}};
  const SafetensorsHeader h = make_safetensors_header(specs, metadata);
  const std::string json = serialize_safetensors_header(h);
  for (char c : json) EXPECT_GE(static_cast<unsigned char>(c), 0x20u) << "raw control byte";
  const SafetensorsHeader back = parse(to_bytes(file_text(h)));
  EXPECT_EQ(describe(back), describe(h));
  EXPECT_EQ(back.metadata, metadata);
  for (const std::string& name : names) EXPECT_NE(back.find(name), nullptr) << name;
  EXPECT_EQ(serialize_safetensors_header(back), json);
}

TEST(SafetensorsWriterTest, RefusesBadNamesAndShapes) {
  auto value_error_of = [](auto&& make) -> std::string {
    try {
      make();
    } catch (const ValueError& e) {
      return e.what();
    } catch (const std::exception& e) {
      return std::string("<not a ValueError: ") + e.what() + ">";
    }
    return "<accepted>";
  };
  auto make = [&](std::vector<TensorSpec> specs) {
    return value_error_of([&] { make_safetensors_header(specs); });
  };
  EXPECT_THAT(make({{"", DType::kF32, {1}}}), HasSubstr("a tensor to save has an empty name"));
  EXPECT_THAT(make({{"a", DType::kF32, {1}}, {"a", DType::kI8, {2}}}),
              HasSubstr("two tensors to save are named 'a'"));
  EXPECT_THAT(make({{std::string("a\0b", 3), DType::kF32, {1}}}),
              HasSubstr("tensor name 'a\\x00b' contains a NUL byte"));
  EXPECT_THAT(make({{"__metadata__", DType::kF32, {1}}}),
              HasSubstr("'__metadata__' is reserved by the safetensors format"));
  EXPECT_THAT(make({{"neg", DType::kF32, {2, -1}}}),
              HasSubstr("tensor 'neg' has the negative shape (2, -1)"));
  EXPECT_THAT(make({{"big", DType::kF64, {int64_t{1} << 31, int64_t{1} << 31, 8}}}),
              HasSubstr("tensor 'big' has the shape (2147483648, 2147483648, 8), whose size "
                        "overflows 64 bits"));
  EXPECT_THAT(make({{"big", DType::kU8, {INT64_MAX, INT64_MAX}}}),
              HasSubstr("tensor 'big' has the shape"));
  EXPECT_THAT(
      make({{"h1", DType::kI64, {int64_t{1} << 60}}, {"h2", DType::kI64, {int64_t{1} << 60}}}),
      HasSubstr("more than 2^64 bytes together (at tensor 'h2')"));
  EXPECT_THAT(make({{"bad\xff", DType::kF32, {1}}}),
              HasSubstr("tensor name 'bad\xff' is not valid UTF-8"));
  EXPECT_THAT(value_error_of([] {
                make_safetensors_header({}, {{"k", "\xc3"}});
              }),
              HasSubstr("metadata value '\xc3' is not valid UTF-8"));
}

// ---------------------------------------------------------------------------------------------
// Property: writer → parser

// The tensors of `h` in the parser's order (begin, end, name). The writer's order (dtype, then
// name) differs only for empty tensors sharing an offset with other tensors.
std::vector<std::string> describe_in_data_order(const SafetensorsHeader& h) {
  std::vector<TensorInfo> tensors = h.tensors;
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  std::vector<std::string> out;
  for (const TensorInfo& t : tensors) out.push_back(describe(t));
  return out;
}

TEST(SafetensorsHeaderPropertyTest, RandomHeadersRoundTrip) {
  const uint64_t seed = test_seed(20260512);
  SCOPED_TRACE("MESHLAYOUT_TEST_SEED=" + std::to_string(seed));
  Random rng(seed);
  for (int iter = 0; iter < 300; ++iter) {
    SCOPED_TRACE("iteration " + std::to_string(iter));
    const SafetensorsHeader h = random_header(rng);
    const std::string text = file_text(h);
    ASSERT_EQ(h.header_bytes % 8, 0u);
    SafetensorsHeader back;
    ASSERT_NO_THROW(back = parse(to_bytes(text))) << text;
    ASSERT_EQ(describe(back), describe_in_data_order(h));
    ASSERT_EQ(back.metadata, h.metadata);
    ASSERT_EQ(back.header_bytes, h.header_bytes);
    ASSERT_EQ(back.data_bytes, h.data_bytes);
    expect_header_invariants(back, text.size());
    // Once parsed, serialise ∘ parse is the identity, to the byte.
    const std::string again = file_text(back);
    ASSERT_EQ(again.size(), text.size());
    ASSERT_EQ(file_text(parse(to_bytes(again))), again);
  }
}

}  // namespace
}  // namespace meshlayout
