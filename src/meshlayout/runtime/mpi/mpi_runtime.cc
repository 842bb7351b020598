#include "meshlayout/runtime/mpi/mpi_runtime.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

namespace meshlayout {
namespace {

constexpr auto kExitWait = std::chrono::seconds(30);
constexpr const char* kLauncherVars[] = {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"};
constexpr const char* kNumProcessesVar = "KERAS_DISTRIBUTION_NUM_PROCESSES";
constexpr const char* kProcessIdVar = "KERAS_DISTRIBUTION_PROCESS_ID";

// MPI is per process, so its state is too. Never destroyed: the at-exit handler may run after
// static destructors would have.
struct State {
  std::mutex mu;
  std::optional<MpiContext> context;   // set by a successful MPI set-up in initialize_mpi
  MPI_Comm exit_comm = MPI_COMM_NULL;  // only the at-exit barrier uses it
  bool at_exit_registered = false;
  int process_id = 0;
  int num_processes = 1;
};

State& state() {
  static State* s = new State;
  return *s;
}

bool launched_by_mpirun() {
  for (const char* var : kLauncherVars) {
    if (std::getenv(var) != nullptr) return true;
  }
  return false;
}

bool mpi_active() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

// An explicit option, else its environment variable, else nothing; `source` says which.
std::optional<int64_t> resolve(std::optional<int> value, const char* var, std::string& source) {
  if (value) return *value;
  const char* text = std::getenv(var);
  if (text == nullptr || *text == '\0') return std::nullopt;
  source = fmt::format(" (from {}={})", var, quote(text));
  return parse_int64(text, fmt::format("environment variable {}", var));
}

// "" if `options` agree with MPI; otherwise what is wrong. ValueError for a malformed variable.
std::string check_options(const MpiInitOptions& options, const MpiContext& mpi) {
  std::string source;
  if (std::optional<int64_t> n = resolve(options.num_processes, kNumProcessesVar, source)) {
    if (*n < 1) {
      return fmt::format("initialize_mpi: num_processes must be at least 1, got {}{}", *n, source);
    }
    if (*n != mpi.num_processes) {
      return fmt::format(
          "initialize_mpi: num_processes={}{} but MPI reports {} process{}; {}", *n, source,
          mpi.num_processes, mpi.num_processes == 1 ? "" : "es",
          mpi.launched_by_mpirun
              ? fmt::format("MPI fixes the process count at launch: start the program with "
                            "`mpirun -np {}`",
                            *n)
              : fmt::format("the program was not started by mpirun (no OMPI_COMM_WORLD_SIZE, "
                            "PMIX_RANK or PMI_RANK in its environment): start it with "
                            "`mpirun -np {} <program>`",
                            *n));
    }
  }
  source.clear();
  if (std::optional<int64_t> id = resolve(options.process_id, kProcessIdVar, source)) {
    if (*id < 0) {
      return fmt::format("initialize_mpi: process_id must be at least 0, got {}{}", *id, source);
    }
    if (*id != mpi.process_id) {
      return fmt::format(
          "initialize_mpi: process_id={}{} but MPI reports process id {} (this process's rank "
          "in MPI_COMM_WORLD, 0 to {}); MPI assigns process ids at launch",
          *id, source, mpi.process_id, mpi.num_processes - 1);
    }
  }
  return "";
}

void finalize_locked(State& s) {
  if (!mpi_active()) return;
  s.context.reset();  // frees the world communicator unless a caller still holds it
  if (s.exit_comm != MPI_COMM_NULL) MPI_Comm_free(&s.exit_comm);
  MPI_Finalize();
}

// Registered with std::atexit by initialize_mpi. MPI_Finalize synchronises all processes, so
// a rank that exits while others are stuck (or exit through an error) would hang in it; wait
// for every rank at a barrier of our own first, with a deadline.
void finalize_at_exit() {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (!mpi_active()) return;
  if (s.exit_comm != MPI_COMM_NULL) {
    MPI_Request request = MPI_REQUEST_NULL;
    int done = 0;
    if (MPI_Ibarrier(s.exit_comm, &request) == MPI_SUCCESS) {
      const auto deadline = std::chrono::steady_clock::now() + kExitWait;
      while (MPI_Test(&request, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && !done &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    if (!done) {
      std::fprintf(stderr,
                   "meshlayout: process %d exits without MPI_Finalize: not every process reached "
                   "exit within %lld s (call finalize_mpi() before exiting)\n",
                   s.process_id, static_cast<long long>(kExitWait.count()));
      return;
    }
  }
  finalize_locked(s);
}

}  // namespace

MpiContext initialize_mpi(int* argc, char*** argv, const MpiInitOptions& options) {
  State& s = state();
  std::lock_guard lock(s.mu);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) {
    throw FailedPreconditionError(
        "initialize_mpi: MPI was finalized already and cannot be initialized again in the same "
        "process");
  }
  if (!s.context) {
    MpiContext mpi;
    if (!initialized) {
      const int code = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &mpi.thread_level);
      if (code != MPI_SUCCESS) {
        throw InternalError(fmt::format("MPI_Init_thread failed with MPI error code {}", code));
      }
      if (!s.at_exit_registered) {
        std::atexit(finalize_at_exit);
        s.at_exit_registered = true;
      }
    } else {
      MPI_Query_thread(&mpi.thread_level);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &mpi.process_id);
    MPI_Comm_size(MPI_COMM_WORLD, &mpi.num_processes);
    mpi.launched_by_mpirun = launched_by_mpirun();
    MPI_Comm node = MPI_COMM_NULL;
    if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, mpi.process_id, MPI_INFO_NULL,
                            &node) == MPI_SUCCESS &&
        node != MPI_COMM_NULL) {
      MPI_Comm_size(node, &mpi.local_processes);
      MPI_Comm_free(&node);
    }
    mpi.world = std::make_shared<MpiCommunicator>(MPI_COMM_WORLD);
    if (s.exit_comm == MPI_COMM_NULL) {
      MPI_Comm_dup(MPI_COMM_WORLD, &s.exit_comm);
      MPI_Comm_set_errhandler(s.exit_comm, MPI_ERRORS_RETURN);
    }
    s.process_id = mpi.process_id;
    s.num_processes = mpi.num_processes;
    s.context = std::move(mpi);
  }
  std::string problem;
  try {
    problem = check_options(options, *s.context);
  } catch (const ValueError& e) {
    problem = e.what();
  }
  // Every rank checks its own options; all throw if any rank's disagree (DESIGN §4).
  agree_on_failure(*s.context->world,
                   problem.empty() ? nullptr : std::make_exception_ptr(ValueError(problem)));
  return *s.context;
}

int mpi_process_id() {
  State& s = state();
  std::lock_guard lock(s.mu);
  return s.process_id;
}

int mpi_num_processes() {
  State& s = state();
  std::lock_guard lock(s.mu);
  return s.num_processes;
}

MpiCommunicator& mpi_world() {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (!s.context) {
    throw FailedPreconditionError(
        "mpi_world: MPI is not initialized (or was finalized); call initialize_mpi() first");
  }
  return *s.context->world;
}

void finalize_mpi() {
  State& s = state();
  std::lock_guard lock(s.mu);
  finalize_locked(s);
}

}  // namespace meshlayout
