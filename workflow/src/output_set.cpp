#include "flashot/workflow/output_set.hpp"

#include <unistd.h>

#include <atomic>
#include <fstream>
#include <stdexcept>
#include <system_error>

namespace flashot::workflow {
namespace {

std::filesystem::path temporary_name(const std::filesystem::path& destination) {
  static std::atomic<unsigned> counter{0};
  const std::filesystem::path folder = destination.parent_path();
  const std::string name = "." + destination.stem().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                           std::to_string(counter++) + destination.extension().string();
  return folder / name;
}

}  // namespace

OutputSet::~OutputSet() {
  if (committed_) return;
  for (const Entry& e : entries_) {
    std::error_code ignored;
    std::filesystem::remove(e.temporary, ignored);
  }
}

std::filesystem::path OutputSet::stage(const std::filesystem::path& destination) {
  for (const Entry& e : entries_) {
    std::error_code ec;
    if (e.destination == destination || std::filesystem::equivalent(e.destination, destination, ec)) {
      throw std::invalid_argument("output " + destination.string() + " is named twice");
    }
  }
  const std::filesystem::path folder = destination.parent_path().empty() ? "." : destination.parent_path();
  if (!std::filesystem::is_directory(folder)) {
    throw std::invalid_argument("output " + destination.string() + ": folder " + folder.string() +
                                " does not exist");
  }
  entries_.push_back({temporary_name(destination), destination});
  return entries_.back().temporary;
}

void OutputSet::commit() {
  for (const Entry& e : entries_) {
    if (!std::filesystem::exists(e.temporary)) {
      throw std::runtime_error("output " + e.destination.string() + " was not written");
    }
  }
  for (Entry& e : entries_) {
    std::error_code ec;
    std::filesystem::rename(e.temporary, e.destination, ec);
    if (ec) throw std::runtime_error("cannot rename " + e.temporary.string() + " to " + e.destination.string() +
                                     ": " + ec.message());
    e.temporary.clear();
  }
  committed_ = true;
}

void write_text_atomically(const std::filesystem::path& path, const std::string& text) {
  OutputSet outputs;
  const std::filesystem::path temporary = outputs.stage(path);
  {
    std::ofstream out(temporary, std::ios::binary);
    out << text;
    out.close();
    if (!out) throw std::runtime_error("cannot write " + path.string());
  }
  outputs.commit();
}

}  // namespace flashot::workflow
