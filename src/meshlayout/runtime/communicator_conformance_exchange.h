// communicator_conformance_exchange.h — TESTONLY: the exchange_boxes checks of the
// conformance suite (communicator_conformance.h lists them in kChecks; same rules: EXPECT_*
// only, every rank makes the same calls).
//
// Example: conformance::check_exchange_boxes_if_agreed(comm);   // on every rank at once
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "meshlayout/runtime/communicator.h"

namespace meshlayout::conformance {

// exchange_boxes: rank r holds a 6x5 int32 buffer at global box [r*10 : r*10+6, 0:5] whose
// element (i, j) is r*1000 + i*10 + j. It sends to every k (itself included) the piece
// rows [k%3, k%3+2) x cols [r%2, r%2+3) — plus, to k = r+1, an empty piece and a contiguous
// full-row piece — and k receives each into its own 8x4 buffer at box [100:108, 50:54], at
// rows [2*(r%4), +2) x cols [1, 4) for the first piece. Receivers check every element.
// `exchange` moves the regions; `moves(p)` says whether the pieces between this rank and rank
// p move (otherwise the receive buffers keep -1).
inline void exchange_boxes_case(
    Communicator& comm,
    const std::function<void(std::span<const BoxRegion>, std::span<const BoxRegion>)>& exchange,
    const std::function<bool(int)>& moves) {
  const int n = comm.size(), r = comm.rank();
  const Box src_box{{r * 10, 0}, {6, 5}};
  std::vector<int32_t> src(30);
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 5; ++j) src[static_cast<size_t>(i * 5 + j)] = r * 1000 + i * 10 + j;
  }
  // One receive buffer per sender, so pieces from different senders never overlap.
  std::vector<std::vector<int32_t>> dst(static_cast<size_t>(n), std::vector<int32_t>(32, -1));
  std::vector<std::vector<int32_t>> full_row(static_cast<size_t>(n), std::vector<int32_t>(5, -1));
  const Box dst_box{{100, 50}, {8, 4}};
  const Box row_box{{0, 0}, {1, 5}};
  std::vector<BoxRegion> sends, recvs;
  auto* src_bytes = reinterpret_cast<std::byte*>(src.data());
  for (int k = 0; k < n; ++k) {
    sends.push_back({k, src_bytes, src_box, Box{{r * 10 + k % 3, r % 2}, {2, 3}}});
    if (k == (r + 1) % n) {
      sends.push_back({k, src_bytes, src_box, Box{{r * 10, 0}, {0, 3}}});      // empty
      sends.push_back({k, src_bytes, src_box, Box{{r * 10 + 5, 0}, {1, 5}}});  // contiguous
    }
  }
  for (int p = 0; p < n; ++p) {
    auto* d = reinterpret_cast<std::byte*>(dst[static_cast<size_t>(p)].data());
    recvs.push_back({p, d, dst_box, Box{{100 + 2 * (p % 4), 51}, {2, 3}}});
    if (r == (p + 1) % n) {
      recvs.push_back({p, d, dst_box, Box{{100, 50}, {0, 3}}});
      recvs.push_back({p, reinterpret_cast<std::byte*>(full_row[static_cast<size_t>(p)].data()),
                       row_box, row_box});
    }
  }
  exchange(sends, recvs);
  for (int p = 0; p < n; ++p) {
    const auto& d = dst[static_cast<size_t>(p)];
    for (int i = 0; i < 8; ++i) {
      for (int j = 0; j < 4; ++j) {
        const bool in_piece = i >= 2 * (p % 4) && i < 2 * (p % 4) + 2 && j >= 1;
        const int32_t want =
            in_piece && moves(p) ? p * 1000 + (r % 3 + i - 2 * (p % 4)) * 10 + (p % 2 + j - 1) : -1;
        EXPECT_EQ(d[static_cast<size_t>(i * 4 + j)], want)
            << "rank " << r << " from rank " << p << " at (" << i << ", " << j << ")";
      }
    }
    if (r == (p + 1) % n) {
      for (int j = 0; j < 5; ++j) {
        EXPECT_EQ(full_row[static_cast<size_t>(p)][static_cast<size_t>(j)],
                  moves(p) ? p * 1000 + 50 + j : -1)
            << "rank " << r << " contiguous row from rank " << p;
      }
    }
  }
}

inline void check_exchange_boxes(Communicator& comm) {
  exchange_boxes_case(
      comm, [&](auto sends, auto recvs) { comm.exchange_boxes(sends, recvs, sizeof(int32_t)); },
      [](int) { return true; });
}

// exchange_boxes_if_agreed: with equal headers everything moves and every header comes back;
// then the last rank brings another header, and only pairs of agreeing ranks move.
inline void check_exchange_boxes_if_agreed(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  for (int round = 0; round < 2; ++round) {
    auto header_of = [&](int rank) {
      return std::string(round == 1 && rank == n - 1 && n > 1 ? "other!" : "agreed");
    };
    const std::string mine = header_of(r);
    std::vector<std::byte> all;
    exchange_boxes_case(
        comm,
        [&](auto sends, auto recvs) {
          int ran = 0;
          all = comm.exchange_boxes_if_agreed(std::as_bytes(std::span(mine)), sends, recvs,
                                              sizeof(int32_t), [&] { ++ran; });
          EXPECT_EQ(ran, 1) << "meanwhile runs once, rank " << r;
        },
        [&](int p) { return header_of(p) == mine; });
    std::string got(reinterpret_cast<const char*>(all.data()), all.size()), want;
    for (int k = 0; k < n; ++k) want += header_of(k);
    EXPECT_EQ(got, want) << "rank " << r << " round " << round;
  }
}

}  // namespace meshlayout::conformance
