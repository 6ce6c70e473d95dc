// A built-in decoder for the LZF filter (HDF5 filter id 32000, registered by h5py / PyTables), used when no working
// LZF plugin is available. Debian's hdf5-plugin-lzf 3.7.0-8 ships a plugin whose liblzf symbols are left
// undefined (no DT_NEEDED on liblzf), so HDF5 cannot dlopen it and anndata 0.7 files would be unreadable.
// Decoding only: flashot writes deflate. The format is liblzf's: a control byte c < 32 starts a literal run of
// c+1 bytes; otherwise c>>5 (7 = extended by the next byte) + 2 bytes are copied from ((c&31)<<8 | next) + 1
// bytes back.

#include "h5/lzf.hpp"

#include <cstdlib>
#include <cstring>

namespace flashot::io::h5 {
namespace {

constexpr H5Z_filter_t kLzfFilter = 32000;
// h5py's LZF filter stores the chunk size in bytes as its third client value.
constexpr std::size_t kChunkSizeValue = 2;
constexpr std::size_t kFirstGuessFactor = 4;
constexpr std::size_t kMaxOutputBytes = std::size_t{1} << 32;

// Decodes `in` into `out`; returns the decoded size, 0 if `out` is too small, or -1 if the input is corrupt.
long long lzf_decode(const unsigned char* in, std::size_t in_size, unsigned char* out, std::size_t out_size) {
  const unsigned char* ip = in;
  const unsigned char* const in_end = in + in_size;
  unsigned char* op = out;
  unsigned char* const out_end = out + out_size;
  while (ip < in_end) {
    std::size_t ctrl = *ip++;
    if (ctrl < 32) {
      const std::size_t len = ctrl + 1;
      if (static_cast<std::size_t>(in_end - ip) < len) return -1;
      if (static_cast<std::size_t>(out_end - op) < len) return 0;
      std::memcpy(op, ip, len);
      op += len;
      ip += len;
    } else {
      std::size_t len = ctrl >> 5;
      if (ip >= in_end) return -1;
      if (len == 7) {
        len += *ip++;
        if (ip >= in_end) return -1;
      }
      const std::size_t back = ((ctrl & 0x1f) << 8) + *ip++ + 1;
      len += 2;
      if (back > static_cast<std::size_t>(op - out)) return -1;
      if (static_cast<std::size_t>(out_end - op) < len) return 0;
      const unsigned char* ref = op - back;
      for (std::size_t i = 0; i < len; ++i) *op++ = *ref++;  // byte by byte: the source may overlap the output
    }
  }
  return static_cast<long long>(op - out);
}

std::size_t lzf_filter(unsigned flags, std::size_t cd_nelmts, const unsigned cd_values[], std::size_t nbytes,
                       std::size_t* buf_size, void** buf) {
  if ((flags & H5Z_FLAG_REVERSE) == 0) return 0;  // encoding is not offered: flashot never writes LZF
  std::size_t out_size = cd_nelmts > kChunkSizeValue && cd_values[kChunkSizeValue] > 0
                             ? cd_values[kChunkSizeValue]
                             : nbytes * kFirstGuessFactor + 64;
  while (out_size <= kMaxOutputBytes) {
    auto* out = static_cast<unsigned char*>(std::malloc(out_size));
    if (out == nullptr) return 0;
    const long long n = lzf_decode(static_cast<const unsigned char*>(*buf), nbytes, out, out_size);
    if (n > 0 || (n == 0 && nbytes == 0)) {
      std::free(*buf);
      *buf = out;
      *buf_size = out_size;
      return static_cast<std::size_t>(n);
    }
    std::free(out);
    if (n < 0) return 0;
    out_size *= 2;
  }
  return 0;
}

}  // namespace

void register_builtin_lzf() {
  static const bool registered = [] {
    if (H5Zfilter_avail(kLzfFilter) > 0) return true;  // a working plugin is already there
    H5Eclear2(H5E_DEFAULT);
    static const H5Z_class2_t kClass = {H5Z_CLASS_T_VERS, kLzfFilter, 1, 0, "lzf (flashot built-in decoder)",
                                        nullptr, nullptr, lzf_filter};
    return H5Zregister(&kClass) >= 0;
  }();
  (void)registered;
}

}  // namespace flashot::io::h5
