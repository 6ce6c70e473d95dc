// zarr arrays, format 2 and 3 (array.hpp). Chunks are fetched from the store and decoded through the array's codec
// chain with packaged libraries (libzstd, c-blosc, zlib); a sharded array (v3 sharding_indexed) reads its shard
// index first and then only the inner chunks a read needs, each with one ranged read of the store.

#include "zarr/array.hpp"

#include <blosc.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "flashot/io/errors.hpp"

namespace flashot::io::zarr {

using nlohmann::json;

namespace {

// Most bytes a compressed chunk may claim to expand to when its size is not known in advance (vlen strings).
constexpr std::uint64_t kMaxUnknownChunkBytes = std::uint64_t{1} << 31;

struct Codec;
struct Chain {
  std::vector<Codec> arrays;  // array → array (only transpose would be here; refused at parse)
  std::shared_ptr<Codec> to_bytes;  // array → bytes
  std::vector<Codec> bytes;   // bytes → bytes, in encoding order
};

struct Codec {
  enum class Kind { kBytes, kVlenUtf8, kVlenBytes, kZstd, kBlosc, kGzip, kCrc32c, kSharding };
  Kind kind = Kind::kBytes;
  bool big_endian = false;
  // sharding_indexed
  std::vector<std::uint64_t> inner_shape;
  std::shared_ptr<Chain> inner;
  std::shared_ptr<Chain> index;
  bool index_at_end = true;
};

std::string dims_text(const std::vector<std::uint64_t>& v) {
  std::string out = "(";
  for (std::size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + std::to_string(v[i]);
  return out + (v.size() == 1 ? ",)" : ")");
}

}  // namespace

struct ArrayMeta {
  const Store* store = nullptr;
  std::string path;
  int format = 3;
  std::vector<std::uint64_t> shape;
  std::vector<std::uint64_t> chunks;
  DType dtype;
  std::string fill;          // one element, native endian (numeric / fixed types)
  std::string fill_text;     // for variable-length strings
  bool v2_keys = false;      // "0.1" keys (v2 and v3's "v2" key encoding) instead of "c/0/1"
  char separator = '/';
  Chain chain;

  [[noreturn]] void fail(const std::string& problem) const {
    throw FormatError(store->name(), path.empty() ? "/" : "/" + path, problem);
  }

  std::string key(const std::vector<std::uint64_t>& index) const {
    std::string k = path.empty() ? "" : path + "/";
    if (!v2_keys) {
      k += "c";
      for (auto i : index) k += separator + std::to_string(i);
      return k;
    }
    if (index.empty()) return k + "0";
    for (std::size_t i = 0; i < index.size(); ++i) k += (i ? std::string(1, separator) : "") + std::to_string(index[i]);
    return k;
  }
};

namespace {

// ---- metadata ------------------------------------------------------------------------------------------------

DType parse_v2_dtype(const ArrayMeta& m, const json& j) {
  if (!j.is_string()) m.fail("dtype " + j.dump() + " is not supported (structured dtypes are not)");
  const std::string s = j.get<std::string>();
  DType t;
  if (s.size() < 2) m.fail("unknown dtype '" + s + "'");
  std::size_t at = 0;
  if (s[0] == '<' || s[0] == '>' || s[0] == '|' || s[0] == '=') {
    t.big_endian = s[0] == '>';
    at = 1;
  }
  const char code = s[at];
  std::size_t n = 0;
  const std::string digits = s.substr(at + 1);
  if (digits.empty() || digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) {
    if (code == 'O' && digits.empty()) {
      t.kind = DType::Kind::kString;
      t.size = 0;
      return t;
    }
    m.fail("unknown dtype '" + s + "'");
  }
  n = std::stoul(digits);
  t.size = n;
  switch (code) {
    case 'b': t.kind = DType::Kind::kBool; if (n != 1) m.fail("unknown dtype '" + s + "'"); return t;
    case 'i': t.kind = DType::Kind::kInt; break;
    case 'u': t.kind = DType::Kind::kUInt; break;
    case 'f': t.kind = DType::Kind::kFloat;
      if (n != 4 && n != 8) m.fail("dtype '" + s + "' is not supported (float32 and float64 are)");
      return t;
    case 'S': t.kind = DType::Kind::kFixedBytes; if (n == 0) m.fail("dtype '" + s + "' has no width"); return t;
    case 'U': t.kind = DType::Kind::kFixedUnicode; t.size = n * 4; if (n == 0) m.fail("dtype '" + s + "' has no width"); return t;
    default: m.fail("dtype '" + s + "' is not supported");
  }
  if (n != 1 && n != 2 && n != 4 && n != 8) m.fail("unknown dtype '" + s + "'");
  return t;
}

DType parse_v3_dtype(const ArrayMeta& m, const json& j) {
  if (!j.is_string()) m.fail("data_type " + j.dump() + " is not supported");
  const std::string s = j.get<std::string>();
  DType t;
  if (s == "bool") return {DType::Kind::kBool, 1, false};
  if (s == "string" || s == "variable_length_utf8") return {DType::Kind::kString, 0, false};
  if (s == "float32") return {DType::Kind::kFloat, 4, false};
  if (s == "float64") return {DType::Kind::kFloat, 8, false};
  for (int bits : {8, 16, 32, 64}) {
    if (s == "int" + std::to_string(bits)) return {DType::Kind::kInt, std::size_t(bits / 8), false};
    if (s == "uint" + std::to_string(bits)) return {DType::Kind::kUInt, std::size_t(bits / 8), false};
  }
  m.fail("data_type '" + s + "' is not supported (bool, int8–64, uint8–64, float32/64, string are)");
}

std::vector<std::uint64_t> parse_dims(const ArrayMeta& m, const json& j, const std::string& what) {
  if (!j.is_array()) m.fail(what + " must be a list of sizes, got " + j.dump());
  if (j.size() > 32) m.fail(what + " has " + std::to_string(j.size()) + " dimensions");
  std::vector<std::uint64_t> out;
  for (const auto& v : j) {
    if (!v.is_number_integer() || v.get<std::int64_t>() < 0) m.fail(what + " must hold sizes ≥ 0, got " + j.dump());
    out.push_back(v.get<std::uint64_t>());
  }
  return out;
}

// The fill value as one native element (numeric, bool, fixed strings) or text (vlen strings).
void parse_fill(ArrayMeta& m, const json& j) {
  const DType& t = m.dtype;
  m.fill.assign(t.size, '\0');
  if (j.is_null()) return;
  if (t.kind == DType::Kind::kString) {
    if (j.is_string()) m.fill_text = j.get<std::string>();
    return;
  }
  if (t.kind == DType::Kind::kFixedBytes || t.kind == DType::Kind::kFixedUnicode) return;  // base64 in v2; zeros here
  double d = 0;
  bool is_double = false;
  std::int64_t i = 0;
  std::uint64_t u = 0;
  if (j.is_boolean()) {
    i = j.get<bool>() ? 1 : 0;
    u = static_cast<std::uint64_t>(i);
    d = static_cast<double>(i);
  } else if (j.is_number_unsigned()) {
    u = j.get<std::uint64_t>();
    i = static_cast<std::int64_t>(u);
    d = static_cast<double>(u);
  } else if (j.is_number_integer()) {
    i = j.get<std::int64_t>();
    u = static_cast<std::uint64_t>(i);
    d = static_cast<double>(i);
  } else if (j.is_number_float()) {
    d = j.get<double>();
    is_double = true;
  } else if (j.is_string()) {
    const std::string s = j.get<std::string>();
    is_double = true;
    if (s == "NaN") d = std::numeric_limits<double>::quiet_NaN();
    else if (s == "Infinity") d = std::numeric_limits<double>::infinity();
    else if (s == "-Infinity") d = -std::numeric_limits<double>::infinity();
    else if (s.size() > 2 && s[0] == '0' && s[1] == 'x' && t.kind == DType::Kind::kFloat && s.size() == 2 + 2 * t.size) {
      const std::uint64_t bits = std::stoull(s.substr(2), nullptr, 16);
      std::memcpy(m.fill.data(), &bits, t.size);  // little-endian host
      return;
    } else {
      m.fail("fill_value " + j.dump() + " is not a number");
    }
  } else {
    m.fail("fill_value " + j.dump() + " is not a number");
  }
  if (is_double && t.kind != DType::Kind::kFloat) {
    if (!std::isfinite(d) || d != std::floor(d)) m.fail("fill_value " + j.dump() + " does not fit " + t.name());
    i = static_cast<std::int64_t>(d);
    u = static_cast<std::uint64_t>(i);
  }
  switch (t.kind) {
    case DType::Kind::kFloat:
      if (t.size == 4) {
        const float f = static_cast<float>(d);
        std::memcpy(m.fill.data(), &f, 4);
      } else {
        std::memcpy(m.fill.data(), &d, 8);
      }
      return;
    case DType::Kind::kBool: m.fill[0] = i != 0 ? 1 : 0; return;
    case DType::Kind::kInt:
    case DType::Kind::kUInt: std::memcpy(m.fill.data(), t.kind == DType::Kind::kInt ? static_cast<const void*>(&i) : &u, t.size); return;
    default: return;
  }
}

Codec parse_v2_codec(const ArrayMeta& m, const json& j, bool compressor) {
  if (!j.is_object() || !j.contains("id") || !j["id"].is_string()) m.fail("codec " + j.dump() + " has no id");
  const std::string id = j["id"].get<std::string>();
  Codec c;
  if (compressor) {
    if (id == "zstd") c.kind = Codec::Kind::kZstd;
    else if (id == "blosc") c.kind = Codec::Kind::kBlosc;
    else if (id == "zlib" || id == "gzip") c.kind = Codec::Kind::kGzip;
    else m.fail("compressor '" + id + "' is not supported (blosc, zstd, zlib and gzip are)");
    return c;
  }
  if (id == "vlen-utf8") c.kind = Codec::Kind::kVlenUtf8;
  else if (id == "vlen-bytes") c.kind = Codec::Kind::kVlenBytes;
  else m.fail("filter '" + id + "' is not supported (vlen-utf8 and vlen-bytes are)");
  return c;
}

std::string codec_name(const ArrayMeta& m, const json& j, const json** config) {
  static const json kEmpty = json::object();
  *config = &kEmpty;
  if (j.is_string()) return j.get<std::string>();
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) m.fail("codec " + j.dump() + " has no name");
  if (j.contains("configuration")) {
    if (!j["configuration"].is_object()) m.fail("codec " + j.dump() + ": configuration is not an object");
    *config = &j["configuration"];
  }
  return j["name"].get<std::string>();
}

std::shared_ptr<Chain> parse_v3_chain(const ArrayMeta& m, const json& list, std::size_t rank, bool strings) {
  if (!list.is_array() || list.empty()) m.fail("codecs must be a non-empty list, got " + list.dump());
  auto chain = std::make_shared<Chain>();
  for (const auto& j : list) {
    const json* config = nullptr;
    const std::string name = codec_name(m, j, &config);
    Codec c;
    if (name == "bytes" || name == "endian") {
      c.kind = Codec::Kind::kBytes;
      if (config->contains("endian")) {
        const json& e = (*config)["endian"];
        if (!e.is_string() || (e != "little" && e != "big")) m.fail("bytes codec: endian " + e.dump() + " is not little or big");
        c.big_endian = e == "big";
      }
    } else if (name == "vlen-utf8" || name == "vlen-bytes") {
      c.kind = name == "vlen-utf8" ? Codec::Kind::kVlenUtf8 : Codec::Kind::kVlenBytes;
    } else if (name == "zstd") {
      c.kind = Codec::Kind::kZstd;
    } else if (name == "blosc") {
      c.kind = Codec::Kind::kBlosc;
    } else if (name == "gzip") {
      c.kind = Codec::Kind::kGzip;
    } else if (name == "crc32c") {
      c.kind = Codec::Kind::kCrc32c;
    } else if (name == "sharding_indexed") {
      c.kind = Codec::Kind::kSharding;
      if (!config->contains("chunk_shape")) m.fail("sharding_indexed: no chunk_shape");
      c.inner_shape = parse_dims(m, (*config)["chunk_shape"], "sharding_indexed chunk_shape");
      if (c.inner_shape.size() != rank) {
        m.fail("sharding_indexed chunk_shape " + dims_text(c.inner_shape) + " has another rank than the array");
      }
      for (auto d : c.inner_shape) if (d == 0) m.fail("sharding_indexed chunk_shape " + dims_text(c.inner_shape) + " holds a 0");
      if (!config->contains("codecs")) m.fail("sharding_indexed: no codecs");
      c.inner = parse_v3_chain(m, (*config)["codecs"], rank, strings);
      const json default_index = json::array({json{{"name", "bytes"}, {"configuration", {{"endian", "little"}}}}, json{{"name", "crc32c"}}});
      c.index = parse_v3_chain(m, config->value("index_codecs", default_index), 1, false);
      for (const auto& b : c.index->bytes) {
        if (b.kind != Codec::Kind::kCrc32c) m.fail("sharding_indexed: index_codecs other than bytes and crc32c are not supported");
      }
      if (c.index->to_bytes->kind != Codec::Kind::kBytes) m.fail("sharding_indexed: the shard index must use the bytes codec");
      const std::string where = config->value("index_location", std::string("end"));
      if (where != "end" && where != "start") m.fail("sharding_indexed: index_location '" + where + "' is neither start nor end");
      c.index_at_end = where == "end";
    } else if (name == "transpose") {
      m.fail("codec 'transpose' is not supported (arrays in C order only)");
    } else {
      m.fail("unknown codec '" + name + "' (bytes, vlen-utf8, zstd, blosc, gzip, crc32c, sharding_indexed are read)");
    }
    const bool is_bytes_codec = c.kind == Codec::Kind::kZstd || c.kind == Codec::Kind::kBlosc ||
                                c.kind == Codec::Kind::kGzip || c.kind == Codec::Kind::kCrc32c;
    if (is_bytes_codec) {
      if (!chain->to_bytes) m.fail("codec '" + name + "' comes before the array → bytes codec");
      chain->bytes.push_back(c);
    } else {
      if (chain->to_bytes) m.fail("two array → bytes codecs ('" + name + "' after another)");
      chain->to_bytes = std::make_shared<Codec>(c);
    }
  }
  if (!chain->to_bytes) m.fail("codecs hold no array → bytes codec (bytes, vlen-utf8 or sharding_indexed)");
  const auto k = chain->to_bytes->kind;
  if (strings && k == Codec::Kind::kBytes) m.fail("a string array needs the vlen-utf8 codec, not bytes");
  if (!strings && (k == Codec::Kind::kVlenUtf8 || k == Codec::Kind::kVlenBytes)) m.fail("vlen codecs apply to string arrays only");
  return chain;
}

// ---- codecs --------------------------------------------------------------------------------------------------

std::string zstd_decode(const ArrayMeta& m, const std::string& key, const std::string& in, std::optional<std::uint64_t> expect) {
  const unsigned long long claimed = ZSTD_getFrameContentSize(in.data(), in.size());
  if (claimed == ZSTD_CONTENTSIZE_ERROR) throw FormatError(m.store->name(), key, "not a zstd frame");
  if (expect && claimed != ZSTD_CONTENTSIZE_UNKNOWN && claimed != *expect) {
    throw FormatError(m.store->name(), key, "zstd frame holds " + std::to_string(claimed) + " bytes, the chunk " + std::to_string(*expect));
  }
  const std::uint64_t limit = expect ? *expect : kMaxUnknownChunkBytes;
  std::string out;
  if (claimed != ZSTD_CONTENTSIZE_UNKNOWN) {
    if (claimed > limit) throw FormatError(m.store->name(), key, "zstd frame claims " + std::to_string(claimed) + " bytes");
    out.resize(static_cast<std::size_t>(claimed));
    const std::size_t n = ZSTD_decompress(out.data(), out.size(), in.data(), in.size());
    if (ZSTD_isError(n) || n != out.size()) {
      throw FormatError(m.store->name(), key, std::string("zstd: ") + (ZSTD_isError(n) ? ZSTD_getErrorName(n) : "short frame"));
    }
    return out;
  }
  std::unique_ptr<ZSTD_DStream, decltype(&ZSTD_freeDStream)> stream(ZSTD_createDStream(), ZSTD_freeDStream);
  ZSTD_inBuffer input{in.data(), in.size(), 0};
  std::size_t done = 0;
  while (true) {
    if (out.size() - done < ZSTD_DStreamOutSize()) out.resize(out.size() + std::max<std::size_t>(ZSTD_DStreamOutSize(), out.size()));
    ZSTD_outBuffer output{out.data() + done, out.size() - done, 0};
    const std::size_t rc = ZSTD_decompressStream(stream.get(), &output, &input);
    if (ZSTD_isError(rc)) throw FormatError(m.store->name(), key, std::string("zstd: ") + ZSTD_getErrorName(rc));
    done += output.pos;
    if (done > limit) throw FormatError(m.store->name(), key, "zstd frame expands past " + std::to_string(limit) + " bytes");
    if (rc == 0) break;
    if (input.pos == input.size && output.pos < output.size) throw FormatError(m.store->name(), key, "zstd frame is cut short");
  }
  out.resize(done);
  return out;
}

std::string blosc_decode(const ArrayMeta& m, const std::string& key, const std::string& in, std::optional<std::uint64_t> expect) {
  std::size_t nbytes = 0;
  if (in.size() < BLOSC_MIN_HEADER_LENGTH || blosc_cbuffer_validate(in.data(), in.size(), &nbytes) != 0) {
    throw FormatError(m.store->name(), key, "not a valid blosc buffer (" + std::to_string(in.size()) + " bytes)");
  }
  if (expect && nbytes != *expect) {
    throw FormatError(m.store->name(), key, "blosc buffer holds " + std::to_string(nbytes) + " bytes, the chunk " + std::to_string(*expect));
  }
  if (nbytes > kMaxUnknownChunkBytes && !expect) throw FormatError(m.store->name(), key, "blosc buffer claims " + std::to_string(nbytes) + " bytes");
  std::string out(nbytes, '\0');
  const int n = blosc_decompress_ctx(in.data(), out.data(), out.size(), 1);
  if (n < 0 || static_cast<std::size_t>(n) != nbytes) {
    throw FormatError(m.store->name(), key, "blosc cannot decompress it (code " + std::to_string(n) + ")");
  }
  return out;
}

std::string gzip_decode(const ArrayMeta& m, const std::string& key, const std::string& in, std::optional<std::uint64_t> expect) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 32) != Z_OK) throw IoError(m.store->name() + ": " + key + ": zlib cannot start");  // gzip or zlib
  const std::uint64_t limit = expect ? *expect : kMaxUnknownChunkBytes;
  std::string out(expect ? static_cast<std::size_t>(*expect) : std::max<std::size_t>(in.size() * 4, 4096), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  int rc = Z_OK;
  while (true) {
    if (z.total_out == out.size()) {
      if (out.size() >= limit) break;
      out.resize(static_cast<std::size_t>(std::min<std::uint64_t>(limit, out.size() * 2 + 1)));
    }
    z.next_out = reinterpret_cast<Bytef*>(out.data() + z.total_out);
    z.avail_out = static_cast<uInt>(std::min<std::size_t>(out.size() - z.total_out, 1u << 30));
    rc = inflate(&z, Z_NO_FLUSH);
    if (rc == Z_STREAM_END || (rc != Z_OK && rc != Z_BUF_ERROR) || (rc == Z_BUF_ERROR && z.avail_in == 0)) break;
  }
  const auto produced = z.total_out;
  inflateEnd(&z);
  if (rc != Z_STREAM_END) throw FormatError(m.store->name(), key, "gzip/zlib data is damaged or cut short (zlib code " + std::to_string(rc) + ")");
  if (expect && produced != *expect) {
    throw FormatError(m.store->name(), key, "gzip data holds " + std::to_string(produced) + " bytes, the chunk " + std::to_string(*expect));
  }
  out.resize(produced);
  return out;
}

std::string crc_strip(const ArrayMeta& m, const std::string& key, std::string in) {
  if (in.size() < 4) throw FormatError(m.store->name(), key, "too short for its crc32c checksum (" + std::to_string(in.size()) + " bytes)");
  const auto* p = reinterpret_cast<const unsigned char*>(in.data());
  const std::uint32_t stored = std::uint32_t(p[in.size() - 4]) | (std::uint32_t(p[in.size() - 3]) << 8) |
                               (std::uint32_t(p[in.size() - 2]) << 16) | (std::uint32_t(p[in.size() - 1]) << 24);
  const std::uint32_t computed = crc32c(p, in.size() - 4);
  if (stored != computed) throw FormatError(m.store->name(), key, "crc32c checksum does not match (damaged data)");
  in.resize(in.size() - 4);
  return in;
}

// bytes → bytes codecs undone, last first. `expect` is the decoded size when the array → bytes codec fixes it.
std::string undo_bytes_codecs(const ArrayMeta& m, const Chain& chain, const std::string& key, std::string data,
                              std::optional<std::uint64_t> expect) {
  for (std::size_t i = chain.bytes.size(); i-- > 0;) {
    std::optional<std::uint64_t> size_here;
    if (i == 0) size_here = expect;
    switch (chain.bytes[i].kind) {
      case Codec::Kind::kZstd: data = zstd_decode(m, key, data, size_here); break;
      case Codec::Kind::kBlosc: data = blosc_decode(m, key, data, size_here); break;
      case Codec::Kind::kGzip: data = gzip_decode(m, key, data, size_here); break;
      case Codec::Kind::kCrc32c: data = crc_strip(m, key, std::move(data)); break;
      default: break;
    }
  }
  return data;
}

std::vector<std::string> vlen_decode(const ArrayMeta& m, const std::string& key, const std::string& data, std::uint64_t n) {
  const auto* p = reinterpret_cast<const unsigned char*>(data.data());
  auto u32 = [&](std::size_t at) { return std::uint32_t(p[at]) | (std::uint32_t(p[at + 1]) << 8) | (std::uint32_t(p[at + 2]) << 16) | (std::uint32_t(p[at + 3]) << 24); };
  if (data.size() < 4) throw FormatError(m.store->name(), key, "vlen-utf8 chunk of " + std::to_string(data.size()) + " bytes has no count");
  const std::uint32_t count = u32(0);
  if (count != n) throw FormatError(m.store->name(), key, "vlen-utf8 chunk holds " + std::to_string(count) + " strings, the chunk " + std::to_string(n));
  std::vector<std::string> out;
  out.reserve(count);
  std::size_t at = 4;
  for (std::uint32_t i = 0; i < count; ++i) {
    if (data.size() - at < 4) throw FormatError(m.store->name(), key, "vlen-utf8 chunk ends inside string " + std::to_string(i));
    const std::uint32_t len = u32(at);
    at += 4;
    if (data.size() - at < len) throw FormatError(m.store->name(), key, "vlen-utf8 string " + std::to_string(i) + " claims " + std::to_string(len) + " bytes past the chunk's end");
    out.emplace_back(data.data() + at, len);
    at += len;
  }
  return out;
}

void swap_bytes(std::string& data, std::size_t size) {
  if (size <= 1) return;
  for (std::size_t at = 0; at + size <= data.size(); at += size) std::reverse(data.begin() + at, data.begin() + at + size);
}

std::string fixed_to_text(const DType& t, const char* p) {
  if (t.kind == DType::Kind::kFixedBytes) {
    std::size_t n = t.size;
    while (n > 0 && p[n - 1] == '\0') --n;
    return std::string(p, n);
  }
  std::string out;  // UTF-32LE → UTF-8
  for (std::size_t i = 0; i + 4 <= t.size; i += 4) {
    std::uint32_t c;
    std::memcpy(&c, p + i, 4);
    if (c == 0) break;
    if (c < 0x80) out += char(c);
    else if (c < 0x800) { out += char(0xC0 | (c >> 6)); out += char(0x80 | (c & 0x3F)); }
    else if (c < 0x10000) { out += char(0xE0 | (c >> 12)); out += char(0x80 | ((c >> 6) & 0x3F)); out += char(0x80 | (c & 0x3F)); }
    else { out += char(0xF0 | ((c >> 18) & 7)); out += char(0x80 | ((c >> 12) & 0x3F)); out += char(0x80 | ((c >> 6) & 0x3F)); out += char(0x80 | (c & 0x3F)); }
  }
  return out;
}

// ---- regions -------------------------------------------------------------------------------------------------

// A decoded chunk: fixed-size elements (bytes) or strings.
struct ChunkData {
  std::string bytes;
  std::vector<std::string> strings;
  bool fill = false;  // absent: every element is the fill value
};

struct Region {
  std::vector<std::uint64_t> start, count;  // of the whole read, in array coordinates
};

std::uint64_t product(const std::vector<std::uint64_t>& v) {
  std::uint64_t p = 1;
  for (auto d : v) p *= d;
  return p;
}

// Calls run(out_index, chunk_index, n) for each contiguous run of the intersection of a chunk (shape `shape` at
// `origin`) with `region`, in elements.
template <class Run>
void for_each_run(const std::vector<std::uint64_t>& origin, const std::vector<std::uint64_t>& shape, const Region& region,
                  Run&& run) {
  const std::size_t rank = shape.size();
  if (rank == 0) {
    run(0, 0, 1);
    return;
  }
  std::vector<std::uint64_t> lo(rank), hi(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    lo[d] = std::max(origin[d], region.start[d]);
    hi[d] = std::min(origin[d] + shape[d], region.start[d] + region.count[d]);
    if (lo[d] >= hi[d]) return;
  }
  std::vector<std::uint64_t> at = lo;
  const std::uint64_t n = hi[rank - 1] - lo[rank - 1];
  while (true) {
    std::uint64_t out_index = 0, chunk_index = 0;
    for (std::size_t d = 0; d < rank; ++d) {
      out_index = out_index * region.count[d] + (at[d] - region.start[d]);
      chunk_index = chunk_index * shape[d] + (at[d] - origin[d]);
    }
    run(out_index, chunk_index, n);
    std::size_t d = rank - 1;
    while (d-- > 0) {
      if (++at[d] < hi[d]) break;
      at[d] = lo[d];
    }
    if (d == static_cast<std::size_t>(-1)) return;
  }
}

// Where decoded elements go: raw native elements, or strings.
struct Sink {
  char* bytes = nullptr;
  std::string* strings = nullptr;
};

void place(const ArrayMeta& m, const ChunkData& c, const std::vector<std::uint64_t>& origin, const std::vector<std::uint64_t>& shape,
           const Region& region, const Sink& sink) {
  const std::size_t size = m.dtype.size;
  const bool text = m.dtype.text();
  if (!text && !c.fill && shape.size() == 2) {  // the common case (obsm, X), one memcpy per row
    const std::uint64_t r0 = std::max(origin[0], region.start[0]);
    const std::uint64_t r1 = std::min(origin[0] + shape[0], region.start[0] + region.count[0]);
    const std::uint64_t c0 = std::max(origin[1], region.start[1]);
    const std::uint64_t c1 = std::min(origin[1] + shape[1], region.start[1] + region.count[1]);
    if (r0 >= r1 || c0 >= c1) return;
    const std::size_t bytes = (c1 - c0) * size;
    char* out = sink.bytes + ((r0 - region.start[0]) * region.count[1] + (c0 - region.start[1])) * size;
    const char* in = c.bytes.data() + ((r0 - origin[0]) * shape[1] + (c0 - origin[1])) * size;
    for (std::uint64_t r = r0; r < r1; ++r, out += region.count[1] * size, in += shape[1] * size) std::memcpy(out, in, bytes);
    return;
  }
  for_each_run(origin, shape, region, [&](std::uint64_t o, std::uint64_t i, std::uint64_t n) {
    if (text) {
      for (std::uint64_t k = 0; k < n; ++k) {
        if (c.fill) sink.strings[o + k] = m.fill_text;
        else if (m.dtype.kind == DType::Kind::kString) sink.strings[o + k] = c.strings[i + k];
        else sink.strings[o + k] = fixed_to_text(m.dtype, c.bytes.data() + (i + k) * size);
      }
      return;
    }
    if (c.fill) {
      for (std::uint64_t k = 0; k < n; ++k) std::memcpy(sink.bytes + (o + k) * size, m.fill.data(), size);
    } else {
      std::memcpy(sink.bytes + o * size, c.bytes.data() + i * size, n * size);
    }
  });
}

// One encoded chunk (not sharded, or an inner chunk of a shard) decoded through `chain`.
ChunkData decode_plain(const ArrayMeta& m, const Chain& chain, const std::string& key, std::string encoded,
                       const std::vector<std::uint64_t>& shape, bool big_endian_v2) {
  ChunkData c;
  const std::uint64_t n = product(shape);
  const auto kind = chain.to_bytes->kind;
  if (kind == Codec::Kind::kVlenUtf8 || kind == Codec::Kind::kVlenBytes) {
    c.strings = vlen_decode(m, key, undo_bytes_codecs(m, chain, key, std::move(encoded), std::nullopt), n);
    return c;
  }
  const std::uint64_t expect = n * m.dtype.size;
  c.bytes = undo_bytes_codecs(m, chain, key, std::move(encoded), expect);
  if (c.bytes.size() != expect) {
    throw FormatError(m.store->name(), key, "chunk holds " + std::to_string(c.bytes.size()) + " bytes, shape " +
                                               dims_text(shape) + " of " + m.dtype.name() + " needs " + std::to_string(expect));
  }
  const bool big = chain.to_bytes->big_endian || big_endian_v2;
  if (big && m.dtype.kind != DType::Kind::kFixedBytes && m.dtype.kind != DType::Kind::kFixedUnicode) swap_bytes(c.bytes, m.dtype.size);
  if (big && m.dtype.kind == DType::Kind::kFixedUnicode) swap_bytes(c.bytes, 4);
  return c;
}

// The shard index: (offset, nbytes) per inner chunk, all-ones for an empty one.
std::vector<std::uint64_t> shard_index(const ArrayMeta& m, const Codec& sharding, const std::string& key,
                                       const std::function<std::string(std::uint64_t, std::uint64_t)>& range,
                                       std::uint64_t shard_bytes, std::uint64_t inner_count) {
  const bool crc = !sharding.index->bytes.empty();
  const std::uint64_t index_bytes = inner_count * 16 + (crc ? 4 : 0);
  if (shard_bytes < index_bytes) {
    throw FormatError(m.store->name(), key, "shard of " + std::to_string(shard_bytes) + " bytes is too short for its index (" +
                                                std::to_string(inner_count) + " inner chunks need " + std::to_string(index_bytes) + " bytes): truncated shard index");
  }
  std::string raw = range(sharding.index_at_end ? shard_bytes - index_bytes : 0, index_bytes);
  raw = undo_bytes_codecs(m, *sharding.index, key + " (shard index)", std::move(raw), std::nullopt);
  std::vector<std::uint64_t> index(inner_count * 2);
  std::memcpy(index.data(), raw.data(), index.size() * 8);
  if (sharding.index->to_bytes->big_endian) for (auto& v : index) v = __builtin_bswap64(v);
  const std::uint64_t data_lo = sharding.index_at_end ? 0 : index_bytes;
  const std::uint64_t data_hi = sharding.index_at_end ? shard_bytes - index_bytes : shard_bytes;
  for (std::uint64_t i = 0; i < inner_count; ++i) {
    const std::uint64_t off = index[2 * i], len = index[2 * i + 1];
    if (off == ~std::uint64_t{0} && len == ~std::uint64_t{0}) continue;
    if (off < data_lo || off > data_hi || len > data_hi - off) {
      throw FormatError(m.store->name(), key, "shard index entry " + std::to_string(i) + " (offset " + std::to_string(off) +
                                                  ", " + std::to_string(len) + " bytes) lies outside the shard's data [" +
                                                  std::to_string(data_lo) + ", " + std::to_string(data_hi) + ")");
    }
  }
  return index;
}

// Visits the chunk grid `grid` (chunks of `shape`, from `base`) that meets `region`, in C order.
void for_each_chunk(const std::vector<std::uint64_t>& base, const std::vector<std::uint64_t>& extent,
                    const std::vector<std::uint64_t>& shape, const Region& region,
                    const std::function<void(const std::vector<std::uint64_t>&, const std::vector<std::uint64_t>&)>& visit) {
  const std::size_t rank = shape.size();
  if (rank == 0) {
    visit({}, {});
    return;
  }
  std::vector<std::uint64_t> lo(rank), hi(rank);
  for (std::size_t d = 0; d < rank; ++d) {
    const std::uint64_t a = std::max(base[d], region.start[d]);
    const std::uint64_t b = std::min(base[d] + extent[d], region.start[d] + region.count[d]);
    if (a >= b) return;
    lo[d] = (a - base[d]) / shape[d];
    hi[d] = (b - base[d] - 1) / shape[d] + 1;
  }
  std::vector<std::uint64_t> at = lo, origin(rank);
  while (true) {
    for (std::size_t d = 0; d < rank; ++d) origin[d] = base[d] + at[d] * shape[d];
    visit(at, origin);
    std::size_t d = rank;
    while (d-- > 0) {
      if (++at[d] < hi[d]) break;
      at[d] = lo[d];
    }
    if (d == static_cast<std::size_t>(-1)) return;
  }
}

// A unit of decoding work: fetch, decode, place.
struct Task {
  std::function<ChunkData()> decode;
  std::vector<std::uint64_t> origin, shape;
};

// Plans the decoding of the (possibly sharded) chunk whose bytes `fetch`/`range` give. Shard indices are read now;
// inner chunks become tasks.
void plan_chunk(const ArrayMeta& m, const Chain& chain, const std::string& key, std::optional<std::uint64_t> bytes,
                std::function<std::string()> fetch, std::function<std::string(std::uint64_t, std::uint64_t)> range,
                const std::vector<std::uint64_t>& origin, const std::vector<std::uint64_t>& shape, const Region& region,
                std::vector<Task>& tasks) {
  if (!bytes) {
    tasks.push_back({[] { ChunkData c; c.fill = true; return c; }, origin, shape});
    return;
  }
  const bool v2_big = m.format == 2 && m.dtype.big_endian;
  if (chain.to_bytes->kind != Codec::Kind::kSharding) {
    const Chain* ch = &chain;
    tasks.push_back({[&m, ch, key, fetch, shape, v2_big] { return decode_plain(m, *ch, key, fetch(), shape, v2_big); }, origin, shape});
    return;
  }
  const Codec& sharding = *chain.to_bytes;
  if (!chain.bytes.empty()) {  // bytes codecs over a whole shard: decode it, then read inside it from memory
    auto whole = std::make_shared<std::string>(undo_bytes_codecs(m, chain, key, fetch(), std::nullopt));
    plan_chunk(m, Chain{{}, chain.to_bytes, {}}, key, whole->size(), [whole] { return *whole; },
               [whole](std::uint64_t o, std::uint64_t n) { return whole->substr(o, n); }, origin, shape, region, tasks);
    return;
  }
  std::vector<std::uint64_t> per(shape.size());
  std::uint64_t inner_count = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] % sharding.inner_shape[d] != 0) {
      m.fail("shard shape " + dims_text(shape) + " is not a multiple of the inner chunk shape " + dims_text(sharding.inner_shape));
    }
    per[d] = shape[d] / sharding.inner_shape[d];
    inner_count *= per[d];
  }
  if (inner_count > (std::uint64_t{1} << 32)) m.fail("shard holds " + std::to_string(inner_count) + " inner chunks");
  const auto index = shard_index(m, sharding, key, range, *bytes, inner_count);
  for_each_chunk(origin, shape, sharding.inner_shape, region, [&](const std::vector<std::uint64_t>& at, const std::vector<std::uint64_t>& inner_origin) {
    std::uint64_t linear = 0;
    for (std::size_t d = 0; d < at.size(); ++d) linear = linear * per[d] + at[d];
    const std::uint64_t off = index[2 * linear], len = index[2 * linear + 1];
    const std::string inner_key = key + " (inner chunk " + std::to_string(linear) + ")";
    if (off == ~std::uint64_t{0} && len == ~std::uint64_t{0}) {
      plan_chunk(m, *sharding.inner, inner_key, std::nullopt, {}, {}, inner_origin, sharding.inner_shape, region, tasks);
      return;
    }
    auto part = [range, off, len] { return range(off, len); };
    auto part_range = [range, off](std::uint64_t o, std::uint64_t n) { return range(off + o, n); };
    plan_chunk(m, *sharding.inner, inner_key, len, part, part_range, inner_origin, sharding.inner_shape, region, tasks);
  });
}

void run_tasks(const ArrayMeta& m, std::vector<Task>& tasks, const Region& region, const Sink& sink, unsigned threads) {
  threads = std::max(1u, std::min<unsigned>(threads, static_cast<unsigned>(tasks.size())));
  std::atomic<std::size_t> next{0};
  std::exception_ptr error;
  std::mutex error_lock;
  auto work = [&] {
    while (true) {
      const std::size_t i = next.fetch_add(1);
      if (i >= tasks.size()) return;
      try {
        const ChunkData c = tasks[i].decode();
        place(m, c, tasks[i].origin, tasks[i].shape, region, sink);
      } catch (...) {
        std::lock_guard<std::mutex> hold(error_lock);
        if (!error) error = std::current_exception();
        next = tasks.size();
        return;
      }
    }
  };
  if (threads == 1) {
    work();
  } else {
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) pool.emplace_back(work);
    for (auto& t : pool) t.join();
  }
  if (error) std::rethrow_exception(error);
}

void read_region(const ArrayMeta& m, const Region& region, const Sink& sink, unsigned threads) {
  std::vector<Task> tasks;
  const std::vector<std::uint64_t> zero(m.shape.size(), 0);
  for_each_chunk(zero, m.shape, m.chunks, region, [&](const std::vector<std::uint64_t>& at, const std::vector<std::uint64_t>& origin) {
    const std::string key = m.key(at);
    const Store* store = m.store;
    const auto bytes = store->size(key);
    plan_chunk(m, m.chain, key, bytes, [store, key] {
      auto v = store->get(key);
      if (!v) throw IoError(store->name() + ": " + key + ": chunk vanished while reading");
      return std::move(*v);
    }, [store, key](std::uint64_t o, std::uint64_t n) { return store->get_range(key, o, n); }, origin, m.chunks, region, tasks);
  });
  run_tasks(m, tasks, region, sink, threads);
}

}  // namespace

std::string DType::name() const {
  switch (kind) {
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int" + std::to_string(size * 8);
    case Kind::kUInt: return "uint" + std::to_string(size * 8);
    case Kind::kFloat: return "float" + std::to_string(size * 8);
    case Kind::kString: return "string";
    case Kind::kFixedBytes: return "bytes" + std::to_string(size);
    case Kind::kFixedUnicode: return "str" + std::to_string(size / 4);
  }
  return "?";
}

std::uint32_t crc32c(const unsigned char* data, std::size_t size) {
  static const auto table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t crc = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < size; ++i) crc = table[(crc ^ data[i]) & 0xFF] ^ (crc >> 8);
  return crc ^ 0xFFFFFFFFu;
}

nlohmann::json parse_json(const std::string& store, const std::string& key, const std::string& text) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw FormatError(store, key, std::string("bad JSON: ") + e.what());
  }
}

Array::Array(const Store& store, std::string path, const json& meta, int format) : meta_(std::make_unique<ArrayMeta>()) {
  ArrayMeta& m = *meta_;
  m.store = &store;
  m.path = std::move(path);
  m.format = format;
  if (!meta.is_object()) m.fail("array metadata is not a JSON object");
  auto need = [&](const char* field) -> const json& {
    if (!meta.contains(field)) m.fail(std::string("array metadata has no '") + field + "'");
    return meta[field];
  };
  m.shape = parse_dims(m, need("shape"), "shape");
  if (format == 2) {
    m.chunks = parse_dims(m, need("chunks"), "chunks");
    m.dtype = parse_v2_dtype(m, need("dtype"));
    const std::string order = meta.value("order", std::string("C"));
    if (order != "C" && !(order == "F" && m.shape.size() <= 1)) m.fail("order '" + order + "' is not supported (C order only)");
    m.v2_keys = true;
    m.separator = '.';
    if (meta.contains("dimension_separator") && meta["dimension_separator"].is_string()) {
      const std::string sep = meta["dimension_separator"].get<std::string>();
      if (sep != "." && sep != "/") m.fail("dimension_separator '" + sep + "' is neither '.' nor '/'");
      m.separator = sep[0];
    }
    m.chain.to_bytes = std::make_shared<Codec>();
    if (meta.contains("filters") && !meta["filters"].is_null()) {
      if (!meta["filters"].is_array()) m.fail("filters must be a list or null");
      for (const auto& f : meta["filters"]) *m.chain.to_bytes = parse_v2_codec(m, f, false);
    }
    if (m.dtype.kind == DType::Kind::kString && m.chain.to_bytes->kind == Codec::Kind::kBytes) {
      m.fail("object dtype '|O' without a vlen-utf8 filter is not supported");
    }
    if (m.dtype.kind != DType::Kind::kString && m.chain.to_bytes->kind != Codec::Kind::kBytes) {
      m.fail("filter vlen-utf8 on a non-object dtype");
    }
    if (meta.contains("compressor") && !meta["compressor"].is_null()) m.chain.bytes.push_back(parse_v2_codec(m, meta["compressor"], true));
  } else {
    const json& grid = need("chunk_grid");
    if (!grid.is_object() || grid.value("name", json()) != "regular" || !grid.contains("configuration") ||
        !grid["configuration"].is_object() || !grid["configuration"].contains("chunk_shape")) {
      m.fail("chunk_grid " + grid.dump() + " is not a regular grid");
    }
    m.chunks = parse_dims(m, grid["configuration"]["chunk_shape"], "chunk_shape");
    m.dtype = parse_v3_dtype(m, need("data_type"));
    if (meta.contains("chunk_key_encoding")) {
      const json& e = meta["chunk_key_encoding"];
      const std::string name = e.is_object() && e.contains("name") && e["name"].is_string() ? e["name"].get<std::string>() : "";
      if (name != "default" && name != "v2") m.fail("chunk_key_encoding " + e.dump() + " is not supported");
      m.v2_keys = name == "v2";
      m.separator = m.v2_keys ? '.' : '/';
      if (e.contains("configuration") && e["configuration"].is_object() && e["configuration"].contains("separator")) {
        const json& s = e["configuration"]["separator"];
        if (!s.is_string() || (s != "." && s != "/")) m.fail("chunk key separator " + s.dump() + " is neither '.' nor '/'");
        m.separator = s.get<std::string>()[0];
      }
    }
    if (meta.contains("storage_transformers") && meta["storage_transformers"].is_array() && !meta["storage_transformers"].empty()) {
      m.fail("storage transformers are not supported");
    }
    const auto chain = parse_v3_chain(m, need("codecs"), m.shape.size(), m.dtype.kind == DType::Kind::kString);
    m.chain = *chain;
  }
  if (m.chunks.size() != m.shape.size()) m.fail("chunks " + dims_text(m.chunks) + " and shape " + dims_text(m.shape) + " differ in rank");
  for (auto d : m.chunks) if (d == 0) m.fail("chunk shape " + dims_text(m.chunks) + " holds a 0");
  // Overflow guards: the element count, and a chunk's bytes, must be addressable.
  long double total = 1, chunk = 1;
  for (std::size_t d = 0; d < m.shape.size(); ++d) {
    total *= static_cast<long double>(m.shape[d]);
    chunk *= static_cast<long double>(m.chunks[d]);
  }
  if (total > static_cast<long double>(std::uint64_t{1} << 52)) m.fail("shape " + dims_text(m.shape) + " is too large");
  if (chunk * std::max<std::size_t>(m.dtype.size, 1) > static_cast<long double>(kMaxUnknownChunkBytes)) {
    m.fail("chunk shape " + dims_text(m.chunks) + " is too large (over 2 GiB a chunk)");
  }
  parse_fill(m, meta.contains("fill_value") ? meta["fill_value"] : json());
}

Array::~Array() = default;
Array::Array(Array&&) noexcept = default;

const std::vector<std::uint64_t>& Array::shape() const { return meta_->shape; }
const DType& Array::dtype() const { return meta_->dtype; }
std::uint64_t Array::elements() const { return product(meta_->shape); }
void Array::fail(const std::string& problem) const { meta_->fail(problem); }

void Array::read_rows(std::uint64_t row0, std::uint64_t rows, void* out, unsigned threads) const {
  const ArrayMeta& m = *meta_;
  if (m.dtype.text()) m.fail("read as numbers, but it holds strings");
  Region region{std::vector<std::uint64_t>(m.shape.size(), 0), m.shape};
  if (!m.shape.empty()) {
    if (row0 > m.shape[0] || rows > m.shape[0] - row0) m.fail("rows [" + std::to_string(row0) + ", " + std::to_string(row0 + rows) + ") outside " + dims_text(m.shape));
    region.start[0] = row0;
    region.count[0] = rows;
    if (rows == 0) return;
    for (auto d : m.shape) if (d == 0) return;
  }
  read_region(m, region, Sink{static_cast<char*>(out), nullptr}, threads);
}

std::vector<std::string> Array::read_strings() const {
  const ArrayMeta& m = *meta_;
  if (!m.dtype.text()) m.fail("read as strings, but it holds " + m.dtype.name());
  if (m.shape.size() > 1) m.fail("a string array must be 1-D, found shape " + dims_text(m.shape));
  std::vector<std::string> out(static_cast<std::size_t>(product(m.shape)));
  if (out.empty()) return out;
  read_region(m, Region{std::vector<std::uint64_t>(m.shape.size(), 0), m.shape}, Sink{nullptr, out.data()}, 1);
  return out;
}

}  // namespace flashot::io::zarr
