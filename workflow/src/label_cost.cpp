// `flashot align --label-cost`: classes and the W table (flashot/workflow/label_cost.hpp).
#include "flashot/workflow/label_cost.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace flashot::workflow {

namespace {

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> cells;
  std::string cell;
  bool quoted = false;
  for (std::size_t k = 0; k < line.size(); ++k) {
    const char c = line[k];
    if (quoted) {
      if (c == '"' && k + 1 < line.size() && line[k + 1] == '"') cell += '"', ++k;
      else if (c == '"') quoted = false;
      else cell += c;
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      cells.push_back(cell);
      cell.clear();
    } else if (c != '\r') {
      cell += c;
    }
  }
  cells.push_back(cell);
  return cells;
}

}  // namespace

LabelCost label_cost_from(const PointCloud& source, const PointCloud& target, const std::string& column,
                          double weight, const std::filesystem::path& table) {
  const Labels ls = read_labels(source, column);
  const Labels lt = read_labels(target, column);
  std::vector<std::string> names = ls.categories;
  for (const std::string& c : lt.categories)
    if (std::find(names.begin(), names.end(), c) == names.end()) names.push_back(c);
  const auto index_of = [&](const std::string& c) {
    return static_cast<std::int32_t>(std::find(names.begin(), names.end(), c) - names.begin());
  };
  LabelCost cost;
  cost.classes = names.size();
  cost.weight = weight;
  const auto codes = [&](const Labels& l, const PointCloud& cloud, const char* role) {
    std::vector<std::int32_t> out(l.codes.size());
    for (std::size_t i = 0; i < l.codes.size(); ++i) {
      if (l.codes[i] < 0)
        throw std::invalid_argument(std::string(role) + " " + cloud.path.string() + ": row '" + cloud.names[i] +
                                    "' has no value in '" + column + "' (--label-cost needs a label on every row)");
      out[i] = index_of(l.categories[static_cast<std::size_t>(l.codes[i])]);
    }
    return out;
  };
  cost.source = codes(ls, source, "SOURCE");
  cost.target = codes(lt, target, "TARGET");
  if (table.empty()) return cost;

  std::ifstream in(table);
  if (!in) throw std::invalid_argument("--label-table " + table.string() + ": cannot be read");
  std::string line;
  if (!std::getline(in, line)) throw std::invalid_argument("--label-table " + table.string() + ": the file is empty");
  const std::vector<std::string> header = split_csv_line(line);
  std::map<std::string, std::size_t> column_of;  // target class → column in the file
  for (std::size_t c = 1; c < header.size(); ++c)
    if (!column_of.emplace(header[c], c).second)
      throw std::invalid_argument("--label-table " + table.string() + ": TARGET class '" + header[c] +
                                  "' appears twice in the header");
  std::map<std::string, std::vector<double>> rows;  // source class → its costs, by file column
  int line_number = 1;
  while (std::getline(in, line)) {
    ++line_number;
    if (line.empty() || line == "\r") continue;
    const std::vector<std::string> cells = split_csv_line(line);
    const std::string where = "--label-table " + table.string() + " line " + std::to_string(line_number);
    if (cells.size() != header.size())
      throw std::invalid_argument(where + ": " + std::to_string(cells.size()) + " cells, the header has " +
                                  std::to_string(header.size()));
    std::vector<double> values(cells.size(), 0.0);
    for (std::size_t c = 1; c < cells.size(); ++c) {
      std::size_t used = 0;
      double v = NAN;
      try {
        v = std::stod(cells[c], &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || !std::isfinite(v))
        throw std::invalid_argument(where + ", class '" + header[c] + "': '" + cells[c] + "' is not a finite number");
      values[c] = v;
    }
    if (!rows.emplace(cells[0], values).second)
      throw std::invalid_argument(where + ": SOURCE class '" + cells[0] + "' appears twice");
  }
  const std::size_t L = names.size();
  cost.table.assign(L * L, 0.0);
  std::vector<bool> in_source(L, false), in_target(L, false);
  for (std::int32_t c : cost.source) in_source[static_cast<std::size_t>(c)] = true;
  for (std::int32_t c : cost.target) in_target[static_cast<std::size_t>(c)] = true;
  for (std::size_t a = 0; a < L; ++a) {
    if (in_source[a] && !rows.count(names[a]))
      throw std::invalid_argument("--label-table " + table.string() + ": no row for SOURCE class '" + names[a] +
                                  "' of '" + column + "'");
    if (in_target[a] && !column_of.count(names[a]))
      throw std::invalid_argument("--label-table " + table.string() + ": no column for TARGET class '" + names[a] +
                                  "' of '" + column + "'");
  }
  for (std::size_t a = 0; a < L; ++a) {
    const auto row = rows.find(names[a]);
    if (row == rows.end()) continue;
    for (std::size_t b = 0; b < L; ++b) {
      const auto col = column_of.find(names[b]);
      if (col != column_of.end()) cost.table[a * L + b] = row->second[col->second];
    }
  }
  return cost;
}

}  // namespace flashot::workflow
