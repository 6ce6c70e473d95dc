#pragma once
// flashot's own reader for variable-length strings stored in an HDF5 file, replacing the library's conversion.
//
// Why: HDF5 1.10.8 trusts the file where it turns a stored variable-length string (a length and a global-heap ID)
// into memory. H5HG__cache_heap_deserialize takes each heap object's size from the file without checking it against
// the collection, and H5HG_read then memcpy's that many bytes out of the collection's buffer into a buffer that
// H5T__conv_vlen sized from the element's own length (H5T_vlen_disk_read ignores that length). A corrupt size makes
// the copy run past both buffers (a SIGSEGV in `flashot info`); a free-space object of size 0 makes the
// deserializer loop forever; a heap index past the collection's table is read without a check (asserts only).
//
// What: a soft conversion function registered with H5Tregister for "stored variable-length string → string in
// memory". HDF5 picks it for every such read (attributes, datasets, compound fields), so the library's global-heap
// code never runs on a read. It reads the heap collection's bytes itself (pread on its own descriptor, or the
// in-memory image), checks the collection (signature, size within the file, every object within the collection)
// and the element (its object exists, its length fits the object) and only then copies. Any mismatch fails the
// read with a message naming the problem, which take_error_stack() reports. Writes and memory-to-memory
// conversions are declined and keep HDF5's own function.

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace flashot::io::h5 {

struct FileRef;

/// Registers the conversion (once per process; silence_errors() calls it).
void register_vlen_string_reader();

/// While alive, variable-length strings read on this thread come from `file` (which must outlive the scope).
/// A writable file is flushed first, so that the bytes on disk are the library's current view.
class VlenReadScope {
 public:
  explicit VlenReadScope(const FileRef* file);
  ~VlenReadScope();
  VlenReadScope(const VlenReadScope&) = delete;
  VlenReadScope& operator=(const VlenReadScope&) = delete;

 private:
  const FileRef* previous_;
};

/// The problem the last failed variable-length read on this thread found ("" if none); clears it.
std::string take_vlen_problem();

}  // namespace flashot::io::h5
