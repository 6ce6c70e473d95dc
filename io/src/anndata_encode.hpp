#pragma once
// The choices both AnnData writers make the same way before storing a column or a dataframe: the .h5ad writer
// (anndata_write.cpp, through the HDF5 layer) and the zarr writer (zarr/write.cpp, through its chunk writer). How
// each stores the result (datasets and attributes, arrays and JSON) stays with it.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "flashot/io/anndata.hpp"

namespace flashot::io::anndata_encode {

inline bool any_missing(const Column& c) {
  return std::any_of(c.missing.begin(), c.missing.end(), [](std::uint8_t m) { return m != 0; });
}

// A numeric column's values, NaN where missing (what anndata writes for a float column with missing entries).
inline std::vector<double> numbers_with_nan(const Column& c) {
  std::vector<double> values = c.numbers;
  for (std::size_t i = 0; i < c.missing.size(); ++i) {
    if (c.missing[i] != 0) values[i] = std::numeric_limits<double>::quiet_NaN();
  }
  return values;
}

// A string column with missing entries as a categorical with code −1 where missing, as anndata's own
// strings_to_categoricals does: every anndata since 0.7 reads that, while `nullable-string-array` is unreadable
// before anndata 0.11 (Debian 12 ships 0.8). Categories are the distinct present strings, sorted.
inline Column strings_as_categorical(const Column& c) {
  std::set<std::string> distinct;
  for (std::size_t i = 0; i < c.strings.size(); ++i) {
    if (c.missing[i] == 0) distinct.insert(c.strings[i]);
  }
  Column out;
  out.kind = Column::Kind::kCategorical;
  out.categories.assign(distinct.begin(), distinct.end());
  out.codes.reserve(c.strings.size());
  for (std::size_t i = 0; i < c.strings.size(); ++i) {
    const auto at_category = distinct.find(c.strings[i]);
    out.codes.push_back(c.missing[i] != 0 ? -1
                                          : static_cast<std::int32_t>(std::distance(distinct.begin(), at_category)));
  }
  return out;
}

// Bytes per categorical code: pandas stores codes in the narrowest signed type that holds every category.
inline std::size_t code_bytes(std::size_t n_categories) {
  return n_categories < 128 ? 1 : n_categories < 32768 ? 2 : 4;
}

// Where a dataframe keeps its index: "_index", unless a column already has that name.
inline std::string index_key(const std::map<std::string, Column>& columns) {
  return columns.count("_index") != 0 ? "__flashot_index" : "_index";
}

}  // namespace flashot::io::anndata_encode
