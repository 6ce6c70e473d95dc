#pragma once
// Private PLY helpers shared by the reader and the writer: scalar type table, byte-order aware loads and stores,
// and a compile-time dispatch from PlyType to the C++ type.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>

#include "flashot/io/ply.hpp"

namespace flashot::io::detail {

/// Bytes one scalar of `type` occupies in a binary payload.
constexpr std::size_t type_size(PlyType type) {
  switch (type) {
    case PlyType::kInt8:
    case PlyType::kUint8: return 1;
    case PlyType::kInt16:
    case PlyType::kUint16: return 2;
    case PlyType::kInt32:
    case PlyType::kUint32:
    case PlyType::kFloat32: return 4;
    case PlyType::kFloat64: return 8;
  }
  return 0;
}

constexpr bool is_valid(PlyType type) { return type_size(type) != 0; }

constexpr bool is_integer(PlyType type) { return type != PlyType::kFloat32 && type != PlyType::kFloat64; }

/// Both spellings the PLY world uses: the original (char, uchar, …) and the sized aliases (int8, uint8, …).
inline std::optional<PlyType> parse_type_name(std::string_view name) {
  struct Entry {
    std::string_view name;
    PlyType type;
  };
  static constexpr Entry kNames[] = {
      {"char", PlyType::kInt8},      {"int8", PlyType::kInt8},       {"uchar", PlyType::kUint8},
      {"uint8", PlyType::kUint8},    {"short", PlyType::kInt16},     {"int16", PlyType::kInt16},
      {"ushort", PlyType::kUint16},  {"uint16", PlyType::kUint16},   {"int", PlyType::kInt32},
      {"int32", PlyType::kInt32},    {"uint", PlyType::kUint32},     {"uint32", PlyType::kUint32},
      {"float", PlyType::kFloat32},  {"float32", PlyType::kFloat32}, {"double", PlyType::kFloat64},
      {"float64", PlyType::kFloat64}};
  for (const Entry& entry : kNames) {
    if (entry.name == name) return entry.type;
  }
  return std::nullopt;
}

/// Calls f(std::type_identity<T>{}) with the C++ type T of `type`. `type` must be valid.
template <class F>
decltype(auto) dispatch_type(PlyType type, F&& f) {
  switch (type) {
    case PlyType::kInt8: return f(std::type_identity<std::int8_t>{});
    case PlyType::kUint8: return f(std::type_identity<std::uint8_t>{});
    case PlyType::kInt16: return f(std::type_identity<std::int16_t>{});
    case PlyType::kUint16: return f(std::type_identity<std::uint16_t>{});
    case PlyType::kInt32: return f(std::type_identity<std::int32_t>{});
    case PlyType::kUint32: return f(std::type_identity<std::uint32_t>{});
    case PlyType::kFloat32: return f(std::type_identity<float>{});
    case PlyType::kFloat64: return f(std::type_identity<double>{});
  }
  throw std::invalid_argument("invalid PlyType value " + std::to_string(static_cast<int>(type)));
}

template <std::size_t N>
using UintOfSize = std::conditional_t<
    N == 1, std::uint8_t,
    std::conditional_t<N == 2, std::uint16_t, std::conditional_t<N == 4, std::uint32_t, std::uint64_t>>>;

template <class U>
constexpr U byteswap(U u) {
  if constexpr (sizeof(U) == 1) {
    return u;
  } else if constexpr (sizeof(U) == 2) {
    return __builtin_bswap16(u);
  } else if constexpr (sizeof(U) == 4) {
    return __builtin_bswap32(u);
  } else {
    return __builtin_bswap64(u);
  }
}

/// Reads one T at p (no alignment needed), swapping bytes when the file's byte order is not the host's.
template <class T, bool Swap>
inline T load(const std::byte* p) {
  using U = UintOfSize<sizeof(T)>;
  U u;
  std::memcpy(&u, p, sizeof(U));
  if constexpr (Swap) u = byteswap(u);
  return std::bit_cast<T>(u);
}

template <class T, bool Swap>
inline void store(std::byte* p, T value) {
  using U = UintOfSize<sizeof(T)>;
  U u = std::bit_cast<U>(value);
  if constexpr (Swap) u = byteswap(u);
  std::memcpy(p, &u, sizeof(U));
}

/// Random-access iterator over one scalar property of fixed-size rows (or over the items of a list, stride =
/// item size), converting to double on dereference. vector::insert with it converts a whole column in one pass
/// without first zero-filling the destination.
template <class T, bool Swap>
class StridedReader {
 public:
  using iterator_category = std::random_access_iterator_tag;
  using value_type = double;
  using difference_type = std::ptrdiff_t;
  using pointer = void;
  using reference = double;

  StridedReader(const std::byte* p, std::ptrdiff_t stride) : p_(p), stride_(stride) {}
  double operator*() const { return static_cast<double>(load<T, Swap>(p_)); }
  double operator[](difference_type n) const { return static_cast<double>(load<T, Swap>(p_ + n * stride_)); }
  StridedReader& operator++() {
    p_ += stride_;
    return *this;
  }
  StridedReader operator++(int) {
    StridedReader old = *this;
    p_ += stride_;
    return old;
  }
  StridedReader& operator--() {
    p_ -= stride_;
    return *this;
  }
  StridedReader operator--(int) {
    StridedReader old = *this;
    p_ -= stride_;
    return old;
  }
  StridedReader& operator+=(difference_type n) {
    p_ += n * stride_;
    return *this;
  }
  StridedReader& operator-=(difference_type n) {
    p_ -= n * stride_;
    return *this;
  }
  friend StridedReader operator+(StridedReader it, difference_type n) { return it += n; }
  friend StridedReader operator+(difference_type n, StridedReader it) { return it += n; }
  friend StridedReader operator-(StridedReader it, difference_type n) { return it -= n; }
  friend difference_type operator-(const StridedReader& a, const StridedReader& b) {
    return (a.p_ - b.p_) / a.stride_;
  }
  friend bool operator==(const StridedReader& a, const StridedReader& b) { return a.p_ == b.p_; }
  friend auto operator<=>(const StridedReader& a, const StridedReader& b) { return a.p_ <=> b.p_; }

 private:
  const std::byte* p_;
  std::ptrdiff_t stride_;
};

}  // namespace flashot::io::detail
