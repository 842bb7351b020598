// communicator_conformance.h — TESTONLY: the conformance suite every Communicator backend
// passes (style-lessons L11: one suite registered for every backend).
//
// Each check is a function of one rank's communicator, called by every rank of the group at
// the same time (threads for the in-process group, processes under mpirun). Checks use gtest
// EXPECT_* only — never ASSERT_*, which would return early on one rank and leave the others
// in a collective — and every rank makes the same calls whatever it observes.
//
// Example (in a backend's test):
//   for (const auto& check : conformance::kChecks) check.run(comm);
//   // or one TEST per check: see in_process_communicator_test.cc, mpi_communicator_test.cc
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <vector>

#include "meshlayout/core/errors.h"
#include "meshlayout/runtime/communicator.h"
#include "meshlayout/runtime/communicator_conformance_exchange.h"

namespace meshlayout::conformance {

/// A recognizable byte for position `i` of the message identified by (a, b, c).
inline uint8_t pattern(int a, int b, size_t i, int c = 0) {
  return static_cast<uint8_t>((a * 59 + b * 13 + c * 101 + i * 7 + 1) % 251);
}

inline std::string where(const Communicator& comm) {
  return fmt::format("rank {} of {} ({})", comm.rank(), comm.size(), comm.backend());
}

/// EXPECTs got == want, reporting the number of differing elements and the first one.
template <typename T>
void expect_elements(const std::vector<T>& got, const std::vector<T>& want,
                     const std::string& what) {
  if (got.size() != want.size()) {
    ADD_FAILURE() << what << ": got " << got.size() << " elements, expected " << want.size();
    return;
  }
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    if (bad++ == 0) first = i;
  }
  EXPECT_EQ(bad, 0u) << what << ": first difference at element " << first << ": got " << +got[first]
                     << ", expected " << +want[first];
}

inline void check_barrier(Communicator& comm) {
  SCOPED_TRACE(where(comm));
  for (int i = 0; i < 20; ++i) comm.barrier();
  // Every rank passed the same number of barriers: nothing is left pending.
  std::vector<int32_t> counts(static_cast<size_t>(comm.size()));
  int32_t mine = 20;
  comm.all_gather(&mine, sizeof mine, counts.data());
  expect_elements(counts, std::vector<int32_t>(counts.size(), 20), "barrier count");
}

inline void check_all_gather(Communicator& comm) {
  SCOPED_TRACE(where(comm));
  const int n = comm.size(), me = comm.rank();
  constexpr size_t kGuard = 16;
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{7}, size_t{4099}}) {
    std::vector<uint8_t> send(bytes);
    for (size_t i = 0; i < bytes; ++i) send[i] = pattern(me, 0, i);
    std::vector<uint8_t> recv(static_cast<size_t>(n) * bytes + kGuard, 0xA5);
    comm.all_gather(send.data(), bytes, recv.data());
    std::vector<uint8_t> want(recv.size(), 0xA5);
    for (int k = 0; k < n; ++k) {
      for (size_t i = 0; i < bytes; ++i)
        want[static_cast<size_t>(k) * bytes + i] = pattern(k, 0, i);
    }
    expect_elements(recv, want, fmt::format("all_gather of {} bytes", bytes));
  }
  // The header example: one uint64_t per rank.
  std::vector<uint64_t> sizes(static_cast<size_t>(n));
  uint64_t value = 1000 + static_cast<uint64_t>(me);
  comm.all_gather(&value, sizeof value, sizes.data());
  for (int k = 0; k < n; ++k) EXPECT_EQ(sizes[static_cast<size_t>(k)], 1000u + k);
}

/// In place: `send` is this rank's block of `recv` (as MPI_IN_PLACE).
inline void check_all_gather_in_place(Communicator& comm) {
  SCOPED_TRACE(where(comm));
  const int n = comm.size(), me = comm.rank();
  const size_t bytes = 33;
  std::vector<uint8_t> buf(static_cast<size_t>(n) * bytes, 0);
  for (size_t i = 0; i < bytes; ++i) buf[static_cast<size_t>(me) * bytes + i] = pattern(me, 1, i);
  comm.all_gather(buf.data() + static_cast<size_t>(me) * bytes, bytes, buf.data());
  std::vector<uint8_t> want(buf.size());
  for (int k = 0; k < n; ++k) {
    for (size_t i = 0; i < bytes; ++i) want[static_cast<size_t>(k) * bytes + i] = pattern(k, 1, i);
  }
  expect_elements(buf, want, "in-place all_gather");
}

/// Bytes rank `from` sends rank `to`: irregular, zero for some pairs (never for n == 1).
inline size_t a2a_count(int from, int to, size_t scale) {
  if ((from + to) % 3 == 1) return 0;
  return static_cast<size_t>(from + 1) * static_cast<size_t>(to + 2) * scale;
}

inline void check_all_to_all_v_scaled(Communicator& comm, size_t scale) {
  SCOPED_TRACE(fmt::format("{}, scale {}", where(comm), scale));
  const int n = comm.size(), me = comm.rank();
  const auto un = static_cast<size_t>(n);
  std::vector<size_t> send_counts(un), send_offsets(un), recv_counts(un), recv_offsets(un);
  // Send blocks in reverse peer order with 3-byte gaps; receive blocks in peer order starting
  // at 5 with 1-byte gaps. Gaps must come back untouched.
  size_t at = 2;
  for (int k = n - 1; k >= 0; --k) {
    send_counts[static_cast<size_t>(k)] = a2a_count(me, k, scale);
    send_offsets[static_cast<size_t>(k)] = at;
    at += send_counts[static_cast<size_t>(k)] + 3;
  }
  std::vector<uint8_t> send(at, 0xEE);
  for (int k = 0; k < n; ++k) {
    const auto uk = static_cast<size_t>(k);
    for (size_t i = 0; i < send_counts[uk]; ++i) send[send_offsets[uk] + i] = pattern(me, k, i, 3);
  }
  at = 5;
  for (int k = 0; k < n; ++k) {
    recv_counts[static_cast<size_t>(k)] = a2a_count(k, me, scale);
    recv_offsets[static_cast<size_t>(k)] = at;
    at += recv_counts[static_cast<size_t>(k)] + 1;
  }
  std::vector<uint8_t> recv(at, 0x5A);
  std::vector<uint8_t> want(at, 0x5A);
  for (int k = 0; k < n; ++k) {
    const auto uk = static_cast<size_t>(k);
    for (size_t i = 0; i < recv_counts[uk]; ++i) want[recv_offsets[uk] + i] = pattern(k, me, i, 3);
  }
  comm.all_to_all_v(send.data(), send_counts, send_offsets, recv.data(), recv_counts, recv_offsets);
  expect_elements(recv, want, "all_to_all_v receive buffer");
}

inline void check_all_to_all_v(Communicator& comm) {
  check_all_to_all_v_scaled(comm, 1);
  check_all_to_all_v_scaled(comm, 997);
}

/// Exactly representable values, so every summation order gives the same exact sum.
template <typename T>
T reduce_value(int rank, size_t i) {
  const auto r = static_cast<int64_t>(rank) + 1;
  const auto j = static_cast<int64_t>(i);
  if constexpr (std::is_same_v<T, int32_t>) {
    return static_cast<T>(r * (j + 1) * (j % 2 == 0 ? 1 : -1));
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return r * (int64_t{1} << 40) + j * (r + 2);
  } else if constexpr (std::is_same_v<T, float>) {
    return 0.25f * static_cast<float>(r * (j % 64)) - static_cast<float>(r);
  } else {
    return 1e10 * static_cast<double>(r) + 0.125 * static_cast<double>(j * r);
  }
}

template <typename T>
T reduce_expected(int n, size_t i) {
  // Summed in int64_t / double: exact for the values above.
  using Wide = std::conditional_t<std::is_integral_v<T>, int64_t, double>;
  Wide sum = 0;
  for (int r = 0; r < n; ++r) sum += static_cast<Wide>(reduce_value<T>(r, i));
  return static_cast<T>(sum);
}

template <typename T>
void check_all_reduce_sum_of(Communicator& comm, DType dtype) {
  for (size_t count : {size_t{0}, size_t{1}, size_t{17}, size_t{1000}}) {
    std::vector<T> data(count), want(count);
    for (size_t i = 0; i < count; ++i) {
      data[i] = reduce_value<T>(comm.rank(), i);
      want[i] = reduce_expected<T>(comm.size(), i);
    }
    comm.all_reduce_sum(data.data(), count, dtype);
    expect_elements(data, want, fmt::format("all_reduce_sum of {} {}", count, dtype_name(dtype)));
  }
}

inline void check_all_reduce_sum(Communicator& comm) {
  SCOPED_TRACE(where(comm));
  check_all_reduce_sum_of<float>(comm, DType::kF32);
  check_all_reduce_sum_of<double>(comm, DType::kF64);
  check_all_reduce_sum_of<int32_t>(comm, DType::kI32);
  check_all_reduce_sum_of<int64_t>(comm, DType::kI64);
}

template <typename T>
void check_reduce_scatter_sum_of(Communicator& comm, DType dtype) {
  const int n = comm.size(), me = comm.rank();
  for (size_t count : {size_t{0}, size_t{1}, size_t{13}, size_t{500}}) {
    std::vector<T> send(static_cast<size_t>(n) * count);
    for (size_t j = 0; j < send.size(); ++j) send[j] = reduce_value<T>(me, j);
    std::vector<T> recv(count, T{7}), want(count);
    for (size_t i = 0; i < count; ++i) {
      want[i] = reduce_expected<T>(n, static_cast<size_t>(me) * count + i);
    }
    comm.reduce_scatter_sum(send.data(), recv.data(), count, dtype);
    expect_elements(recv, want,
                    fmt::format("reduce_scatter_sum of {} {} per rank", count, dtype_name(dtype)));
  }
}

inline void check_reduce_scatter_sum(Communicator& comm) {
  SCOPED_TRACE(where(comm));
  check_reduce_scatter_sum_of<float>(comm, DType::kF32);
  check_reduce_scatter_sum_of<double>(comm, DType::kF64);
  check_reduce_scatter_sum_of<int32_t>(comm, DType::kI32);
  check_reduce_scatter_sum_of<int64_t>(comm, DType::kI64);
}

inline void check_broadcast(Communicator& comm) {
  SCOPED_TRACE(where(comm));
  for (int root = 0; root < comm.size(); ++root) {
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{1000}, size_t{65537}}) {
      std::vector<uint8_t> data(bytes + 8, 0x11), want(bytes + 8, 0x11);
      for (size_t i = 0; i < bytes; ++i) {
        want[i] = pattern(root, 2, i);
        if (comm.rank() == root) data[i] = want[i];
      }
      comm.broadcast(data.data(), bytes, root);
      expect_elements(data, want, fmt::format("broadcast of {} bytes from root {}", bytes, root));
    }
  }
}

/// 50 rounds cycling through every collective with round-dependent data: results of one round
/// never leak into another.
inline void check_sequence(Communicator& comm) {
  SCOPED_TRACE(where(comm));
  const int n = comm.size(), me = comm.rank();
  const auto un = static_cast<size_t>(n);
  for (int round = 0; round < 50; ++round) {
    SCOPED_TRACE(fmt::format("round {}", round));
    switch (round % 6) {
      case 0: {
        int64_t mine[2] = {me, round};
        std::vector<int64_t> all(2 * un);
        comm.all_gather(mine, sizeof mine, all.data());
        for (int k = 0; k < n; ++k) {
          EXPECT_EQ(all[2 * static_cast<size_t>(k)], k);
          EXPECT_EQ(all[2 * static_cast<size_t>(k) + 1], round);
        }
        break;
      }
      case 1: {
        int64_t v[2] = {round, me};
        comm.all_reduce_sum(v, 2, DType::kI64);
        EXPECT_EQ(v[0], int64_t{round} * n);
        EXPECT_EQ(v[1], int64_t{n} * (n - 1) / 2);
        break;
      }
      case 2: {
        const int root = round % n;
        int64_t v = me == root ? 1000 * round + root : -1;
        comm.broadcast(&v, sizeof v, root);
        EXPECT_EQ(v, 1000 * round + root);
        break;
      }
      case 3: {
        // Rank r sends round % 4 + (r + k) % 2 bytes to k, each byte (r, k, round)-specific.
        auto count = [&](int from, int to) {
          return static_cast<size_t>(round % 4 + (from + to) % 2);
        };
        std::vector<size_t> sc(un), so(un), rc(un), ro(un);
        size_t s = 0, r = 0;
        for (int k = 0; k < n; ++k) {
          const auto uk = static_cast<size_t>(k);
          sc[uk] = count(me, k), so[uk] = s, s += sc[uk];
          rc[uk] = count(k, me), ro[uk] = r, r += rc[uk];
        }
        std::vector<uint8_t> send(s), recv(r, 0), want(r);
        for (int k = 0; k < n; ++k) {
          const auto uk = static_cast<size_t>(k);
          for (size_t i = 0; i < sc[uk]; ++i) send[so[uk] + i] = pattern(me, k, i, round);
          for (size_t i = 0; i < rc[uk]; ++i) want[ro[uk] + i] = pattern(k, me, i, round);
        }
        comm.all_to_all_v(send.data(), sc, so, recv.data(), rc, ro);
        expect_elements(recv, want, "all_to_all_v");
        break;
      }
      case 4: {
        std::vector<double> send(2 * un);
        for (size_t j = 0; j < send.size(); ++j) send[j] = round + 0.5 * static_cast<double>(j);
        double recv[2] = {-1, -1};
        comm.reduce_scatter_sum(send.data(), recv, 2, DType::kF64);
        EXPECT_EQ(recv[0], n * (round + 0.5 * (2.0 * me)));
        EXPECT_EQ(recv[1], n * (round + 0.5 * (2.0 * me + 1)));
        break;
      }
      case 5:
        comm.barrier();
        break;
    }
  }
}

/// Runs `fn`, which must throw E on every rank; returns its message ("" and a failure if not).
template <typename E, typename Fn>
std::string expect_throws(Fn&& fn, const std::string& what) {
  try {
    fn();
  } catch (const E& e) {
    EXPECT_EQ(typeid(e), typeid(E)) << what << ": threw a subclass of the expected type";
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": threw the wrong type: " << e.what();
    return "";
  }
  ADD_FAILURE() << what << ": did not throw";
  return "";
}

inline void check_agree_on_failure(Communicator& comm) {
  SCOPED_TRACE(where(comm));
  const int n = comm.size(), me = comm.rank(), last = n - 1;

  // No failure anywhere: every rank returns.
  agree_on_failure(comm, std::string_view());
  agree_on_failure(comm, std::exception_ptr());

  // The last rank fails with a ValueError: every rank throws it, prefixed with the rank.
  std::exception_ptr err;
  if (me == last)
    err = std::make_exception_ptr(ValueError(fmt::format("disk full on rank {}", me)));
  EXPECT_EQ(expect_throws<ValueError>([&] { agree_on_failure(comm, err); }, "ValueError case"),
            fmt::format("rank {}: disk full on rank {}", last, last));

  // Several ranks fail: the lowest failing rank's error (and category) wins; others are listed.
  err = nullptr;
  if (me == last) err = std::make_exception_ptr(DataLossError("truncated shard"));
  if (n >= 3 && me == 1) err = std::make_exception_ptr(NotFoundError("no tensor 'w'"));
  if (n >= 3) {
    EXPECT_EQ(expect_throws<NotFoundError>([&] { agree_on_failure(comm, err); }, "two failures"),
              fmt::format("rank 1: no tensor 'w' (1 more rank failed: [{}])", last));
  } else {
    EXPECT_EQ(expect_throws<DataLossError>([&] { agree_on_failure(comm, err); }, "one failure"),
              fmt::format("rank {}: truncated shard", last));
  }

  // A std::exception that is not a meshlayout::Error becomes an InternalError.
  err = me == 0 ? std::make_exception_ptr(std::runtime_error("bad alloc-ish")) : nullptr;
  EXPECT_EQ(expect_throws<InternalError>([&] { agree_on_failure(comm, err); }, "std::exception"),
            "rank 0: bad alloc-ish");

  // The string overload throws meshlayout::Error itself; an empty message on every rank but one.
  std::string local = me == last ? "cannot open 'ckpt/shard-3'" : "";
  EXPECT_EQ(expect_throws<Error>([&] { agree_on_failure(comm, local); }, "string overload"),
            fmt::format("rank {}: cannot open 'ckpt/shard-3'", last));

  // Every rank failing: all messages differ, rank 0's wins.
  std::string everyone = fmt::format("error {}", me);
  std::string msg = expect_throws<Error>([&] { agree_on_failure(comm, everyone); }, "all fail");
  if (n == 1) {
    EXPECT_EQ(msg, "rank 0: error 0");
  } else {
    EXPECT_EQ(msg.rfind(fmt::format("rank 0: error 0 ({} more rank", n - 1), 0), 0u) << msg;
  }

  // The communicator is still in step on every rank.
  std::vector<int32_t> ranks(static_cast<size_t>(n));
  int32_t mine = me;
  comm.all_gather(&mine, sizeof mine, ranks.data());
  for (int k = 0; k < n; ++k) EXPECT_EQ(ranks[static_cast<size_t>(k)], k);
}

/// Errors every rank detects the same way, before any data moves.
inline void check_consistent_errors(Communicator& comm) {
  SCOPED_TRACE(where(comm));
  const int n = comm.size();
  uint16_t half[4] = {};
  std::string msg = expect_throws<ValueError>([&] { comm.all_reduce_sum(half, 4, DType::kBF16); },
                                              "all_reduce_sum of BF16");
  EXPECT_NE(msg.find("BF16"), std::string::npos) << msg;
  std::vector<uint8_t> flags(static_cast<size_t>(n) * 2);
  uint8_t out[2];
  msg = expect_throws<ValueError>(
      [&] { comm.reduce_scatter_sum(flags.data(), out, 2, DType::kBool); }, "reduce_scatter BOOL");
  EXPECT_NE(msg.find("BOOL"), std::string::npos) << msg;
  int64_t v = 1;
  msg = expect_throws<ValueError>([&] { comm.broadcast(&v, sizeof v, n); }, "broadcast root n");
  EXPECT_NE(msg.find(fmt::format("root {}", n)), std::string::npos) << msg;
  // Still usable.
  comm.all_reduce_sum(&v, 1, DType::kI64);
  EXPECT_EQ(v, n);
}

struct Check {
  const char* name;
  void (*run)(Communicator&);
};

/// Every conformance check, for parameterized tests.
inline constexpr Check kChecks[] = {
    {"Barrier", check_barrier},
    {"AllGather", check_all_gather},
    {"AllGatherInPlace", check_all_gather_in_place},
    {"AllToAllV", check_all_to_all_v},
    {"AllReduceSum", check_all_reduce_sum},
    {"ReduceScatterSum", check_reduce_scatter_sum},
    {"Broadcast", check_broadcast},
    {"Sequence", check_sequence},
    {"ExchangeBoxes", check_exchange_boxes},
    {"ExchangeBoxesIfAgreed", check_exchange_boxes_if_agreed},
    {"AgreeOnFailure", check_agree_on_failure},
    {"ConsistentErrors", check_consistent_errors},
};

/// Runs every check, in order.
inline void run_communicator_conformance(Communicator& comm) {
  for (const Check& check : kChecks) check.run(comm);
}

}  // namespace meshlayout::conformance
