// audit/src/h5.h (internal): a thin RAII layer over the HDF5 C API for
// normgate's case and map files (datasets/SCHEMA.md). Every failure throws
// std::runtime_error naming the file and the object; HDF5's own error printing
// is switched off, its innermost message is appended instead.
#pragma once

#include <hdf5.h>

#include <cstdint>
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
  void reset() {
    if (id_ >= 0 && close_ != nullptr) close_(id_);
    id_ = -1;
  }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

/// An HDF5 file being written: created as PATH.tmp-<pid>, renamed onto PATH by
/// commit(); destroyed without commit() it is removed (no half file is ever
/// at PATH).
class Writer {
 public:
  explicit Writer(std::string path);
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;
  hid_t root() const { return file_.get(); }
  /// Create a group (and any missing parents) under the root; returns it.
  Id group(const std::string& name);
  /// Flush, close, rename onto the final path. Throws on failure (the
  /// temporary is removed).
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;
  Id file_;
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

 private:
  std::string path_;
  Id file_;
};

/// Element types stored.
enum class Type { u16, i64, f32, f64 };

/// Write a dataset of `dims` (rank 1 or 2) at `name` under `loc`: chunked
/// (at most ~1 MiB per chunk), byte shuffle, deflate level 4, Fletcher-32
/// checksum; `dtype_attr` ("bf16", "fp32", ...) is stored as the string
/// attribute "dtype" when not empty. `file` names the file in errors.
void write(hid_t loc, const std::string& file, const std::string& name, Type t, const std::vector<uint64_t>& dims,
           const void* data, const std::string& dtype_attr = "");

/// Read a whole dataset of the given element type (converted by HDF5 when the
/// stored type differs but is numeric). Returns its dims in *dims. Throws
/// naming file and dataset when missing, of another rank than `rank` (0: any),
/// or unreadable (a Fletcher-32 checksum mismatch included).
std::vector<uint16_t> read_u16(const Reader& f, const std::string& name, std::vector<uint64_t>* dims, int rank = 0);
std::vector<float> read_f32(const Reader& f, const std::string& name, std::vector<uint64_t>* dims, int rank = 0);
std::vector<double> read_f64(const Reader& f, const std::string& name, std::vector<uint64_t>* dims, int rank = 0);
std::vector<int64_t> read_i64(const Reader& f, const std::string& name, std::vector<uint64_t>* dims, int rank = 0);

/// Scalar attributes on an object (`obj` = "/" or a group/dataset path).
void attr(hid_t loc, const std::string& file, const std::string& name, const std::string& value);
void attr(hid_t loc, const std::string& file, const std::string& name, double value);
void attr(hid_t loc, const std::string& file, const std::string& name, int64_t value);
std::string attr_string(const Reader& f, const std::string& obj, const std::string& name);
double attr_double(const Reader& f, const std::string& obj, const std::string& name);
int64_t attr_int(const Reader& f, const std::string& obj, const std::string& name);
bool has_attr(const Reader& f, const std::string& obj, const std::string& name);

}  // namespace normgate::validators::h5
