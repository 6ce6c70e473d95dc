#include "flashot/workflow/run_plan.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <system_error>

#include "flashot/io/anndata.hpp"
#include "flashot/io/ply.hpp"

namespace flashot::workflow {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxLinkHops = 40;  // as the kernel's ELOOP limit

/// Every name under which a path reaches a file, and the file itself where it exists.
struct Identity {
  fs::path lexical;  ///< absolute, lexically normal: the path as spelled, "./" and ".." folded
  fs::path entry;    ///< canonical folder / file name: the directory entry the name stands for
  fs::path resolved; ///< where symbolic links at the entry lead (the entry itself when it is no link)
  bool exists = false;
  dev_t device = 0;
  ino_t inode = 0;
};

/// The entry `p` names, with every symbolic link among its folders resolved (its last component kept).
fs::path entry_of(const fs::path& absolute) {
  std::error_code ec;
  const fs::path folder = fs::weakly_canonical(absolute.parent_path(), ec);
  return (ec ? absolute.parent_path() : folder) / absolute.filename();
}

Identity identify(const fs::path& path) {
  Identity id;
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec);
  id.lexical = absolute.lexically_normal();
  id.entry = entry_of(absolute);  // not normalized first: "link/.." is the link target's parent, as the kernel has it
  // Follow the last component's links one hop at a time, also when the final target does not exist yet (a link
  // to an output that this run would create).
  fs::path at = id.entry;
  for (int hop = 0; hop < kMaxLinkHops; ++hop) {
    if (!fs::is_symlink(fs::symlink_status(at, ec))) break;
    const fs::path link = fs::read_symlink(at, ec);
    if (ec) break;
    at = entry_of(link.is_absolute() ? link : at.parent_path() / link);
  }
  id.resolved = at;
  struct stat info {};
  if (::stat(absolute.c_str(), &info) == 0) {
    id.exists = true;
    id.device = info.st_dev;
    id.inode = info.st_ino;
  }
  return id;
}

/// Why two paths are one file, or "" when they are not.
std::string same_file(const fs::path& a_text, const Identity& a, const fs::path& b_text, const Identity& b) {
  if (a_text == b_text) return "same file";
  if (a.lexical == b.lexical) return "same file: the same path spelled differently";
  if (a.entry == b.entry || a.resolved == b.resolved || a.entry == b.resolved || a.resolved == b.entry) {
    return "same file through a symbolic link";
  }
  if (a.exists && b.exists && a.device == b.device && a.inode == b.inode) {
    return "same file: a hard link, same device and inode";
  }
  return "";
}

std::string shown(const fs::path& p) { return p.string(); }

/// Whether `inner` lies inside the folder `outer` (as spelled, and with links resolved).
bool inside(const Identity& inner, const Identity& outer) {
  auto under = [](const fs::path& a, const fs::path& b) {
    auto ai = a.begin(), bi = b.begin();
    for (; bi != b.end(); ++ai, ++bi) {
      if (bi->empty()) continue;  // a trailing separator
      if (ai == a.end() || *ai != *bi) return false;
    }
    return ai != a.end();
  };
  return under(inner.lexical, outer.lexical) || under(inner.entry, outer.entry) || under(inner.resolved, outer.resolved);
}

bool zip_name(const fs::path& p) {
  std::string name = p.filename().string();
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return name.size() > 9 && name.compare(name.size() - 9, 9, ".zarr.zip") == 0;
}

/// A zarr folder store (docs/io-zarr.md): what an existing .zarr output may be replaced as.
bool looks_like_zarr_store(const fs::path& folder) {
  std::error_code ec;
  if (fs::is_empty(folder, ec)) return true;
  return fs::exists(folder / "zarr.json", ec) || fs::exists(folder / ".zgroup", ec) || fs::exists(folder / ".zattrs", ec);
}

/// The folder an output is renamed into: its own folder, not a link target's (OutputSet stages there).
fs::path folder_of(const fs::path& output) {
  const fs::path parent = output.parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

/// "" when a new file can be created in `folder`, else why not.
std::string folder_problem(const fs::path& folder) {
  std::error_code ec;
  const fs::file_status status = fs::status(folder, ec);
  if (!fs::exists(status)) return "does not exist";
  if (!fs::is_directory(status)) return "is not a folder";
  if (::access(folder.c_str(), W_OK | X_OK) != 0) {
    return std::string("is not writable (") + std::strerror(errno) + ")";
  }
  // access() answers from the permission bits; root passes it everywhere, also where a read-only mount or a
  // virtual file system refuses new files. A probe file asks the file system itself.
  static std::atomic<unsigned> counter{0};
  const fs::path probe = folder / (".flashot-write-check-" + std::to_string(::getpid()) + "-" +
                                   std::to_string(counter++));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return std::string("is not writable (a new file there fails: ") + std::strerror(errno) + ")";
  ::close(fd);
  ::unlink(probe.c_str());
  return "";
}

}  // namespace

RunPlan& RunPlan::input(std::string role, std::filesystem::path path) {
  if (!path.empty()) inputs_.push_back({std::move(role), std::move(path)});
  return *this;
}

RunPlan& RunPlan::output(std::string option, std::filesystem::path path) {
  outputs_.push_back({std::move(option), std::move(path)});
  return *this;
}

void RunPlan::check() const {
  std::vector<Identity> inputs;
  for (const Entry& in : inputs_) inputs.push_back(identify(in.path));
  std::vector<Identity> outputs;
  // 1. No output is an input or an earlier output; no output names a folder or a device.
  for (const Entry& given : outputs_) {
    Entry out = given;
    if (io::is_zarr_path(out.path)) {  // "out.zarr/" names the store out.zarr
      std::string text = out.path.string();
      while (text.size() > 1 && text.back() == '/') text.pop_back();
      out.path = text;
    }
    const std::string head = out.name + " " + shown(out.path);
    if (out.path.empty()) throw PathError(out.name, out.path, out.name + ": empty path");
    const fs::path name = out.path.filename();
    if (name.empty() || name == "." || name == "..") {
      throw PathError(out.name, out.path, head + " is a folder, not a file name");
    }
    const Identity id = identify(out.path);
    for (std::size_t i = 0; i < inputs_.size(); ++i) {
      const std::string why = same_file(out.path, id, inputs_[i].path, inputs[i]);
      if (why.empty()) continue;
      const std::string other = out.path == inputs_[i].path ? "" : " " + shown(inputs_[i].path);
      throw PathError(out.name, out.path, head + " is the input " + inputs_[i].name + other + " (" + why + ")");
    }
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      const std::string why = same_file(out.path, id, outputs_[i].path, outputs[i]);
      if (why.empty()) continue;
      const std::string other = out.path == outputs_[i].path ? "" : " " + shown(outputs_[i].path);
      throw PathError(out.name, out.path, head + " is also the output " + outputs_[i].name + other + " (" + why + ")");
    }
    // A zarr folder store holds files: an output inside an input store, or an output store holding an input, would
    // write into (or replace) the input.
    for (std::size_t i = 0; i < inputs_.size(); ++i) {
      if (inside(id, inputs[i])) {
        throw PathError(out.name, out.path, head + " lies inside the input " + inputs_[i].name + " " + shown(inputs_[i].path));
      }
      if (inside(inputs[i], id)) {
        throw PathError(out.name, out.path, head + " would replace the folder holding the input " + inputs_[i].name + " " +
                                                shown(inputs_[i].path));
      }
    }
    if (id.exists) {
      std::error_code ec;
      const fs::file_status status = fs::status(out.path, ec);
      if (fs::is_directory(status) && io::is_zarr_path(out.path) && !zip_name(out.path)) {
        if (!looks_like_zarr_store(out.path)) {
          throw PathError(out.name, out.path, head + " is a folder that is not a zarr store (no zarr.json or .zgroup): not replaced");
        }
        outputs.push_back(id);
        continue;
      }
      if (fs::is_directory(status)) throw PathError(out.name, out.path, head + " is a folder");
      if (!fs::is_regular_file(status)) {
        throw PathError(out.name, out.path, head + " exists and is not a regular file (outputs replace files)");
      }
    }
    outputs.push_back(id);
  }
  // 2. Every output's folder exists and takes a new file (each folder tried once).
  std::set<fs::path> tried;
  for (const Entry& out : outputs_) {
    const fs::path folder = folder_of(out.path);
    std::error_code ec;
    const fs::path key = fs::weakly_canonical(fs::absolute(folder), ec);
    if (!tried.insert(ec ? fs::absolute(folder) : key).second) continue;
    const std::string problem = folder_problem(folder);
    if (!problem.empty()) {
      throw PathError(out.name, out.path,
                      out.name + " " + shown(out.path) + ": folder " + shown(folder) + " " + problem);
    }
  }
}

}  // namespace flashot::workflow

// ---- Data options against the files' metadata ----------------------------------------------------------------

namespace flashot::workflow {
namespace {

std::string join(const std::vector<std::string>& words) {
  constexpr std::size_t kListed = 30;
  std::string text;
  for (std::size_t i = 0; i < words.size() && i < kListed; ++i) text += (i ? ", " : "") + words[i];
  if (words.size() > kListed) text += ", … (" + std::to_string(words.size()) + " in all)";
  return words.empty() ? "none" : text;
}

bool contains(const std::vector<std::string>& words, const std::string& word) {
  return std::find(words.begin(), words.end(), word) != words.end();
}

/// "--source-where cell_type=T"
std::string filter_text(const std::string& option, const RowFilter& filter) {
  return option + " " + filter.column + "=" + filter.value;
}

/// An .h5ad opened for its metadata (H5adReader reads only what each accessor returns).
struct H5adFile {
  std::string role;  // "SOURCE", "TARGET", "POINTS"
  io::H5adReader reader;
  std::string named() const { return role + " " + reader.path().string(); }

  void require_obs_column(const std::string& option_and_value, const std::string& column) const {
    const std::vector<std::string> columns = reader.obs_columns();
    if (!contains(columns, column)) {
      throw std::invalid_argument(option_and_value + ": " + named() + " has no obs column '" + column +
                                  "' (obs columns: " + join(columns) + ")");
    }
  }
  /// obsm[key]'s width, its rows checked against n_obs.
  std::size_t require_obsm(const std::string& option_and_value, const std::string& key) const {
    const std::vector<std::string> keys = reader.obsm_keys();
    if (!contains(keys, key)) {
      throw std::invalid_argument(option_and_value + ": " + named() + " has no obsm['" + key + "'] (obsm keys: " +
                                  join(keys) + ")");
    }
    return reader.obsm_shape(key).cols;
  }
};

/// A PLY header: the vertex element's scalar properties.
struct PlyHeader {
  std::string role;
  std::filesystem::path path;
  std::vector<std::string> scalars;  // scalar vertex properties, in file order

  PlyHeader(std::string r, const std::filesystem::path& p) : role(std::move(r)), path(p) {
    const io::PlyFile header = io::read_ply_header(p);
    const io::PlyElement* vertex = header.find("vertex");
    if (vertex == nullptr) {
      std::vector<std::string> elements;
      for (const io::PlyElement& e : header.elements) elements.push_back(e.name);
      throw std::invalid_argument(named() + " has no vertex element (elements: " + join(elements) + ")");
    }
    for (const io::PlyProperty& property : vertex->properties) {
      if (!property.is_list) scalars.push_back(property.name);
    }
    for (const char* axis : {"x", "y", "z"}) {
      if (!contains(scalars, axis)) {
        throw std::invalid_argument(named() + ": the vertex element has no scalar property '" + axis +
                                    "' (properties: " + join(scalars) + ")");
      }
    }
  }
  std::string named() const { return role + " " + path.string(); }
  void require_property(const std::string& option_and_value, const std::string& name) const {
    if (!contains(scalars, name)) {
      throw std::invalid_argument(option_and_value + ": " + named() + " has no scalar vertex property '" + name +
                                  "' (properties: " + join(scalars) + ")");
    }
  }
};

}  // namespace

void check_pair(const std::filesystem::path& source, const std::filesystem::path& target, const LoadOptions& options,
                const std::string& label_column) {
  const FileKind kind = file_kind(source);
  if (file_kind(target) != kind) {
    throw std::invalid_argument("SOURCE " + source.string() + " and TARGET " + target.string() +
                                " are different kinds of file (both .h5ad or both .ply)");
  }
  if (kind == FileKind::kPly) {
    if (options.use_x || !options.key.empty()) {
      throw std::invalid_argument(std::string(options.use_x ? "--use-x" : "--key " + options.key) +
                                  ": PLY files are aligned by their vertex x, y, z (--key and --use-x are for .h5ad)");
    }
    const PlyHeader s("SOURCE", source), t("TARGET", target);
    if (options.source_where) {
      s.require_property(filter_text("--source-where", *options.source_where), options.source_where->column);
    }
    if (options.target_where) {
      t.require_property(filter_text("--target-where", *options.target_where), options.target_where->column);
    }
    if (!label_column.empty()) t.require_property("--transfer-labels " + label_column, label_column);
    return;
  }
  const H5adFile s{"SOURCE", io::H5adReader(source)}, t{"TARGET", io::H5adReader(target)};
  if (options.source_where) {
    s.require_obs_column(filter_text("--source-where", *options.source_where), options.source_where->column);
  }
  if (options.target_where) {
    t.require_obs_column(filter_text("--target-where", *options.target_where), options.target_where->column);
  }
  if (!label_column.empty()) t.require_obs_column("--transfer-labels " + label_column, label_column);
  if (options.use_x) {
    if (!options.key.empty()) throw std::invalid_argument("--key " + options.key + " and --use-x exclude each other");
    for (const H5adFile* f : {&s, &t}) {
      if (!f->reader.x_info()) throw std::invalid_argument("--use-x: " + f->named() + " has no X");
    }
    const std::vector<std::string> source_genes = s.reader.var_names();
    const std::set<std::string> target_genes = [&] {
      const std::vector<std::string> names = t.reader.var_names();
      return std::set<std::string>(names.begin(), names.end());
    }();
    if (std::none_of(source_genes.begin(), source_genes.end(),
                     [&](const std::string& gene) { return target_genes.count(gene) > 0; })) {
      throw std::invalid_argument("--use-x: " + s.named() + " and " + t.named() + " share no gene (var name)");
    }
    return;
  }
  if (options.key.empty()) {
    for (const H5adFile* f : {&s, &t}) {
      if (!contains(f->reader.obsm_keys(), "X_pca")) {
        throw std::invalid_argument("no --key given and " + f->named() + " has no obsm['X_pca'] (obsm keys: " +
                                    join(f->reader.obsm_keys()) + "); pass --key KEY or --use-x");
      }
    }
  }
  const std::string key = options.key.empty() ? "X_pca" : options.key;
  const std::string named = options.key.empty() ? "obsm['X_pca'] (the default)" : "--key " + key;
  const std::size_t ds = s.require_obsm(named, key), dt = t.require_obsm(named, key);
  if (ds != dt) {
    throw std::invalid_argument(named + ": " + s.named() + " obsm['" + key + "'] is " + std::to_string(ds) +
                                "-d but " + t.named() + " obsm['" + key + "'] is " + std::to_string(dt) + "-d");
  }
}

std::size_t check_points(const std::filesystem::path& path, const std::string& key,
                         const std::optional<RowFilter>& where, const std::string& role,
                         const std::string& key_option, const std::string& where_option) {
  if (file_kind(path) == FileKind::kPly) {
    const PlyHeader p(role, path);
    if (where) p.require_property(filter_text(where_option, *where), where->column);
    return 3;
  }
  const H5adFile f{role, io::H5adReader(path)};
  if (where) f.require_obs_column(filter_text(where_option, *where), where->column);
  if (key.empty()) throw std::invalid_argument(f.named() + ": no obsm key given");
  return f.require_obsm(key_option + " " + key, key);
}

}  // namespace flashot::workflow
