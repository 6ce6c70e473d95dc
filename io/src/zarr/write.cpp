// Writing AnnData as zarr (write.hpp). The layout is what anndata ≥0.8 writes and reads: the same elements and
// encodings as write_h5ad's .h5ad (anndata_write.cpp; the column choices both make are in anndata_encode.hpp),
// arrays chunked along their first dimension (≈1 MiB chunks) and zstd-compressed, strings as vlen-utf8, consolidated
// metadata at the root (.zmetadata for format 2, inline in the root zarr.json for format 3), so anndata.read_zarr
// opens it with one metadata read.

#include "zarr/write.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "anndata_encode.hpp"
#include "flashot/io/errors.hpp"
#include "partial_file.hpp"
#include "zarr/anndata_zarr.hpp"
#include "zarr/node.hpp"
#include "zarr/store.hpp"

namespace flashot::io::zarr {

using nlohmann::json;

namespace {

constexpr std::size_t kChunkBytes = std::size_t{1} << 20;

std::filesystem::path normalized(const std::filesystem::path& p) {
  std::string s = p.string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

// ---- sinks -------------------------------------------------------------------------------------------------------

class Sink {
 public:
  virtual ~Sink() = default;
  virtual void put(const std::string& key, const std::string& bytes) = 0;
  virtual void commit() = 0;
};

void write_all(int fd, const char* data, std::size_t n, const std::string& shown) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      throw IoError(shown + ": cannot write: " + detail::errno_cause(errno));
    }
    data += w;
    n -= static_cast<std::size_t>(w);
  }
}

void sync_folder(const std::filesystem::path& folder) {
  const int fd = ::open(folder.empty() ? "." : folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// A directory store built in `.<name>.flashot-partial-…` beside the target, then renamed into place (an existing
// target is exchanged atomically with renameat2(RENAME_EXCHANGE) and then removed).
class DirectorySink final : public Sink {
 public:
  explicit DirectorySink(const std::filesystem::path& target) : target_(target), temp_(detail::partial_path_for(target)) {
    if (::mkdir(temp_.c_str(), 0777) != 0) throw IoError(target_.string() + ": cannot create " + temp_.string() + ": " + detail::errno_cause(errno));
  }
  ~DirectorySink() override {
    if (!committed_) {
      std::error_code ec;
      std::filesystem::remove_all(temp_, ec);
    }
  }
  void put(const std::string& key, const std::string& bytes) override {
    const std::filesystem::path file = temp_ / key;
    std::error_code ec;
    std::filesystem::create_directories(file.parent_path(), ec);
    if (ec) throw IoError(target_.string() + ": cannot create " + file.parent_path().string() + ": " + ec.message());
    const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) throw IoError(target_.string() + ": " + key + ": cannot create: " + detail::errno_cause(errno));
    try {
      write_all(fd, bytes.data(), bytes.size(), target_.string() + ": " + key);
    } catch (...) {
      ::close(fd);
      throw;
    }
    if (::close(fd) != 0) throw IoError(target_.string() + ": " + key + ": cannot write: " + detail::errno_cause(errno));
  }
  void commit() override {
    ::sync();  // every file of the store on disk before it takes the target's name
    std::error_code ec;
    const bool exists = std::filesystem::exists(std::filesystem::symlink_status(target_, ec));
    if (exists) {
      if (!std::filesystem::is_directory(target_, ec)) {
        throw IoError(target_.string() + ": exists and is not a folder; a .zarr store is written as a folder");
      }
      if (::renameat2(AT_FDCWD, temp_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) != 0) {
        throw IoError(target_.string() + ": cannot put the new store in place: " + detail::errno_cause(errno));
      }
      committed_ = true;
      std::filesystem::remove_all(temp_, ec);  // now the previous store
    } else {
      if (::rename(temp_.c_str(), target_.c_str()) != 0) {
        throw IoError(target_.string() + ": cannot put the new store in place: " + detail::errno_cause(errno));
      }
      committed_ = true;
    }
    sync_folder(target_.parent_path());
  }

 private:
  std::filesystem::path target_, temp_;
  bool committed_ = false;
};

// A zip archive of stored entries (ZIP64 where sizes or offsets need it), written to a partial file.
class ZipSink final : public Sink {
 public:
  explicit ZipSink(const std::filesystem::path& target) : partial_(target) {
    fd_ = ::open(partial_.path().c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd_ < 0) throw IoError(target.string() + ": cannot create " + partial_.path().string() + ": " + detail::errno_cause(errno));
  }
  ~ZipSink() override {
    if (fd_ >= 0) ::close(fd_);
  }
  void put(const std::string& key, const std::string& bytes) override {
    Entry e{key, static_cast<std::uint32_t>(crc(bytes)), bytes.size(), offset_};
    std::string header;
    const bool big = bytes.size() >= 0xFFFFFFFFu;
    le(header, 0x04034b50, 4);
    le(header, big ? 45 : 20, 2);  // version needed
    le(header, 0x0800, 2);  // UTF-8 names
    le(header, 0, 2);       // stored
    le(header, 0, 4);       // time, date
    le(header, e.crc, 4);
    le(header, big ? 0xFFFFFFFFu : bytes.size(), 4);
    le(header, big ? 0xFFFFFFFFu : bytes.size(), 4);
    le(header, key.size(), 2);
    le(header, big ? 20 : 0, 2);
    header += key;
    if (big) {
      le(header, 1, 2);
      le(header, 16, 2);
      le(header, bytes.size(), 8);
      le(header, bytes.size(), 8);
    }
    emit(header);
    emit(bytes);
    entries_.push_back(std::move(e));
  }
  void commit() override {
    const std::uint64_t cd_start = offset_;
    std::string cd;
    for (const auto& e : entries_) {
      const bool big_size = e.size >= 0xFFFFFFFFu, big_off = e.offset >= 0xFFFFFFFFu;
      std::string extra;
      if (big_size || big_off) {
        std::string body;
        if (big_size) { le(body, e.size, 8); le(body, e.size, 8); }
        if (big_off) le(body, e.offset, 8);
        le(extra, 1, 2);
        le(extra, body.size(), 2);
        extra += body;
      }
      le(cd, 0x02014b50, 4);
      le(cd, 45 | (3 << 8), 2);
      le(cd, (big_size || big_off) ? 45 : 20, 2);
      le(cd, 0x0800, 2);
      le(cd, 0, 2);
      le(cd, 0, 4);
      le(cd, e.crc, 4);
      le(cd, big_size ? 0xFFFFFFFFu : e.size, 4);
      le(cd, big_size ? 0xFFFFFFFFu : e.size, 4);
      le(cd, e.key.size(), 2);
      le(cd, extra.size(), 2);
      le(cd, 0, 2);
      le(cd, 0, 2);
      le(cd, 0, 2);
      le(cd, 0100644u << 16, 4);
      le(cd, big_off ? 0xFFFFFFFFu : e.offset, 4);
      cd += e.key;
      cd += extra;
    }
    emit(cd);
    const std::uint64_t cd_end = offset_;
    const bool z64 = entries_.size() >= 0xFFFF || cd_start >= 0xFFFFFFFFu || cd.size() >= 0xFFFFFFFFu;
    std::string tail;
    if (z64) {
      le(tail, 0x06064b50, 4);
      le(tail, 44, 8);
      le(tail, 45, 2);
      le(tail, 45, 2);
      le(tail, 0, 4);
      le(tail, 0, 4);
      le(tail, entries_.size(), 8);
      le(tail, entries_.size(), 8);
      le(tail, cd.size(), 8);
      le(tail, cd_start, 8);
      le(tail, 0x07064b50, 4);
      le(tail, 0, 4);
      le(tail, cd_end, 8);
      le(tail, 1, 4);
    }
    le(tail, 0x06054b50, 4);
    le(tail, 0, 2);
    le(tail, 0, 2);
    le(tail, z64 ? 0xFFFF : entries_.size(), 2);
    le(tail, z64 ? 0xFFFF : entries_.size(), 2);
    le(tail, z64 ? 0xFFFFFFFFu : cd.size(), 4);
    le(tail, z64 ? 0xFFFFFFFFu : cd_start, 4);
    le(tail, 0, 2);
    emit(tail);
    if (::close(fd_) != 0) {
      fd_ = -1;
      throw IoError(partial_.target().string() + ": cannot write: " + detail::errno_cause(errno));
    }
    fd_ = -1;
    partial_.commit();
  }

 private:
  struct Entry {
    std::string key;
    std::uint32_t crc;
    std::uint64_t size, offset;
  };
  static void le(std::string& out, std::uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out += static_cast<char>((v >> (8 * i)) & 0xFF);
  }
  static std::uint32_t crc(const std::string& s) {
    uLong c = ::crc32(0L, Z_NULL, 0);
    for (std::size_t at = 0; at < s.size();) {
      const std::size_t n = std::min<std::size_t>(s.size() - at, std::size_t{1} << 30);
      c = ::crc32(c, reinterpret_cast<const Bytef*>(s.data() + at), static_cast<uInt>(n));
      at += n;
    }
    return static_cast<std::uint32_t>(c);
  }
  void emit(const std::string& bytes) {
    write_all(fd_, bytes.data(), bytes.size(), partial_.target().string());
    offset_ += bytes.size();
  }
  detail::PartialFile partial_;
  int fd_ = -1;
  std::uint64_t offset_ = 0;
  std::vector<Entry> entries_;
};

std::unique_ptr<Sink> make_sink(const std::filesystem::path& target) {
  if (is_zip_name(target)) return std::make_unique<ZipSink>(target);
  return std::make_unique<DirectorySink>(target);
}

// ---- the zarr layer --------------------------------------------------------------------------------------------

std::string zstd(const std::string& in, const std::string& shown) {
  std::string out(ZSTD_compressBound(in.size()), '\0');
  const std::size_t n = ZSTD_compress(out.data(), out.size(), in.data(), in.size(), 3);
  if (ZSTD_isError(n)) throw IoError(shown + ": zstd: " + ZSTD_getErrorName(n));
  out.resize(n);
  return out;
}

enum class Elem { kBool, kInt8, kInt16, kInt32, kInt64, kFloat32, kFloat64, kString };

std::size_t elem_size(Elem e) {
  switch (e) {
    case Elem::kBool: case Elem::kInt8: return 1;
    case Elem::kInt16: return 2;
    case Elem::kInt32: case Elem::kFloat32: return 4;
    case Elem::kInt64: case Elem::kFloat64: return 8;
    case Elem::kString: return 0;
  }
  return 0;
}

class Writer {
 public:
  Writer(Sink& sink, int format, std::string shown) : sink_(sink), format_(format), shown_(std::move(shown)) {}

  void group(const std::string& path, json attrs) {
    if (format_ == 3) {
      json m{{"zarr_format", 3}, {"node_type", "group"}, {"attributes", attrs}};
      if (path.empty()) {
        root_ = m;  // written last, with the consolidated metadata
        return;
      }
      put_meta(path, "zarr.json", m);
    } else {
      put_meta(path, ".zgroup", json{{"zarr_format", 2}});
      put_meta(path, ".zattrs", attrs);
    }
  }

  // A numeric / boolean array of `shape` (0-D, 1-D or 2-D) from native little-endian bytes.
  void array(const std::string& path, Elem elem, const std::vector<std::uint64_t>& shape, const void* data, json attrs) {
    const std::size_t size = elem_size(elem);
    std::uint64_t row_elems = 1;
    for (std::size_t d = 1; d < shape.size(); ++d) row_elems *= shape[d];
    const std::uint64_t rows = shape.empty() ? 1 : shape[0];
    const std::uint64_t chunk_rows = std::max<std::uint64_t>(1, kChunkBytes / std::max<std::uint64_t>(1, row_elems * size));
    std::vector<std::uint64_t> chunks = shape;
    if (!chunks.empty()) chunks[0] = std::max<std::uint64_t>(1, std::min(rows, chunk_rows));
    for (auto& c : chunks) c = std::max<std::uint64_t>(c, 1);
    meta_array(path, elem, shape, chunks, attrs);
    const auto* bytes = static_cast<const char*>(data);
    if (shape.empty()) {
      put(path, chunk_key({}), zstd(std::string(bytes, size), shown_));
      return;
    }
    for (std::uint64_t at = 0, i = 0; at < rows; at += chunks[0], ++i) {
      // every chunk holds whole chunk-size blocks: the last one is padded with zeros (the fill value)
      std::string chunk(chunks[0] * row_elems * size, '\0');
      const std::uint64_t n = std::min(chunks[0], rows - at);
      std::memcpy(chunk.data(), bytes + at * row_elems * size, n * row_elems * size);
      std::vector<std::uint64_t> index(shape.size(), 0);
      index[0] = i;
      put(path, chunk_key(index), zstd(chunk, shown_));
    }
  }

  void strings(const std::string& path, const std::vector<std::string>& values, json attrs, bool scalar = false) {
    const std::vector<std::uint64_t> shape = scalar ? std::vector<std::uint64_t>{} : std::vector<std::uint64_t>{values.size()};
    std::vector<std::uint64_t> chunks = shape;
    std::size_t total = 0;
    for (const auto& v : values) total += v.size() + 4;
    const std::uint64_t per = values.empty() ? 1 : std::max<std::uint64_t>(1, kChunkBytes / std::max<std::size_t>(1, total / values.size()));
    if (!scalar) chunks[0] = std::max<std::uint64_t>(1, std::min<std::uint64_t>(values.size(), per));
    meta_array(path, Elem::kString, shape, chunks, attrs);
    const std::uint64_t n = values.size();
    const std::uint64_t step = scalar ? 1 : chunks[0];
    for (std::uint64_t at = 0, i = 0; at < n; at += step, ++i) {
      std::string chunk;
      const std::uint64_t count = scalar ? 1 : chunks[0];
      auto le32 = [&](std::uint32_t v) { for (int b = 0; b < 4; ++b) chunk += static_cast<char>((v >> (8 * b)) & 0xFF); };
      le32(static_cast<std::uint32_t>(count));
      for (std::uint64_t k = 0; k < count; ++k) {
        const std::string empty;
        const std::string& s = at + k < n ? values[at + k] : empty;
        le32(static_cast<std::uint32_t>(s.size()));
        chunk += s;
      }
      put(path, scalar ? chunk_key({}) : chunk_key({i}), zstd(chunk, shown_));
    }
  }

  // Metadata documents copied from an input store (already in the output's format), recorded for consolidation.
  void copy_meta(const std::string& key, const std::string& text) {
    const auto slash = key.rfind('/');
    const std::string path = slash == std::string::npos ? "" : key.substr(0, slash);
    const std::string leaf = slash == std::string::npos ? key : key.substr(slash + 1);
    json doc = json::parse(text, nullptr, false);
    if (doc.is_discarded()) throw FormatError(shown_, key, "bad JSON in the input store");
    if (doc.is_object()) doc.erase("consolidated_metadata");  // rebuilt at the root by finish()
    if (format_ == 3 && path.empty() && leaf == "zarr.json") {
      root_ = doc;
      return;
    }
    put_meta(path, leaf, doc);
  }

  void raw(const std::string& key, const std::string& bytes) { sink_.put(key, bytes); }

  void finish() {
    if (format_ == 3) {
      json nested = json::object();
      for (const auto& [path, m] : consolidated_) nested[path] = m;
      json root = root_.is_null() ? json{{"zarr_format", 3}, {"node_type", "group"}, {"attributes", json::object()}} : root_;
      root["consolidated_metadata"] = json{{"kind", "inline"}, {"must_understand", false}, {"metadata", nested}};
      sink_.put("zarr.json", root.dump(2));
    } else {
      json meta = json::object();
      for (const auto& [key, m] : v2_docs_) meta[key] = m;
      sink_.put(".zmetadata", json{{"metadata", meta}, {"zarr_consolidated_format", 1}}.dump(2));
    }
    sink_.commit();
  }

 private:
  std::string chunk_key(const std::vector<std::uint64_t>& index) const {
    std::string k;
    if (format_ == 3) {
      k = "c";
      for (auto i : index) k += "/" + std::to_string(i);
      return k;
    }
    if (index.empty()) return "0";
    for (std::size_t i = 0; i < index.size(); ++i) k += (i ? "." : "") + std::to_string(index[i]);
    return k;
  }

  void put(const std::string& path, const std::string& leaf, const std::string& bytes) {
    sink_.put(path.empty() ? leaf : path + "/" + leaf, bytes);
  }

  void put_meta(const std::string& path, const std::string& leaf, const json& doc) {
    put(path, leaf, doc.dump(2));
    const std::string key = path.empty() ? leaf : path + "/" + leaf;
    if (format_ == 3) {
      if (leaf == "zarr.json" && !path.empty()) {
        json m = doc;
        m.erase("consolidated_metadata");
        consolidated_[path] = m;
      }
    } else {
      v2_docs_[key] = doc;
    }
  }

  void meta_array(const std::string& path, Elem elem, const std::vector<std::uint64_t>& shape,
                  const std::vector<std::uint64_t>& chunks, const json& attrs) {
    const bool text = elem == Elem::kString;
    const json fill = text ? json("") : elem == Elem::kBool ? json(false) : (elem == Elem::kFloat32 || elem == Elem::kFloat64) ? json(0.0) : json(0);
    if (format_ == 3) {
      static const char* kNames[] = {"bool", "int8", "int16", "int32", "int64", "float32", "float64", "string"};
      json codecs = json::array();
      if (text) codecs.push_back(json{{"name", "vlen-utf8"}, {"configuration", json::object()}});
      else if (elem_size(elem) == 1) codecs.push_back(json{{"name", "bytes"}});
      else codecs.push_back(json{{"name", "bytes"}, {"configuration", {{"endian", "little"}}}});
      codecs.push_back(json{{"name", "zstd"}, {"configuration", {{"level", 3}, {"checksum", false}}}});
      json m{{"zarr_format", 3},
             {"node_type", "array"},
             {"shape", shape},
             {"data_type", kNames[static_cast<int>(elem)]},
             {"chunk_grid", {{"name", "regular"}, {"configuration", {{"chunk_shape", chunks}}}}},
             {"chunk_key_encoding", {{"name", "default"}, {"configuration", {{"separator", "/"}}}}},
             {"fill_value", fill},
             {"codecs", codecs},
             {"attributes", attrs}};
      put_meta(path, "zarr.json", m);
    } else {
      static const char* kNames[] = {"|b1", "|i1", "<i2", "<i4", "<i8", "<f4", "<f8", "|O"};
      json m{{"zarr_format", 2},
             {"shape", shape},
             {"chunks", chunks},
             {"dtype", kNames[static_cast<int>(elem)]},
             {"compressor", {{"id", "zstd"}, {"level", 3}}},
             {"fill_value", fill},
             {"order", "C"},
             {"filters", text ? json::array({json{{"id", "vlen-utf8"}}}) : json()},
             {"dimension_separator", "."}};
      put_meta(path, ".zarray", m);
      put_meta(path, ".zattrs", attrs);
    }
  }

  Sink& sink_;
  int format_;
  std::string shown_;
  json root_;
  std::map<std::string, json> consolidated_;
  std::map<std::string, json> v2_docs_;
};

// ---- AnnData elements (as anndata_write.cpp writes them) -----------------------------------------------------------

json enc(const std::string& type, const std::string& version) { return json{{"encoding-type", type}, {"encoding-version", version}}; }

std::string join(const std::string& a, const std::string& b) { return a.empty() ? b : a + "/" + b; }

void write_dense(Writer& w, const std::string& path, const DenseMatrix& m) {
  w.array(path, Elem::kFloat32, {m.rows, m.cols}, m.values.data(), enc("array", "0.2.0"));
}

void write_index_array(Writer& w, const std::string& path, const std::vector<std::int64_t>& values, std::int64_t max) {
  if (max <= std::numeric_limits<std::int32_t>::max()) {
    std::vector<std::int32_t> narrow(values.begin(), values.end());
    w.array(path, Elem::kInt32, {values.size()}, narrow.data(), enc("array", "0.2.0"));
  } else {
    w.array(path, Elem::kInt64, {values.size()}, values.data(), enc("array", "0.2.0"));
  }
}

void write_sparse(Writer& w, const std::string& path, const SparseMatrix& m) {
  json attrs = enc(m.csc ? "csc_matrix" : "csr_matrix", "0.1.0");
  attrs["shape"] = {m.rows, m.cols};
  w.group(path, attrs);
  w.array(join(path, "data"), Elem::kFloat32, {m.data.size()}, m.data.data(), enc("array", "0.2.0"));
  write_index_array(w, join(path, "indices"), m.indices, static_cast<std::int64_t>(m.csc ? m.rows : m.cols));
  write_index_array(w, join(path, "indptr"), m.indptr, static_cast<std::int64_t>(m.data.size()));
}

void write_strings(Writer& w, const std::string& path, const std::vector<std::string>& values) {
  w.strings(path, values, enc("string-array", "0.2.0"));
}

void write_column(Writer& w, const std::string& path, const Column& c) {
  switch (c.kind) {
    case Column::Kind::kCategorical: {
      json attrs = enc("categorical", "0.2.0");
      attrs["ordered"] = c.ordered;
      w.group(path, attrs);
      const std::uint64_t n = c.codes.size();
      const std::size_t code_bytes = anndata_encode::code_bytes(c.categories.size());
      if (code_bytes == 1) {
        std::vector<std::int8_t> narrow(c.codes.begin(), c.codes.end());
        w.array(join(path, "codes"), Elem::kInt8, {n}, narrow.data(), enc("array", "0.2.0"));
      } else if (code_bytes == 2) {
        std::vector<std::int16_t> narrow(c.codes.begin(), c.codes.end());
        w.array(join(path, "codes"), Elem::kInt16, {n}, narrow.data(), enc("array", "0.2.0"));
      } else {
        w.array(join(path, "codes"), Elem::kInt32, {n}, c.codes.data(), enc("array", "0.2.0"));
      }
      write_strings(w, join(path, "categories"), c.categories);
      return;
    }
    case Column::Kind::kNumeric: {
      const std::vector<double> values = anndata_encode::numbers_with_nan(c);
      w.array(path, Elem::kFloat64, {values.size()}, values.data(), enc("array", "0.2.0"));
      return;
    }
    case Column::Kind::kString: {
      if (!anndata_encode::any_missing(c)) {
        write_strings(w, path, c.strings);
        return;
      }
      write_column(w, path, anndata_encode::strings_as_categorical(c));
      return;
    }
    case Column::Kind::kBoolean: {
      if (!anndata_encode::any_missing(c)) {
        w.array(path, Elem::kBool, {c.flags.size()}, c.flags.data(), enc("array", "0.2.0"));
        return;
      }
      w.group(path, enc("nullable-boolean", "0.1.0"));
      w.array(join(path, "values"), Elem::kBool, {c.flags.size()}, c.flags.data(), enc("array", "0.2.0"));
      w.array(join(path, "mask"), Elem::kBool, {c.missing.size()}, c.missing.data(), enc("array", "0.2.0"));
      return;
    }
  }
}

void write_dataframe(Writer& w, const std::string& path, const std::vector<std::string>& index,
                     const std::map<std::string, Column>& columns) {
  const std::string index_name = anndata_encode::index_key(columns);
  json attrs = enc("dataframe", "0.2.0");
  attrs["_index"] = index_name;
  json order = json::array();
  for (const auto& [key, column] : columns) order.push_back(key);
  attrs["column-order"] = order;
  w.group(path, attrs);
  write_strings(w, join(path, index_name), index);
  for (const auto& [key, column] : columns) write_column(w, join(path, key), column);
}

void write_uns_value(Writer& w, const std::string& path, const UnsValue& value) {
  if (const auto* d = std::get_if<double>(&value)) {
    w.array(path, Elem::kFloat64, {}, d, enc("numeric-scalar", "0.2.0"));
  } else if (const auto* i = std::get_if<std::int64_t>(&value)) {
    w.array(path, Elem::kInt64, {}, i, enc("numeric-scalar", "0.2.0"));
  } else if (const auto* s = std::get_if<std::string>(&value)) {
    w.strings(path, {*s}, enc("string", "0.2.0"), true);
  } else {
    const auto& v = std::get<std::vector<double>>(value);
    w.array(path, Elem::kFloat64, {v.size()}, v.data(), enc("array", "0.2.0"));
  }
}

}  // namespace

void write_new(const std::filesystem::path& path_in, const std::vector<std::string>& obs_names,
               const std::vector<std::string>& var_names, const DenseMatrix* x_dense, const SparseMatrix* x_sparse,
               const H5adContent& c, int format) {
  if (format != 2 && format != 3) throw std::invalid_argument("zarr format " + std::to_string(format) + ": must be 2 or 3");
  const std::filesystem::path path = normalized(path_in);
  auto sink = make_sink(path);
  Writer w(*sink, format, path.string());
  w.group("", enc("anndata", "0.1.0"));
  if (x_dense) write_dense(w, "X", *x_dense);
  if (x_sparse) write_sparse(w, "X", *x_sparse);
  write_dataframe(w, "obs", obs_names, c.obs);
  write_dataframe(w, "var", var_names, c.var);
  w.group("obsm", enc("dict", "0.1.0"));
  for (const auto& [key, m] : c.obsm) write_dense(w, "obsm/" + key, m);
  w.group("uns", enc("dict", "0.1.0"));
  for (const auto& [key, v] : c.uns) write_uns_value(w, "uns/" + key, v);
  for (const char* name : {"varm", "obsp", "varp", "layers"}) w.group(name, enc("dict", "0.1.0"));
  w.finish();
}

H5adContent gather_for_conversion(const std::filesystem::path& input, const H5adContent& additions) {
  const H5adReader reader(input);
  std::vector<std::string> lost;
  for (const char* group : {"layers", "varm", "obsp", "varp"}) {
    const std::vector<std::string> keys = std::string(group) == "layers" ? reader.layer_keys()
                                          : std::string(group) == "varm" ? reader.varm_keys()
                                                                         : std::vector<std::string>{};
    for (const auto& k : keys) lost.push_back(std::string(group) + "/" + k);
  }
  if (reader.has_raw()) lost.push_back("raw");
  H5adContent out;
  out.obs_names = reader.obs_names();
  out.var_names = reader.var_names();
  if (auto x = reader.x_info()) {
    if (x->encoding == "csr_matrix" || x->encoding == "csc_matrix") out.x_sparse = reader.read_x_sparse();
    else out.x_dense = reader.read_x_dense();
  }
  for (const auto& key : reader.obsm_keys()) out.obsm[key] = reader.read_obsm(key);
  for (const auto& col : reader.obs_columns()) out.obs[col] = reader.read_obs(col);
  for (const auto& col : reader.var_columns()) out.var[col] = reader.read_var(col);
  for (const auto& key : reader.uns_keys()) {
    try {
      out.uns[key] = reader.read_uns(key);
    } catch (const FormatError&) {
      lost.push_back("uns/" + key);
    }
  }
  if (!lost.empty()) {
    std::string list;
    for (const auto& l : lost) list += (list.empty() ? "" : ", ") + l;
    throw std::invalid_argument(input.string() + ": converting between .h5ad and zarr would drop " + list +
                                " (flashot carries X, obs, var, obsm and plain uns values across formats); write the "
                                "output in the input's format instead");
  }
  for (const auto& [k, v] : additions.obsm) out.obsm[k] = v;
  for (const auto& [k, v] : additions.obs) out.obs[k] = v;
  for (const auto& [k, v] : additions.var) out.var[k] = v;
  for (const auto& [k, v] : additions.uns) out.uns[k] = v;
  return out;
}

void write_copy(const std::filesystem::path& input_in, const std::filesystem::path& output_in, const H5adContent& additions,
                bool in_place) {
  const std::filesystem::path input = normalized(input_in), output = normalized(output_in);
  if (!is_zarr_name(input)) {  // .h5ad → zarr
    const H5adContent all = gather_for_conversion(input, additions);
    write_new(output, all.obs_names, all.var_names, all.x_dense ? &*all.x_dense : nullptr,
              all.x_sparse ? &*all.x_sparse : nullptr, all, additions.zarr_format);
    return;
  }
  std::error_code ec;
  if (!in_place && std::filesystem::exists(output, ec) && std::filesystem::equivalent(input, output, ec)) {
    throw std::invalid_argument("write_h5ad_copy: output " + output.string() + " is the input store; pass in_place = true to replace it");
  }
  const AnnData source(input);
  const Hierarchy& h = source.hierarchy();
  const int format = h.format();
  const std::size_t n_obs = source.n_obs();
  (void)n_obs;
  // What the additions replace: their subtrees are not copied.
  std::vector<std::string> replaced;
  for (const auto& [k, v] : additions.obsm) replaced.push_back("obsm/" + k);
  for (const auto& [k, v] : additions.obs) replaced.push_back("obs/" + k);
  for (const auto& [k, v] : additions.var) replaced.push_back("var/" + k);
  for (const auto& [k, v] : additions.uns) replaced.push_back("uns/" + k);
  std::set<std::string> rewritten;  // group documents written anew
  const std::string meta_leaf = format == 3 ? "zarr.json" : ".zattrs";
  for (const char* frame : {"obs", "var"}) {
    if ((std::string(frame) == "obs" ? additions.obs : additions.var).empty()) continue;
    rewritten.insert(std::string(frame) + "/" + meta_leaf);
    if (format == 2) rewritten.insert(std::string(frame) + "/.zgroup");
  }
  auto sink = make_sink(output);
  Writer w(*sink, format, output.string());
  const std::string& prefix = h.prefix();
  const Store& store = h.store();
  for (const std::string& full : store.keys()) {
    if (full.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string key = full.substr(prefix.size());
    if (key == ".zmetadata" || rewritten.count(key)) continue;
    bool skip = false;
    for (const auto& r : replaced) {
      if (key == r || key.compare(0, r.size() + 1, r + "/") == 0) skip = true;
    }
    if (skip) continue;
    auto bytes = store.get(full);
    if (!bytes) continue;
    const std::string leaf = key.substr(key.rfind('/') == std::string::npos ? 0 : key.rfind('/') + 1);
    if (leaf == "zarr.json" || leaf == ".zgroup" || leaf == ".zarray" || leaf == ".zattrs") {
      w.copy_meta(key, *bytes);
    } else {
      w.raw(key, *bytes);
    }
  }
  // Groups the additions need, and the frames' column-order.
  auto ensure_dict = [&](const std::string& name) {
    if (!source.hierarchy().meta(name)) w.group(name, enc("dict", "0.1.0"));
  };
  if (!additions.obsm.empty()) ensure_dict("obsm");
  if (!additions.uns.empty()) ensure_dict("uns");
  for (const char* frame : {"obs", "var"}) {
    const auto& columns = std::string(frame) == "obs" ? additions.obs : additions.var;
    if (columns.empty()) continue;
    auto m = h.meta(frame);
    if (!m || !m->group) throw FormatError(input.string(), std::string("/") + frame, "is not a dataframe group; cannot add columns");
    json attrs = m->attrs;
    const std::string index_name = attrs.contains("_index") && attrs["_index"].is_string() ? attrs["_index"].get<std::string>() : "_index";
    json order = attrs.contains("column-order") && attrs["column-order"].is_array() ? attrs["column-order"] : json::array();
    for (const auto& [key, column] : columns) {
      if (key == index_name) throw std::invalid_argument(std::string(frame) + ": column '" + key + "' would replace the index");
      if (std::find(order.begin(), order.end(), json(key)) == order.end()) order.push_back(key);
      write_column(w, std::string(frame) + "/" + key, column);
    }
    attrs["column-order"] = order;
    w.group(frame, attrs);
  }
  for (const auto& [key, m] : additions.obsm) write_dense(w, "obsm/" + key, m);
  for (const auto& [key, v] : additions.uns) write_uns_value(w, "uns/" + key, v);
  w.finish();
}

}  // namespace flashot::io::zarr
