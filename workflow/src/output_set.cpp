#include "flashot/workflow/output_set.hpp"

#include <fcntl.h>
#include <stdio.h>
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
  std::string stem = destination.stem().string(), extension = destination.extension().string();
  // A zarr store's name is its format (io::is_zarr_path): ".zarr.zip" stays whole in the temporary name.
  if (stem.size() > 5 && extension.size() == 4 && stem.substr(stem.size() - 5) == ".zarr") {
    extension = stem.substr(stem.size() - 5) + extension;
    stem.resize(stem.size() - 5);
  }
  const std::string name = "." + stem + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) +
                           extension;
  return folder / name;
}

// A trailing separator ("out.zarr/") names the same output as without it.
std::filesystem::path without_trailing_separator(const std::filesystem::path& p) {
  std::string s = p.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

}  // namespace

OutputSet::~OutputSet() {
  if (committed_) return;
  for (const Entry& e : entries_) {
    std::error_code ignored;
    std::filesystem::remove_all(e.temporary, ignored);  // a zarr store is a folder
  }
}

std::filesystem::path OutputSet::stage(const std::filesystem::path& named) {
  const std::filesystem::path destination = without_trailing_separator(named);
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
    if (std::filesystem::is_directory(e.temporary) && std::filesystem::is_directory(e.destination)) {
      // A zarr folder store over a previous one: swapped atomically, then the previous one removed.
      if (::renameat2(AT_FDCWD, e.temporary.c_str(), AT_FDCWD, e.destination.c_str(), RENAME_EXCHANGE) != 0) {
        ec = std::error_code(errno, std::generic_category());
      } else {
        std::filesystem::remove_all(e.temporary, ec);
        ec.clear();
      }
    } else {
      std::filesystem::rename(e.temporary, e.destination, ec);
    }
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
