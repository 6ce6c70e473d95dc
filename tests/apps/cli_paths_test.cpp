// What every command checks before it reads any data (docs/cli.md, "Checks before any data is read"): no output is
// an input or another output however it is spelled, every output's folder exists and takes a file, and every option
// that names data (obsm key, filter and label columns, PLY properties) exists in the files. The inputs' bytes must
// come out unchanged whatever is refused.

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "flashot/io/anndata.hpp"
#include "flashot/io/ply.hpp"
#include "flashot/workflow/solution.hpp"
#include "run_command.hpp"

namespace flashot::test {
namespace {

namespace fs = std::filesystem;

const fs::path kSamples = FLASHOT_SAMPLES;

// ---- Small inputs -------------------------------------------------------------------------------------------

/// An .h5ad with obsm `key` (n × d, seeded values; NaN in `nan_row` when ≥ 0) and a categorical obs cell_type.
void write_h5ad(const fs::path& path, std::size_t n, std::size_t d, const std::string& key = "X_pca",
                long nan_row = -1) {
  io::H5adContent content;
  for (std::size_t i = 0; i < n; ++i) content.obs_names.push_back("c" + std::to_string(i));
  content.var_names = {"g0"};
  io::DenseMatrix m{n, d, std::vector<float>(n * d)};
  for (std::size_t i = 0; i < n * d; ++i) m.values[i] = float((i * 2654435761u + n) % 1000) / 100.0f;
  if (nan_row >= 0) m.values[std::size_t(nan_row) * d] = std::numeric_limits<float>::quiet_NaN();
  content.obsm.emplace(key, std::move(m));
  io::Column types;
  types.kind = io::Column::Kind::kCategorical;
  types.categories = {"a", "b"};
  for (std::size_t i = 0; i < n; ++i) types.codes.push_back(std::int32_t(i % 2));
  content.obs.emplace("cell_type", std::move(types));
  io::write_h5ad(path, content);
}

/// A point cloud of n seeded points in the unit cube, with a uchar `part` property.
void write_ply(const fs::path& path, std::size_t n, std::uint32_t seed) {
  std::vector<float> xyz(n * 3);
  for (std::size_t i = 0; i < xyz.size(); ++i) xyz[i] = float((i * 2654435761u + seed * 7919u) % 1000) / 1000.0f;
  io::PlyFile ply = io::make_point_cloud(xyz, n);
  io::PlyProperty part{"part", io::PlyType::kUint8, false, io::PlyType::kUint8, std::vector<double>(n, 1.0), {}};
  ply.find("vertex")->properties.push_back(std::move(part));
  io::write_ply(path, ply);
}

/// A solution file for n source and m target points in d dimensions, obsm key `key` (no solve needed).
void write_solution(const fs::path& path, std::size_t n, std::size_t m, std::size_t d, const std::string& key) {
  workflow::Solution s;
  s.key = key;
  s.representation = "obsm['" + key + "']";
  s.source = "s.h5ad";
  s.target = "t.h5ad";
  s.epsilon = 0.1;
  s.n = n;
  s.m = m;
  s.d = d;
  s.x.assign(n * d, 0.5f);
  s.a.assign(n, 1.0f / float(n));
  s.f.assign(n, 0.0f);
  s.y.assign(m * d, 0.25f);
  s.b.assign(m, 1.0f / float(m));
  s.g.assign(m, 0.0f);
  workflow::save_solution(path, s);
}

// ---- Commands as slots -----------------------------------------------------------------------------------------

/// One path of a command line: an input (positional or an option) or an output.
struct Slot {
  std::string name;       ///< as messages name it: "SOURCE", "--solution", "-o", "--report"
  std::string file;       ///< its file name in the test folder
  bool output = false;
  std::string extension;  ///< outputs: the extension the command requires ("" = any)
};

struct Command {
  std::string name;
  std::vector<Slot> slots;
  /// The command line with `value(slot name)` for every slot.
  std::vector<std::string> (*args)(const std::map<std::string, std::string>& value);
  void (*make_inputs)(const fs::path& folder);
};

std::vector<std::string> align_args(const std::map<std::string, std::string>& v) {
  return {"align", v.at("SOURCE"), v.at("TARGET"), "-o", v.at("-o"), "--coupling", v.at("--coupling"),
          "--save-solution", v.at("--save-solution"), "--report", v.at("--report"), "--quiet", "--backend", "cpu"};
}
std::vector<std::string> map_args(const std::map<std::string, std::string>& v) {
  return {"map", "--solution", v.at("--solution"), v.at("POINTS"), "-o", v.at("-o"), "--report", v.at("--report"),
          "--quiet", "--backend", "cpu"};
}
std::vector<std::string> register_args(const std::map<std::string, std::string>& v) {
  return {"register", v.at("SOURCE"), v.at("TARGET"), "-o", v.at("-o"), "--report", v.at("--report"), "--quiet",
          "--backend", "cpu"};
}
std::vector<std::string> flow_args(const std::map<std::string, std::string>& v) {
  return {"flow", v.at("SOURCE"), v.at("TARGET"), "-o", v.at("-o"), "--report", v.at("--report"), "--steps", "2",
          "--quiet", "--backend", "cpu"};
}

void align_inputs(const fs::path& folder) {
  write_h5ad(folder / "s.h5ad", 20, 4);
  write_h5ad(folder / "t.h5ad", 30, 4);
}
void map_inputs(const fs::path& folder) {
  write_solution(folder / "b_to_a.solution", 20, 30, 4, "X_pca");
  write_h5ad(folder / "p.h5ad", 10, 4);
}
void ply_inputs(const fs::path& folder) {
  write_ply(folder / "s.ply", 40, 1);
  write_ply(folder / "t.ply", 50, 2);
}

const std::vector<Command>& commands() {
  static const std::vector<Command> all = {
      {"align",
       {{"SOURCE", "s.h5ad"}, {"TARGET", "t.h5ad"}, {"-o", "o.h5ad", true, ".h5ad"},
        {"--coupling", "c.h5ad", true, ".h5ad"}, {"--save-solution", "s_to_t.solution", true, ""},
        {"--report", "r.json", true, ""}},
       align_args, align_inputs},
      {"map",
       {{"--solution", "b_to_a.solution"}, {"POINTS", "p.h5ad"}, {"-o", "m.h5ad", true, ".h5ad"},
        {"--report", "r.json", true, ""}},
       map_args, map_inputs},
      {"register",
       {{"SOURCE", "s.ply"}, {"TARGET", "t.ply"}, {"-o", "o.ply", true, ".ply"}, {"--report", "r.json", true, ""}},
       register_args, ply_inputs},
      {"flow",
       {{"SOURCE", "s.ply"}, {"TARGET", "t.ply"}, {"-o", "o.ply", true, ".ply"}, {"--report", "r.json", true, ""}},
       flow_args, ply_inputs},
  };
  return all;
}

const Command& command(const std::string& name) {
  for (const Command& c : commands()) {
    if (c.name == name) return c;
  }
  throw std::invalid_argument(name);
}

std::map<std::string, std::string> default_values(const Command& c) {
  std::map<std::string, std::string> values;
  for (const Slot& s : c.slots) values[s.name] = s.file;
  return values;
}

/// The inputs, and a file at every output's name as a previous run would have left it.
fs::path prepare(const Command& c) {
  const fs::path folder = fresh_folder();
  c.make_inputs(folder);
  for (const Slot& s : c.slots) {
    if (s.output) std::ofstream(folder / s.file) << "previous " << s.name << " output\n";
  }
  return folder;
}

/// Every entry of `folder`: a file's bytes, a link's target.
std::map<std::string, std::string> snapshot(const fs::path& folder) {
  std::map<std::string, std::string> entries;
  for (const auto& e : fs::directory_iterator(folder)) {
    const std::string name = e.path().filename().string();
    entries[name] = e.is_symlink() ? "-> " + fs::read_symlink(e.path()).string() : read_file(e.path());
  }
  return entries;
}

std::string joined(const std::vector<std::string>& args) {
  std::string text;
  for (const std::string& a : args) text += a + " ";
  return text;
}

enum class Spelling { kSame, kDotSlash, kAbsolute, kSymbolicLink, kHardLink };
constexpr Spelling kSpellings[] = {Spelling::kSame, Spelling::kDotSlash, Spelling::kAbsolute,
                                   Spelling::kSymbolicLink, Spelling::kHardLink};
const char* to_string(Spelling s) {
  switch (s) {
    case Spelling::kSame: return "same path";
    case Spelling::kDotSlash: return "./path";
    case Spelling::kAbsolute: return "absolute path";
    case Spelling::kSymbolicLink: return "symbolic link";
    case Spelling::kHardLink: return "hard link";
  }
  return "?";
}

/// `file` spelled as `spelling` for the output `option`, from inside `folder`; links are made here (named with the
/// extension the option requires) and listed in `made` for removal.
std::string spell(const fs::path& folder, const std::string& file, Spelling spelling, const Slot& option,
                  std::vector<fs::path>& made) {
  const std::string extension = option.extension.empty() ? fs::path(file).extension().string() : option.extension;
  switch (spelling) {
    case Spelling::kSame: return file;
    case Spelling::kDotSlash: return "./" + file;
    case Spelling::kAbsolute: return (folder / file).string();
    case Spelling::kSymbolicLink: {
      const fs::path link = folder / ("symlink-to-" + fs::path(file).stem().string() + extension);
      fs::create_symlink(file, link);
      made.push_back(link);
      return link.filename().string();
    }
    case Spelling::kHardLink: {
      const fs::path link = folder / ("hardlink-to-" + fs::path(file).stem().string() + extension);
      fs::create_hard_link(folder / file, link);
      made.push_back(link);
      return link.filename().string();
    }
  }
  return file;
}

/// Every output option of `c` set to every input and every other output, in every spelling: refused with exit 2
/// (a usage error) and a message naming the option and "same file", and nothing in the folder changed.
void expect_every_clash_refused(const Command& c) {
  const fs::path folder = prepare(c);
  int cases = 0;
  for (const Slot& out : c.slots) {
    if (!out.output) continue;
    for (const Slot& other : c.slots) {
      if (&other == &out) continue;
      for (const Spelling spelling : kSpellings) {
        std::vector<fs::path> made;
        std::map<std::string, std::string> values = default_values(c);
        values[out.name] = spell(folder, other.file, spelling, out, made);
        const std::vector<std::string> args = c.args(values);
        SCOPED_TRACE(std::string(out.name) + " = " + other.name + " as " + to_string(spelling) + ": " + joined(args));
        const auto before = snapshot(folder);
        const CommandResult r = run_flashot_in(folder, args);
        EXPECT_EQ(r.exit_code, 2) << r.err;
        EXPECT_EQ(lines(r.err).size(), 1u) << r.err;
        EXPECT_NE(r.err.find(out.name + " "), std::string::npos) << r.err;
        EXPECT_NE(r.err.find("same file"), std::string::npos) << r.err;
        EXPECT_TRUE(r.out.empty()) << r.out;
        EXPECT_EQ(snapshot(folder), before) << "every file, input or earlier output, must be left as it was";
        for (const fs::path& link : made) fs::remove(link);
        ++cases;
      }
    }
  }
  std::printf("%s: %d clashes refused\n", c.name.c_str(), cases);
}

TEST(OutputPaths, AlignRefusesEveryOutputThatIsAnInputOrAnotherOutput) { expect_every_clash_refused(command("align")); }
TEST(OutputPaths, MapRefusesEveryOutputThatIsAnInputOrAnotherOutput) { expect_every_clash_refused(command("map")); }
TEST(OutputPaths, RegisterRefusesEveryOutputThatIsAnInputOrAnotherOutput) {
  expect_every_clash_refused(command("register"));
}
TEST(OutputPaths, FlowRefusesEveryOutputThatIsAnInputOrAnotherOutput) { expect_every_clash_refused(command("flow")); }

TEST(OutputPaths, TheMessageNamesBothSidesOfTheClash) {
  const Command& c = command("align");
  const fs::path folder = prepare(c);
  std::map<std::string, std::string> values = default_values(c);
  values["--report"] = "t.h5ad";
  CommandResult r = run_flashot_in(folder, c.args(values));
  EXPECT_NE(r.err.find("--report t.h5ad is the input TARGET (same file)"), std::string::npos) << r.err;
  values = default_values(c);
  values["--coupling"] = "./o.h5ad";
  r = run_flashot_in(folder, c.args(values));
  EXPECT_NE(r.err.find("--coupling ./o.h5ad is also the output -o o.h5ad (same file"), std::string::npos) << r.err;
  values = default_values(c);
  fs::create_symlink("s.h5ad", folder / "alias.h5ad");
  values["-o"] = "alias.h5ad";
  r = run_flashot_in(folder, c.args(values));
  EXPECT_NE(r.err.find("-o alias.h5ad is the input SOURCE s.h5ad (same file through a symbolic link)"),
            std::string::npos)
      << r.err;
}

TEST(OutputPaths, ALinkToAnOutputNotYetWrittenIsTheSameOutput) {
  const Command& c = command("register");
  const fs::path folder = fresh_folder();
  c.make_inputs(folder);
  fs::create_symlink("later.ply", folder / "pointer.json");  // dangling: later.ply does not exist yet
  std::map<std::string, std::string> values = default_values(c);
  values["-o"] = "later.ply";
  values["--report"] = "pointer.json";
  const CommandResult r = run_flashot_in(folder, c.args(values));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--report pointer.json is also the output -o"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(folder / "later.ply"));
}

TEST(OutputPaths, LinkedFoldersAndExistingOutputsAreFine) {
  // Nothing is refused that is no clash: the outputs exist from an earlier run (they are replaced), -o goes through
  // a linked folder, and SOURCE and TARGET may be one file.
  const Command& c = command("register");
  const fs::path folder = prepare(c);
  fs::create_directory(folder / "results");
  fs::create_directory_symlink("results", folder / "latest");
  std::map<std::string, std::string> values = default_values(c);
  values["-o"] = "latest/o.ply";
  values["TARGET"] = "./s.ply";
  const CommandResult r = run_flashot_in(folder, c.args(values));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(folder / "results" / "o.ply"));
  EXPECT_NE(read_file(folder / "r.json").find("\"command\": \"register\""), std::string::npos);
}

TEST(OutputPaths, MissingFolderOfEveryOutputIsAUsageError) {
  for (const Command& c : commands()) {
    const fs::path folder = prepare(c);
    for (const Slot& out : c.slots) {
      if (!out.output) continue;
      std::map<std::string, std::string> values = default_values(c);
      values[out.name] = "no_such_folder/" + out.file;
      SCOPED_TRACE(c.name + " " + out.name);
      const auto before = snapshot(folder);
      const CommandResult r = run_flashot_in(folder, c.args(values));
      EXPECT_EQ(r.exit_code, 2) << r.err;
      EXPECT_EQ(lines(r.err).size(), 1u) << r.err;
      EXPECT_NE(r.err.find(out.name + " no_such_folder/" + out.file + ": folder no_such_folder does not exist"),
                std::string::npos)
          << r.err;
      EXPECT_EQ(snapshot(folder), before);
    }
  }
}

TEST(OutputPaths, TheOutputFolderIsCheckedBeforeTheData) {
  // The output's folder is checked before any file is opened: with a missing folder and an obsm key that SOURCE
  // lacks, the folder is what is reported (exit 2); with the folder fixed, the key (exit 1) — both before the data.
  const Command& c = command("align");
  const fs::path folder = prepare(c);
  std::vector<std::string> args = c.args(default_values(c));
  args.insert(args.end(), {"--key", "X_nope"});
  std::vector<std::string> missing_folder = args;
  missing_folder[4] = "no_such_folder/o.h5ad";
  CommandResult r = run_flashot_in(folder, missing_folder);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("-o no_such_folder/o.h5ad: folder no_such_folder does not exist"), std::string::npos) << r.err;
  r = run_flashot_in(folder, args);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("--key X_nope: SOURCE s.h5ad has no obsm['X_nope'] (obsm keys: X_pca)"), std::string::npos)
      << r.err;
}

TEST(OutputPaths, UnwritableFolderIsAUsageError) {
  if (::geteuid() == 0) {
    GTEST_SKIP() << "running as root: permission bits do not stop root (ReadOnlyLocationRefusesEvenRoot covers it)";
  }
  const Command& c = command("align");
  const fs::path folder = prepare(c);
  fs::create_directory(folder / "locked");
  fs::permissions(folder / "locked", fs::perms::owner_read | fs::perms::owner_exec);
  std::map<std::string, std::string> values = default_values(c);
  values["--report"] = "locked/r.json";
  const CommandResult r = run_flashot_in(folder, c.args(values));
  fs::permissions(folder / "locked", fs::perms::owner_all);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--report locked/r.json: folder locked is not writable"), std::string::npos) << r.err;
}

TEST(OutputPaths, ReadOnlyLocationRefusesEvenRoot) {
  // /proc takes no new file, whoever asks: the probe file finds it out where access() would let root pass.
  const Command& c = command("align");
  const fs::path folder = prepare(c);
  std::map<std::string, std::string> values = default_values(c);
  values["--report"] = "/proc/flashot-report.json";
  const auto before = snapshot(folder);
  const CommandResult r = run_flashot_in(folder, c.args(values));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--report /proc/flashot-report.json: folder /proc is not writable"), std::string::npos)
      << r.err;
  EXPECT_EQ(snapshot(folder), before);
}

TEST(OutputPaths, FoldersAndDevicesAreNoOutputs) {
  const Command& c = command("align");
  const fs::path folder = prepare(c);
  fs::create_directory(folder / "dir.h5ad");
  std::map<std::string, std::string> values = default_values(c);
  values["-o"] = "dir.h5ad";
  CommandResult r = run_flashot_in(folder, c.args(values));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("-o dir.h5ad is a folder"), std::string::npos) << r.err;
  values = default_values(c);
  values["--report"] = "results/";
  r = run_flashot_in(folder, c.args(values));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--report results/ is a folder, not a file name"), std::string::npos) << r.err;
  values = default_values(c);
  values["--report"] = "/dev/null";
  r = run_flashot_in(folder, c.args(values));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--report /dev/null exists and is not a regular file"), std::string::npos) << r.err;
}

// ---- Options that name data, against the files' metadata ---------------------------------------------------------

void expect_error(const CommandResult& r, int code, const std::vector<std::string>& mentions) {
  EXPECT_EQ(r.exit_code, code) << r.err;
  EXPECT_EQ(lines(r.err).size(), 1u) << r.err;
  for (const std::string& m : mentions) EXPECT_NE(r.err.find(m), std::string::npos) << "'" << m << "' in: " << r.err;
}

// The SOURCE of these has a NaN in row 7 of X_pca: reading its data fails, so an error about an option proves the
// option was checked against the metadata before the data were read.
fs::path poisoned_pair() {
  const fs::path folder = fresh_folder();
  write_h5ad(folder / "s.h5ad", 20, 4, "X_pca", 7);
  write_h5ad(folder / "t.h5ad", 30, 4);
  write_h5ad(folder / "t5.h5ad", 30, 5);
  write_h5ad(folder / "t_scvi.h5ad", 30, 4, "X_scvi");
  return folder;
}

TEST(DataChecks, AlignOptionsAreCheckedBeforeTheData) {
  const fs::path f = poisoned_pair();
  const std::vector<std::string> base = {"align", "s.h5ad", "t.h5ad", "-o", "o.h5ad", "--quiet", "--backend", "cpu"};
  const auto with = [&](std::vector<std::string> extra, const std::string& target = "t.h5ad") {
    std::vector<std::string> args = base;
    args[2] = target;
    args.insert(args.end(), extra.begin(), extra.end());
    return run_flashot_in(f, args);
  };
  expect_error(with({"--transfer-labels", "louvain"}), 1,
               {"--transfer-labels louvain: TARGET t.h5ad has no obs column 'louvain' (obs columns: cell_type)"});
  expect_error(with({"--source-where", "batch=1"}), 1,
               {"--source-where batch=1: SOURCE s.h5ad has no obs column 'batch' (obs columns: cell_type)"});
  expect_error(with({"--target-where", "stage=3"}), 1, {"--target-where stage=3: TARGET t.h5ad", "cell_type"});
  expect_error(with({"--key", "X_umap"}), 1, {"--key X_umap: SOURCE s.h5ad has no obsm['X_umap'] (obsm keys: X_pca)"});
  expect_error(with({}, "t_scvi.h5ad"), 1, {"no --key given and TARGET t_scvi.h5ad has no obsm['X_pca']", "X_scvi"});
  expect_error(with({}, "t5.h5ad"), 1, {"SOURCE s.h5ad obsm['X_pca'] is 4-d but TARGET t5.h5ad obsm['X_pca'] is 5-d"});
  expect_error(with({"--use-x"}), 1, {"--use-x: SOURCE s.h5ad has no X"});
  // With every option right, the data are read and the NaN is found.
  expect_error(with({}), 1, {"row 7", "nan"});
  EXPECT_FALSE(fs::exists(f / "o.h5ad"));
}

TEST(DataChecks, UseXNeedsGenesBothFilesShare) {
  const fs::path f = fresh_folder();
  for (const auto& [name, prefix] : {std::pair{"s.h5ad", "g"}, std::pair{"t.h5ad", "h"}}) {
    io::H5adContent content;
    for (std::size_t i = 0; i < 6; ++i) content.obs_names.push_back("c" + std::to_string(i));
    content.var_names = {std::string(prefix) + "0", std::string(prefix) + "1"};
    content.x_dense = io::DenseMatrix{6, 2, std::vector<float>(12, 1.0f)};
    io::write_h5ad(f / name, content);
  }
  expect_error(run_flashot_in(f, {"align", "s.h5ad", "t.h5ad", "-o", "o.h5ad", "--use-x"}), 1,
               {"--use-x: SOURCE s.h5ad and TARGET t.h5ad share no gene (var name)"});
  expect_error(run_flashot_in(f, {"align", "s.h5ad", "t.h5ad", "-o", "o.h5ad", "--use-x", "--key", "X_pca"}), 1,
               {"--key X_pca and --use-x exclude each other"});
}

TEST(DataChecks, PlyPropertiesAreCheckedFromTheHeaderAlone) {
  const fs::path f = fresh_folder();
  write_ply(f / "s.ply", 40, 1);
  write_ply(f / "t.ply", 50, 2);
  // A TARGET whose payload is cut short: only its header is read before the label column is found missing.
  const std::string whole = read_file(f / "t.ply");
  std::ofstream(f / "cut.ply", std::ios::binary) << whole.substr(0, whole.size() - 100);
  expect_error(run_flashot_in(f, {"align", "s.ply", "cut.ply", "-o", "o.ply", "--transfer-labels", "label"}), 1,
               {"--transfer-labels label: TARGET cut.ply has no scalar vertex property 'label' (properties: x, y, z, "
                "part)"});
  expect_error(run_flashot_in(f, {"align", "s.ply", "t.ply", "-o", "o.ply", "--source-where", "segment=2"}), 1,
               {"--source-where segment=2: SOURCE s.ply has no scalar vertex property 'segment'"});
  expect_error(run_flashot_in(f, {"align", "s.ply", "t.ply", "-o", "o.ply", "--key", "X_pca"}), 1,
               {"--key X_pca: PLY files are aligned by their vertex x, y, z"});
  // A cloud without z, for register and flow.
  io::PlyFile flat;
  flat.format = io::PlyFormat::kAscii;
  flat.elements.push_back({"vertex", 2, {{"x", io::PlyType::kFloat32, false, io::PlyType::kUint8, {0, 1}, {}},
                                         {"y", io::PlyType::kFloat32, false, io::PlyType::kUint8, {0, 1}, {}}}});
  io::write_ply(f / "flat.ply", flat);
  for (const char* cmd : {"register", "flow"}) {
    expect_error(run_flashot_in(f, {cmd, "flat.ply", "t.ply", "-o", "o.ply"}), 1,
                 {"SOURCE flat.ply: the vertex element has no scalar property 'z' (properties: x, y)"});
  }
  // With the right names the cut file is read in full and its truncation reported.
  expect_error(run_flashot_in(f, {"align", "s.ply", "cut.ply", "-o", "o.ply", "--transfer-labels", "part"}), 1,
               {"cut.ply"});
  EXPECT_FALSE(fs::exists(f / "o.ply"));
}

TEST(DataChecks, MapChecksTheSolutionHeaderAndThePoints) {
  const fs::path f = fresh_folder();
  write_solution(f / "sol", 20, 30, 4, "X_pca");
  write_solution(f / "sol_x", 20, 30, 4, "X");
  write_h5ad(f / "p.h5ad", 10, 4, "X_pca", 3);
  write_h5ad(f / "p3.h5ad", 10, 3);
  write_h5ad(f / "p_scvi.h5ad", 10, 4, "X_scvi");
  const auto map = [&](const std::string& points, std::vector<std::string> extra, const std::string& sol = "sol") {
    std::vector<std::string> args = {"map", "--solution", sol, points, "-o", "m.h5ad", "--quiet", "--backend", "cpu"};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_flashot_in(f, args);
  };
  expect_error(map("p_scvi.h5ad", {}), 1,
               {"the solution's key X_pca: POINTS p_scvi.h5ad has no obsm['X_pca'] (obsm keys: X_scvi)"});
  expect_error(map("p.h5ad", {"--key", "X_umap"}), 1, {"--key X_umap: POINTS p.h5ad has no obsm['X_umap']"});
  expect_error(map("p.h5ad", {"--where", "batch=2"}), 1, {"--where batch=2: POINTS p.h5ad has no obs column 'batch'"});
  expect_error(map("p3.h5ad", {}), 1, {"POINTS p3.h5ad is 3-d (obsm['X_pca']) but the solution sol is 4-d"});
  expect_error(map("p.h5ad", {}, "sol_x"), 1, {"--use-x cannot map new files"});
  expect_error(map("p.h5ad", {}), 1, {"row 3", "nan"});  // every name right: the data are read
  EXPECT_FALSE(fs::exists(f / "m.h5ad"));
}

// ---- flashot info with several files ------------------------------------------------------------------------------

TEST(Info, SeveralFilesEachDescribed) {
  const std::string a = (kSamples / "cells_batch_a.h5ad").string(), ply = (kSamples / "shape.ply").string();
  CommandResult r = run_flashot({"info", a, ply});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("cells_batch_a.h5ad: AnnData"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("shape.ply: PLY"), std::string::npos) << r.out;
  EXPECT_LT(r.out.find("cells_batch_a.h5ad: AnnData"), r.out.find("shape.ply: PLY")) << "in the order given";
  r = run_flashot({"info", a, ply, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["file"], a);
  EXPECT_EQ(j[0]["n_obs"], 2400);
  EXPECT_EQ(j[1]["file"], ply);
  EXPECT_EQ(j[1]["type"], "ply");
  r = run_flashot({"info", ply, "--json"});  // one file: one object, as before
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(nlohmann::json::parse(r.out).is_object());
}

TEST(Info, ABadFileAmongSeveralIsOneErrorLineAndTheOthersAreStillDescribed) {
  const fs::path f = fresh_folder();
  std::ofstream(f / "garbage.h5ad") << "this is not HDF5";
  const std::string ply = (kSamples / "shape.ply").string();
  const CommandResult r = run_flashot({"info", (f / "garbage.h5ad").string(), ply, (f / "missing.ply").string(),
                                       "--json"});
  EXPECT_EQ(r.exit_code, 1);
  ASSERT_EQ(lines(r.err).size(), 2u) << r.err;
  EXPECT_NE(lines(r.err)[0].find("garbage.h5ad"), std::string::npos) << r.err;
  EXPECT_NE(lines(r.err)[1].find("missing.ply"), std::string::npos) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["file"], ply);
}

}  // namespace
}  // namespace flashot::test
