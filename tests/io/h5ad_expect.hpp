#pragma once
// The plain-text expect format shared with tests/io/python/h5ad_expect.py (documented there): Python anndata says
// what a file holds, flashot's reader must return the same; flashot says what it wrote, anndata must read it back.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <variant>
#include <vector>

#include "flashot/io/anndata.hpp"
#include "flashot/io/errors.hpp"

namespace flashot::io::test {

/// float32 matrices are compared with values Python computed in float64.
inline constexpr double kFloat32RelTolerance = 1e-6;
/// Columns are doubles on both sides; only formatting can differ.
inline constexpr double kFloat64RelTolerance = 1e-12;

inline std::string hex_encode(const std::string& s) {
  if (s.empty()) return "_";
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

inline std::string hex_decode(const std::string& token) {
  if (token == "_") return {};
  std::string out;
  for (std::size_t i = 0; i + 1 < token.size(); i += 2) {
    out += static_cast<char>(std::stoi(token.substr(i, 2), nullptr, 16));
  }
  return out;
}

inline std::string number_token(double v) {
  if (std::isnan(v)) return "nan";
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

inline double parse_number(const std::string& token) {
  if (token == "nan") return std::nan("");
  return std::strtod(token.c_str(), nullptr);
}

/// Records as token lists, one per line.
inline std::vector<std::vector<std::string>> read_expect(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<std::vector<std::string>> records;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream tokens(line);
    std::vector<std::string> record;
    std::string t;
    while (tokens >> t) record.push_back(t);
    if (!record.empty()) records.push_back(std::move(record));
  }
  return records;
}

/// Reads tokens of one record in order.
class Cursor {
 public:
  explicit Cursor(const std::vector<std::string>& r) : r_(r) {}
  const std::string& next() {
    if (i_ >= r_.size()) throw std::out_of_range("expect record too short");
    return r_[i_++];
  }
  std::size_t size() { return std::stoul(next()); }
  std::string text() { return hex_decode(next()); }
  double number() { return parse_number(next()); }
  std::vector<std::string> texts() {
    std::vector<std::string> out(size());
    for (auto& s : out) s = text();
    return out;
  }

 private:
  const std::vector<std::string>& r_;
  std::size_t i_ = 0;
};

inline void expect_near_rel(double actual, double expected, double rel, const std::string& where) {
  if (std::isnan(expected)) {
    EXPECT_TRUE(std::isnan(actual)) << where << ": expected missing (NaN), got " << actual;
    return;
  }
  EXPECT_NEAR(actual, expected, rel * std::max(1.0, std::fabs(expected))) << where;
}

inline void expect_matrix(const DenseMatrix& m, Cursor& c, const std::string& where) {
  const std::size_t rows = c.size(), cols = c.size();
  ASSERT_EQ(m.rows, rows) << where;
  ASSERT_EQ(m.cols, cols) << where;
  ASSERT_EQ(m.values.size(), rows * cols) << where;
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < rows * cols; ++i) {
    const double expected = c.number();
    const double tolerance = kFloat32RelTolerance * std::max(1.0, std::fabs(expected));
    const bool same = std::isnan(expected) ? std::isnan(m.values[i]) : std::fabs(m.values[i] - expected) <= tolerance;
    if (!same && mismatches++ < 5) {
      ADD_FAILURE() << where << " element " << i << " (row " << i / cols << ", col " << i % cols << "): got "
                    << m.values[i] << ", expected " << expected;
    }
  }
  EXPECT_EQ(mismatches, 0u) << where;
}

inline void expect_column(const Column& col, const std::string& kind, Cursor& c, const std::string& where) {
  if (kind == "categorical") {
    ASSERT_EQ(col.kind, Column::Kind::kCategorical) << where;
    EXPECT_EQ(col.ordered, c.next() == "1") << where;
    EXPECT_EQ(col.categories, c.texts()) << where;
    const std::size_t n = c.size();
    ASSERT_EQ(col.codes.size(), n) << where;
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(col.codes[i], std::stoi(c.next())) << where << " row " << i;
  } else if (kind == "numeric") {
    ASSERT_EQ(col.kind, Column::Kind::kNumeric) << where;
    const std::size_t n = c.size();
    ASSERT_EQ(col.numbers.size(), n) << where;
    for (std::size_t i = 0; i < n; ++i) {
      expect_near_rel(col.numbers[i], c.number(), kFloat64RelTolerance, where + " row " + std::to_string(i));
    }
  } else if (kind == "string" || kind == "boolean") {
    ASSERT_EQ(col.kind, kind == "string" ? Column::Kind::kString : Column::Kind::kBoolean) << where;
    const std::size_t n = c.size();
    ASSERT_EQ(col.size(), n) << where;
    for (std::size_t i = 0; i < n; ++i) {
      if (kind == "string") {
        EXPECT_EQ(col.strings[i], c.text()) << where << " row " << i;
      } else {
        EXPECT_EQ(col.flags[i] != 0, c.next() == "1") << where << " row " << i;
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      const bool missing = c.next() == "1";
      const bool got = !col.missing.empty() && col.missing[i] != 0;
      EXPECT_EQ(got, missing) << where << " missing flag, row " << i;
    }
  } else {
    FAIL() << where << ": unknown column kind " << kind;
  }
}

inline std::set<std::string> as_set(const std::vector<std::string>& v) { return {v.begin(), v.end()}; }

/// Runs `action`, which must throw FormatError or IoError whose message contains both needles.
inline void expect_failure(const std::function<void()>& action, const std::string& a, const std::string& b,
                           const std::string& where) {
  try {
    action();
    ADD_FAILURE() << where << ": no error thrown (expected one mentioning '" << a << "' and '" << b << "')";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(a), std::string::npos) << where << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(b), std::string::npos) << where << ": " << e.what();
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(a), std::string::npos) << where << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(b), std::string::npos) << where << ": " << e.what();
  }
}

/// Checks every record of `expect` against what flashot reads from `path`.
inline void check_file(const std::filesystem::path& path, const std::filesystem::path& expect) {
  const auto records = read_expect(expect);
  ASSERT_FALSE(records.empty()) << "no expectations in " << expect;
  std::optional<H5adReader> reader;
  auto open = [&] {
    if (!reader) reader.emplace(path);
    return &*reader;
  };
  for (const auto& record : records) {
    Cursor c(record);
    const std::string tag = c.next();
    const std::string where = path.filename().string() + ": " + tag;
    if (tag == "fail") {
      const std::string what = c.next();
      const std::string a = c.text(), b = c.text();
      expect_failure(
          [&] {
            if (what == "open") {
              H5adReader fresh(path);
              return;
            }
            const H5adReader fresh(path);
            if (what == "x_dense") fresh.read_x_dense();
            else if (what == "x_sparse") fresh.read_x_sparse();
            else if (what == "obs_names") fresh.obs_names();
            else if (what.rfind("obsm:", 0) == 0) fresh.read_obsm(hex_decode(what.substr(5)));
            else if (what.rfind("obs:", 0) == 0) fresh.read_obs(hex_decode(what.substr(4)));
            else throw std::logic_error("unknown fail action " + what);
          },
          a, b, where + " " + what);
      continue;
    }
    const H5adReader& r = *open();
    if (tag == "n_obs") {
      EXPECT_EQ(r.n_obs(), c.size()) << where;
    } else if (tag == "n_vars") {
      EXPECT_EQ(r.n_vars(), c.size()) << where;
    } else if (tag == "names") {
      const std::string which = c.next();
      const auto names = which == "obs" ? r.obs_names() : which == "var" ? r.var_names() : r.raw_var_names();
      EXPECT_EQ(names, c.texts()) << where << " " << which;
    } else if (tag == "x") {
      const std::string encoding = c.next();
      const auto info = r.x_info();
      if (encoding == "none") {
        EXPECT_FALSE(info.has_value()) << where;
        continue;
      }
      ASSERT_TRUE(info.has_value()) << where;
      EXPECT_EQ(info->encoding, encoding == "_" ? "" : encoding) << where;
      EXPECT_EQ(info->dtype, c.next()) << where;
      EXPECT_EQ(info->rows, c.size()) << where;
      EXPECT_EQ(info->cols, c.size()) << where;
    } else if (tag == "dense") {
      const std::string kind = c.next();
      const std::string key = c.text();
      const std::string at = where + " " + kind + " " + key;
      if (kind == "X") expect_matrix(r.read_x_dense(), c, at);
      else if (kind == "raw_x") expect_matrix(r.read_raw_x_dense(), c, at);
      else if (kind == "obsm") expect_matrix(r.read_obsm(key), c, at);
      else if (kind == "varm") expect_matrix(r.read_varm(key), c, at);
      else if (kind == "layers") expect_matrix(r.read_layer(key), c, at);
      else ADD_FAILURE() << at << ": unknown matrix kind";
    } else if (tag == "columns") {
      const std::string which = c.next();
      EXPECT_EQ(which == "obs" ? r.obs_columns() : r.var_columns(), c.texts()) << where << " " << which;
    } else if (tag == "column") {
      const std::string which = c.next();
      const std::string name = c.text();
      const std::string kind = c.next();
      expect_column(which == "obs" ? r.read_obs(name) : r.read_var(name), kind, c, where + " " + which + "/" + name);
    } else if (tag == "keys") {
      const std::string which = c.next();
      const auto keys = which == "obsm"     ? r.obsm_keys()
                        : which == "varm"   ? r.varm_keys()
                        : which == "layers" ? r.layer_keys()
                                            : r.uns_keys();
      EXPECT_EQ(as_set(keys), as_set(c.texts())) << where << " " << which;
    } else if (tag == "uns") {
      const std::string key = c.text();
      const std::string kind = c.next();
      const UnsValue value = r.read_uns(key);
      const std::string at = where + " " + key;
      if (kind == "f") {
        ASSERT_TRUE(std::holds_alternative<double>(value)) << at;
        expect_near_rel(std::get<double>(value), c.number(), kFloat64RelTolerance, at);
      } else if (kind == "i") {
        ASSERT_TRUE(std::holds_alternative<std::int64_t>(value)) << at;
        EXPECT_EQ(std::get<std::int64_t>(value), std::stoll(c.next())) << at;
      } else if (kind == "s") {
        ASSERT_TRUE(std::holds_alternative<std::string>(value)) << at;
        EXPECT_EQ(std::get<std::string>(value), c.text()) << at;
      } else {
        ASSERT_TRUE(std::holds_alternative<std::vector<double>>(value)) << at;
        const auto& v = std::get<std::vector<double>>(value);
        ASSERT_EQ(v.size(), c.size()) << at;
        for (double x : v) expect_near_rel(x, c.number(), kFloat32RelTolerance, at);
      }
    } else if (tag == "generation") {
      EXPECT_EQ(r.writer_generation(), c.text()) << where;
    } else {
      ADD_FAILURE() << where << ": unknown record";
    }
  }
}

}  // namespace flashot::io::test
