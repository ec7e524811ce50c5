// audit/src/h5.cpp: the HDF5 layer (h5.h).
#include "h5.h"

#include "normgate/core/file_target.h"
#include "normgate/core/temp_files.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <stdexcept>

namespace normgate::validators::h5 {

static_assert(std::endian::native == std::endian::little, "the manifest hashes elements in memory order");

namespace {

// HDF5 prints its error stack to stderr by default; errors here are turned
// into exceptions that carry the innermost description instead.
void quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

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

// Strings longer than this (an attribute's stored size) are damage, not data.
constexpr size_t kMaxString = size_t{1} << 20;

struct MdFree {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

std::string sha256_hex(const void* data, size_t n) {
  std::unique_ptr<EVP_MD_CTX, MdFree> ctx(EVP_MD_CTX_new());
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1 ||
      (n != 0 && EVP_DigestUpdate(ctx.get(), data, n) != 1) || EVP_DigestFinal_ex(ctx.get(), md, &len) != 1 ||
      len != 32)
    throw std::runtime_error("sha256: OpenSSL failed");
  static const char* hex = "0123456789abcdef";
  std::string s(64, '0');
  for (unsigned i = 0; i < 32; ++i) {
    s[2 * i] = hex[md[i] >> 4];
    s[2 * i + 1] = hex[md[i] & 15];
  }
  return s;
}

const char* type_name(Type t) {
  switch (t) {
    case Type::u16: return "u16";
    case Type::i64: return "i64";
    case Type::f32: return "f32";
    case Type::f64: return "f64";
  }
  return "?";
}

std::string dims_text(const std::vector<uint64_t>& dims) {
  if (dims.empty()) return "-";
  std::string s;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(dims[i]);
  }
  return s;
}

// KEY of an item: "/path" for a dataset, "/obj@name" for an attribute.
std::string item_key(const std::string& obj, const std::string& attr) {
  std::string o = obj.empty() || obj[0] != '/' ? "/" + obj : obj;
  if (attr.empty()) return o;
  if (o.size() > 1 && o.back() == '/') o.pop_back();
  return o + "@" + attr;
}

// Names are plain: printable ASCII without spaces (the manifest's lines)
// and without '@', which separates an object from an attribute in a
// manifest key: a dataset /maps@rows would have the key of the attribute
// rows of /maps, and an added dataset so named passed as that attribute.
bool plain_name(const std::string& s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c > ' ' && c < 127 && c != '@'; });
}

void enter(Manifest& m, const std::string& key, const char* type, const std::vector<uint64_t>& dims,
           const void* data, size_t bytes) {
  m[key] = std::string(type) + " " + dims_text(dims) + " " + sha256_hex(data, bytes) + " " + key + "\n";
}

std::string name_of(hid_t loc) {
  const ssize_t n = H5Iget_name(loc, nullptr, 0);
  if (n <= 0) return "/";
  std::string s(static_cast<size_t>(n), '\0');
  H5Iget_name(loc, s.data(), static_cast<size_t>(n) + 1);
  return s;
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

// The stored type must be t's exactly: class, size, sign and byte order.
bool stored_as(hid_t ftype, Type t) { return H5Tequal(ftype, file_type(t)) > 0; }

std::string describe_type(hid_t ftype) {
  const H5T_class_t c = H5Tget_class(ftype);
  const size_t n = H5Tget_size(ftype);
  const char* cls = c == H5T_INTEGER ? "integer" : c == H5T_FLOAT ? "float" : c == H5T_STRING ? "string" : "other";
  return std::string(cls) + " of " + std::to_string(n) + " bytes" +
         (c == H5T_INTEGER || c == H5T_FLOAT ? (H5Tget_order(ftype) == H5T_ORDER_BE ? ", big-endian" : "") : "");
}

template <class T>
std::vector<T> read_any(const Reader& f, const std::string& name, Type t, const std::vector<uint64_t>& want) {
  quiet();
  if (!f.exists(name)) fail(f.path(), "dataset " + name + " is missing");
  Id d(H5Dopen2(f.root(), name.c_str(), H5P_DEFAULT), H5Dclose);
  if (d.get() < 0) fail(f.path(), "cannot open dataset " + name);
  Id ft(H5Dget_type(d.get()), H5Tclose);
  if (ft.get() < 0) fail(f.path(), "dataset " + name + ": cannot read its type");
  if (!stored_as(ft.get(), t))
    fail(f.path(), "dataset " + name + " is stored as " + describe_type(ft.get()) + ", expected " + type_name(t));
  Id sp(H5Dget_space(d.get()), H5Sclose);
  const int r = sp.get() < 0 ? -1 : H5Sget_simple_extent_ndims(sp.get());
  if (r < 0) fail(f.path(), "dataset " + name + ": cannot read its shape");
  std::vector<hsize_t> hd(static_cast<size_t>(std::max(r, 1)), 0);
  if (r > 0 && H5Sget_simple_extent_dims(sp.get(), hd.data(), nullptr) < 0)
    fail(f.path(), "dataset " + name + ": cannot read its shape");
  const std::vector<uint64_t> dims(hd.begin(), hd.begin() + r);
  // The shape comes from the case before anything is allocated: a damaged
  // dataspace cannot ask for more memory than the case needs.
  if (dims != want)
    fail(f.path(), "dataset " + name + " has shape [" + dims_text(dims) + "], expected [" + dims_text(want) + "]");
  uint64_t n = 1;
  for (uint64_t v : dims) n *= v;
  std::vector<T> out(static_cast<size_t>(n));
  if (n > 0 && H5Dread(d.get(), mem_type(t), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0)
    fail(f.path(), "dataset " + name + ": read failed (corrupted data or checksum mismatch)");
  enter(f.manifest(), item_key(name, ""), type_name(t), dims, out.data(), out.size() * sizeof(T));
  return out;
}

Id open_obj(const Reader& f, const std::string& obj) {
  if (obj != "/" && !f.exists(obj)) fail(f.path(), "object " + obj + " is missing");
  Id o(H5Oopen(f.root(), obj.c_str(), H5P_DEFAULT), H5Oclose);
  if (o.get() < 0) fail(f.path(), "object " + obj + " is missing");
  return o;
}

std::string where(const std::string& obj, const std::string& name) { return item_key(obj, name); }

Id open_attr(const Reader& f, const std::string& obj, const std::string& name) {
  const Id o = open_obj(f, obj);
  if (H5Aexists(o.get(), name.c_str()) <= 0) fail(f.path(), "attribute " + where(obj, name) + " is missing");
  Id a(H5Aopen(o.get(), name.c_str(), H5P_DEFAULT), H5Aclose);
  if (a.get() < 0) fail(f.path(), "cannot open attribute " + where(obj, name));
  Id sp(H5Aget_space(a.get()), H5Sclose);
  if (sp.get() < 0 || H5Sget_simple_extent_type(sp.get()) != H5S_SCALAR)
    fail(f.path(), "attribute " + where(obj, name) + " is not a scalar");
  return a;
}

template <class T>
T attr_number(const Reader& f, const std::string& obj, const std::string& name, Type t) {
  const Id a = open_attr(f, obj, name);
  Id ft(H5Aget_type(a.get()), H5Tclose);
  if (ft.get() < 0 || !stored_as(ft.get(), t))
    fail(f.path(), "attribute " + where(obj, name) + " is not of type " + type_name(t));
  T v{};
  if (H5Aread(a.get(), mem_type(t), &v) < 0) fail(f.path(), "cannot read attribute " + where(obj, name));
  enter(f.manifest(), item_key(obj, name), type_name(t), {}, &v, sizeof v);
  return v;
}

void write_attr(Writer& w, hid_t loc, const std::string& name, const char* tname, hid_t ftype, hid_t mtype,
                const void* v, size_t bytes) {
  quiet();
  Id sp(H5Screate(H5S_SCALAR), H5Sclose);
  Id a(H5Acreate2(loc, name.c_str(), ftype, sp.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  if (a.get() < 0 || H5Awrite(a.get(), mtype, v) < 0) fail(w.path(), "cannot write attribute " + name);
  enter(w.manifest(), item_key(name_of(loc), name), tname, {}, v, bytes);
}

}  // namespace

std::string manifest_sha256(const Manifest& m) {
  std::string all;
  for (const auto& [key, line] : m) all += line;
  return sha256_hex(all.data(), all.size());
}

// The memory image of a file being written: the core driver allocates it
// through these callbacks, and at H5Fclose (superblock final, its checksum
// valid) hands it to image_free, which keeps it for commit() instead.
// (H5Fget_file_image on an open file gives an image whose 1.10-format
// superblock fails its checksum in HDF5 1.10.8.)
struct Writer::Image {
  void* mem = nullptr;   // kept at close
  size_t size = 0;       // its allocated size
  size_t alloc = 0;      // size of the live buffer
};

namespace {
void* image_malloc(size_t size, H5FD_file_image_op_t, void* ud) {
  auto* im = static_cast<Writer::Image*>(ud);
  im->alloc = size;
  return std::malloc(size);
}
void* image_memcpy(void* dst, const void* src, size_t n, H5FD_file_image_op_t, void*) {
  return std::memcpy(dst, src, n);
}
void* image_realloc(void* p, size_t size, H5FD_file_image_op_t, void* ud) {
  void* q = std::realloc(p, size);
  if (q != nullptr) static_cast<Writer::Image*>(ud)->alloc = size;
  return q;
}
// The property list's copies share the one Image (the Writer owns it).
void* udata_copy(void* ud) { return ud; }
herr_t udata_free(void*) { return 0; }
herr_t image_free(void* p, H5FD_file_image_op_t op, void* ud) {
  auto* im = static_cast<Writer::Image*>(ud);
  if (op == H5FD_FILE_IMAGE_OP_FILE_CLOSE && p != nullptr) {
    std::free(im->mem);
    im->mem = p;
    im->size = im->alloc;
  } else {
    std::free(p);
  }
  return 0;
}
}  // namespace

Writer::Writer(std::string path, uint64_t size_hint) : path_(std::move(path)), image_(std::make_unique<Image>()) {
  quiet();
  target_ = normgate::core::rename_target(path_);  // a link is written through, never replaced
  tmp_ = normgate::core::temp_name_beside(target_);
  // Built in memory (HDF5's core driver, no backing store) and written out by
  // commit() with plain write()s: an I/O error or a full disk is then an
  // error of ours, and HDF5 never holds a file it could not flush (its exit
  // handler would flush it again: the old writer's SIGSEGV). The 1.10 file
  // format: superblock, object headers and chunk indexes carry checksums of
  // their own (readable by HDF5 1.10 and later).
  const uint64_t grow = std::clamp<uint64_t>(size_hint / 4, uint64_t{1} << 20, uint64_t{1} << 30);
  H5FD_file_image_callbacks_t cb{image_malloc, image_memcpy, image_realloc, image_free, udata_copy, udata_free,
                                 image_.get()};
  Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (fapl.get() < 0 || H5Pset_fapl_core(fapl.get(), static_cast<size_t>(grow), 0) < 0 ||
      H5Pset_file_image_callbacks(fapl.get(), &cb) < 0 || H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG) < 0 ||
      H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V110, H5F_LIBVER_V110) < 0)
    fail(path_, "cannot set up the HDF5 file");
  file_ = Id(H5Fcreate(path_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl.get()), H5Fclose);
  if (file_.get() < 0) fail(path_, "cannot create it in memory");
}

Writer::~Writer() {
  file_.reset();
  std::free(image_->mem);
}

Id Writer::group(const std::string& name) {
  Id lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.get(), 1);
  Id g(H5Gcreate2(file_.get(), name.c_str(), lcpl.get(), H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
  if (g.get() < 0) fail(path_, "cannot create group " + name);
  return g;
}

namespace {
// Write all of buf to fd; false (errno set) on failure.
bool write_all(int fd, const char* buf, size_t n) {
  while (n > 0) {
    const ssize_t k = ::write(fd, buf, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      if (k == 0) errno = EIO;
      return false;
    }
    buf += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}
}  // namespace

void Writer::commit() {
  if (done_) throw std::logic_error("h5::Writer::commit called twice");
  attr(*this, file_.get(), "content_sha256", manifest_sha256(manifest_));
  manifest_.erase("/@content_sha256");
  if (file_.reset() < 0 || image_->mem == nullptr) fail(path_, "cannot finish the HDF5 image in memory");
  done_ = true;
  // The file's length is the superblock's end-of-file address (superblock
  // version 2 or 3: signature, 4 bytes, base address, extension address, EOF).
  const auto* img = static_cast<const unsigned char*>(image_->mem);
  uint64_t eof = 0;
  if (image_->size < 48 || std::memcmp(img, "\x89HDF\r\n\x1a\n", 8) != 0 || img[8] < 2 || img[9] != 8)
    throw std::runtime_error(path_ + ": the HDF5 image in memory has an unexpected superblock");
  for (int i = 7; i >= 0; --i) eof = (eof << 8) | img[28 + i];
  if (eof < 48 || eof > image_->size)
    throw std::runtime_error(path_ + ": the HDF5 image in memory ends at " + std::to_string(eof) + " of " +
                             std::to_string(image_->size) + " bytes");
  // Temporary, fsync, rename: PATH is either the old file or the whole new one.
  // A rewrite keeps the old file's permission bits (core::create_replacement).
  // Tracked while it exists: a signal meanwhile removes it (temp_files.h).
  const normgate::core::TrackedTemp tracked(tmp_);
  const int fd = normgate::core::create_replacement(tmp_, target_);
  if (fd < 0) throw std::runtime_error(path_ + ": cannot create " + tmp_ + ": " + std::strerror(errno));
  if (!write_all(fd, static_cast<const char*>(image_->mem), static_cast<size_t>(eof)) || ::fsync(fd) != 0) {
    const int e = errno;
    ::close(fd);
    ::unlink(tmp_.c_str());
    throw std::runtime_error(path_ + ": writing " + tmp_ + " failed: " + std::strerror(e) + " (nothing written at " +
                             path_ + ")");
  }
  if (::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp_.c_str());
    throw std::runtime_error(path_ + ": closing " + tmp_ + " failed: " + std::strerror(e) + " (nothing written at " +
                             path_ + ")");
  }
  if (::rename(tmp_.c_str(), target_.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp_.c_str());
    throw std::runtime_error(path_ + ": cannot rename " + tmp_ + " onto it: " + std::strerror(e));
  }
}

Reader::Reader(std::string path) : path_(std::move(path)) {
  quiet();
  if (const std::string why = core::regular_file_problem(path_); !why.empty())
    throw std::runtime_error(path_ + ": " + why);
  // HDF5 says "not an HDF5 file" for a file it cannot open: the reason first.
  if (::access(path_.c_str(), R_OK) != 0) throw std::runtime_error(path_ + ": cannot read: " + std::strerror(errno));
  if (H5Fis_hdf5(path_.c_str()) <= 0) fail(path_, "not an HDF5 file (truncated or corrupted?)");
  // A metadata checksum that fails once fails again: no retries (HDF5's
  // default re-reads a failing piece of metadata up to 100 times).
  Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  if (fapl.get() < 0 || H5Pset_metadata_read_attempts(fapl.get(), 1) < 0) fail(path_, "cannot set up HDF5");
  file_ = Id(H5Fopen(path_.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose);
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
    if (n < 0 || static_cast<size_t>(n) > kMaxString)
      fail(path_, "group " + g + ": cannot read member " + std::to_string(i));
    std::string s(static_cast<size_t>(n), '\0');
    H5Lget_name_by_idx(grp.get(), ".", H5_INDEX_NAME, H5_ITER_INC, i, s.data(), static_cast<size_t>(n) + 1,
                       H5P_DEFAULT);
    out.push_back(s);
  }
  return out;
}

namespace {
struct Visit {
  std::vector<std::string> datasets, objects;  // objects: groups and datasets, "/" first
  bool other = false;                          // a named datatype or an unknown object
  std::string other_name;
};
herr_t visit_obj(hid_t, const char* name, const H5O_info_t* info, void* out) {
  auto* v = static_cast<Visit*>(out);
  const std::string n = std::string(name) == "." ? "/" : name;
  if (info->type == H5O_TYPE_DATASET) v->datasets.push_back(n);
  if (info->type == H5O_TYPE_DATASET || info->type == H5O_TYPE_GROUP) {
    v->objects.push_back(n);
  } else if (!v->other) {
    v->other = true;
    v->other_name = n;
  }
  return 0;
}
herr_t visit_attr(hid_t, const char* name, const H5A_info_t*, void* out) {
  static_cast<std::vector<std::string>*>(out)->push_back(name);
  return 0;
}
// Every link under the root, each hard link by its name (an object reached
// by two names has two), and the first link that is not a hard link.
struct Links {
  std::vector<std::string> hard;
  std::string other;  // "soft link /a" or "external link /b" ("" when none)
};
herr_t visit_link(hid_t, const char* name, const H5L_info_t* info, void* out) {
  auto* l = static_cast<Links*>(out);
  if (info->type == H5L_TYPE_HARD) {
    l->hard.push_back(name);
  } else if (l->other.empty()) {
    l->other = std::string(info->type == H5L_TYPE_SOFT       ? "soft link /"
                           : info->type == H5L_TYPE_EXTERNAL ? "external link /"
                                                             : "user-defined link /") +
               name;
  }
  return 0;
}
Visit visit_all(const Reader& r) {
  Visit v;
  if (H5Ovisit(r.root(), H5_INDEX_NAME, H5_ITER_INC, visit_obj, &v) < 0) fail(r.path(), "cannot list its objects");
  return v;
}
}  // namespace

std::vector<std::string> Reader::datasets() const { return visit_all(*this).datasets; }

std::vector<std::string> Reader::attributes(const std::string& obj) const {
  const Id o = open_obj(*this, obj);
  std::vector<std::string> out;
  hsize_t idx = 0;
  if (H5Aiterate2(o.get(), H5_INDEX_NAME, H5_ITER_INC, &idx, visit_attr, &out) < 0)
    fail(path_, "cannot list attributes of " + obj);
  return out;
}

void Reader::verify_content(const std::string& schema) const {
  const Visit v = visit_all(*this);
  if (v.other) fail(path_, "object /" + v.other_name + " is not part of " + schema);
  // Links: the objects are visited once each, by their first name, so a
  // soft or external link, or a second name of a dataset, was never seen.
  Links links;
  if (H5Lvisit(root(), H5_INDEX_NAME, H5_ITER_INC, visit_link, &links) < 0) fail(path_, "cannot list its links");
  if (!links.other.empty()) fail(path_, links.other + " is not part of " + schema);
  if (links.hard.size() + 1 != v.objects.size())  // the root has no link of its own
    for (const std::string& l : links.hard)
      if (std::find(v.objects.begin(), v.objects.end(), l) == v.objects.end())
        fail(path_, "link /" + l + " (a second name of an object) is not part of " + schema);
  for (const std::string& obj : v.objects) {
    if (!plain_name(obj)) fail(path_, "an object name with spaces, control characters or '@' is not part of " + schema);
    const bool dataset = std::find(v.datasets.begin(), v.datasets.end(), obj) != v.datasets.end();
    if (dataset && manifest_.count(item_key(obj, "")) == 0)
      fail(path_, "dataset " + item_key(obj, "") + " is not part of " + schema);
    // A group holds what the schema puts in it (its attributes or members):
    // an empty or foreign group is not part of it.
    if (!dataset && obj != "/") {
      const std::string g = item_key(obj, "");
      bool used = false;
      for (auto it = manifest_.lower_bound(g); !used && it != manifest_.end() && it->first.compare(0, g.size(), g) == 0;
           ++it)
        used = it->first.size() > g.size() && (it->first[g.size()] == '/' || it->first[g.size()] == '@');
      if (!used) fail(path_, "group " + g + " is not part of " + schema);
    }
    for (const std::string& a : attributes(obj)) {
      if (!plain_name(a)) fail(path_, "an attribute name with spaces, control characters or '@' is not part of " + schema);
      const std::string key = item_key(obj, a);
      if (key != "/@content_sha256" && manifest_.count(key) == 0)
        fail(path_, "attribute " + key + " is not part of " + schema);
    }
  }
  const std::string recorded = attr_string(*this, "/", "content_sha256");
  manifest_.erase("/@content_sha256");
  const std::string found = manifest_sha256(manifest_);
  if (found != recorded)
    throw std::runtime_error(path_ + ": content SHA-256 mismatch: the file records " + recorded +
                             ", its attributes and datasets hash to " + found +
                             " (modified or damaged after it was written)");
}

void write(Writer& w, hid_t loc, const std::string& name, Type t, const std::vector<uint64_t>& dims,
           const void* data, const std::string& dtype_attr) {
  quiet();
  const std::string& file = w.path();
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
  enter(w.manifest(), item_key(name_of(d.get()), ""), type_name(t), dims, data, n * type_size(t));
  if (!dtype_attr.empty()) attr(w, d.get(), "dtype", dtype_attr);
}

std::vector<uint16_t> read_u16(const Reader& f, const std::string& name, const std::vector<uint64_t>& want) {
  return read_any<uint16_t>(f, name, Type::u16, want);
}
std::vector<float> read_f32(const Reader& f, const std::string& name, const std::vector<uint64_t>& want) {
  return read_any<float>(f, name, Type::f32, want);
}
std::vector<double> read_f64(const Reader& f, const std::string& name, const std::vector<uint64_t>& want) {
  return read_any<double>(f, name, Type::f64, want);
}
std::vector<int64_t> read_i64(const Reader& f, const std::string& name, const std::vector<uint64_t>& want) {
  return read_any<int64_t>(f, name, Type::i64, want);
}

void attr(Writer& w, hid_t loc, const std::string& name, const std::string& value) {
  quiet();
  Id t(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(t.get(), std::max<size_t>(1, value.size()));
  H5Tset_strpad(t.get(), H5T_STR_NULLPAD);
  H5Tset_cset(t.get(), H5T_CSET_UTF8);
  std::string v = value.empty() ? std::string(1, '\0') : value;
  // Hashed as stored without trailing NULs (what a reader gets back).
  size_t n = v.size();
  while (n > 0 && v[n - 1] == '\0') --n;
  write_attr(w, loc, name, "str", t.get(), t.get(), v.data(), n);
}
void attr(Writer& w, hid_t loc, const std::string& name, double value) {
  write_attr(w, loc, name, "f64", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value, sizeof value);
}
void attr(Writer& w, hid_t loc, const std::string& name, int64_t value) {
  write_attr(w, loc, name, "i64", H5T_STD_I64LE, H5T_NATIVE_INT64, &value, sizeof value);
}

std::string attr_string(const Reader& f, const std::string& obj, const std::string& name) {
  const Id a = open_attr(f, obj, name);
  Id t(H5Aget_type(a.get()), H5Tclose);
  if (t.get() < 0 || H5Tget_class(t.get()) != H5T_STRING || H5Tis_variable_str(t.get()) > 0)
    fail(f.path(), "attribute " + where(obj, name) + " is not a fixed-length string");
  const size_t n = H5Tget_size(t.get());
  if (n == 0 || n > kMaxString)
    fail(f.path(), "attribute " + where(obj, name) + " has a stored size of " + std::to_string(n) + " bytes");
  std::string s(n, '\0');
  Id mt(H5Tcopy(t.get()), H5Tclose);
  if (H5Aread(a.get(), mt.get(), s.data()) < 0) fail(f.path(), "cannot read attribute " + where(obj, name));
  size_t k = s.size();
  while (k > 0 && s[k - 1] == '\0') --k;
  enter(f.manifest(), item_key(obj, name), "str", {}, s.data(), k);
  s.resize(std::min(s.size(), s.find('\0')));
  return s;
}
double attr_double(const Reader& f, const std::string& obj, const std::string& name) {
  return attr_number<double>(f, obj, name, Type::f64);
}
int64_t attr_int(const Reader& f, const std::string& obj, const std::string& name) {
  return attr_number<int64_t>(f, obj, name, Type::i64);
}
bool has_attr(const Reader& f, const std::string& obj, const std::string& name) {
  const Id o = open_obj(f, obj);
  return H5Aexists(o.get(), name.c_str()) > 0;
}

}  // namespace normgate::validators::h5
