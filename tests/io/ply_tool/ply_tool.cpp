// flashot_ply_tool: the flashot side of the plyfile interoperability test (tests/io/ply_plyfile_interop.py).
//   flashot_ply_tool dump FILE                 prints the parsed file as one JSON object (values exact: %.17g)
//   flashot_ply_tool convert IN OUT FORMAT     reads IN and writes it to OUT as ascii, binary_little_endian or
//                                              binary_big_endian
//   flashot_ply_tool read FILE                 reads FILE, prints {"seconds": read_ply's wall time, "rows": …}
//                                              (tests/bench/io_ply_bench.py times it against plyfile)
// Exit status 1 with the error on stderr when reading or writing fails, 2 for a usage error.

#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

#include "flashot/io/ply.hpp"

namespace {

using flashot::io::PlyFile;
using flashot::io::PlyFormat;

void print_string(std::string_view s) {
  std::putchar('"');
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      std::printf("\\%c", c);
    } else if (u < 0x20) {
      std::printf("\\u%04x", u);
    } else {
      std::putchar(c);
    }
  }
  std::putchar('"');
}

// Python's json module reads NaN and ±Infinity, which plain JSON lacks.
void print_number(double value) {
  if (std::isnan(value)) {
    std::fputs("NaN", stdout);
  } else if (std::isinf(value)) {
    std::fputs(value > 0 ? "Infinity" : "-Infinity", stdout);
  } else {
    std::printf("%.17g", value);
  }
}

template <class Range, class Print>
void print_array(const Range& range, Print print) {
  std::putchar('[');
  bool first = true;
  for (const auto& item : range) {
    if (!first) std::putchar(',');
    first = false;
    print(item);
  }
  std::putchar(']');
}

void dump(const PlyFile& ply) {
  std::fputs("{\"format\":", stdout);
  print_string(to_string(ply.format));
  std::fputs(",\"comments\":", stdout);
  print_array(ply.comments, [](const std::string& s) { print_string(s); });
  std::fputs(",\"obj_info\":", stdout);
  print_array(ply.obj_info, [](const std::string& s) { print_string(s); });
  std::fputs(",\"elements\":", stdout);
  print_array(ply.elements, [](const flashot::io::PlyElement& element) {
    std::fputs("{\"name\":", stdout);
    print_string(element.name);
    std::printf(",\"count\":%zu,\"properties\":", element.count);
    print_array(element.properties, [](const flashot::io::PlyProperty& property) {
      std::fputs("{\"name\":", stdout);
      print_string(property.name);
      std::fputs(",\"type\":", stdout);
      print_string(to_string(property.type));
      std::printf(",\"list\":%s", property.is_list ? "true" : "false");
      if (property.is_list) {
        std::fputs(",\"count_type\":", stdout);
        print_string(to_string(property.count_type));
        std::fputs(",\"offsets\":", stdout);
        print_array(property.offsets, [](std::size_t offset) { std::printf("%zu", offset); });
      }
      std::fputs(",\"values\":", stdout);
      print_array(property.values, print_number);
      std::putchar('}');
    });
    std::putchar('}');
  });
  std::fputs("}\n", stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  if (!(((command == "dump" || command == "read") && argc == 3) || (command == "convert" && argc == 5))) {
    std::fputs("usage: flashot_ply_tool dump FILE | read FILE | convert IN OUT "
               "ascii|binary_little_endian|binary_big_endian\n",
               stderr);
    return 2;
  }
  try {
    if (command == "read") {
      const auto start = std::chrono::steady_clock::now();
      const PlyFile ply = flashot::io::read_ply(argv[2]);
      const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
      std::size_t rows = 0;
      for (const auto& element : ply.elements) rows += element.count;
      std::printf("{\"seconds\":%.6f,\"rows\":%zu}\n", seconds.count(), rows);
      return 0;
    }
    PlyFile ply = flashot::io::read_ply(argv[2]);
    if (command == "dump") {
      dump(ply);
      return 0;
    }
    const std::string format = argv[4];
    if (format == "ascii") {
      ply.format = PlyFormat::kAscii;
    } else if (format == "binary_little_endian") {
      ply.format = PlyFormat::kBinaryLittleEndian;
    } else if (format == "binary_big_endian") {
      ply.format = PlyFormat::kBinaryBigEndian;
    } else {
      std::fprintf(stderr, "unknown format '%s'\n", format.c_str());
      return 2;
    }
    flashot::io::write_ply(argv[3], ply);
    return 0;
  } catch (const std::exception& error) {
    std::fprintf(stderr, "%s\n", error.what());
    return 1;
  }
}
