// PLY reader: header, then each element in file order, ascii or binary. Every count in the file is checked against
// the bytes left before anything is reserved, so a hostile header cannot make the reader allocate more than a small
// multiple of the file's size.

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "flashot/io/errors.hpp"
#include "flashot/io/ply.hpp"
#include "ply_types.hpp"

namespace flashot::io {
namespace {

using detail::dispatch_type;
using detail::type_size;

// Rows converted per pass over a fixed-size element: small enough that the block stays in L2 while each property
// is copied out of it, large enough to amortise the per-block dispatch.
constexpr std::size_t kBlockRows = 8192;
// Fixed-size elements with at least this many values are converted one column per thread.
constexpr std::size_t kParallelValues = std::size_t{1} << 22;
// How much of an offending token or line an error message quotes.
constexpr std::size_t kShownChars = 40;

// Columns at least this big ask the kernel for transparent huge pages (see advise_huge_pages).
constexpr std::size_t kHugePageAdviceBytes = std::size_t{16} << 20;
constexpr std::uintptr_t kHugePage = std::uintptr_t{2} << 20;

/// Reading a large binary cloud is dominated by the kernel handing out fresh zeroed pages for the double columns
/// (docs/io-ply.md). Asking for 2 MiB pages on the still untouched reservation cuts the page faults 512-fold; the
/// zeroing itself remains. Advisory only; where THP is off or unsupported nothing changes.
void advise_huge_pages(const std::vector<double>& column) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const std::size_t bytes = column.capacity() * sizeof(double);
  if (bytes < kHugePageAdviceBytes) return;
  const auto first = reinterpret_cast<std::uintptr_t>(column.data());
  const std::uintptr_t begin = (first + kHugePage - 1) & ~(kHugePage - 1);
  const std::uintptr_t end = (first + bytes) & ~(kHugePage - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)column;
#endif
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  return s;
}

/// Quotes a piece of the input for an error message: truncated, non-printable bytes escaped.
std::string shown(std::string_view s) {
  std::string out = "'";
  for (std::size_t i = 0; i < s.size() && i < kShownChars; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  out += s.size() > kShownChars ? "'…" : "'";
  return out;
}

/// Splits a line into whitespace-separated tokens, one at a time.
class Tokenizer {
 public:
  explicit Tokenizer(std::string_view line) : rest_(line) {}
  /// The next token, or an empty view at the end of the line.
  std::string_view next() {
    std::size_t i = 0;
    while (i < rest_.size() && is_space(rest_[i])) ++i;
    std::size_t j = i;
    while (j < rest_.size() && !is_space(rest_[j])) ++j;
    std::string_view token = rest_.substr(i, j - i);
    rest_.remove_prefix(j);
    return token;
  }
  std::size_t chars_left() const { return rest_.size(); }

 private:
  std::string_view rest_;
};

std::vector<std::string_view> split(std::string_view line) {
  std::vector<std::string_view> tokens;
  Tokenizer tokenizer(line);
  for (std::string_view t = tokenizer.next(); !t.empty(); t = tokenizer.next()) tokens.push_back(t);
  return tokens;
}

template <class T>
bool parse_integer(std::string_view token, T& value) {
  // from_chars rejects a leading '+', which some writers emit.
  if (token.size() > 1 && token[0] == '+' && token[1] != '-') token.remove_prefix(1);
  const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
  return ec == std::errc() && end == token.data() + token.size();
}

/// Parses one ascii value of `type`; false if the token is not a number of that type or out of its range.
bool parse_ascii_value(std::string_view token, PlyType type, double& value) {
  if (token.size() > 1 && token[0] == '+' && token[1] != '-') token.remove_prefix(1);
  const char* first = token.data();
  const char* last = first + token.size();
  if (type == PlyType::kFloat32 || type == PlyType::kFloat64) {
    // Float properties are parsed at their own precision: decimal → float directly, never through double, so the
    // shortest representation of every float reads back to that float.
    std::errc ec;
    const char* end;
    if (type == PlyType::kFloat32) {
      float f = 0;
      const auto result = std::from_chars(first, last, f);
      ec = result.ec;
      end = result.ptr;
      value = f;
    } else {
      const auto result = std::from_chars(first, last, value);
      ec = result.ec;
      end = result.ptr;
    }
    if (end != last) return false;
    if (ec == std::errc::result_out_of_range) {
      // Underflow rounds to zero or a subnormal as strtod does; overflow is an error.
      const std::string copy(token);
      value = type == PlyType::kFloat32 ? static_cast<double>(std::strtof(copy.c_str(), nullptr))
                                        : std::strtod(copy.c_str(), nullptr);
      return std::isfinite(value);
    }
    return ec == std::errc();
  }
  std::int64_t n = 0;
  const auto [end, ec] = std::from_chars(first, last, n);
  if (ec != std::errc() || end != last) return false;
  const bool in_range = dispatch_type(type, [n]<class T>(std::type_identity<T>) {
    return n >= static_cast<std::int64_t>(std::numeric_limits<T>::min()) &&
           n <= static_cast<std::int64_t>(std::numeric_limits<T>::max());
  });
  value = static_cast<double>(n);
  return in_range;
}

std::string big_number(unsigned __int128 n) {
  return n > std::numeric_limits<std::uint64_t>::max() ? "more than 2^64" : std::to_string(static_cast<std::uint64_t>(n));
}

std::string describe_type(const PlyProperty& property) {
  return property.is_list ? "list " + to_string(property.count_type) + " " + to_string(property.type)
                          : to_string(property.type);
}

/// Appends n scalars of `type` stored `stride` bytes apart at p to `out`, converted to double.
void append_strided(std::vector<double>& out, const std::byte* p, std::size_t n, std::ptrdiff_t stride,
                    PlyType type, bool swap) {
  dispatch_type(type, [&]<class T>(std::type_identity<T>) {
    if (swap) {
      const detail::StridedReader<T, true> first(p, stride);
      out.insert(out.end(), first, first + static_cast<std::ptrdiff_t>(n));
    } else {
      const detail::StridedReader<T, false> first(p, stride);
      out.insert(out.end(), first, first + static_cast<std::ptrdiff_t>(n));
    }
  });
}

double load_scalar(const std::byte* p, PlyType type, bool swap) {
  return dispatch_type(type, [&]<class T>(std::type_identity<T>) {
    return swap ? static_cast<double>(detail::load<T, true>(p)) : static_cast<double>(detail::load<T, false>(p));
  });
}

class Parser {
 public:
  Parser(std::span<const std::byte> bytes, std::string_view name)
      : bytes_(bytes), text_(reinterpret_cast<const char*>(bytes.data()), bytes.size()), name_(name) {}

  PlyFile parse() {
    parse_header();
    for (PlyElement& element : ply_.elements) {
      if (ply_.format == PlyFormat::kAscii) {
        read_ascii(element);
      } else {
        read_binary(element);
      }
    }
    check_trailing();
    return std::move(ply_);
  }

  /// The header alone: elements with their counts and properties, no values.
  PlyFile parse_header_only() {
    parse_header();
    return std::move(ply_);
  }

 private:
  [[noreturn]] void fail(const std::string& where, const std::string& problem) const {
    throw FormatError(std::string(name_), where, problem);
  }
  [[noreturn]] void fail_header(const std::string& problem) const {
    fail("header line " + std::to_string(line_number_), problem);
  }

  /// The next line (without its '\n'), or false at the end of the input.
  bool next_line(std::string_view& line) {
    if (pos_ >= text_.size()) return false;
    const std::size_t newline = text_.find('\n', pos_);
    const std::size_t end = newline == std::string_view::npos ? text_.size() : newline;
    line = text_.substr(pos_, end - pos_);
    pos_ = newline == std::string_view::npos ? text_.size() : newline + 1;
    ++line_number_;
    return true;
  }

  /// The text after a keyword: one separator dropped, the rest kept as written (trailing whitespace excepted).
  static std::string text_after(std::string_view line, std::string_view keyword) {
    std::string_view rest = line.substr(static_cast<std::size_t>(keyword.data() - line.data()) + keyword.size());
    if (!rest.empty()) rest.remove_prefix(1);
    return std::string(rest);
  }

  void parse_header() {
    std::string_view line;
    if (text_.empty()) fail("", "empty, 0 bytes");
    if (!next_line(line)) fail("header line 1", "file is empty (expected 'ply')");
    if (trim(line) != "ply") {
      // Say what it is where that is cheap: the other format flashot reads, or a packed file.
      if (text_.starts_with("\x89HDF\r\n\x1a\n")) fail_header("not a PLY file: it is an HDF5 file (an .h5ad?)");
      if (text_.starts_with("PK\x03\x04")) fail_header("not a PLY file: it is a zip archive (unzip it first)");
      if (text_.starts_with("\x1f\x8b")) fail_header("not a PLY file: it is gzip-compressed (gunzip it first)");
      fail_header("expected 'ply', found " + shown(line));
    }
    bool have_format = false;
    while (true) {
      if (!next_line(line)) {
        fail("header line " + std::to_string(line_number_ + 1), "file ends before 'end_header'");
      }
      line = trim(line);
      const std::vector<std::string_view> tokens = split(line);
      if (tokens.empty()) continue;
      const std::string_view keyword = tokens[0];
      if (keyword == "end_header") {
        if (tokens.size() != 1) fail_header("unexpected text after 'end_header': " + shown(tokens[1]));
        break;
      } else if (keyword == "comment") {
        ply_.comments.push_back(text_after(line, keyword));
      } else if (keyword == "obj_info") {
        ply_.obj_info.push_back(text_after(line, keyword));
      } else if (keyword == "format") {
        if (have_format) fail_header("second 'format' line");
        if (tokens.size() != 3) fail_header("expected 'format <ascii|binary_little_endian|binary_big_endian> 1.0'");
        if (tokens[1] == "ascii") {
          ply_.format = PlyFormat::kAscii;
        } else if (tokens[1] == "binary_little_endian") {
          ply_.format = PlyFormat::kBinaryLittleEndian;
        } else if (tokens[1] == "binary_big_endian") {
          ply_.format = PlyFormat::kBinaryBigEndian;
        } else {
          fail_header("unknown format " + shown(tokens[1]) +
                      " (expected ascii, binary_little_endian or binary_big_endian)");
        }
        if (tokens[2] != "1.0" && tokens[2] != "1") fail_header("unsupported version " + shown(tokens[2]) + " (expected 1.0)");
        have_format = true;
      } else if (keyword == "element") {
        parse_element(tokens, have_format);
      } else if (keyword == "property") {
        parse_property(tokens);
      } else if (ply_.elements.empty()) {
        // Free text before the first element: Blender 2.47 wrote "Created by Blender3D …" there without a
        // 'comment' keyword. Kept as a comment; after an element it would change the layout, so it is an error.
        ply_.comments.emplace_back(line);
      } else {
        fail_header("unknown keyword " + shown(keyword) + " (expected element, property, comment, obj_info or end_header)");
      }
    }
    if (!have_format) fail_header("no 'format' line before 'end_header'");
    payload_start_ = pos_;
  }

  void parse_element(const std::vector<std::string_view>& tokens, bool have_format) {
    if (!have_format) fail_header("'element' before the 'format' line");
    if (tokens.size() != 3) fail_header("expected 'element <name> <count>'");
    std::uint64_t count = 0;
    if (!parse_integer(tokens[2], count)) {
      fail_header("element " + shown(tokens[1]) + ": count must be a non-negative integer (got " + shown(tokens[2]) + ")");
    }
    if (ply_.find(tokens[1]) != nullptr) fail_header("second element named " + shown(tokens[1]));
    PlyElement& element = ply_.elements.emplace_back();
    element.name = std::string(tokens[1]);
    element.count = static_cast<std::size_t>(count);
  }

  PlyType parse_type(std::string_view name) const {
    const std::optional<PlyType> type = detail::parse_type_name(name);
    if (!type) {
      fail_header("unknown property type " + shown(name) +
                  " (expected char, uchar, short, ushort, int, uint, float, double or int8 … float64)");
    }
    return *type;
  }

  void parse_property(const std::vector<std::string_view>& tokens) {
    if (ply_.elements.empty()) fail_header("'property' before any 'element'");
    PlyElement& element = ply_.elements.back();
    PlyProperty property;
    if (tokens.size() >= 2 && tokens[1] == "list") {
      if (tokens.size() != 5) fail_header("expected 'property list <count type> <item type> <name>'");
      property.is_list = true;
      property.count_type = parse_type(tokens[2]);
      if (!detail::is_integer(property.count_type)) {
        fail_header("list count type must be an integer type (got " + shown(tokens[2]) + ")");
      }
      property.type = parse_type(tokens[3]);
      property.name = std::string(tokens[4]);
    } else {
      if (tokens.size() != 3) fail_header("expected 'property <type> <name>'");
      property.type = parse_type(tokens[1]);
      property.name = std::string(tokens[2]);
    }
    if (element.find(property.name) != nullptr) {
      fail_header("element '" + element.name + "' has a second property named " + shown(property.name));
    }
    element.properties.push_back(std::move(property));
  }

  std::string row_where(const PlyElement& element, std::size_t row) const {
    return element.name + " row " + std::to_string(row) + " of " + std::to_string(element.count);
  }
  std::string ascii_row_where(const PlyElement& element, std::size_t row) const {
    return row_where(element, row) + " (line " + std::to_string(line_number_) + ")";
  }

  void read_binary(PlyElement& element) {
    const bool swap = (ply_.format == PlyFormat::kBinaryBigEndian) != (std::endian::native == std::endian::big);
    bool has_list = false;
    std::size_t row_bytes = 0;  // fixed rows: the row size; rows with lists: the least a row can take
    for (PlyProperty& property : element.properties) {
      has_list = has_list || property.is_list;
      row_bytes += type_size(property.is_list ? property.count_type : property.type);
      if (property.is_list) property.offsets.assign(1, 0);
    }
    if (element.properties.empty() || element.count == 0) return;
    const std::size_t left = bytes_.size() - pos_;
    if (!has_list) {
      read_binary_fixed(element, row_bytes, left, swap);
    } else {
      read_binary_rows(element, row_bytes, left, swap);
    }
  }

  void read_binary_fixed(PlyElement& element, std::size_t row_bytes, std::size_t left, bool swap) {
    const std::size_t count = element.count;
    if (count > left / row_bytes) {
      const auto need = static_cast<unsigned __int128>(count) * row_bytes;
      fail(row_where(element, left / row_bytes),
           "payload ends " + big_number(need - left) + " bytes early (" + std::to_string(count) + " rows of " +
               std::to_string(row_bytes) + " bytes need " + big_number(need) + ", " + std::to_string(left) +
               " remain)");
    }
    std::vector<std::size_t> offsets;
    std::size_t offset = 0;
    for (PlyProperty& property : element.properties) {
      offsets.push_back(offset);
      offset += type_size(property.type);
      property.values.reserve(count);
      advise_huge_pages(property.values);
    }
    const std::byte* base = bytes_.data() + pos_;
    const auto stride = static_cast<std::ptrdiff_t>(row_bytes);
    auto convert = [&](std::size_t k, std::size_t first, std::size_t rows) {
      PlyProperty& property = element.properties[k];
      append_strided(property.values, base + first * row_bytes + offsets[k], rows, stride, property.type, swap);
    };
    const std::size_t n_properties = element.properties.size();
    const std::size_t workers =
        count * n_properties < kParallelValues
            ? 1
            : std::min<std::size_t>(n_properties, std::max(1u, std::thread::hardware_concurrency()));
    if (workers == 1) {
      // Block by block, every property in turn, so each block is read from memory once.
      for (std::size_t first = 0; first < count; first += kBlockRows) {
        const std::size_t rows = std::min(kBlockRows, count - first);
        for (std::size_t k = 0; k < n_properties; ++k) convert(k, first, rows);
      }
    } else {
      // One column per thread: the time goes into the kernel zeroing the fresh pages of each column, which
      // parallelises across columns. Capacity is reserved above, so the appends cannot allocate or throw.
      std::atomic<std::size_t> next{0};
      auto work = [&] {
        for (std::size_t k = next++; k < n_properties; k = next++) {
          for (std::size_t first = 0; first < count; first += kBlockRows) {
            convert(k, first, std::min(kBlockRows, count - first));
          }
        }
      };
      std::vector<std::jthread> threads;
      for (std::size_t w = 1; w < workers; ++w) threads.emplace_back(work);
      work();
    }
    pos_ += count * row_bytes;
  }

  void read_binary_rows(PlyElement& element, std::size_t min_row_bytes, std::size_t left, bool swap) {
    const std::size_t count = element.count;
    // Reserve only what the bytes left can hold; a count beyond that fails below at the row where data ends.
    const std::size_t reservable = std::min(count, left / min_row_bytes);
    for (PlyProperty& property : element.properties) {
      if (property.is_list) {
        property.offsets.reserve(reservable + 1);
      } else {
        property.values.reserve(reservable);
      }
    }
    const std::byte* data = bytes_.data();
    const std::size_t end = bytes_.size();
    for (std::size_t row = 0; row < count; ++row) {
      for (PlyProperty& property : element.properties) {
        const std::size_t head = type_size(property.is_list ? property.count_type : property.type);
        if (end - pos_ < head) {
          fail(row_where(element, row), "payload ends inside the row: property '" + property.name + "' needs " +
                                            std::to_string(head) + " bytes, " + std::to_string(end - pos_) +
                                            " remain");
        }
        const double scalar = load_scalar(data + pos_, property.is_list ? property.count_type : property.type, swap);
        pos_ += head;
        if (!property.is_list) {
          property.values.push_back(scalar);
          continue;
        }
        if (scalar < 0) {
          fail(row_where(element, row), "list '" + property.name + "' has a negative length (" +
                                            std::to_string(static_cast<std::int64_t>(scalar)) + ")");
        }
        const auto length = static_cast<std::size_t>(scalar);
        const std::size_t item = type_size(property.type);
        if (length > (end - pos_) / item) {
          fail(row_where(element, row), "list '" + property.name + "' has " + std::to_string(length) +
                                            " items of " + std::to_string(item) + " bytes but only " +
                                            std::to_string(end - pos_) + " bytes remain");
        }
        append_strided(property.values, data + pos_, length, static_cast<std::ptrdiff_t>(item), property.type, swap);
        property.offsets.push_back(property.values.size());
        pos_ += length * item;
      }
    }
  }

  static bool is_blank(std::string_view line) {
    return std::all_of(line.begin(), line.end(), [](char c) { return is_space(c); });
  }

  void read_ascii(PlyElement& element) {
    for (PlyProperty& property : element.properties) {
      if (property.is_list) property.offsets.assign(1, 0);
    }
    if (element.properties.empty()) return;
    const std::size_t count = element.count;
    // Every row takes at least two bytes ("0\n"), which bounds what a hostile count can make us reserve.
    const std::size_t reservable = std::min(count, (text_.size() - pos_) / 2 + 1);
    for (PlyProperty& property : element.properties) {
      if (property.is_list) {
        property.offsets.reserve(reservable + 1);
      } else {
        property.values.reserve(reservable);
      }
    }
    std::string_view line;
    for (std::size_t row = 0; row < count; ++row) {
      do {
        if (!next_line(line)) {
          fail(row_where(element, row), "file ends after line " + std::to_string(line_number_) + "; the header declares " +
                                            std::to_string(count) + " rows");
        }
      } while (is_blank(line));
      Tokenizer tokens(line);
      for (PlyProperty& property : element.properties) {
        std::string_view token = tokens.next();
        if (token.empty()) {
          fail(ascii_row_where(element, row), "line ends before property '" + property.name + "'");
        }
        if (!property.is_list) {
          property.values.push_back(parse_value(element, row, property, token, property.type));
          continue;
        }
        const double length_value = parse_value(element, row, property, token, property.count_type);
        if (length_value < 0) {
          fail(ascii_row_where(element, row), "list '" + property.name + "' has a negative length (" +
                                                  std::string(token) + ")");
        }
        const auto length = static_cast<std::size_t>(length_value);
        // Each item needs a separator and a character, so a length the line cannot hold is refused before reserving.
        if (length > tokens.chars_left() / 2) {
          fail(ascii_row_where(element, row), "list '" + property.name + "' declares " + std::to_string(length) +
                                                  " items but the line has only " +
                                                  std::to_string(tokens.chars_left()) + " characters left");
        }
        property.values.reserve(property.values.size() + length);
        for (std::size_t i = 0; i < length; ++i) {
          token = tokens.next();
          if (token.empty()) {
            fail(ascii_row_where(element, row), "line ends after " + std::to_string(i) + " of " +
                                                    std::to_string(length) + " items of list '" + property.name + "'");
          }
          property.values.push_back(parse_value(element, row, property, token, property.type));
        }
        property.offsets.push_back(property.values.size());
      }
      const std::string_view extra = tokens.next();
      if (!extra.empty()) {
        fail(ascii_row_where(element, row), "unexpected value " + shown(extra) + " after the last property '" +
                                                element.properties.back().name + "'");
      }
    }
  }

  double parse_value(const PlyElement& element, std::size_t row, const PlyProperty& property, std::string_view token,
                     PlyType type) const {
    double value = 0;
    if (!parse_ascii_value(token, type, value)) {
      fail(ascii_row_where(element, row), "property '" + property.name + "' (" + describe_type(property) +
                                              "): cannot read " + shown(token) + " as " + to_string(type));
    }
    return value;
  }

  void check_trailing() {
    if (ply_.format == PlyFormat::kAscii) {
      std::string_view line;
      while (next_line(line)) {
        if (!is_blank(line)) {
          fail("line " + std::to_string(line_number_),
               "data after the last element: " + shown(trim(line)) + " (the header's element counts are too small)");
        }
      }
      return;
    }
    const std::string_view rest = text_.substr(pos_);
    // Some writers end a binary file with a newline; anything else means the counts do not match the data.
    if (!is_blank(rest)) {
      fail("byte " + std::to_string(pos_), std::to_string(rest.size()) +
                                               " bytes after the last element (the header's element counts are too "
                                               "small for the payload of " +
                                               std::to_string(bytes_.size() - payload_start_) + " bytes)");
    }
  }

  std::span<const std::byte> bytes_;
  std::string_view text_;
  std::string_view name_;
  std::size_t pos_ = 0;
  std::size_t line_number_ = 0;
  std::size_t payload_start_ = 0;
  PlyFile ply_;
};

}  // namespace

PlyFile parse_ply(std::span<const std::byte> bytes, std::string_view name) { return Parser(bytes, name).parse(); }

PlyFile parse_ply_header(std::span<const std::byte> bytes, std::string_view name) {
  return Parser(bytes, name).parse_header_only();
}

}  // namespace flashot::io
