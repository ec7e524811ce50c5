// audit/src/h5.h (internal): a thin RAII layer over the HDF5 C API for
// normgate's case and map files (datasets/SCHEMA.md). Every failure throws
// std::runtime_error naming the file and the object; HDF5's own error printing
// is switched off, its innermost message is appended instead.
//
// Content digest: every attribute and dataset written through a Writer is
// entered in a manifest, and commit() stores the SHA-256 of that manifest as
// the root attribute content_sha256. A Reader enters every item it reads the
// same way; verify_content() checks that the file holds nothing it did not
// read and that the manifest's SHA-256 is the recorded one. Manifest (also in
// datasets/SCHEMA.md, and computed the same way by python/normgate/cases.py
// and audit/plot_maps.py): one line per item, sorted by KEY,
//   TYPE " " DIMS " " SHA256(VALUE) " " KEY "\n"
// KEY "/path" for a dataset, "/path@name" ("/@name" on the root) for an
// attribute; TYPE str | u16 | i64 | f32 | f64; DIMS "-" for a scalar
// attribute, else the dims joined by "x"; VALUE the elements little-endian,
// row-major (a string: its stored bytes without trailing NULs).
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace normgate::validators::h5 {

/// An owned HDF5 identifier, closed with the matching H5*close.
class Id {
 public:
  Id() = default;
  Id(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Id() { reset(); }
  Id(Id&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Id& operator=(Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      close_ = o.close_;
      o.id_ = -1;
    }
    return *this;
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  hid_t get() const { return id_; }
  /// Close it; the close's status (0 when there was nothing to close).
  herr_t reset() {
    herr_t r = 0;
    if (id_ >= 0 && close_ != nullptr) r = close_(id_);
    id_ = -1;
    return r;
  }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

/// Items read or written, KEY -> manifest line (see the top of this file).
using Manifest = std::map<std::string, std::string>;
/// SHA-256 (lowercase hex) of the manifest's lines in key order.
std::string manifest_sha256(const Manifest& m);

/// An HDF5 file being written: built in memory (HDF5 1.10 file format:
/// checksummed metadata), then written by commit() to a temporary beside
/// PATH (core::temp_name_beside), fsynced and renamed onto PATH; destroyed
/// without commit() nothing is written (no half file is ever at PATH).
/// size_hint: roughly the bytes the datasets will take (the memory image
/// grows in steps of a quarter of it).
class Writer {
 public:
  explicit Writer(std::string path, uint64_t size_hint = 0);
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  hid_t root() const { return file_.get(); }
  /// Create a group (and any missing parents) under the root; returns it.
  Id group(const std::string& name);
  /// Store content_sha256, write the image to the temporary, fsync, rename
  /// onto PATH. Throws std::runtime_error naming PATH and the system's error
  /// (disk full, I/O error); the temporary is removed.
  void commit();
  const std::string& path() const { return path_; }
  Manifest& manifest() { return manifest_; }
  struct Image;  ///< the memory image (h5.cpp)

 private:
  std::string path_, target_, tmp_;  // target_: path_, or the file its link points to
  std::unique_ptr<Image> image_;
  Id file_;
  Manifest manifest_;
  bool done_ = false;
};

/// An HDF5 file opened read-only. Throws std::runtime_error naming the file
/// when it is missing or not HDF5 (truncated, corrupted superblock).
class Reader {
 public:
  explicit Reader(std::string path);
  hid_t root() const { return file_.get(); }
  const std::string& path() const { return path_; }
  bool exists(const std::string& name) const;  ///< a link of that path exists
  /// Names of the members of group `g` ("/" for the root), in name order.
  std::vector<std::string> members(const std::string& g) const;
  /// Paths of every dataset in the file ("inputs/x", ...), in visit order.
  std::vector<std::string> datasets() const;
  /// Names of the attributes of object `obj`.
  std::vector<std::string> attributes(const std::string& obj) const;
  /// Every item read so far.
  Manifest& manifest() const { return manifest_; }
  /// Check the content digest: every attribute and dataset of the file must
  /// have been read (else "... is not part of SCHEMA"), and the SHA-256 of
  /// their manifest must equal /@content_sha256. Throws naming the file.
  void verify_content(const std::string& schema) const;

 private:
  std::string path_;
  Id file_;
  mutable Manifest manifest_;
};

/// Element types stored.
enum class Type { u16, i64, f32, f64 };

/// Write a dataset of `dims` (rank 1 or 2) at `name` under `loc`: chunked
/// (at most ~1 MiB per chunk), byte shuffle, deflate level 4, Fletcher-32
/// checksum; `dtype_attr` ("bf16", "fp32", ...) is stored as the string
/// attribute "dtype" when not empty. Entered in w's manifest.
void write(Writer& w, hid_t loc, const std::string& name, Type t, const std::vector<uint64_t>& dims,
           const void* data, const std::string& dtype_attr = "");

/// Read a whole dataset whose stored element type must be exactly `t`'s
/// (class, size, sign) and whose dims must be `want`; both are checked before
/// anything is allocated. Throws naming file and dataset when missing, of
/// another type or shape, or unreadable (a Fletcher-32 checksum mismatch
/// included). Entered in f's manifest.
std::vector<uint16_t> read_u16(const Reader& f, const std::string& name, const std::vector<uint64_t>& want);
std::vector<float> read_f32(const Reader& f, const std::string& name, const std::vector<uint64_t>& want);
std::vector<double> read_f64(const Reader& f, const std::string& name, const std::vector<uint64_t>& want);
std::vector<int64_t> read_i64(const Reader& f, const std::string& name, const std::vector<uint64_t>& want);

/// Scalar attributes on an object (`obj` = "/" or a group/dataset path).
void attr(Writer& w, hid_t loc, const std::string& name, const std::string& value);
void attr(Writer& w, hid_t loc, const std::string& name, double value);
void attr(Writer& w, hid_t loc, const std::string& name, int64_t value);
std::string attr_string(const Reader& f, const std::string& obj, const std::string& name);
double attr_double(const Reader& f, const std::string& obj, const std::string& name);
int64_t attr_int(const Reader& f, const std::string& obj, const std::string& name);
bool has_attr(const Reader& f, const std::string& obj, const std::string& name);

}  // namespace normgate::validators::h5
