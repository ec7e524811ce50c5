// audit/src/h5.cpp: the HDF5 layer (h5.h).
#include "h5.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <stdexcept>

namespace normgate::validators::h5 {

namespace {

// HDF5 prints its error stack to stderr by default; errors here are turned
// into exceptions that carry the innermost description instead.
void quiet() {
  static const bool once = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)once;
}

herr_t walk(unsigned n, const H5E_error2_t* e, void* out) {
  auto* s = static_cast<std::string*>(out);
  if (n == 0 && e != nullptr && e->desc != nullptr) *s = e->desc;
  return 0;
}

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  std::string inner;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk, &inner);
  H5Eclear2(H5E_DEFAULT);
  throw std::runtime_error(file + ": " + what + (inner.empty() ? "" : " (HDF5: " + inner + ")"));
}

hid_t mem_type(Type t) {
  switch (t) {
    case Type::u16: return H5T_NATIVE_UINT16;
    case Type::i64: return H5T_NATIVE_INT64;
    case Type::f32: return H5T_NATIVE_FLOAT;
    case Type::f64: return H5T_NATIVE_DOUBLE;
  }
  return H5T_NATIVE_DOUBLE;
}

hid_t file_type(Type t) {
  switch (t) {
    case Type::u16: return H5T_STD_U16LE;
    case Type::i64: return H5T_STD_I64LE;
    case Type::f32: return H5T_IEEE_F32LE;
    case Type::f64: return H5T_IEEE_F64LE;
  }
  return H5T_IEEE_F64LE;
}

size_t type_size(Type t) { return t == Type::u16 ? 2 : t == Type::f32 ? 4 : 8; }

const char* type_name(Type t) {
  switch (t) {
    case Type::u16: return "uint16 little-endian";
    case Type::i64: return "int64 little-endian";
    case Type::f32: return "IEEE float32 little-endian";
    case Type::f64: return "IEEE float64 little-endian";
  }
  return "?";
}

// The stored type of a dataset or attribute must be exactly the one normgate
// writes: HDF5 converts any file type to the memory type on read, and a
// corrupted type (e.g. a float64 whose size field says 2 MiB) makes that
// conversion read past HDF5's own buffers.
void need_type(const std::string& file, hid_t type_id, Type t, const std::string& what) {
  Id ft(type_id, H5Tclose);
  if (ft.get() < 0 || H5Tequal(ft.get(), file_type(t)) <= 0)
    fail(file, what + " is not stored as " + type_name(t) + " (corrupted, or not written by normgate)");
}

template <class T>
std::vector<T> read_any(const Reader& f, const std::string& name, Type t, std::vector<uint64_t>* dims, int rank) {
  quiet();
  if (!f.exists(name)) fail(f.path(), "dataset " + name + " is missing");
  Id d(H5Dopen2(f.root(), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (d.get() < 0) fail(f.path(), "cannot open dataset " + name);
  need_type(f.path(), H5Dget_type(d.get()), t, "dataset " + name);
  Id sp(H5Dget_space(d.get()), H5Sclose);
  const int r = H5Sget_simple_extent_ndims(sp.get());
  if (r < 0) fail(f.path(), "dataset " + name + ": cannot read its shape");
  if (rank > 0 && r != rank)
    fail(f.path(), "dataset " + name + " has rank " + std::to_string(r) + ", expected " + std::to_string(rank));
  std::vector<hsize_t> hd(static_cast<size_t>(std::max(r, 1)), 1);
  if (r > 0) H5Sget_simple_extent_dims(sp.get(), hd.data(), nullptr);
  uint64_t n = 1;
  dims->assign(hd.begin(), hd.begin() + r);
  for (int i = 0; i < r; ++i) n *= hd[static_cast<size_t>(i)];
  if (n > (uint64_t{1} << 40)) fail(f.path(), "dataset " + name + " has " + std::to_string(n) + " elements (> 2^40)");
  std::vector<T> out(static_cast<size_t>(n));
  if (n > 0 && H5Dread(d.get(), mem_type(t), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    fail(f.path(), "dataset " + name + ": read failed (corrupted data or checksum mismatch)");
  return out;
}

Id open_obj(const Reader& f, const std::string& obj) {
  Id o(H5Oopen(f.root(), obj.c_str(), H5P_DEFAULT), H5Oclose);
  if (o.get() < 0) fail(f.path(), "object " + obj + " is missing");
  return o;
}

Id open_attr(const Reader& f, const std::string& obj, const std::string& name) {
  const Id o = open_obj(f, obj);
  if (H5Aexists(o.get(), name.c_str()) <= 0) fail(f.path(), "attribute " + obj + "@" + name + " is missing");
  Id a(H5Aopen(o.get(), name.c_str(), H5P_DEFAULT), H5Aclose);
  if (a.get() < 0) fail(f.path(), "cannot open attribute " + obj + "@" + name);
  return a;
}

void write_attr(hid_t loc, const std::string& file, const std::string& name, hid_t ftype, hid_t mtype,
                const void* v) {
  quiet();
  Id sp(H5Screate(H5S_SCALAR), H5Sclose);
  Id a(H5Acreate2(loc, name.c_str(), ftype, sp.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (a.get() < 0 || H5Awrite(a.get(), mtype, v) < 0) fail(file, "cannot write attribute " + name);
}

}  // namespace

Writer::Writer(std::string path) : path_(std::move(path)) {
  quiet();
  tmp_ = path_ + ".tmp-" + std::to_string(::getpid());
  file_ = Id(H5Fcreate(tmp_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  if (file_.get() < 0) fail(path_, "cannot create (temporary " + tmp_ + ")");
}

Writer::~Writer() {
  if (!done_) {
    file_.reset();
    std::remove(tmp_.c_str());
  }
}

Id Writer::group(const std::string& name) {
  Id lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Id g(H5Gcreate2(file_.get(), name.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  if (g.get() < 0) fail(path_, "cannot create group " + name);
  return g;
}

void Writer::commit() {
  if (H5Fflush(file_.get(), H5F_SCOPE_GLOBAL) < 0) fail(path_, "flush failed");
  file_.reset();
  std::error_code ec;
  std::filesystem::rename(tmp_, path_, ec);
  if (ec) {
    std::remove(tmp_.c_str());
    throw std::runtime_error(path_ + ": cannot rename " + tmp_ + " onto it: " + ec.message());
  }
  done_ = true;
}

Reader::Reader(std::string path) : path_(std::move(path)) {
  quiet();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path_, ec)) throw std::runtime_error(path_ + ": no such file");
  if (H5Fis_hdf5(path_.c_str()) <= 0) fail(path_, "not an HDF5 file (truncated or corrupted?)");
  file_ = Id(H5Fopen(path_.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (file_.get() < 0) fail(path_, "cannot open as HDF5 (truncated or corrupted?)");
}

bool Reader::exists(const std::string& name) const {
  // Check each prefix: H5Lexists fails on a missing intermediate group.
  size_t pos = 0;
  while (true) {
    pos = name.find('/', pos + 1);
    const std::string prefix = name.substr(0, pos);
    if (!prefix.empty() && prefix != "/" && H5Lexists(file_.get(), prefix.c_str(), H5P_DEFAULT) <= 0) return false;
    if (pos == std::string::npos) return true;
  }
}

std::vector<std::string> Reader::members(const std::string& g) const {
  Id grp(H5Gopen2(file_.get(), g.c_str(), H5P_DEFAULT), H5Gclose);
  if (grp.get() < 0) fail(path_, "group " + g + " is missing");
  H5G_info_t info;
  if (H5Gget_info(grp.get(), &info) < 0) fail(path_, "group " + g + ": cannot list");
  std::vector<std::string> out;
  for (hsize_t i = 0; i < info.nlinks; ++i) {
    const ssize_t n = H5Lget_name_by_idx(grp.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
    if (n < 0) fail(path_, "group " + g + ": cannot read member " + std::to_string(i));
    std::string s(static_cast<size_t>(n), '\0');
    H5Lget_name_by_idx(grp.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, s.data(), static_cast<size_t>(n) + 1,
                       H5P_DEFAULT);
    out.push_back(s);
  }
  return out;
}

namespace {
herr_t visit_ds(hid_t, const char* name, const H5O_info_t* info, void* out) {
  if (info->type == H5O_TYPE_DATASET) static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}
herr_t visit_attr(hid_t, const char* name, const H5A_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}
}  // namespace

std::vector<std::string> Reader::datasets() const {
  std::vector<std::string> out;
  if (H5Ovisit(file_.get(), H5_INDEX_NAME, H5_ITER_INC, visit_ds, &out) < 0) fail(path_, "cannot list datasets");
  return out;
}

std::vector<std::string> Reader::attributes(const std::string& obj) const {
  Id o(H5Oopen(file_.get(), obj.c_str(), H5P_DEFAULT), H5Oclose);
  if (o.get() < 0) fail(path_, "object " + obj + " is missing");
  std::vector<std::string> out;
  hsize_t idx = 0;
  if (H5Aiterate2(o.get(), H5_INDEX_NAME, H5_ITER_INC, &idx, visit_attr, &out) < 0)
    fail(path_, "cannot list attributes of " + obj);
  return out;
}

void write(hid_t loc, const std::string& file, const std::string& name, Type t, const std::vector<uint64_t>& dims,
           const void* data, const std::string& dtype_attr) {
  quiet();
  if (dims.empty() || dims.size() > 2) fail(file, "dataset " + name + ": rank must be 1 or 2");
  std::vector<hsize_t> hd(dims.begin(), dims.end());
  Id sp(H5Screate_simple(static_cast<int>(hd.size()), hd.data(), nullptr), H5Sclose);
  Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  uint64_t n = 1;
  for (uint64_t d : dims) n *= d;
  if (n > 0) {
    // Chunks of ~1 MiB: whole rows of the last dimension where they fit.
    const uint64_t per = std::max<uint64_t>(1, (uint64_t{1} << 20) / type_size(t));
    std::vector<hsize_t> ch(hd);
    if (ch.size() == 1) {
      ch[0] = std::min<uint64_t>(hd[0], per);
    } else {
      ch[1] = std::min<uint64_t>(hd[1], per);
      ch[0] = std::max<uint64_t>(1, std::min<uint64_t>(hd[0], per / ch[1]));
    }
    if (H5Pset_chunk(dcpl.get(), static_cast<int>(ch.size()), ch.data()) < 0 || H5Pset_fletcher32(dcpl.get()) < 0 ||
        H5Pset_shuffle(dcpl.get()) < 0 || H5Pset_deflate(dcpl.get(), 4) < 0)
      fail(file, "dataset " + name + ": cannot set chunking/filters");
  }
  Id lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Id d(H5Dcreate2(loc, name.c_str(), file_type(t), sp.get(), lcpl.get(), dcpl.get(), H5P_DEFAULT), H5Dclose);
  if (d.get() < 0) fail(file, "cannot create dataset " + name);
  if (n > 0 && H5Dwrite(d.get(), mem_type(t), H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    fail(file, "dataset " + name + ": write failed");
  if (!dtype_attr.empty()) attr(d.get(), file, "dtype", dtype_attr);
}

std::vector<uint16_t> read_u16(const Reader& f, const std::string& name, std::vector<uint64_t>* dims, int rank) {
  return read_any<uint16_t>(f, name, Type::u16, dims, rank);
}
std::vector<float> read_f32(const Reader& f, const std::string& name, std::vector<uint64_t>* dims, int rank) {
  return read_any<float>(f, name, Type::f32, dims, rank);
}
std::vector<double> read_f64(const Reader& f, const std::string& name, std::vector<uint64_t>* dims, int rank) {
  return read_any<double>(f, name, Type::f64, dims, rank);
}
std::vector<int64_t> read_i64(const Reader& f, const std::string& name, std::vector<uint64_t>* dims, int rank) {
  return read_any<int64_t>(f, name, Type::i64, dims, rank);
}

void attr(hid_t loc, const std::string& file, const std::string& name, const std::string& value) {
  quiet();
  Id t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t.get(), std::max<size_t>(1, value.size()));
  H5Tset_strpad(t.get(), H5T_STR_NULLPAD);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  std::string v = value.empty() ? std::string(1, '\0') : value;
  write_attr(loc, file, name, t.get(), t.get(), v.data());
}
void attr(hid_t loc, const std::string& file, const std::string& name, double value) {
  write_attr(loc, file, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}
void attr(hid_t loc, const std::string& file, const std::string& name, int64_t value) {
  write_attr(loc, file, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

std::string attr_string(const Reader& f, const std::string& obj, const std::string& name) {
  const Id a = open_attr(f, obj, name);
  Id t(H5Aget_type(a.get()), H5Tclose);
  if (H5Tget_class(t.get()) != H5T_STRING || H5Tis_variable_str(t.get()) > 0)
    fail(f.path(), "attribute " + obj + "@" + name + " is not a fixed-length string");
  const size_t n = H5Tget_size(t.get());
  std::string s(n, '\0');
  Id mt(H5Tcopy(t.get()), H5Tclose);
  if (H5Aread(a.get(), mt.get(), s.data()) < 0) fail(f.path(), "cannot read attribute " + obj + "@" + name);
  s.resize(std::min(s.size(), s.find('\0')));
  return s;
}
double attr_double(const Reader& f, const std::string& obj, const std::string& name) {
  const Id a = open_attr(f, obj, name);
  need_type(f.path(), H5Aget_type(a.get()), Type::f64, "attribute " + obj + "@" + name);
  double v = 0;
  if (H5Aread(a.get(), H5T_NATIVE_DOUBLE, &v) < 0) fail(f.path(), "cannot read attribute " + obj + "@" + name);
  return v;
}
int64_t attr_int(const Reader& f, const std::string& obj, const std::string& name) {
  const Id a = open_attr(f, obj, name);
  need_type(f.path(), H5Aget_type(a.get()), Type::i64, "attribute " + obj + "@" + name);
  int64_t v = 0;
  if (H5Aread(a.get(), H5T_NATIVE_INT64, &v) < 0) fail(f.path(), "cannot read attribute " + obj + "@" + name);
  return v;
}
bool has_attr(const Reader& f, const std::string& obj, const std::string& name) {
  const Id o = open_obj(f, obj);
  return H5Aexists(o.get(), name.c_str()) > 0;
}

}  // namespace normgate::validators::h5
