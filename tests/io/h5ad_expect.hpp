#pragma once
// The plain-text expect format shared with tests/io/python/h5ad_expect.py (documented there): Python anndata says
// what a file holds, flashot's reader must return the same; flashot says what it wrote, anndata must read it back.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <cstdlib>
#include <cstring>
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

/// obsm[key] read both ways: read_obsm, and read_obsm_into a buffer sized by obsm_info, which must hold the same
/// floats bit for bit. Returns the first.
inline DenseMatrix read_obsm_both_ways(const H5adReader& r, const std::string& key, const std::string& where) {
  DenseMatrix m = r.read_obsm(key);
  const auto info = r.obsm_info(key);
  EXPECT_TRUE(info.has_value()) << where;
  if (!info) return m;
  EXPECT_EQ(info->rows, m.rows) << where;
  EXPECT_EQ(info->cols, m.cols) << where;
  std::vector<float> into(m.values.size(), -1.0f);
  r.read_obsm_into(key, into);
  const bool same = std::equal(into.begin(), into.end(), m.values.begin(), m.values.end(),
                               [](float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; });
  EXPECT_TRUE(same) << where << ": read_obsm_into differs from read_obsm";
  return m;
}

/// read_obsm_into for a broken entry: the buffer sized by obsm_info where it answers, else empty.
inline void read_obsm_into_sized_by_info(const H5adReader& r, const std::string& key) {
  std::optional<ArrayInfo> info;
  try {
    info = r.obsm_info(key);
  } catch (const std::exception&) {
    // obsm_info itself may refuse the entry; read_obsm_into must then refuse it too, for the same reason
  }
  std::vector<float> out(info ? info->rows * info->cols : 0);
  r.read_obsm_into(key, out);
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
      if (what.rfind("obsm:", 0) == 0) {
        expect_failure([&] { read_obsm_into_sized_by_info(H5adReader(path), hex_decode(what.substr(5))); }, a, b,
                       where + " read_obsm_into " + what);
      }
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
    } else if (tag == "info") {
      c.next();  // obsm
      const std::string key = c.text();
      const std::string encoding = c.next();
      const auto info = r.obsm_info(key);
      ASSERT_TRUE(info.has_value()) << where << " " << key;
      EXPECT_EQ(info->encoding, encoding == "_" ? "" : encoding) << where << " " << key;
      EXPECT_EQ(info->dtype, c.next()) << where << " " << key;
      EXPECT_EQ(info->rows, c.size()) << where << " " << key;
      EXPECT_EQ(info->cols, c.size()) << where << " " << key;
    } else if (tag == "dense") {
      const std::string kind = c.next();
      const std::string key = c.text();
      const std::string at = where + " " + kind + " " + key;
      if (kind == "X") expect_matrix(r.read_x_dense(), c, at);
      else if (kind == "raw_x") expect_matrix(r.read_raw_x_dense(), c, at);
      else if (kind == "obsm") expect_matrix(read_obsm_both_ways(r, key, at), c, at);
      else if (kind == "varm") expect_matrix(r.read_varm(key), c, at);
      else if (kind == "layers") expect_matrix(r.read_layer(key), c, at);
      else ADD_FAILURE() << at << ": unknown matrix kind";
    } else if (tag == "pattern") {
      c.next();  // obsm
      const std::string key = c.text();
      const std::size_t rows = c.size(), cols = c.size();
      const DenseMatrix m = read_obsm_both_ways(r, key, where + " " + key);
      ASSERT_EQ(m.rows, rows) << where << " " << key;
      ASSERT_EQ(m.cols, cols) << where << " " << key;
      std::size_t mismatches = 0;
      for (std::size_t i = 0; i < rows * cols; ++i) {
        if (m.values[i] != static_cast<float>(static_cast<double>(i % 1000) / 8.0) && mismatches++ < 5) {
          ADD_FAILURE() << where << " " << key << " element " << i << ": " << m.values[i];
        }
      }
      EXPECT_EQ(mismatches, 0u) << where << " " << key;
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

/// Writes expect records (for tests/io/python/check_with_anndata.py) line by line.
class ExpectWriter {
 public:
  void line(const std::vector<std::string>& tokens) {
    for (std::size_t i = 0; i < tokens.size(); ++i) out_ << (i ? " " : "") << tokens[i];
    out_ << '\n';
  }
  void names(const std::string& which, const std::vector<std::string>& values) {
    std::vector<std::string> t = {"names", which, std::to_string(values.size())};
    for (const auto& v : values) t.push_back(hex_encode(v));
    line(t);
  }
  void keys(const std::string& which, const std::vector<std::string>& values) {
    std::vector<std::string> t = {"keys", which, std::to_string(values.size())};
    for (const auto& v : values) t.push_back(hex_encode(v));
    line(t);
  }
  void columns(const std::string& which, const std::vector<std::string>& values) {
    std::vector<std::string> t = {"columns", which, std::to_string(values.size())};
    for (const auto& v : values) t.push_back(hex_encode(v));
    line(t);
  }
  void dense(const std::string& kind, const std::string& key, const DenseMatrix& m) {
    std::vector<std::string> t = {"dense", kind, hex_encode(key), std::to_string(m.rows), std::to_string(m.cols)};
    for (float v : m.values) t.push_back(number_token(v));
    line(t);
  }
  void column(const std::string& which, const std::string& name, const Column& c) {
    std::vector<std::string> t = {"column", which, hex_encode(name)};
    auto missing = [&](std::size_t i) { return !c.missing.empty() && c.missing[i] != 0; };
    switch (c.kind) {
      case Column::Kind::kCategorical:
        t.insert(t.end(), {"categorical", c.ordered ? "1" : "0", std::to_string(c.categories.size())});
        for (const auto& s : c.categories) t.push_back(hex_encode(s));
        t.push_back(std::to_string(c.codes.size()));
        for (auto code : c.codes) t.push_back(std::to_string(code));
        break;
      case Column::Kind::kNumeric:
        t.insert(t.end(), {"numeric", std::to_string(c.numbers.size())});
        for (std::size_t i = 0; i < c.numbers.size(); ++i) t.push_back(missing(i) ? "nan" : number_token(c.numbers[i]));
        break;
      case Column::Kind::kString:
        if (std::any_of(c.missing.begin(), c.missing.end(), [](auto m) { return m != 0; })) {
          // flashot writes strings with missing entries as a categorical (sorted categories, −1 = missing)
          std::set<std::string> distinct;
          for (std::size_t i = 0; i < c.strings.size(); ++i) {
            if (!missing(i)) distinct.insert(c.strings[i]);
          }
          t.insert(t.end(), {"categorical", "0", std::to_string(distinct.size())});
          for (const auto& s : distinct) t.push_back(hex_encode(s));
          t.push_back(std::to_string(c.strings.size()));
          for (std::size_t i = 0; i < c.strings.size(); ++i) {
            t.push_back(missing(i) ? "-1"
                                   : std::to_string(std::distance(distinct.begin(), distinct.find(c.strings[i]))));
          }
          break;
        }
        t.insert(t.end(), {"string", std::to_string(c.strings.size())});
        for (std::size_t i = 0; i < c.strings.size(); ++i) t.push_back(hex_encode(missing(i) ? "" : c.strings[i]));
        for (std::size_t i = 0; i < c.strings.size(); ++i) t.push_back(missing(i) ? "1" : "0");
        break;
      case Column::Kind::kBoolean:
        t.insert(t.end(), {"boolean", std::to_string(c.flags.size())});
        for (auto f : c.flags) t.push_back(f ? "1" : "0");
        for (std::size_t i = 0; i < c.flags.size(); ++i) t.push_back(missing(i) ? "1" : "0");
        break;
    }
    line(t);
  }
  void uns(const std::string& key, const UnsValue& value) {
    std::vector<std::string> t = {"uns", hex_encode(key)};
    if (const auto* d = std::get_if<double>(&value)) {
      t.insert(t.end(), {"f", number_token(*d)});
    } else if (const auto* i = std::get_if<std::int64_t>(&value)) {
      t.insert(t.end(), {"i", std::to_string(*i)});
    } else if (const auto* s = std::get_if<std::string>(&value)) {
      t.insert(t.end(), {"s", hex_encode(*s)});
    } else {
      const auto& v = std::get<std::vector<double>>(value);
      t.insert(t.end(), {"v", std::to_string(v.size())});
      for (double x : v) t.push_back(number_token(x));
    }
    line(t);
  }
  /// Everything a new file written from `c` must hold.
  void content(const H5adContent& c) {
    line({"n_obs", std::to_string(c.obs_names.size())});
    line({"n_vars", std::to_string(c.var_names.size())});
    names("obs", c.obs_names);
    names("var", c.var_names);
    if (c.x_dense) {
      line({"x", "array", "float32", std::to_string(c.x_dense->rows), std::to_string(c.x_dense->cols)});
      dense("X", "", *c.x_dense);
    } else if (c.x_sparse) {
      const auto& s = *c.x_sparse;
      line({"x", s.csc ? "csc_matrix" : "csr_matrix", "float32", std::to_string(s.rows), std::to_string(s.cols)});
    } else {
      line({"x", "none"});
    }
    additions(c);
    std::vector<std::string> obs_order, var_order;
    for (const auto& [k, v] : c.obs) obs_order.push_back(k);
    for (const auto& [k, v] : c.var) var_order.push_back(k);
    columns("obs", obs_order);
    columns("var", var_order);
    std::vector<std::string> obsm_keys, uns_keys;
    for (const auto& [k, v] : c.obsm) obsm_keys.push_back(k);
    for (const auto& [k, v] : c.uns) uns_keys.push_back(k);
    keys("obsm", obsm_keys);
    keys("uns", uns_keys);
  }
  /// The obsm entries, columns and uns entries of `c` (what a copy must have gained).
  void additions(const H5adContent& c) {
    for (const auto& [k, m] : c.obsm) dense("obsm", k, m);
    for (const auto& [k, col] : c.obs) column("obs", k, col);
    for (const auto& [k, col] : c.var) column("var", k, col);
    for (const auto& [k, v] : c.uns) uns(k, v);
  }
  void save(const std::filesystem::path& path) const { std::ofstream(path) << out_.str(); }

 private:
  std::ostringstream out_;
};

}  // namespace flashot::io::test
