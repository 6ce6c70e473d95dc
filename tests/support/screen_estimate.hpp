#pragma once
// What the CUDA backend's rows' LSE tile screen would keep, estimated in fp64 on the host (docs/engine.md, "Point
// order"; the screen itself: "Tile screening"). The CPU backend has no screen; this counts, for potentials from any
// solve, the warp tiles of `tile_rows` consecutive rows × `tile_cols` consecutive columns (in a given order of each
// side) that hold an entry within 2^-(26 + log2 m) of its row's sum — the tiles a screen that knew the row sums
// exactly would have to keep. O(n·m·d) work.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "flashot/flashot.hpp"

namespace flashot::test {

struct ScreenEstimate {
  std::size_t kept = 0, tiles = 0;
  double fraction() const { return tiles == 0 ? 0 : double(kept) / double(tiles); }
};

/// x (n×d), y (m×d), weights b (m), potentials g (m) of cost s·‖x − y‖² at ε; order_x[p] (order_y[p]) = the index of
/// the point at position p of that side's order (empty: the given order).
ScreenEstimate rows_screen_estimate(PointsView x, PointsView y, std::span<const float> b, std::span<const float> g,
                                    double epsilon, double cost_scale, std::span<const std::uint32_t> order_x,
                                    std::span<const std::uint32_t> order_y, std::size_t tile_rows = 16,
                                    std::size_t tile_cols = 64);

}  // namespace flashot::test
