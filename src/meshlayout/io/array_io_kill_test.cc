// array_io_kill_test.cc — a save killed part-way leaves the previous checkpoint intact. A child
// process (io_save_child) saves over an existing checkpoint and is killed with SIGKILL: once
// exactly while its bytes are going into the temporary file, then at random moments of its
// run. Afterwards the checkpoint must be, byte for byte, either the old file or the new one.
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <thread>

#include "meshlayout/io/safetensors_file.h"

extern char** environ;

namespace meshlayout {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// io_save_child running with its stdout on a pipe.
class SaveChild {
 public:
  SaveChild(const fs::path& target, int mib, int seed, bool pause) {
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    const std::string path = target.string(), mib_text = std::to_string(mib),
                      seed_text = std::to_string(seed);
    std::vector<char*> argv{const_cast<char*>(MESHLAYOUT_IO_SAVE_CHILD),
                            const_cast<char*>(path.c_str()), const_cast<char*>(mib_text.c_str()),
                            const_cast<char*>(seed_text.c_str())};
    if (pause) argv.push_back(const_cast<char*>("--pause"));
    argv.push_back(nullptr);
    const int rc =
        posix_spawn(&pid_, MESHLAYOUT_IO_SAVE_CHILD, &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    if (rc != 0)
      throw std::runtime_error(fmt::format("spawning {} failed", MESHLAYOUT_IO_SAVE_CHILD));
    out_ = ::fdopen(fds[0], "r");
  }
  ~SaveChild() {
    if (pid_ > 0) kill_and_wait();
    if (out_) std::fclose(out_);
  }
  // The child's next line of output ("" at end of file).
  std::string line() {
    char buf[256];
    return std::fgets(buf, sizeof buf, out_) ? std::string(buf) : std::string();
  }
  void kill_and_wait() {
    ::kill(pid_, SIGKILL);
    wait();
  }
  int wait() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
};

class ArrayIoKillTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("meshlayout_kill_test_{}", ::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Runs the child to completion: the file a save of (mib, seed) produces.
  std::string complete_save(const fs::path& target, int mib, int seed) {
    SaveChild child(target, mib, seed, /*pause=*/false);
    EXPECT_EQ(child.line(), "saved\n");
    const int status = child.wait();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
    return read_all(target);
  }

  fs::path dir_;
};

TEST_F(ArrayIoKillTest, KilledWhileWritingKeepsTheOldCheckpoint) {
  const fs::path target = dir_ / "model.safetensors";
  const std::string old_bytes = complete_save(target, 4, 1);
  ASSERT_GT(old_bytes.size(), 4u << 20);
  {
    SaveChild child(target, 4, 2, /*pause=*/true);
    ASSERT_EQ(child.line(), "writing\n");  // its bytes are going into the temporary file now
    child.kill_and_wait();
  }
  EXPECT_EQ(read_all(target), old_bytes);
  EXPECT_NO_THROW(Checkpoint::open(target.string()));
  // The half-written temporary file is next to it, under a name that says what it is.
  int temporaries = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    const std::string name = e.path().filename().string();
    if (name != "model.safetensors") {
      EXPECT_EQ(name.rfind(".model.safetensors.tmp-", 0), 0u) << name;
      ++temporaries;
    }
  }
  EXPECT_EQ(temporaries, 1);
  // Its process is dead: the next save to the same target removes it.
  complete_save(target, 1, 3);
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(dir_)) left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"model.safetensors"});
}

TEST_F(ArrayIoKillTest, KilledAtRandomMomentsLeavesTheOldOrTheNewFile) {
  const fs::path target = dir_ / "model.safetensors";
  const std::string new_bytes = complete_save(dir_ / "reference.safetensors", 24, 4);
  const auto start = Clock::now();
  const std::string old_bytes = complete_save(target, 24, 3);
  const auto run_time = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start);
  std::mt19937 rng(2026);
  int old_seen = 0, new_seen = 0;
  for (int round = 0; round < 8; ++round) {
    const auto delay = std::chrono::microseconds(
        std::uniform_int_distribution<int64_t>(0, run_time.count() * 11 / 10)(rng));
    {
      SaveChild child(target, 24, 4, /*pause=*/false);
      std::this_thread::sleep_for(delay);
      child.kill_and_wait();
    }
    const std::string now = read_all(target);
    if (now == old_bytes) {
      ++old_seen;
    } else if (now == new_bytes) {
      ++new_seen;
      std::ofstream(target, std::ios::binary | std::ios::trunc) << old_bytes;  // start over
    } else {
      FAIL() << "round " << round << ": killed after " << delay.count()
             << " us, the checkpoint is neither the old nor the new file (" << now.size()
             << " bytes)";
    }
  }
  EXPECT_EQ(old_seen + new_seen, 8);
  std::printf("kills that left the old file: %d, the new file: %d\n", old_seen, new_seen);
}

}  // namespace
}  // namespace meshlayout
