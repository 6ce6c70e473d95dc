// zarr hierarchies and nodes (node.hpp).

#include "zarr/node.hpp"

#include <algorithm>
#include <cstring>
#include <set>
#include <thread>

#include "flashot/io/errors.hpp"

namespace flashot::io::zarr {

using nlohmann::json;

namespace {

std::string join(const std::string& parent, const std::string& name) { return parent.empty() ? name : parent + "/" + name; }

unsigned decode_threads() { return std::max(1u, std::min(8u, std::thread::hardware_concurrency())); }

json object_or_empty(const json& j) { return j.is_object() ? j : json::object(); }

}  // namespace

Hierarchy::Hierarchy(std::unique_ptr<Store> store) : store_(std::move(store)) {
  const std::string& name = store_->name();
  auto detect = [&](const std::string& prefix) -> int {
    if (store_->size(prefix + "zarr.json")) return 3;
    if (store_->size(prefix + ".zgroup") || store_->size(prefix + ".zattrs")) return 2;
    return 0;
  };
  format_ = detect("");
  if (format_ == 0) {
    const auto top = store_->list("");
    if (top.size() == 1 && (format_ = detect(top[0] + "/")) != 0) prefix_ = top[0] + "/";
  }
  if (format_ == 0) {
    if (store_->size(".zarray") || store_->size("zarr.json")) throw FormatError(name, "/", "the store's root is an array, not an AnnData group");
    throw FormatError(name, "", "not a zarr store: no zarr.json (format 3) or .zgroup (format 2) at its root");
  }
  if (format_ == 3) {
    const std::string key = prefix_ + "zarr.json";
    const json root = parse_json(name, key, *store_->get(key));
    if (!root.is_object()) throw FormatError(name, key, "is not a JSON object");
    if (root.value("zarr_format", json()) != 3) throw FormatError(name, key, "zarr_format " + root.value("zarr_format", json()).dump() + " is not 3");
    if (root.contains("consolidated_metadata") && root["consolidated_metadata"].is_object() &&
        root["consolidated_metadata"].contains("metadata") && root["consolidated_metadata"]["metadata"].is_object()) {
      consolidated_ = true;
      nodes_[""] = NodeMeta{root.value("node_type", std::string("group")) == "group", root, object_or_empty(root.value("attributes", json()))};
      for (const auto& [path, m] : root["consolidated_metadata"]["metadata"].items()) {
        if (!m.is_object()) throw FormatError(name, key, "consolidated metadata of '" + path + "' is not an object");
        const json type = m.value("node_type", json());
        if (type != "group" && type != "array") throw FormatError(name, key, "consolidated metadata of '" + path + "': node_type " + type.dump());
        nodes_[path] = NodeMeta{type == "group", m, object_or_empty(m.value("attributes", json()))};
      }
    }
  } else if (auto text = store_->get(prefix_ + ".zmetadata")) {
    const std::string key = prefix_ + ".zmetadata";
    const json root = parse_json(name, key, *text);
    if (!root.is_object() || !root.contains("metadata") || !root["metadata"].is_object()) {
      throw FormatError(name, key, "has no 'metadata' object");
    }
    consolidated_ = true;
    for (const auto& [k, m] : root["metadata"].items()) {
      const auto slash = k.rfind('/');
      const std::string path = slash == std::string::npos ? "" : k.substr(0, slash);
      const std::string leaf = slash == std::string::npos ? k : k.substr(slash + 1);
      if (leaf == ".zgroup" || leaf == ".zarray") {
        NodeMeta& n = nodes_[path];
        n.group = leaf == ".zgroup";
        n.meta = m;
        if (n.attrs.is_null()) n.attrs = json::object();
      } else if (leaf == ".zattrs") {
        nodes_[path].attrs = object_or_empty(m);
      }
    }
    for (auto it = nodes_.begin(); it != nodes_.end();) {  // attributes without a node (damaged metadata)
      it = it->second.meta.is_null() && !it->first.empty() ? nodes_.erase(it) : std::next(it);
    }
    if (!nodes_.count("")) nodes_[""] = NodeMeta{true, json::object(), json::object()};
  }
}

std::optional<NodeMeta> Hierarchy::meta(const std::string& path) const {
  if (consolidated_) {
    const auto it = nodes_.find(path);
    if (it == nodes_.end()) return std::nullopt;
    return it->second;
  }
  const std::string base = prefix_ + (path.empty() ? "" : path + "/");
  const std::string& name = store_->name();
  if (format_ == 3) {
    auto text = store_->get(base + "zarr.json");
    if (!text) return std::nullopt;
    json m = parse_json(name, base + "zarr.json", *text);
    if (!m.is_object()) throw FormatError(name, base + "zarr.json", "is not a JSON object");
    const json type = m.value("node_type", json());
    if (type != "group" && type != "array") throw FormatError(name, base + "zarr.json", "node_type " + type.dump() + " is neither group nor array");
    NodeMeta out{type == "group", m, object_or_empty(m.value("attributes", json()))};
    return out;
  }
  NodeMeta out;
  if (auto g = store_->get(base + ".zgroup")) {
    out.group = true;
    out.meta = parse_json(name, base + ".zgroup", *g);
  } else if (auto a = store_->get(base + ".zarray")) {
    out.group = false;
    out.meta = parse_json(name, base + ".zarray", *a);
  } else {
    return std::nullopt;
  }
  out.attrs = json::object();
  if (auto t = store_->get(base + ".zattrs")) out.attrs = object_or_empty(parse_json(name, base + ".zattrs", *t));
  return out;
}

std::vector<std::string> Hierarchy::children(const std::string& path) const {
  std::vector<std::string> out;
  if (consolidated_) {
    const std::string head = path.empty() ? "" : path + "/";
    for (auto it = nodes_.lower_bound(head); it != nodes_.end() && it->first.compare(0, head.size(), head) == 0; ++it) {
      if (it->first.size() > head.size() && it->first.find('/', head.size()) == std::string::npos) out.push_back(it->first.substr(head.size()));
    }
    return out;
  }
  const std::string dir = prefix_ + path;
  for (auto& name : store_->list(dir.empty() ? "" : (dir.back() == '/' ? dir.substr(0, dir.size() - 1) : dir))) {
    if (name.empty() || name[0] == '.' || name == "zarr.json") continue;
    if (format_ == 3 && name == "c") {  // chunks of an array, never a child of a group … unless it is one
      if (!store_->size(prefix_ + join(path, "c/zarr.json"))) continue;
    }
    if (meta(join(path, name))) out.push_back(name);
  }
  return out;
}

Node::Node(const Hierarchy* h, std::string path, NodeMeta meta) : h_(h), path_(std::move(path)), meta_(std::move(meta)) {}

void Node::fail(const std::string& problem) const { throw FormatError(h_->store().name(), object_path(), problem); }

bool Node::has(const std::string& name) const { return is_group() && h_->meta(join(path_, name)).has_value(); }

std::optional<Node> Node::find(const std::string& name) const {
  if (!is_group() || name.empty() || name.find('/') != std::string::npos) return std::nullopt;
  auto m = h_->meta(join(path_, name));
  if (!m) return std::nullopt;
  return Node(h_, join(path_, name), std::move(*m));
}

Node Node::child(const std::string& name) const {
  auto n = find(name);
  if (!n) fail("has no '" + name + "'");
  return std::move(*n);
}

std::vector<std::string> Node::children() const { return is_group() ? h_->children(path_) : std::vector<std::string>{}; }

bool Node::has_attr(const std::string& name) const { return meta_.attrs.contains(name); }

const json& Node::attr(const std::string& name) const {
  if (!meta_.attrs.contains(name)) fail("has no attribute '" + name + "'");
  return meta_.attrs[name];
}

std::string Node::attr_string(const std::string& name) const {
  const json& v = attr(name);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array() && v.size() == 1 && v[0].is_string()) return v[0].get<std::string>();
  fail("attribute '" + name + "' is " + v.dump() + ", not a string");
}

std::optional<std::string> Node::attr_string_opt(const std::string& name) const {
  if (!has_attr(name)) return std::nullopt;
  return attr_string(name);
}

std::vector<std::string> Node::attr_strings(const std::string& name) const {
  const json& v = attr(name);
  std::vector<std::string> out;
  if (v.is_string()) return {v.get<std::string>()};
  if (!v.is_array()) fail("attribute '" + name + "' is " + v.dump() + ", not a list of strings");
  for (const auto& s : v) {
    if (!s.is_string()) fail("attribute '" + name + "' holds " + s.dump() + ", not a string");
    out.push_back(s.get<std::string>());
  }
  return out;
}

std::vector<std::int64_t> Node::attr_ints(const std::string& name) const {
  const json& v = attr(name);
  std::vector<std::int64_t> out;
  if (!v.is_array()) fail("attribute '" + name + "' is " + v.dump() + ", not a list of integers");
  for (const auto& s : v) {
    if (!s.is_number_integer()) fail("attribute '" + name + "' holds " + s.dump() + ", not an integer");
    out.push_back(s.get<std::int64_t>());
  }
  return out;
}

bool Node::attr_bool(const std::string& name) const {
  const json& v = attr(name);
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_number_integer()) return v.get<std::int64_t>() != 0;
  fail("attribute '" + name + "' is " + v.dump() + ", not a boolean");
}

const Array& Node::array() const {
  if (is_group()) fail("is a group, not an array");
  if (!array_) array_ = std::make_shared<Array>(h_->store(), h_->prefix() + path_, meta_.meta, h_->format());
  return *array_;
}

std::vector<std::uint64_t> Node::shape() const { return array().shape(); }

TypeClass Node::type_class() const {
  switch (array().dtype().kind) {
    case DType::Kind::kInt: return TypeClass::kInteger;
    case DType::Kind::kUInt: return TypeClass::kUnsigned;
    case DType::Kind::kFloat: return TypeClass::kFloat;
    case DType::Kind::kBool: return TypeClass::kEnum;
    case DType::Kind::kString:
    case DType::Kind::kFixedBytes:
    case DType::Kind::kFixedUnicode: return TypeClass::kString;
  }
  return TypeClass::kOther;
}

std::string Node::dtype_name() const { return array().dtype().name(); }

template <class T>
void Node::read_as(std::uint64_t row0, std::uint64_t rows, T* out) const {
  const Array& a = array();
  const DType& t = a.dtype();
  if (t.text()) fail("expected numbers, found strings");
  std::uint64_t per_row = 1;
  for (std::size_t d = 1; d < a.shape().size(); ++d) per_row *= a.shape()[d];
  const std::uint64_t n = rows * per_row;
  if constexpr (std::is_same_v<T, float>) {
    if (t.kind == DType::Kind::kFloat && t.size == 4) {
      a.read_rows(row0, rows, out, decode_threads());
      return;
    }
  }
  if constexpr (std::is_same_v<T, double>) {
    if (t.kind == DType::Kind::kFloat && t.size == 8) {
      a.read_rows(row0, rows, out, decode_threads());
      return;
    }
  }
  std::vector<char> raw(static_cast<std::size_t>(n * t.size));
  a.read_rows(row0, rows, raw.data(), decode_threads());
  const char* p = raw.data();
  for (std::uint64_t i = 0; i < n; ++i, p += t.size) {
    T v{};
    switch (t.kind) {
      case DType::Kind::kFloat: {
        if (t.size == 4) { float f; std::memcpy(&f, p, 4); v = static_cast<T>(f); }
        else { double f; std::memcpy(&f, p, 8); v = static_cast<T>(f); }
        break;
      }
      case DType::Kind::kBool: v = static_cast<T>(*p != 0); break;
      case DType::Kind::kInt: {
        std::int64_t x = 0;
        switch (t.size) {
          case 1: { std::int8_t y; std::memcpy(&y, p, 1); x = y; break; }
          case 2: { std::int16_t y; std::memcpy(&y, p, 2); x = y; break; }
          case 4: { std::int32_t y; std::memcpy(&y, p, 4); x = y; break; }
          default: std::memcpy(&x, p, 8);
        }
        v = static_cast<T>(x);
        break;
      }
      case DType::Kind::kUInt: {
        std::uint64_t x = 0;
        std::memcpy(&x, p, t.size);  // little-endian host
        if constexpr (std::is_same_v<T, std::int64_t>) {
          if (x > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) fail("value " + std::to_string(x) + " does not fit int64");
        }
        v = static_cast<T>(x);
        break;
      }
      default: break;
    }
    out[i] = v;
  }
}

std::vector<double> Node::read_doubles() const {
  std::vector<double> out(static_cast<std::size_t>(array().elements()));
  read_as<double>(0, shape().empty() ? 1 : shape()[0], out.data());
  return out;
}

std::vector<float> Node::read_floats() const {
  std::vector<float> out(static_cast<std::size_t>(array().elements()));
  read_as<float>(0, shape().empty() ? 1 : shape()[0], out.data());
  return out;
}

std::vector<std::int64_t> Node::read_int64s() const {
  if (array().dtype().kind == DType::Kind::kFloat) fail("expected integers, found " + dtype_name());
  std::vector<std::int64_t> out(static_cast<std::size_t>(array().elements()));
  read_as<std::int64_t>(0, shape().empty() ? 1 : shape()[0], out.data());
  return out;
}

void Node::read_floats_into(std::span<float> out) const {
  if (out.size() != array().elements()) {
    fail("holds " + std::to_string(array().elements()) + " values, the buffer " + std::to_string(out.size()));
  }
  read_as<float>(0, shape().empty() ? 1 : shape()[0], out.data());
}

void Node::read_float_rows(std::uint64_t row0, std::uint64_t count, float* out) const { read_as<float>(row0, count, out); }

void Node::read_int64_range(std::uint64_t first, std::uint64_t count, std::int64_t* out) const {
  if (shape().size() != 1) fail("expected a 1-D array");
  read_as<std::int64_t>(first, count, out);
}

std::vector<std::string> Node::read_strings() const { return array().read_strings(); }

std::vector<std::uint8_t> Node::read_flags() const {
  const DType& t = array().dtype();
  if (t.kind != DType::Kind::kBool && t.kind != DType::Kind::kInt && t.kind != DType::Kind::kUInt) {
    fail("expected booleans, found " + t.name());
  }
  const auto values = read_int64s();
  std::vector<std::uint8_t> out(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) out[i] = values[i] != 0;
  return out;
}

}  // namespace flashot::io::zarr
