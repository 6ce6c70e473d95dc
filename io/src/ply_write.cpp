// PLY writer: validates the whole PlyFile first (so nothing is written for an inconsistent one), then writes the
// header and the payload in the file's format. Values are narrowed to each property's type only when exact (floats
// round to nearest), so a write never changes a value silently.

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "flashot/io/ply.hpp"
#include "ply_types.hpp"

namespace flashot::io {
namespace {

using detail::dispatch_type;
using detail::type_size;

// Rows written per pass over a fixed-size element (see kBlockRows in ply_read.cpp).
constexpr std::size_t kBlockRows = 8192;

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }

void check_name(const std::string& name, const std::string& what) {
  if (name.empty() || std::any_of(name.begin(), name.end(), is_space)) {
    throw std::invalid_argument(what + " name must be non-empty without whitespace (got '" + name + "')");
  }
}

/// True if `value` is exactly representable as T (floats: finite values must not overflow; NaN and ±inf pass).
template <class T>
bool fits(double value) {
  if constexpr (std::is_floating_point_v<T>) {
    return !std::isfinite(value) || std::isfinite(static_cast<T>(value));
  } else {
    return value >= static_cast<double>(std::numeric_limits<T>::min()) &&
           value <= static_cast<double>(std::numeric_limits<T>::max()) && value == std::trunc(value);
  }
}

bool fits(double value, PlyType type) {
  return dispatch_type(type, [value]<class T>(std::type_identity<T>) { return fits<T>(value); });
}

std::string value_string(double value) {
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

[[noreturn]] void throw_unrepresentable(const PlyElement& element, const PlyProperty& property, std::size_t index,
                                        double value, PlyType type) {
  throw std::invalid_argument(element.name + "." + property.name + " value " + std::to_string(index) + " (" +
                              value_string(value) + ") is not representable as " + to_string(type));
}

void validate(const PlyFile& ply) {
  if (ply.format != PlyFormat::kAscii && ply.format != PlyFormat::kBinaryLittleEndian &&
      ply.format != PlyFormat::kBinaryBigEndian) {
    throw std::invalid_argument("invalid PlyFormat value " + std::to_string(static_cast<int>(ply.format)));
  }
  for (const auto* lines : {&ply.comments, &ply.obj_info}) {
    for (const std::string& line : *lines) {
      if (line.find('\n') != std::string::npos) {
        throw std::invalid_argument("comment/obj_info lines must not contain a newline (got '" + line + "')");
      }
    }
  }
  for (std::size_t e = 0; e < ply.elements.size(); ++e) {
    const PlyElement& element = ply.elements[e];
    check_name(element.name, "element");
    for (std::size_t f = 0; f < e; ++f) {
      if (ply.elements[f].name == element.name) throw std::invalid_argument("two elements named '" + element.name + "'");
    }
    for (std::size_t p = 0; p < element.properties.size(); ++p) {
      const PlyProperty& property = element.properties[p];
      const std::string full = element.name + "." + property.name;
      check_name(property.name, "property");
      for (std::size_t q = 0; q < p; ++q) {
        if (element.properties[q].name == property.name) throw std::invalid_argument("two properties named '" + full + "'");
      }
      if (!detail::is_valid(property.type)) {
        throw std::invalid_argument(full + ": invalid PlyType value " + std::to_string(static_cast<int>(property.type)));
      }
      if (!property.is_list) {
        if (property.values.size() != element.count) {
          throw std::invalid_argument(full + " has " + std::to_string(property.values.size()) +
                                      " values but the element count is " + std::to_string(element.count));
        }
        continue;
      }
      if (!detail::is_valid(property.count_type) || !detail::is_integer(property.count_type)) {
        throw std::invalid_argument(full + ": list count type must be an integer type (got value " +
                                    std::to_string(static_cast<int>(property.count_type)) + ")");
      }
      const auto& offsets = property.offsets;
      if (offsets.size() != element.count + 1 || offsets.front() != 0 || offsets.back() != property.values.size()) {
        throw std::invalid_argument(full + ": offsets must hold count + 1 = " + std::to_string(element.count + 1) +
                                    " entries from 0 to values.size() = " + std::to_string(property.values.size()) +
                                    " (got " + std::to_string(offsets.size()) + " entries)");
      }
      for (std::size_t row = 0; row < element.count; ++row) {
        if (offsets[row + 1] < offsets[row]) {
          throw std::invalid_argument(full + ": offsets decrease at row " + std::to_string(row));
        }
        if (!fits(static_cast<double>(offsets[row + 1] - offsets[row]), property.count_type)) {
          throw std::invalid_argument(full + " row " + std::to_string(row) + ": list length " +
                                      std::to_string(offsets[row + 1] - offsets[row]) + " does not fit its count type " +
                                      to_string(property.count_type));
        }
      }
    }
  }
}

std::string header(const PlyFile& ply) {
  std::string text = "ply\nformat " + to_string(ply.format) + " 1.0\n";
  for (const std::string& line : ply.comments) text += "comment " + line + "\n";
  for (const std::string& line : ply.obj_info) text += "obj_info " + line + "\n";
  for (const PlyElement& element : ply.elements) {
    text += "element " + element.name + " " + std::to_string(element.count) + "\n";
    for (const PlyProperty& property : element.properties) {
      text += "property ";
      if (property.is_list) text += "list " + to_string(property.count_type) + " ";
      text += to_string(property.type) + " " + property.name + "\n";
    }
  }
  text += "end_header\n";
  return text;
}

/// Shortest text that reads back to the same value of `type` (from_chars/to_chars round trip).
void append_ascii(std::string& out, double value, PlyType type) {
  char buffer[32];
  std::to_chars_result result{};
  if (type == PlyType::kFloat32) {
    result = std::to_chars(buffer, buffer + sizeof buffer, static_cast<float>(value));
  } else if (type == PlyType::kFloat64) {
    result = std::to_chars(buffer, buffer + sizeof buffer, value);
  } else {
    result = std::to_chars(buffer, buffer + sizeof buffer, static_cast<std::int64_t>(value));
  }
  out.append(buffer, result.ptr);
}

void write_ascii(std::string& out, const PlyFile& ply) {
  for (const PlyElement& element : ply.elements) {
    if (element.properties.empty()) continue;
    for (std::size_t row = 0; row < element.count; ++row) {
      bool first = true;
      auto separate = [&] {
        if (!first) out += ' ';
        first = false;
      };
      for (const PlyProperty& property : element.properties) {
        if (!property.is_list) {
          const double value = property.values[row];
          if (!fits(value, property.type)) throw_unrepresentable(element, property, row, value, property.type);
          separate();
          append_ascii(out, value, property.type);
          continue;
        }
        const std::size_t begin = property.offsets[row];
        const std::size_t end = property.offsets[row + 1];
        separate();
        append_ascii(out, static_cast<double>(end - begin), property.count_type);
        for (std::size_t i = begin; i < end; ++i) {
          const double value = property.values[i];
          if (!fits(value, property.type)) throw_unrepresentable(element, property, i, value, property.type);
          out += ' ';
          append_ascii(out, value, property.type);
        }
      }
      out += '\n';
    }
  }
}

template <bool Swap>
void store_scalar(std::byte* p, double value, PlyType type) {
  dispatch_type(type, [&]<class T>(std::type_identity<T>) { detail::store<T, Swap>(p, static_cast<T>(value)); });
}

/// Writes n values (already checked to fit) of `type`, `stride` bytes apart from p.
template <bool Swap>
void store_strided(std::byte* p, const double* values, std::size_t n, std::size_t stride, PlyType type) {
  dispatch_type(type, [&]<class T>(std::type_identity<T>) {
    for (std::size_t i = 0; i < n; ++i) detail::store<T, Swap>(p + i * stride, static_cast<T>(values[i]));
  });
}

void check_range(const PlyElement& element, const PlyProperty& property, std::size_t first, std::size_t n) {
  const double* values = property.values.data() + first;
  const bool ok = dispatch_type(property.type, [&]<class T>(std::type_identity<T>) {
    bool all = true;
    for (std::size_t i = 0; i < n; ++i) all &= fits<T>(values[i]);
    return all;
  });
  if (ok) return;
  for (std::size_t i = 0; i < n; ++i) {
    if (!fits(values[i], property.type)) {
      throw_unrepresentable(element, property, first + i, values[i], property.type);
    }
  }
}

template <bool Swap>
void write_binary(std::byte* out, const PlyFile& ply) {
  for (const PlyElement& element : ply.elements) {
    if (element.properties.empty()) continue;
    const bool has_list = std::any_of(element.properties.begin(), element.properties.end(),
                                      [](const PlyProperty& property) { return property.is_list; });
    if (!has_list) {
      std::size_t row_bytes = 0;
      for (const PlyProperty& property : element.properties) row_bytes += type_size(property.type);
      for (std::size_t first = 0; first < element.count; first += kBlockRows) {
        const std::size_t rows = std::min(kBlockRows, element.count - first);
        std::size_t offset = 0;
        for (const PlyProperty& property : element.properties) {
          check_range(element, property, first, rows);
          store_strided<Swap>(out + first * row_bytes + offset, property.values.data() + first, rows, row_bytes,
                              property.type);
          offset += type_size(property.type);
        }
      }
      out += element.count * row_bytes;
      continue;
    }
    for (const PlyProperty& property : element.properties) {
      if (property.is_list) check_range(element, property, 0, property.values.size());
    }
    for (std::size_t row = 0; row < element.count; ++row) {
      for (const PlyProperty& property : element.properties) {
        if (!property.is_list) {
          const double value = property.values[row];
          if (!fits(value, property.type)) throw_unrepresentable(element, property, row, value, property.type);
          store_scalar<Swap>(out, value, property.type);
          out += type_size(property.type);
          continue;
        }
        const std::size_t begin = property.offsets[row];
        const std::size_t end = property.offsets[row + 1];
        store_scalar<Swap>(out, static_cast<double>(end - begin), property.count_type);
        out += type_size(property.count_type);
        const std::size_t item = type_size(property.type);
        store_strided<Swap>(out, property.values.data() + begin, end - begin, item, property.type);
        out += (end - begin) * item;
      }
    }
  }
}

std::size_t binary_payload_size(const PlyFile& ply) {
  std::size_t total = 0;
  for (const PlyElement& element : ply.elements) {
    for (const PlyProperty& property : element.properties) {
      if (property.is_list) {
        total += element.count * type_size(property.count_type) + property.values.size() * type_size(property.type);
      } else {
        total += element.count * type_size(property.type);
      }
    }
  }
  return total;
}

}  // namespace

std::vector<std::byte> serialize_ply(const PlyFile& ply) {
  validate(ply);
  const std::string head = header(ply);
  if (ply.format == PlyFormat::kAscii) {
    std::string text = head;
    write_ascii(text, ply);
    const auto* first = reinterpret_cast<const std::byte*>(text.data());
    return std::vector<std::byte>(first, first + text.size());
  }
  std::vector<std::byte> out(head.size() + binary_payload_size(ply));
  std::memcpy(out.data(), head.data(), head.size());
  const bool swap = (ply.format == PlyFormat::kBinaryBigEndian) != (std::endian::native == std::endian::big);
  if (swap) {
    write_binary<true>(out.data() + head.size(), ply);
  } else {
    write_binary<false>(out.data() + head.size(), ply);
  }
  return out;
}

}  // namespace flashot::io
