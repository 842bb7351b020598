// array_io_test.cc — save_arrays / load_arrays: round trips across random layouts, the file
// format to the byte, bytes read against shard bytes, dtype conversion, errors, thread ranks.
// The kill tests (a save that dies part-way) are in array_io_kill_test.cc.
#include "meshlayout/io/array_io.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "meshlayout/array/array_test_util.h"
#include "meshlayout/core/errors.h"
#include "meshlayout/init/float_convert.h"

namespace meshlayout {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Files in `dir` (names only), to see what a failed save left behind.
std::set<std::string> listing(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.insert(e.path().filename().string());
  return names;
}

class ArrayIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           fmt::format("meshlayout_array_io_{}_{}", ::getpid(),
                       ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::shared_ptr<Runtime> rt_ = Runtime::single_process(8);
  fs::path dir_;
};

// Save several tensors from random layouts A, load them into random layouts B (other meshes
// included): every tensor comes back exactly, and every byte count is the minimum.
TEST_F(ArrayIoTest, RoundTripsAcrossRandomLayouts) {
  const uint64_t seed = testing::test_seed(20261123);
  testing::Random r(seed);
  for (int round = 0; round < 12; ++round) {
    SCOPED_TRACE(fmt::format("seed {} round {}", seed, round));
    std::vector<HostTensor> hosts;
    std::vector<Array> saved, loaded;
    std::vector<std::string> names;
    for (int t = 0; t < 4; ++t) {
      testing::Case c = testing::random_case(r, 8);
      hosts.push_back(
          HostTensor::random(c.dtype, c.shape, seed + static_cast<uint64_t>(round * 10 + t)));
      saved.push_back(distribute_tensor(hosts.back(), c.a, {.runtime = rt_}));
      loaded.push_back(Array::allocate(c.b, c.shape, c.dtype, rt_));
      names.push_back(fmt::format("layer_{}/w{}", round, t));
    }
    std::vector<NamedArray> to_save;
    std::vector<LoadTarget> to_load;
    uint64_t data_bytes = 0;
    for (size_t t = 0; t < hosts.size(); ++t) {
      to_save.push_back({names[t], &saved[t]});
      to_load.push_back({names[t], &loaded[t]});
      data_bytes += hosts[t].num_bytes();
    }
    const std::string file = path("round.safetensors");
    SaveReport saved_report = save_arrays(file, to_save);
    EXPECT_EQ(saved_report.bytes_written, data_bytes);  // one writer per block
    EXPECT_EQ(saved_report.file_bytes, fs::file_size(file));

    Checkpoint ckpt = Checkpoint::open(file);
    LoadReport report = load_arrays(ckpt, to_load);
    uint64_t distinct = 0;
    for (const Array& a : loaded) {
      std::set<std::vector<int64_t>> boxes;
      for (const Array::Shard& s : a.local_shards()) {
        if (s.box.empty()) continue;
        std::vector<int64_t> key = s.box.offset;
        key.insert(key.end(), s.box.shape.begin(), s.box.shape.end());
        if (boxes.insert(key).second) distinct += s.buffer.size();
      }
    }
    EXPECT_EQ(report.shard_bytes, distinct);
    EXPECT_EQ(report.bytes_read, distinct);  // each distinct box read once, nothing more
    for (size_t t = 0; t < hosts.size(); ++t) {
      EXPECT_TRUE(loaded[t].gather() == hosts[t]) << names[t];
      EXPECT_NO_THROW(testing::expect_shards_match(loaded[t], hosts[t])) << names[t];
    }
  }
}

// The file is the standard format: the header the reference writer would produce, padded
// with spaces to a multiple of 8, then each tensor's bytes row-major at its offsets.
TEST_F(ArrayIoTest, WritesTheStandardFormatToTheByte) {
  DeviceMesh mesh({2, 4}, {"data", "model"});
  HostTensor w = HostTensor::random(DType::kF32, {6, 10}, 1);
  HostTensor b = HostTensor::random(DType::kBF16, {10}, 2);
  HostTensor ids = HostTensor::random(DType::kI64, {3}, 3);
  Array wa = distribute_tensor(w, TensorLayout({"model", "data"}, mesh), {.runtime = rt_});
  Array ba = distribute_tensor(b, TensorLayout({"model"}, mesh), {.runtime = rt_});
  Array ia = distribute_tensor(ids, TensorLayout({None}, mesh), {.runtime = rt_});
  const std::string file = path("format.safetensors");
  NamedArray arrays[] = {{"dense/kernel", &wa}, {"dense/bias", &ba}, {"ids", &ia}};
  save_arrays(file, arrays, {.metadata = {{"format", "pt"}}});

  const std::string bytes = read_all(file);
  SafetensorsHeader expected =
      make_safetensors_header(std::vector<TensorSpec>{{"dense/kernel", DType::kF32, {6, 10}},
                                                      {"dense/bias", DType::kBF16, {10}},
                                                      {"ids", DType::kI64, {3}}},
                              {{"format", "pt"}});
  const std::string head = safetensors_header_bytes(expected);
  ASSERT_EQ(bytes.size(), expected.file_bytes());
  EXPECT_EQ(bytes.substr(0, head.size()), head);
  EXPECT_EQ(expected.data_start() % 8, 0u);
  EXPECT_EQ(head.back(), ' ') << "the header is padded with spaces";  // 8 + N is not aligned here
  EXPECT_THAT(head, HasSubstr("\"dtype\":\"BF16\""));
  EXPECT_THAT(head, HasSubstr("\"dtype\":\"I64\""));
  // Data in the reference writer's order: the 8-byte ids, then the kernel, then the bias.
  EXPECT_LT(expected.find("ids")->begin, expected.find("dense/kernel")->begin);
  for (const auto& [name, host] :
       {std::pair{"dense/kernel", &w}, std::pair{"dense/bias", &b}, std::pair{"ids", &ids}}) {
    const TensorInfo* info = expected.find(name);
    EXPECT_EQ(0, std::memcmp(bytes.data() + expected.data_start() + info->begin, host->data(),
                             host->num_bytes()))
        << name;
  }
  // And our own strict reader accepts it.
  Checkpoint ckpt = Checkpoint::open(file);
  EXPECT_EQ(ckpt.metadata().at("format"), "pt");
  EXPECT_EQ(ckpt.tensors().size(), 3u);
}

// A tensor replicated on all 8 devices is read from the file once and copied to the others;
// a row-sharded one reads exactly its bytes.
TEST_F(ArrayIoTest, ReplicatedTargetsReadTheFileOnce) {
  DeviceMesh mesh({8}, {"x"});
  HostTensor x = HostTensor::random(DType::kF32, {64, 32}, 4);
  Array src = distribute_tensor(x, TensorLayout({"x", None}, mesh), {.runtime = rt_});
  NamedArray arrays[] = {{"x", &src}};
  save_arrays(path("x.safetensors"), arrays);
  Checkpoint ckpt = Checkpoint::open(path("x.safetensors"));
  const uint64_t header_reads = ckpt.bytes_read();

  Array replicated = Array::allocate(TensorLayout({None, None}, mesh), {64, 32}, DType::kF32, rt_);
  LoadTarget t1[] = {{"x", &replicated}};
  LoadReport report = load_arrays(ckpt, t1);
  EXPECT_EQ(report.bytes_read, x.num_bytes());
  EXPECT_EQ(ckpt.bytes_read() - header_reads, x.num_bytes());
  EXPECT_TRUE(replicated.gather() == x);

  Array cols = Array::allocate(TensorLayout({None, "x"}, mesh), {64, 32}, DType::kF32, rt_);
  LoadTarget t2[] = {{"x", &cols}};
  EXPECT_EQ(load_arrays(ckpt, t2).bytes_read, x.num_bytes());
  EXPECT_TRUE(cols.gather() == x);
}

TEST_F(ArrayIoTest, ConvertsFloatDtypesOnlyWhenAsked) {
  DeviceMesh mesh({2, 4}, {"data", "model"});
  HostTensor half = HostTensor::random(DType::kBF16, {8, 12}, 5);
  Array src = distribute_tensor(half, TensorLayout({"data", "model"}, mesh), {.runtime = rt_});
  NamedArray arrays[] = {{"w", &src}};
  save_arrays(path("w.safetensors"), arrays);
  Checkpoint ckpt = Checkpoint::open(path("w.safetensors"));

  Array wide = Array::allocate(TensorLayout({"model", None}, mesh), {8, 12}, DType::kF32, rt_);
  LoadTarget targets[] = {{"w", &wide}};
  try {
    load_arrays(ckpt, targets);
    FAIL() << "a BF16 tensor loaded into F32 without convert_dtypes";
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'w'"));
    EXPECT_THAT(e.what(), HasSubstr("BF16"));
    EXPECT_THAT(e.what(), HasSubstr("convert_dtypes"));
  }
  // A tiny staging budget forces several read-then-convert rounds.
  LoadReport report = load_arrays(ckpt, targets, {.convert_dtypes = true, .max_staging_bytes = 16});
  EXPECT_EQ(report.bytes_read, half.num_bytes());  // the file's bytes, not the target's
  HostTensor got = wide.gather();
  for (int64_t i = 0; i < 8 * 12; ++i) {
    ASSERT_EQ(got.data_as<float>()[i], float_from_bf16(half.data_as<uint16_t>()[i])) << i;
  }
  // And back down: F32 → F16 rounds to nearest even, as f16_from_float does.
  NamedArray wide_arrays[] = {{"w", &wide}};
  save_arrays(path("wide.safetensors"), wide_arrays);
  Array narrow = Array::allocate(TensorLayout({None, "data"}, mesh), {8, 12}, DType::kF16, rt_);
  LoadTarget narrow_targets[] = {{"w", &narrow}};
  load_arrays(Checkpoint::open(path("wide.safetensors")), narrow_targets, {.convert_dtypes = true});
  HostTensor n = narrow.gather();
  for (int64_t i = 0; i < 8 * 12; ++i) {
    ASSERT_EQ(n.data_as<uint16_t>()[i], f16_from_float(got.data_as<float>()[i])) << i;
  }
  // Integers never convert.
  Array ints = Array::allocate(TensorLayout({None, None}, mesh), {8, 12}, DType::kI32, rt_);
  LoadTarget int_targets[] = {{"w", &ints}};
  EXPECT_THROW(load_arrays(ckpt, int_targets, {.convert_dtypes = true}), ValueError);
}

TEST_F(ArrayIoTest, RefusesMissingTensorsListingThem) {
  DeviceMesh mesh({8}, {"x"});
  Array a = distribute_tensor(HostTensor::random(DType::kF32, {8}, 6), TensorLayout({"x"}, mesh),
                              {.runtime = rt_});
  NamedArray arrays[] = {{"a", &a}};
  save_arrays(path("a.safetensors"), arrays);
  Checkpoint ckpt = Checkpoint::open(path("a.safetensors"));
  Array b = Array::allocate(TensorLayout({"x"}, mesh), {8}, DType::kF32, rt_);
  Array c = Array::allocate(TensorLayout({"x"}, mesh), {8}, DType::kF32, rt_);
  LoadTarget targets[] = {{"a", &a}, {"b", &b}, {"c", &c}};
  try {
    load_arrays(ckpt, targets);
    FAIL();
  } catch (const NotFoundError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'b', 'c'"));
    EXPECT_THAT(e.what(), HasSubstr("a.safetensors"));
  }
  Array wrong = Array::allocate(TensorLayout({"x", None}, mesh), {8, 1}, DType::kF32, rt_);
  LoadTarget shape_target[] = {{"a", &wrong}};
  try {
    load_arrays(ckpt, shape_target);
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'a'"));
    EXPECT_THAT(e.what(), HasSubstr("(8,)"));
    EXPECT_THAT(e.what(), HasSubstr("(8, 1)"));
  }
}

TEST_F(ArrayIoTest, AFailedSaveLeavesNothingAndKeepsTheOldFile) {
  DeviceMesh mesh({8}, {"x"});
  Array a = distribute_tensor(HostTensor::random(DType::kF32, {16}, 7), TensorLayout({"x"}, mesh),
                              {.runtime = rt_});
  NamedArray arrays[] = {{"a", &a}};
  try {
    save_arrays(path("missing/dir/a.safetensors"), arrays);
    FAIL();
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("missing/dir"));
  }
  EXPECT_TRUE(listing(dir_).empty());

  // Names are checked before anything is created.
  NamedArray dup[] = {{"a", &a}, {"a", &a}};
  EXPECT_THROW(save_arrays(path("dup.safetensors"), dup), ValueError);
  NamedArray nul[] = {{std::string("a\0b", 3), &a}};
  EXPECT_THROW(save_arrays(path("nul.safetensors"), nul), ValueError);
  EXPECT_TRUE(listing(dir_).empty());

  // A save over an existing file replaces it whole and leaves no temporary file.
  save_arrays(path("a.safetensors"), arrays);
  const std::string before = read_all(path("a.safetensors"));
  Array other = distribute_tensor(HostTensor::random(DType::kF32, {16}, 8),
                                  TensorLayout({None}, mesh), {.runtime = rt_});
  NamedArray other_arrays[] = {{"a", &other}};
  save_arrays(path("a.safetensors"), other_arrays);
  EXPECT_NE(read_all(path("a.safetensors")), before);
  EXPECT_EQ(listing(dir_), std::set<std::string>{"a.safetensors"});
}

TEST_F(ArrayIoTest, ReportsProgressUpToTheTotal) {
  DeviceMesh mesh({2, 4}, {"data", "model"});
  Array a = distribute_tensor(HostTensor::random(DType::kF32, {256, 64}, 9),
                              TensorLayout({"data", "model"}, mesh), {.runtime = rt_});
  NamedArray arrays[] = {{"a", &a}};
  uint64_t last_done = 0, last_total = 0;
  int calls = 0;
  save_arrays(path("p.safetensors"), arrays, {.progress = [&](uint64_t done, uint64_t total) {
                EXPECT_GE(done, last_done);
                last_done = done;
                last_total = total;
                ++calls;
              }});
  EXPECT_GT(calls, 0);
  EXPECT_EQ(last_done, 256u * 64 * 4);
  EXPECT_EQ(last_total, last_done);
  Array b = Array::allocate(TensorLayout({"model", None}, mesh), {256, 64}, DType::kF32, rt_);
  LoadTarget targets[] = {{"a", &b}};
  last_done = 0;
  load_arrays(Checkpoint::open(path("p.safetensors")), targets,
              {.progress = [&](uint64_t done, uint64_t total) {
                last_done = done;
                last_total = total;
              }});
  EXPECT_EQ(last_done, 256u * 64 * 4);
  EXPECT_EQ(last_total, last_done);
}

// Threads as the processes of one group: each process writes only the blocks it was given and
// reads only its devices' boxes; the file and the loaded arrays are whole.
void save_and_load_as_processes(const fs::path& dir, int procs, int64_t local_devices) {
  const std::string file = (dir / fmt::format("procs{}.safetensors", procs)).string();
  const uint64_t seed = testing::test_seed(77);
  std::vector<uint64_t> written(static_cast<size_t>(procs));
  testing::run_as_processes(procs, local_devices, [&](std::shared_ptr<Runtime> rt) {
    testing::Random r(seed);  // the same cases in every process
    for (int round = 0; round < 6; ++round) {
      testing::Case c = testing::random_case(r, rt->global_device_count());
      HostTensor x = HostTensor::random(c.dtype, c.shape, seed + static_cast<uint64_t>(round));
      HostTensor y =
          HostTensor::random(DType::kF32, {16, 8}, seed + 100 + static_cast<uint64_t>(round));
      Array a = distribute_tensor(x, c.a, {.runtime = rt});
      Array ya = distribute_tensor(y, TensorLayout({c.mesh.axis_names()[0], None}, c.mesh),
                                   {.runtime = rt});
      NamedArray arrays[] = {{"x", &a}, {"y", &ya}};
      SaveReport s = save_arrays(file, arrays);
      written[static_cast<size_t>(rt->comm().rank())] = s.bytes_written;
      rt->comm().barrier();
      uint64_t total = 0;
      for (uint64_t w : written) total += w;
      if (total != x.num_bytes() + y.num_bytes()) {
        throw InternalError(fmt::format("round {}: processes wrote {} bytes, data is {}", round,
                                        total, x.num_bytes() + y.num_bytes()));
      }
      // preadv, two-phase (slabs exchanged; tiny staging: many rounds), mapped, two-phase's
      // auto choice without mapping, and the defaults.
      const std::pair<TwoPhaseMode, MapMode> modes[] = {{TwoPhaseMode::kNever, MapMode::kNever},
                                                        {TwoPhaseMode::kAlways, MapMode::kNever},
                                                        {TwoPhaseMode::kNever, MapMode::kAlways},
                                                        {TwoPhaseMode::kAuto, MapMode::kNever},
                                                        {TwoPhaseMode::kAuto, MapMode::kAuto}};
      for (const auto& [two_phase, map] : modes) {
        Array b = Array::allocate(c.b, c.shape, c.dtype, rt);
        Array yb = Array::allocate(TensorLayout({None, None}, c.mesh), {16, 8}, DType::kF32, rt);
        LoadTarget targets[] = {{"x", &b}, {"y", &yb}};
        load_arrays(Checkpoint::open(file), targets,
                    {.max_staging_bytes = 64, .two_phase = two_phase, .map = map});
        if (!(b.gather() == x) || !(yb.gather() == y)) {
          throw InternalError(fmt::format("round {} two_phase {} map {}: {} did not round-trip",
                                          round, static_cast<int>(two_phase), static_cast<int>(map),
                                          c.describe()));
        }
      }
      rt->comm().barrier();  // nobody saves the next round while another still reads
    }
  });
}

// A column-sharded tensor over 4 processes loads two-phase when mapping is off: every byte of
// the file is read once over all processes, each process holds one staging slab within the
// bound. (With mapping, the default, it is mapped: mapped_read_test.cc.)
TEST_F(ArrayIoTest, ColumnShardsLoadTwoPhaseReadingTheFileOnce) {
  const std::string file = path("columns.safetensors");
  const HostTensor x =
      HostTensor::random(DType::kF32, {64, 4096}, testing::test_seed(15));  // 1 MiB
  std::vector<LoadReport> reports(4);
  testing::run_as_processes(4, 2, [&](std::shared_ptr<Runtime> rt) {
    DeviceMesh mesh({8}, {"x"});
    Array a = distribute_tensor(x, TensorLayout({"x", None}, mesh), {.runtime = rt});
    NamedArray arrays[] = {{"x", &a}};
    save_arrays(file, arrays);
    for (uint64_t staging : {uint64_t{256} << 20, uint64_t{40000}}) {
      Array b = Array::allocate(TensorLayout({None, "x"}, mesh), x.shape(), DType::kF32, rt);
      LoadTarget targets[] = {{"x", &b}};
      LoadReport report = load_arrays(Checkpoint::open(file), targets,
                                      {.max_staging_bytes = staging, .map = MapMode::kNever});
      if (!(b.gather() == x)) throw InternalError("the column-sharded load differs");
      if (report.staging_bytes > std::max<uint64_t>(staging, 4096 * 4)) {
        throw InternalError(
            fmt::format("staging {} over the bound {}", report.staging_bytes, staging));
      }
      reports[static_cast<size_t>(rt->comm().rank())] = report;
      rt->comm().barrier();
      uint64_t read = 0;
      for (const LoadReport& r : reports) read += r.bytes_read;
      if (read != x.num_bytes()) {
        throw InternalError(
            fmt::format("the processes read {} bytes of a {}-byte tensor", read, x.num_bytes()));
      }
      rt->comm().barrier();
    }
  });
  for (const LoadReport& r : reports) {
    EXPECT_EQ(r.two_phase_bytes, r.shard_bytes);
    EXPECT_EQ(r.shard_bytes, x.num_bytes() / 4);
  }
}

TEST_F(ArrayIoTest, TwoProcessesOfFourDevices) { save_and_load_as_processes(dir_, 2, 4); }
TEST_F(ArrayIoTest, FourProcessesOfTwoDevices) { save_and_load_as_processes(dir_, 4, 2); }

}  // namespace
}  // namespace meshlayout
