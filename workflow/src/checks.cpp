// The front ends' shared argument checks (checks.hpp).
#include "flashot/workflow/checks.hpp"

#include <stdexcept>

namespace flashot::workflow {

void require(bool ok, const std::string& what, double value) {
  if (!ok) throw std::invalid_argument(what + " (got " + value_text(value) + ")");
}

void require_extension(const std::filesystem::path& path, FileKind kind, const std::string& what) {
  bool matches = false;
  try {
    matches = file_kind(path) == kind;
  } catch (const std::invalid_argument&) {
    matches = false;  // neither .h5ad nor .ply
  }
  if (!matches) {
    throw std::invalid_argument(what + " " + path.string() + " must be " + (kind == FileKind::kH5ad ? ".h5ad, .zarr or .zarr.zip" : ".ply"));
  }
}

}  // namespace flashot::workflow
