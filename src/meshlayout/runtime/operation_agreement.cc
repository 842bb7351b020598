#include "meshlayout/runtime/operation_agreement.h"

#include <fmt/format.h>

#include <cstdint>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/core/strings.h"

namespace meshlayout {
namespace {

using Record = OperationRecord;
static_assert(sizeof(Record) == 24, "exchanged as raw bytes");

// FNV-1a, 64 bits: the same on every process and compiler, which std::hash is not.
uint64_t fnv1a(std::string_view text) { return fnv1a_64(text) ^ text.size(); }

std::vector<std::string_view> fields_of(std::string_view text) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t at = text.find("; ", start);
    out.push_back(text.substr(start, at == std::string_view::npos ? at : at - start));
    if (at == std::string_view::npos) return out;
    start = at + 2;
  }
}

// Values in messages are capped: a description can be long (a checkpoint's tensor list).
std::string shown(std::string_view field) {
  constexpr size_t kMax = 160;
  if (field.size() <= kMax) return std::string(field);
  return fmt::format("{}… ({} bytes)", field.substr(0, kMax), field.size());
}

std::string first_difference(std::string_view mine, std::string_view theirs, int rank) {
  const std::vector<std::string_view> a = fields_of(mine), b = fields_of(theirs);
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    const std::string_view x = i < a.size() ? a[i] : "(nothing)";
    const std::string_view y = i < b.size() ? b[i] : "(nothing)";
    if (x != y)
      return fmt::format("process {} has {} but process 0 has {}", rank, shown(x), shown(y));
  }
  return fmt::format("process {} describes it differently from process 0", rank);
}

}  // namespace

std::string describe_fields(std::initializer_list<std::string> fields) {
  std::string out;
  for (const std::string& f : fields) {
    if (!out.empty()) out += "; ";
    out += f;
  }
  return out;
}

OperationRecord operation_record(std::string_view description, bool failed) {
  return OperationRecord{fnv1a(description), description.size(),
                         failed ? uint64_t{1} : uint64_t{0}};
}

void settle_operation_agreement(Communicator& comm, std::string_view what,
                                std::string_view description, const std::exception_ptr& local_error,
                                std::span<const OperationRecord> all) {
  const int n = comm.size();
  if (all.size() != static_cast<size_t>(n)) {
    throw InternalError(fmt::format("settle_operation_agreement ({}): {} records for {} ranks",
                                    what, all.size(), n));
  }
  for (const Record& x : all) {
    if (x.failed == 0) continue;
    // Every rank saw the flag, so every rank takes part; this throws on every rank.
    agree_on_failure(comm, local_error);
    throw InternalError(
        fmt::format("agree_on_operation ({}): a rank reported a failure that "
                    "agree_on_failure lost",
                    what));
  }
  std::vector<int> differ;
  for (int r = 1; r < n; ++r) {
    const Record& x = all[static_cast<size_t>(r)];
    if (x.hash != all[0].hash || x.bytes != all[0].bytes) differ.push_back(r);
  }
  if (differ.empty()) return;
  // Every rank knows the first differing rank; fetch its description and rank 0's.
  const int first = differ.front();
  std::string theirs(all[static_cast<size_t>(first)].bytes, '\0');
  std::string base(all[0].bytes, '\0');
  if (comm.rank() == first) theirs.assign(description);
  if (comm.rank() == 0) base.assign(description);
  if (!theirs.empty()) comm.broadcast(theirs.data(), theirs.size(), first);
  if (!base.empty()) comm.broadcast(base.data(), base.size(), 0);
  std::string message =
      fmt::format("processes disagree on {}: {}", what, first_difference(theirs, base, first));
  if (differ.size() > 1) {
    std::vector<int> rest(differ.begin() + 1, differ.end());
    message +=
        fmt::format(" (process{} [{}] differ{} from process 0 too)", rest.size() == 1 ? "" : "es",
                    fmt::join(rest, ", "), rest.size() == 1 ? "s" : "");
  }
  message +=
      "; every process must run the same operation with the same arguments and "
      "environment";
  throw ValueError(message);
}

namespace {

void agree(Communicator& comm, std::string_view what, std::string_view description,
           const std::exception_ptr* local_error) {
  const int n = comm.size();
  if (n == 1) {
    if (local_error != nullptr) agree_on_failure(comm, *local_error);
    return;
  }
  const Record mine = operation_record(description, local_error != nullptr && *local_error);
  std::vector<Record> all(static_cast<size_t>(n));
  comm.all_gather(&mine, sizeof mine, all.data());
  settle_operation_agreement(comm, what, description,
                             local_error != nullptr ? *local_error : std::exception_ptr(), all);
}

}  // namespace

void agree_on_operation(Communicator& comm, std::string_view what, std::string_view description) {
  agree(comm, what, description, nullptr);
}

void agree_on_operation(Communicator& comm, std::string_view what, std::string_view description,
                        const std::exception_ptr& local_error) {
  agree(comm, what, description, &local_error);
}

}  // namespace meshlayout
