// libFuzzer target for the PLY parser. Any input must either parse or throw FormatError (anything else — a crash,
// an ASan report, another exception — is a finding), and whatever parses must serialize and parse back to the
// same file: the writer accepts everything the reader produces, and nothing is lost on the way.

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "flashot/io/errors.hpp"
#include "flashot/io/ply.hpp"

namespace {

using flashot::io::PlyFile;

// ascii cannot carry a NaN's payload, so NaNs compare equal to each other; everything else bit for bit.
bool same_value(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
}

bool same_file(const PlyFile& a, const PlyFile& b) {
  if (a.format != b.format || a.comments != b.comments || a.obj_info != b.obj_info ||
      a.elements.size() != b.elements.size()) {
    return false;
  }
  for (std::size_t e = 0; e < a.elements.size(); ++e) {
    const auto& x = a.elements[e];
    const auto& y = b.elements[e];
    if (x.name != y.name || x.count != y.count || x.properties.size() != y.properties.size()) return false;
    for (std::size_t p = 0; p < x.properties.size(); ++p) {
      const auto& u = x.properties[p];
      const auto& v = y.properties[p];
      if (u.name != v.name || u.type != v.type || u.is_list != v.is_list || u.values.size() != v.values.size()) {
        return false;
      }
      if (u.is_list && (u.count_type != v.count_type || u.offsets != v.offsets)) return false;
      for (std::size_t i = 0; i < u.values.size(); ++i) {
        if (!same_value(u.values[i], v.values[i])) return false;
      }
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  PlyFile ply;
  try {
    ply = flashot::io::parse_ply(std::span(reinterpret_cast<const std::byte*>(data), size), "fuzz.ply");
  } catch (const flashot::io::FormatError&) {
    return 0;
  }
  const std::vector<std::byte> bytes = flashot::io::serialize_ply(ply);
  const PlyFile back = flashot::io::parse_ply(bytes, "reserialized.ply");
  if (!same_file(ply, back)) __builtin_trap();
  return 0;
}
