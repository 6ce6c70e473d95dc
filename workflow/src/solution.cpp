#include "flashot/workflow/solution.hpp"

#include <bit>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace flashot::workflow {
namespace {

static_assert(std::endian::native == std::endian::little, "the solution format is written as little-endian");
constexpr char kMagic[] = "FLASHOT-SOLUTION\n";
constexpr std::size_t kMagicSize = sizeof kMagic - 1;
constexpr int kFormatVersion = 1;
constexpr std::uint64_t kMaxHeaderBytes = 1 << 20;
constexpr std::size_t kMaxCount = std::size_t{1} << 36;  // keeps n·d far from overflow

struct ArraySlot {
  const char* name;
  std::vector<float> Solution::*member;
  std::size_t count;
};

std::vector<ArraySlot> slots(const Solution& s) {
  return {{"x", &Solution::x, s.n * s.d}, {"a", &Solution::a, s.n}, {"f", &Solution::f, s.n},
          {"y", &Solution::y, s.m * s.d}, {"b", &Solution::b, s.m}, {"g", &Solution::g, s.m}};
}

}  // namespace

SolveResult Solution::result() const {
  SolveResult r;
  r.f = f;
  r.g = g;
  r.cost = cost;
  r.epsilon = epsilon;
  r.reach_source = reach_source;
  r.reach_target = reach_target;
  r.converged = true;
  return r;
}

void save_solution(const std::filesystem::path& path, const Solution& s) {
  for (const ArraySlot& slot : slots(s)) {
    if ((s.*slot.member).size() != slot.count) {
      throw std::invalid_argument(std::string("solution array ") + slot.name + ": expected " +
                                  std::to_string(slot.count) + " values, got " +
                                  std::to_string((s.*slot.member).size()));
    }
  }
  nlohmann::json header = {
      {"format_version", kFormatVersion}, {"n", s.n}, {"m", s.m}, {"d", s.d}, {"epsilon", s.epsilon},
      {"cost", to_string(s.cost)}, {"reach_source", s.reach_source}, {"reach_target", s.reach_target},
      {"key", s.key}, {"representation", s.representation}, {"source", s.source}, {"target", s.target},
      {"flashot_version", version()}};
  header["arrays"] = nlohmann::json::array();
  for (const ArraySlot& slot : slots(s)) header["arrays"].push_back({slot.name, slot.count});
  const std::string text = header.dump();
  std::ofstream out(path, std::ios::binary);
  const std::uint64_t size = text.size();
  out.write(kMagic, kMagicSize);
  out.write(reinterpret_cast<const char*>(&size), sizeof size);
  out.write(text.data(), std::streamsize(text.size()));
  for (const ArraySlot& slot : slots(s)) {
    const std::vector<float>& v = s.*slot.member;
    out.write(reinterpret_cast<const char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
  }
  out.close();
  if (!out) throw std::runtime_error("cannot write solution " + path.string());
}

namespace {

/// Reads and checks the header; leaves `in` at the first array.
Solution read_header(std::ifstream& in, const std::filesystem::path& path) {
  if (!in) throw std::runtime_error("cannot open solution " + path.string());
  const std::string where = path.string() + ": ";
  char magic[kMagicSize];
  std::uint64_t size = 0;
  if (!in.read(magic, kMagicSize) || std::memcmp(magic, kMagic, kMagicSize) != 0) {
    throw std::runtime_error(where + "not a flashot solution file (written by `flashot align --save-solution`)");
  }
  if (!in.read(reinterpret_cast<char*>(&size), sizeof size) || size > kMaxHeaderBytes) {
    throw std::runtime_error(where + "truncated or corrupt header");
  }
  std::string text(size, '\0');
  if (!in.read(text.data(), std::streamsize(size))) throw std::runtime_error(where + "truncated header");
  Solution s;
  try {
    const nlohmann::json h = nlohmann::json::parse(text);
    if (h.at("format_version").get<int>() != kFormatVersion) {
      throw std::runtime_error("format_version " + h.at("format_version").dump() + " is not supported");
    }
    s.n = h.at("n").get<std::size_t>();
    s.m = h.at("m").get<std::size_t>();
    s.d = h.at("d").get<std::size_t>();
    s.epsilon = h.at("epsilon").get<double>();
    const std::string cost = h.at("cost").get<std::string>();
    if (cost == to_string(Cost::kSquaredEuclidean)) {
      s.cost = Cost::kSquaredEuclidean;
    } else if (cost == to_string(Cost::kHalfSquaredEuclidean)) {
      s.cost = Cost::kHalfSquaredEuclidean;
    } else {
      throw std::runtime_error("unknown cost '" + cost + "'");
    }
    s.reach_source = h.at("reach_source").get<double>();
    s.reach_target = h.at("reach_target").get<double>();
    s.key = h.at("key").get<std::string>();
    s.representation = h.at("representation").get<std::string>();
    s.source = h.at("source").get<std::string>();
    s.target = h.at("target").get<std::string>();
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(where + "bad header: " + e.what());
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(where + e.what());
  }
  if (s.n == 0 || s.m == 0 || s.d == 0 || s.n > kMaxCount || s.m > kMaxCount || s.d > kMaxCount ||
      !(s.epsilon > 0)) {
    throw std::runtime_error(where + "empty or invalid problem in the header");
  }
  // Reject sizes the file cannot hold before allocating them.
  const auto payload_start = in.tellg();
  in.seekg(0, std::ios::end);
  const auto payload_bytes = std::uint64_t(in.tellg() - payload_start);
  in.seekg(payload_start);
  std::uint64_t expected = 0;
  for (const ArraySlot& slot : slots(s)) expected += slot.count * sizeof(float);
  if (payload_bytes != expected) {
    throw std::runtime_error(where + "holds " + std::to_string(payload_bytes) + " bytes of arrays, the header says " +
                             std::to_string(expected));
  }
  return s;
}

}  // namespace

Solution read_solution_header(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return read_header(in, path);
}

Solution load_solution(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  Solution s = read_header(in, path);
  const std::string where = path.string() + ": ";
  for (const ArraySlot& slot : slots(s)) {
    std::vector<float>& v = s.*slot.member;
    v.resize(slot.count);
    if (!in.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(float)))) {
      throw std::runtime_error(where + "truncated array " + slot.name);
    }
  }
  return s;
}

}  // namespace flashot::workflow
