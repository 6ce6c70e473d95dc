#pragma once
// The point order of a Problem's backend (BackendOptions::point_order, docs/engine.md "Point order"). Private to the
// engine.
//
// The one boundary between the caller's order of the points and the order the backend holds them in: a Problem (and
// TransportDerivatives) builds its backend through make_problem_backend, which either hands the caller's points to
// make_backend as they are, or sorts each side into a locality order, builds the backend on the sorted points and
// weights, and wraps it in a Backend that translates every per-point input (potentials, value matrices, c-transform
// potentials) into the backend's order and every per-point output (potentials, soft c-transforms, plan
// applications, top-k rows and columns, c-transform values and argmins) back into the caller's. Everything above the
// Backend interface (the Sinkhorn loop, every Problem operation, the derivatives) sees the caller's order only.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend.hpp"
#include "flashot/flashot.hpp"

namespace flashot::detail {

/// PointOrder::kAuto sorts host inputs on the CUDA backend from this many pairs n·m up (docs/engine.md, "Point
/// order": the screen a sorted order enables pays on large problems; the sort is O((n + m)·d·log) host work once per
/// Problem).
inline constexpr double kPointOrderAutoPairs = 1.0e9;
/// Points per leaf of the locality order: a leaf is a run of this many consecutive points (from position 0), so one
/// 64-column tile of the CUDA kernels holds one leaf and a 16–32-row warp tile lies inside one.
inline constexpr std::size_t kPointOrderLeaf = 64;
/// Seed of the locality order's PCA tree (its power iterations' starting vectors); the order is deterministic.
inline constexpr std::uint64_t kPointOrderSeed = 0x6f72646572;  // "order"

/// PointOrder::kAuto sorts only clustered data: both sides' leaf_spread at most this (docs/engine.md, "Point order":
/// the benchmark's 8 Gaussians measure 0.014–0.033 at d = 3–64, N(0, I) 0.125 / 0.30 / 0.50 / 0.72 / 0.90 at d = 3 /
/// 5 / 8 / 16 / 64; sorted, the H200 ran the first 22–43 % faster and the second 1.5–3.6 % slower at d = 8–64).
inline constexpr double kPointOrderAutoSpread = 0.1;
/// PointOrder::kAuto sorts only above this d: up to it the CUDA backend's register kernels serve (docs/engine.md,
/// "Choosing the kernel"), which have no tile screen for an order to help.
inline constexpr std::size_t kPointOrderAutoMinD = 5;
/// Points of each side that leaf_spread looks at (a deterministic stride sample), and its leaves' size there.
inline constexpr std::size_t kSpreadSample = 4096, kSpreadLeaf = 64;

/// Whether a Problem of n × m points in d dimensions built with `options` (host inputs: device_input false) may be
/// sorted: kLocality always, kInput never, kAuto on the CUDA backend (asked for, or kAuto with a device present) from
/// kPointOrderAutoPairs pairs and d ≥ kPointOrderAutoMinD up (kAuto then also asks leaf_spread of both sides:
/// make_problem_backend). Device inputs are never sorted.
bool uses_locality_order(const BackendOptions& options, std::size_t n, std::size_t m, std::size_t d,
                         bool device_input);

/// How much of a cloud's spread its locality order's leaves keep: on a stride sample of at most kSpreadSample points,
/// sorted into leaves of kSpreadLeaf, the mean squared distance of a point to its leaf's mean over the mean squared
/// distance to the sample's mean (0: every leaf one point; ≈ 1: leaves as wide as the cloud; 0 for a cloud of
/// coincident points). Small for clustered data, whose leaves lie inside one cluster. O(s·d·log s) work.
double leaf_spread(PointsView points);

/// The locality order of one cloud: order[p] = the caller's index of the point held at position p (the leaf order of
/// a PCA tree with leaves of kPointOrderLeaf points, multiscale_tree.hpp's cluster_order).
std::vector<std::uint32_t> locality_order(PointsView points);

/// The backend of a Problem for `data` (host or device inputs, in the caller's order), in the order
/// uses_locality_order picks. Throws as make_backend, and std::invalid_argument for PointOrder::kLocality with
/// device inputs or a PointOrder value that is not one of the three.
std::unique_ptr<Backend> make_problem_backend(const BackendOptions& options, const ProblemData& data);

}  // namespace flashot::detail
