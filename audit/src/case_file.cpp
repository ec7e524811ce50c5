// audit/src/case_file.cpp: error maps and the normgate-case/1, normgate-maps/1 files.
#include "normgate/audit/case_file.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "h5.h"
#include "normgate/core/bf16.h"
#include "normgate/core/host_memory.h"
#include "normgate/core/printable.h"
#include "normgate/kernels/registry.h"
#include "normgate/seeds/case_id.h"
#include "normgate/validators/budget.h"

namespace normgate::validators {

namespace {

// A provenance backend of a built-in variant's run ("gpu", "cpu-model") or
// the FP32 baseline's ("cpu"); an external's is its own ran_on.
bool builtin_backend(const std::string& b) { return b == "gpu" || b == "cpu-model" || b == "cpu"; }

// A SHA-256 as the project writes it: 64 lowercase hex digits.
bool is_sha256_hex(const std::string& s) {
  return s.size() == 64 &&
         std::all_of(s.begin(), s.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

// Every shape of a case or maps file comes from its case id, so a crafted id
// (T = 2^31 at H = 16384, over datasets of unwritten chunks) made the reader
// allocate what the host does not have before the content digest could
// fail: std::bad_alloc, no file named. `bytes` (what reading `what` holds at
// once) is checked against the host's memory first.
void require_memory_to_read(const std::string& path, const std::string& what, unsigned __int128 bytes,
                            const core::HostMemory& hm) {
  const uint64_t have = hm.usable();
  if (have == 0 || bytes <= have) return;
  char need[48];
  std::snprintf(need, sizeof need, "%.1f GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
  throw std::runtime_error(path + ": " + what + " needs " + need + " of host memory to read, more than " +
                           hm.describe_usable() + " (a damaged or crafted file?)");
}

void require_memory_to_read(const std::string& path, const std::string& what, unsigned __int128 bytes) {
  require_memory_to_read(path, what, bytes, core::host_memory());
}


constexpr const char* kCaseSchema = "normgate-case/2";
constexpr const char* kMapsSchema = "normgate-maps/2";
// Written before the content digest (attributes covered by no digest):
// refused, except by upgrade_file.
constexpr const char* kCaseSchemaV1 = "normgate-case/1";
constexpr const char* kMapsSchemaV1 = "normgate-maps/1";
constexpr const char* kHistNames[4] = {"hist_y", "hist_rstd", "hist_dx", "hist_dw"};
constexpr const char* kMaxNames[4] = {"max_ratio_y", "max_ratio_rstd", "max_ratio_dx", "max_ratio_dw"};
// Largest tile edge (normgate export --tile) and maps file entry count a reader accepts.
constexpr int64_t kMaxTile = int64_t{1} << 20;
constexpr int64_t kMaxEntries = 1000000;

using U = std::vector<uint64_t>;

U dims1(int64_t n) { return {static_cast<uint64_t>(n)}; }
U dims2(int64_t a, int64_t b) { return {static_cast<uint64_t>(a), static_cast<uint64_t>(b)}; }

void need(bool ok, const std::string& msg) {
  if (!ok) throw std::invalid_argument(msg);
}

// Provenance as string attributes of one object.
const std::vector<std::pair<const char*, std::string Provenance::*>>& prov_fields() {
  static const std::vector<std::pair<const char*, std::string Provenance::*>> f = {
      {"case_id", &Provenance::case_id},   {"impl", &Provenance::impl},
      {"impl_sha256", &Provenance::impl_sha256}, {"backend", &Provenance::backend},
      {"oracle", &Provenance::oracle},     {"escalations", &Provenance::escalations},
      {"window", &Provenance::window},     {"seed_set", &Provenance::seed_set},
      {"family", &Provenance::family},     {"budgets", &Provenance::budgets},
      {"verdict", &Provenance::verdict},   {"gpu", &Provenance::gpu},
      {"driver", &Provenance::driver},     {"cuda", &Provenance::cuda},
      {"normgate_version", &Provenance::normgate_version}, {"normgate_commit", &Provenance::normgate_commit},
      {"date", &Provenance::date}, {"fwd", &Provenance::fwd}, {"fwd_sha256", &Provenance::fwd_sha256}};
  return f;
}

void write_prov(h5::Writer& w, hid_t loc, const Provenance& p) {
  for (const auto& [name, m] : prov_fields()) h5::attr(w, loc, name, p.*m);
}

// legacy: a /1 file, whose fwd and fwd_sha256 may be absent (read as empty).
Provenance read_prov(const h5::Reader& f, const std::string& obj, bool legacy) {
  Provenance p;
  for (const auto& [name, m] : prov_fields()) {
    const bool optional = legacy && (std::string(name) == "fwd" || std::string(name) == "fwd_sha256");
    if (!optional || h5::has_attr(f, obj, name)) p.*m = h5::attr_string(f, obj, name);
  }
  return p;
}

uint64_t maps_bytes(const ErrorMaps& m) {
  return static_cast<uint64_t>(m.cols) * 24 + static_cast<uint64_t>(m.rows) * 8 + m.y_tiles.size() * 8 +
         m.dx_full.size() * 4 + 5 * Histogram::kBins * 8;
}

void write_maps(h5::Writer& w, hid_t loc, const ErrorMaps& m) {
  need(m.dw_ratio.size() == static_cast<size_t>(m.cols) && m.dw_bound.size() == m.dw_ratio.size() &&
           m.dw_bound_tol.size() == m.dw_ratio.size() && m.rstd_ratio.size() == static_cast<size_t>(m.rows) &&
           m.y_tiles.size() == static_cast<size_t>(m.tile_rows * m.tile_cols) && m.dx_tiles.size() == m.y_tiles.size() &&
           (m.dx_full.empty() || m.dx_full.size() == static_cast<size_t>(m.rows * m.cols)),
       "error maps: inconsistent sizes");
  need(m.tile >= 1 && m.tile <= kMaxTile && m.tile_rows == (m.rows + m.tile - 1) / m.tile &&
           m.tile_cols == (m.cols + m.tile - 1) / m.tile,
       "error maps: tile " + std::to_string(m.tile) + " and the tile counts do not match");
  for (int o = 0; o < 4; ++o)
    need(m.hist[o].size() == static_cast<size_t>(Histogram::kBins), "error maps: histogram size");
  h5::write(w, loc, "dw_ratio", h5::Type::f64, dims1(m.cols), m.dw_ratio.data());
  h5::write(w, loc, "dw_bound", h5::Type::f64, dims1(m.cols), m.dw_bound.data());
  h5::write(w, loc, "dw_bound_over_tol", h5::Type::f64, dims1(m.cols), m.dw_bound_tol.data());
  h5::write(w, loc, "rstd_ratio", h5::Type::f64, dims1(m.rows), m.rstd_ratio.data());
  h5::write(w, loc, "y_tiles", h5::Type::f32, dims2(m.tile_rows, m.tile_cols), m.y_tiles.data());
  h5::write(w, loc, "dx_tiles", h5::Type::f32, dims2(m.tile_rows, m.tile_cols), m.dx_tiles.data());
  if (!m.dx_full.empty()) h5::write(w, loc, "dx_ratio", h5::Type::f32, dims2(m.rows, m.cols), m.dx_full.data());
  std::vector<double> upper(Histogram::kBins);
  for (int k = 0; k < Histogram::kBins; ++k) upper[static_cast<size_t>(k)] = Histogram::upper(k);
  h5::write(w, loc, "hist_upper", h5::Type::f64, dims1(Histogram::kBins), upper.data());
  for (int o = 0; o < 4; ++o) h5::write(w, loc, kHistNames[o], h5::Type::i64, dims1(Histogram::kBins), m.hist[o].data());
  h5::attr(w, loc, "rows", m.rows);
  h5::attr(w, loc, "cols", m.cols);
  h5::attr(w, loc, "tile", m.tile);
}

// Group g's maps attributes (rows, cols, tile), checked against its case's
// `rows` x `cols` (the case id's) and kMaxTile, with the tile counts; no
// dataset is read.
ErrorMaps maps_header(const h5::Reader& f, const std::string& g, int64_t rows, int64_t cols) {
  ErrorMaps m;
  m.rows = h5::attr_int(f, g, "rows");
  m.cols = h5::attr_int(f, g, "cols");
  m.tile = h5::attr_int(f, g, "tile");
  if (m.rows != rows || m.cols != cols || m.tile < 1 || m.tile > kMaxTile)
    throw std::runtime_error(f.path() + ": group " + g + " has rows " + std::to_string(m.rows) + ", cols " +
                             std::to_string(m.cols) + ", tile " + std::to_string(m.tile) + "; its case has " +
                             std::to_string(rows) + " x " + std::to_string(cols) + " (tile 1.." +
                             std::to_string(kMaxTile) + ")");
  m.tile_rows = (m.rows + m.tile - 1) / m.tile;
  m.tile_cols = (m.cols + m.tile - 1) / m.tile;
  return m;
}

// What read_maps holds of group g with header m: rstd's ratios (8 B a row),
// dw's three arrays (24 B a column), the two tile maps (4 B a tile each),
// the five histograms and the full dx map when present.
unsigned __int128 maps_bytes(const h5::Reader& f, const std::string& g, const ErrorMaps& m) {
  using U = unsigned __int128;
  return U(8) * U(m.rows) + U(24) * U(m.cols) + U(8) * U(m.tile_rows) * U(m.tile_cols) +
         U(5) * U(8) * U(Histogram::kBins) + (f.exists(g + "/dx_ratio") ? U(4) * U(m.rows) * U(m.cols) : U(0));
}

// Group g's datasets into m, a header maps_header checked (and whose
// memory the caller checked).
ErrorMaps read_maps_data(const h5::Reader& f, const std::string& g, ErrorMaps m) {
  m.dw_ratio = h5::read_f64(f, g + "/dw_ratio", dims1(m.cols));
  m.dw_bound = h5::read_f64(f, g + "/dw_bound", dims1(m.cols));
  m.dw_bound_tol = h5::read_f64(f, g + "/dw_bound_over_tol", dims1(m.cols));
  m.rstd_ratio = h5::read_f64(f, g + "/rstd_ratio", dims1(m.rows));
  m.y_tiles = h5::read_f32(f, g + "/y_tiles", dims2(m.tile_rows, m.tile_cols));
  m.dx_tiles = h5::read_f32(f, g + "/dx_tiles", dims2(m.tile_rows, m.tile_cols));
  if (f.exists(g + "/dx_ratio")) m.dx_full = h5::read_f32(f, g + "/dx_ratio", dims2(m.rows, m.cols));
  (void)h5::read_f64(f, g + "/hist_upper", dims1(Histogram::kBins));  // part of the content digest
  for (int o = 0; o < 4; ++o) m.hist[o] = h5::read_i64(f, g + "/" + kHistNames[o], dims1(Histogram::kBins));
  return m;
}

std::string schema_of(const h5::Reader& f) {
  if (!h5::has_attr(f, "/", "schema")) throw std::runtime_error(f.path() + ": no schema attribute: not a normgate file");
  return h5::attr_string(f, "/", "schema");
}

[[noreturn]] void refuse_v1(const std::string& path, const std::string& schema) {
  const bool cas = schema == kCaseSchemaV1;
  throw std::runtime_error(
      path + ": schema '" + schema + "' was written before content digests (its attributes, the case id and verdict " +
      "among them, are covered by no digest) and is no longer read; write it again: " +
      (cas ? std::string("normgate repro CASE_ID --variant V --save NEW.h5 (the case id and variant it names)")
           : std::string("normgate export REPORT -o NEW.h5 (the report it names as /@source)")) +
      ", or, for a file whose history you trust (e.g. committed), normgate inspect '" + path +
      "' --upgrade NEW.h5 re-reads it with the old format's checks and writes it with a digest");
}

// Rows and columns of the maps of a case id; throws naming the file and where.
std::pair<int64_t, int64_t> case_shape(const std::string& path, const std::string& where, const std::string& id) {
  try {
    const seeds::CaseId c = seeds::parse_case(id);
    return {c.rows(), c.H};
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": attribute " + where + ": " + e.what());
  }
}

SavedCase read_case(const std::string& path, bool legacy, std::string* upgraded) {
  const h5::Reader f(path);
  const std::string schema = schema_of(f);
  if (schema == kCaseSchemaV1 && !legacy) refuse_v1(path, schema);
  const std::string want = legacy ? kCaseSchemaV1 : kCaseSchema;
  if (schema != want) throw std::runtime_error(path + ": schema '" + schema + "', expected '" + want + "'");
  SavedCase c;
  c.prov = read_prov(f, "/", legacy);
  c.inputs_sha256 = h5::attr_string(f, "/", "inputs_sha256");
  if (!legacy && h5::has_attr(f, "/", "upgraded")) {
    const std::string u = h5::attr_string(f, "/", "upgraded");
    if (upgraded) *upgraded = u;
  }
  seeds::CaseId id;
  try {
    id = seeds::parse_case(c.prov.case_id);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": attribute /@case_id: " + e.what());
  }
  const int64_t T = id.rows(), H = id.H;
  // Everything read is held at once, checked before the first read: BF16 x,
  // dy, y, dx (and form res's u, dh_new, h_new); per row rstd (FP32) and the
  // reference rstd and its bound (FP64); per column w, dw (at most FP32
  // each) and the reference dw and its bound (FP64); the maps. Counting the
  // BF16 tensors alone let a crafted [2^28, 1] case (44 B a row held, 8
  // counted) end in std::bad_alloc.
  using U = unsigned __int128;
  const U tensors = U(2) * U(T) * U(H) * (id.form == Form::res ? 7u : 4u) + U(20) * U(T) + U(24) * U(H);
  require_memory_to_read(path, "its case " + seeds::to_string(id), tensors);
  const ErrorMaps header = maps_header(f, "maps", T, H);  // the maps' shapes are the case's
  require_memory_to_read(path, "its case " + seeds::to_string(id) + " with its maps",
                         tensors + maps_bytes(f, "maps", header));
  c.inputs.id = id;
  c.inputs.rows = T;
  c.inputs.cols = H;
  c.inputs.x = h5::read_u16(f, "inputs/x", dims2(T, H));
  c.inputs.dy = h5::read_u16(f, "inputs/dy", dims2(T, H));
  if (id.w == WDtype::bf16)
    c.inputs.w_bf16 = h5::read_u16(f, "inputs/w", dims1(H));
  else
    c.inputs.w_f32 = h5::read_f32(f, "inputs/w", dims1(H));
  if (id.form == Form::res) {
    c.inputs.u = h5::read_u16(f, "inputs/u", dims2(T, H));
    c.inputs.dh_new = h5::read_u16(f, "inputs/dh_new", dims2(T, H));
    c.outputs.h_new = h5::read_u16(f, "outputs/h_new", dims2(T, H));
  }
  c.outputs.y = h5::read_u16(f, "outputs/y", dims2(T, H));
  c.outputs.dx = h5::read_u16(f, "outputs/dx", dims2(T, H));
  c.outputs.rstd = h5::read_f32(f, "outputs/rstd", dims1(T));
  c.outputs.dw = h5::read_f32(f, "outputs/dw", dims1(H));
  c.ref_rstd = h5::read_f64(f, "reference/rstd", dims1(T));
  c.ref_rstd_bound = h5::read_f64(f, "reference/rstd_bound", dims1(T));
  c.ref_dw = h5::read_f64(f, "reference/dw", dims1(H));
  c.ref_dw_bound = h5::read_f64(f, "reference/dw_bound", dims1(H));
  c.maps = read_maps_data(f, "maps", header);
  // Every dataset's "dtype" attribute is part of the content too.
  for (const std::string& d : f.datasets())
    if (h5::has_attr(f, d, "dtype")) (void)h5::attr_string(f, d, "dtype");
  if (!legacy) f.verify_content(want);
  const std::string dig = seeds::digest(c.inputs).all;
  if (dig != c.inputs_sha256)
    throw std::runtime_error(path + ": the inputs' SHA-256 is " + dig + " but the file records " + c.inputs_sha256 +
                             " (modified inputs)");
  return c;
}

std::vector<MapsEntry> read_maps_entries(const std::string& path, bool legacy, std::string* source,
                                         std::string* upgraded, std::string* source_sha256 = nullptr) {
  const h5::Reader f(path);
  const std::string schema = schema_of(f);
  if (schema == kMapsSchemaV1 && !legacy) refuse_v1(path, schema);
  const std::string want = legacy ? kMapsSchemaV1 : kMapsSchema;
  if (schema != want) throw std::runtime_error(path + ": schema '" + schema + "', expected '" + want + "'");
  const std::string src = h5::attr_string(f, "/", "source");
  if (source) *source = src;
  // The report's digest (exports since it was recorded; not in upgraded files).
  std::string src_sha;
  if (!legacy && h5::has_attr(f, "/", "source_sha256")) {
    src_sha = h5::attr_string(f, "/", "source_sha256");
    if (!is_sha256_hex(src_sha))
      throw std::runtime_error(path + ": attribute /@source_sha256 is not 64 lowercase hex digits");
  }
  if (source_sha256) *source_sha256 = src_sha;
  if (!legacy && h5::has_attr(f, "/", "upgraded")) {
    const std::string u = h5::attr_string(f, "/", "upgraded");
    if (upgraded) *upgraded = u;
  }
  const int64_t n = h5::attr_int(f, "/", "entries");
  if (n < 0 || n > kMaxEntries)
    throw std::runtime_error(path + ": attribute /@entries is " + std::to_string(n) + " (0.." +
                             std::to_string(kMaxEntries) + ")");
  const size_t present = n > 0 || f.exists("cases") ? f.members("cases").size() : 0;
  if (present != static_cast<size_t>(n))
    throw std::runtime_error(path + ": /@entries is " + std::to_string(n) + " but group /cases holds " +
                             std::to_string(present) + " groups");
  // Every entry is held at once: each group's maps, then all of them
  // together, are checked against the host's memory before any is read
  // (each alone could fit).
  // The host's memory is read once, not per group (up to kMaxEntries of
  // them); each group's provenance and checked header are kept for the read.
  const core::HostMemory hm = core::host_memory();
  std::vector<MapsEntry> out(static_cast<size_t>(n));
  unsigned __int128 total = 0;
  for (int64_t i = 0; i < n; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "cases/%04lld", static_cast<long long>(i));
    if (!f.exists(name)) throw std::runtime_error(path + ": group " + name + " is missing (" + std::to_string(n) + " entries recorded)");
    MapsEntry& e = out[static_cast<size_t>(i)];
    e.prov = read_prov(f, name, legacy);
    const std::string where = "/" + std::string(name) + "@case_id";
    const auto [rows, cols] = case_shape(path, where, e.prov.case_id);
    e.maps = maps_header(f, name, rows, cols);
    const unsigned __int128 b = maps_bytes(f, name, e.maps);
    // A group beyond memory on its own is named (a damaged or crafted one).
    require_memory_to_read(path, "group " + std::string(name) + " (" + std::to_string(rows) + " x " +
                                     std::to_string(cols) + ")",
                           b, hm);
    total += b;
  }
  if (n > 1) require_memory_to_read(path, "the sum of its " + std::to_string(n) + " groups of maps", total, hm);
  for (int64_t i = 0; i < n; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "cases/%04lld", static_cast<long long>(i));
    MapsEntry& e = out[static_cast<size_t>(i)];
    for (int o = 0; o < 4; ++o) e.max_ratio[o] = h5::attr_double(f, name, kMaxNames[o]);
    e.maps = read_maps_data(f, name, std::move(e.maps));
  }
  for (const std::string& d : f.datasets())
    if (h5::has_attr(f, d, "dtype")) (void)h5::attr_string(f, d, "dtype");
  if (!legacy) f.verify_content(want);
  return out;
}

}  // namespace

ErrorMaps error_maps(const oracle::Problem& p, const Outputs& got, const oracle::Reference& ref, int64_t tile,
                     bool full, int threads) {
  need(tile >= 1, "error_maps: tile = " + std::to_string(tile) + " must be >= 1");
  const int64_t rows = p.x.rows(), cols = p.x.cols;
  need(got.y.size() == static_cast<size_t>(rows * cols) && got.dx.size() == got.y.size() &&
           got.rstd.size() == static_cast<size_t>(rows) && got.dw.size() == static_cast<size_t>(cols),
       "error_maps: outputs do not match the problem's [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
  ErrorMaps m;
  m.rows = rows;
  m.cols = cols;
  m.tile = tile;
  m.tile_rows = (rows + tile - 1) / tile;
  m.tile_cols = (cols + tile - 1) / tile;
  for (auto& h : m.hist) h.assign(Histogram::kBins, 0);
  const Budget by = budget(Output::y), br = budget(Output::rstd), bx = budget(Output::dx), bw = budget(Output::dw);
  m.dw_ratio.resize(static_cast<size_t>(cols));
  m.dw_bound.resize(m.dw_ratio.size());
  m.dw_bound_tol.resize(m.dw_ratio.size());
  for (int64_t j = 0; j < cols; ++j) {
    const oracle::VB v = ref.dw(j);
    const double r = ratio(bw, static_cast<double>(got.dw[j]), v.v);
    m.dw_ratio[j] = r;
    m.dw_bound[j] = v.bound;
    const double tol = tolerance(bw, v.v);
    m.dw_bound_tol[j] = tol > 0 ? v.bound / tol : std::numeric_limits<double>::infinity();
    ++m.hist[3][Histogram::bin(r)];
  }
  m.rstd_ratio.resize(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    m.rstd_ratio[r] = ratio(br, static_cast<double>(got.rstd[r]), ref.rstd(r).v);
    ++m.hist[1][Histogram::bin(m.rstd_ratio[r])];
  }
  if (full) m.dx_full.assign(static_cast<size_t>(rows * cols), 0.0f);
  const size_t ntiles = static_cast<size_t>(m.tile_rows * m.tile_cols);
  const int nt = threads > 0 ? threads : std::max(1, omp_get_max_threads());
  // Every allocation before the parallel region, where std::bad_alloc is an
  // ordinary exception (thrown inside it, it ends the process). With enough
  // tile rows each thread owns whole tile rows and writes the maps directly
  // (2 floats a tile in all); otherwise (few, wide tiles: ntiles is small)
  // each thread keeps its own maps, merged after.
  const bool by_tile_rows = m.tile_rows >= 4 * static_cast<int64_t>(nt);
  m.y_tiles.assign(ntiles, 0.0f);
  m.dx_tiles.assign(ntiles, 0.0f);
  struct Part {
    std::vector<float> yt, dt;
    std::vector<int64_t> hy, hd;
    std::vector<oracle::VB> yb, db;
  };
  std::vector<Part> part(static_cast<size_t>(nt));
  for (Part& pt : part) {
    if (!by_tile_rows) {
      pt.yt.assign(ntiles, 0.0f);
      pt.dt.assign(ntiles, 0.0f);
    }
    pt.hy.assign(Histogram::kBins, 0);
    pt.hd.assign(Histogram::kBins, 0);
    pt.yb.resize(static_cast<size_t>(cols));
    pt.db.resize(static_cast<size_t>(cols));
  }
  auto do_row = [&](Part& me, int64_t r, float* yt, float* dt) {
    ref.y_row(r, me.yb.data());
    ref.dx_row(r, me.db.data());
    const int64_t tr = r / tile;
    for (int64_t j = 0; j < cols; ++j) {
      const double ry = ratio(by, static_cast<double>(bf16_to_float(got.y[r * cols + j])), me.yb[j].v);
      const double rx = ratio(bx, static_cast<double>(bf16_to_float(got.dx[r * cols + j])), me.db[j].v);
      ++me.hy[Histogram::bin(ry)];
      ++me.hd[Histogram::bin(rx)];
      const size_t t = static_cast<size_t>(tr * m.tile_cols + j / tile);
      yt[t] = std::max(yt[t], static_cast<float>(ry));  // float(inf) stays inf
      dt[t] = std::max(dt[t], static_cast<float>(rx));
      if (full) m.dx_full[static_cast<size_t>(r * cols + j)] = static_cast<float>(rx);
    }
  };
#pragma omp parallel num_threads(nt)
  {
    Part& me = part[static_cast<size_t>(omp_get_thread_num())];
    if (by_tile_rows) {
#pragma omp for schedule(dynamic, 1)
      for (int64_t tr = 0; tr < m.tile_rows; ++tr)
        for (int64_t r = tr * tile; r < std::min(rows, (tr + 1) * tile); ++r)
          do_row(me, r, m.y_tiles.data(), m.dx_tiles.data());
    } else {
#pragma omp for schedule(static)
      for (int64_t r = 0; r < rows; ++r) do_row(me, r, me.yt.data(), me.dt.data());
    }
  }
  for (const Part& pt : part) {
    for (size_t t = 0; t < pt.yt.size(); ++t) {
      m.y_tiles[t] = std::max(m.y_tiles[t], pt.yt[t]);
      m.dx_tiles[t] = std::max(m.dx_tiles[t], pt.dt[t]);
    }
    for (int k = 0; k < Histogram::kBins; ++k) {
      m.hist[0][k] += pt.hy[k];
      m.hist[2][k] += pt.hd[k];
    }
  }
  return m;
}

namespace {

void write_case(const std::string& path, const SavedCase& c, const std::string& upgraded) {
  const seeds::CaseId& id = c.inputs.id;
  const int64_t T = c.inputs.rows, H = c.inputs.cols;
  const bool res = id.form == Form::res;
  need(!res || (c.inputs.u.size() == c.inputs.x.size() && c.inputs.dh_new.size() == c.inputs.x.size() &&
                c.outputs.h_new.size() == c.inputs.x.size()),
       "write_case_file: a res case needs u, dh_new and h_new of rows*cols elements");
  need(T == id.rows() && H == id.H && c.inputs.x.size() == static_cast<size_t>(T * H) &&
           c.inputs.dy.size() == c.inputs.x.size() &&
           (id.w == WDtype::bf16 ? c.inputs.w_bf16.size() : c.inputs.w_f32.size()) == static_cast<size_t>(H),
       "write_case_file: inputs do not match case " + seeds::to_string(id));
  need(c.prov.case_id == seeds::to_string(id),
       "write_case_file: provenance case_id '" + c.prov.case_id + "' is not the inputs' case " + seeds::to_string(id));
  need(c.outputs.y.size() == c.inputs.x.size() && c.outputs.dx.size() == c.inputs.x.size() &&
           c.outputs.rstd.size() == static_cast<size_t>(T) && c.outputs.dw.size() == static_cast<size_t>(H),
       "write_case_file: outputs do not match case " + seeds::to_string(id));
  need(c.ref_rstd.size() == static_cast<size_t>(T) && c.ref_rstd_bound.size() == c.ref_rstd.size() &&
           c.ref_dw.size() == static_cast<size_t>(H) && c.ref_dw_bound.size() == c.ref_dw.size(),
       "write_case_file: references do not match case " + seeds::to_string(id));
  need(c.maps.rows == T && c.maps.cols == H, "write_case_file: maps do not match case " + seeds::to_string(id));
  const uint64_t n = static_cast<uint64_t>(T * H);
  h5::Writer w(path, n * (res ? 10 : 4) * 2 + static_cast<uint64_t>(T) * 20 + static_cast<uint64_t>(H) * 20 +
                         maps_bytes(c.maps));
  h5::attr(w, w.root(), "schema", std::string(kCaseSchema));
  write_prov(w, w.root(), c.prov);
  h5::attr(w, w.root(), "inputs_sha256", c.inputs_sha256);
  if (!upgraded.empty()) h5::attr(w, w.root(), "upgraded", upgraded);
  h5::write(w, w.root(), "inputs/x", h5::Type::u16, dims2(T, H), c.inputs.x.data(), "bf16");
  h5::write(w, w.root(), "inputs/dy", h5::Type::u16, dims2(T, H), c.inputs.dy.data(), "bf16");
  if (id.w == WDtype::bf16)
    h5::write(w, w.root(), "inputs/w", h5::Type::u16, dims1(H), c.inputs.w_bf16.data(), "bf16");
  else
    h5::write(w, w.root(), "inputs/w", h5::Type::f32, dims1(H), c.inputs.w_f32.data(), "fp32");
  if (res) {
    h5::write(w, w.root(), "inputs/u", h5::Type::u16, dims2(T, H), c.inputs.u.data(), "bf16");
    h5::write(w, w.root(), "inputs/dh_new", h5::Type::u16, dims2(T, H), c.inputs.dh_new.data(), "bf16");
    h5::write(w, w.root(), "outputs/h_new", h5::Type::u16, dims2(T, H), c.outputs.h_new.data(), "bf16");
  }
  h5::write(w, w.root(), "outputs/y", h5::Type::u16, dims2(T, H), c.outputs.y.data(), "bf16");
  h5::write(w, w.root(), "outputs/dx", h5::Type::u16, dims2(T, H), c.outputs.dx.data(), "bf16");
  h5::write(w, w.root(), "outputs/rstd", h5::Type::f32, dims1(T), c.outputs.rstd.data(), "fp32");
  h5::write(w, w.root(), "outputs/dw", h5::Type::f32, dims1(H), c.outputs.dw.data(), "fp32");
  h5::write(w, w.root(), "reference/rstd", h5::Type::f64, dims1(T), c.ref_rstd.data());
  h5::write(w, w.root(), "reference/rstd_bound", h5::Type::f64, dims1(T), c.ref_rstd_bound.data());
  h5::write(w, w.root(), "reference/dw", h5::Type::f64, dims1(H), c.ref_dw.data());
  h5::write(w, w.root(), "reference/dw_bound", h5::Type::f64, dims1(H), c.ref_dw_bound.data());
  {
    const h5::Id g = w.group("maps");
    write_maps(w, g.get(), c.maps);
  }
  w.commit();
}

void write_maps_entries(const std::string& path, const std::string& source, const std::vector<MapsEntry>& entries,
                        const std::string& upgraded, const std::string& source_sha256) {
  if (!source_sha256.empty() && !is_sha256_hex(source_sha256))
    throw std::invalid_argument("write_maps_file: source_sha256 '" + source_sha256 + "' is not 64 lowercase hex digits");
  uint64_t bytes = 0;
  for (const auto& e : entries) {
    bytes += maps_bytes(e.maps);
    // What the reader checks: the maps have the shape of their case.
    seeds::CaseId id;
    try {
      id = seeds::parse_case(e.prov.case_id);
    } catch (const std::exception& ex) {
      throw std::invalid_argument("write_maps_file: entry case_id '" + e.prov.case_id + "': " + ex.what());
    }
    need(e.maps.rows == id.rows() && e.maps.cols == id.H,
         "write_maps_file: maps of " + std::to_string(e.maps.rows) + " x " + std::to_string(e.maps.cols) +
             " do not match case " + e.prov.case_id);
  }
  h5::Writer w(path, bytes);
  h5::attr(w, w.root(), "schema", std::string(kMapsSchema));
  h5::attr(w, w.root(), "source", source);
  if (!source_sha256.empty()) h5::attr(w, w.root(), "source_sha256", source_sha256);
  h5::attr(w, w.root(), "entries", static_cast<int64_t>(entries.size()));
  if (!upgraded.empty()) h5::attr(w, w.root(), "upgraded", upgraded);
  for (size_t i = 0; i < entries.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "cases/%04zu", i);
    const h5::Id g = w.group(name);
    write_prov(w, g.get(), entries[i].prov);
    for (int o = 0; o < 4; ++o) h5::attr(w, g.get(), kMaxNames[o], entries[i].max_ratio[o]);
    write_maps(w, g.get(), entries[i].maps);
  }
  w.commit();
}

}  // namespace

void write_case_file(const std::string& path, const SavedCase& c) { write_case(path, c, ""); }

SavedCase read_case_file(const std::string& path) { return read_case(path, false, nullptr); }

void write_maps_file(const std::string& path, const std::string& source, const std::vector<MapsEntry>& entries,
                     const std::string& source_sha256) {
  write_maps_entries(path, source, entries, "", source_sha256);
}

std::vector<MapsEntry> read_maps_file(const std::string& path, std::string* source, std::string* source_sha256) {
  return read_maps_entries(path, false, source, nullptr, source_sha256);
}

std::string upgrade_file(const std::string& path, const std::string& out, const std::string& note) {
  std::string schema;
  {
    const h5::Reader f(path);
    schema = schema_of(f);
  }
  const std::string mark = "from " + schema + (note.empty() ? "" : " " + note) +
                           ": its attributes were covered by no digest before";
  if (schema == kCaseSchemaV1) {
    write_case(out, read_case(path, true, nullptr), mark);
    return kCaseSchema;
  }
  if (schema == kMapsSchemaV1) {
    std::string src;
    const std::vector<MapsEntry> es = read_maps_entries(path, true, &src, nullptr);
    write_maps_entries(out, src, es, mark, "");
    return kMapsSchema;
  }
  throw std::runtime_error(path + ": schema '" + schema + "': only " + kCaseSchemaV1 + " and " + kMapsSchemaV1 +
                           " files are upgraded");
}

std::string changed_sources(const Provenance& p) {
  std::string stale;
  auto check = [&stale](const std::string& name, const std::string& rec) {
    if (name.empty() || rec.empty()) return;
    const kernels::Variant* v = kernels::find_variant(name);
    if (v != nullptr && std::string(v->source_sha256) != rec)
      stale += (stale.empty() ? "" : ", ") + name + " recorded " + rec.substr(0, 12) + ", this build " +
               std::string(v->source_sha256).substr(0, 12);
  };
  check(p.impl, p.impl_sha256);
  if (p.fwd != p.impl) check(p.fwd, p.fwd_sha256);
  return stale;
}

std::vector<std::string> list_layout(const std::string& path) {
  const h5::Reader f(path);
  std::vector<std::string> out = f.datasets();
  std::vector<std::string> objs = {"/"};
  // Groups: every prefix of a dataset path.
  for (const auto& d : f.datasets())
    for (size_t pos = d.find('/'); pos != std::string::npos; pos = d.find('/', pos + 1)) objs.push_back(d.substr(0, pos));
  std::sort(objs.begin(), objs.end());
  objs.erase(std::unique(objs.begin(), objs.end()), objs.end());
  for (const auto& o : objs)
    for (const auto& a : f.attributes(o)) out.push_back((o == "/" ? "" : o) + "@" + a);
  for (const auto& d : f.datasets())
    for (const auto& a : f.attributes(d)) out.push_back(d + "@" + a);
  return out;
}

std::string inspect_file(const std::string& path) {
  std::string schema;
  {
    const h5::Reader f(path);
    schema = schema_of(f);
  }
  std::ostringstream o;
  // Every string read from the file escaped: one line each (printable.h).
  const auto E = [](const std::string& t) { return core::escape_controls(t); };
  auto line = [&o, &E](const Provenance& p, const ErrorMaps& m) {
    double mdw = 0, mr = 0, my = 0, mx = 0;
    for (double v : m.dw_ratio) mdw = std::max(mdw, v);
    for (double v : m.rstd_ratio) mr = std::max(mr, v);
    for (float v : m.y_tiles) my = std::max(my, static_cast<double>(v));
    for (float v : m.dx_tiles) mx = std::max(mx, static_cast<double>(v));
    char buf[256];
    std::snprintf(buf, sizeof buf, "  max err/tol: y %.4g  rstd %.4g  dx %.4g  dw %.4g   (%lldx%lld tiles of %lldx%lld%s)\n",
                  my, mr, mx, mdw, static_cast<long long>(m.tile_rows), static_cast<long long>(m.tile_cols),
                  static_cast<long long>(m.tile), static_cast<long long>(m.tile),
                  m.dx_full.empty() ? "" : ", full dx map");
    o << "  case " << E(p.case_id) << "\n  impl " << E(p.impl) << " (sha256 " << E(p.impl_sha256.substr(0, 12)) << ")"
      << (p.fwd.empty() || p.fwd == p.impl ? ""
                                           : ", forward " + E(p.fwd) + " (sha256 " + E(p.fwd_sha256.substr(0, 12)) + ")")
      << " on " << E(p.backend) << (p.gpu.empty() ? "" : " (" + E(p.gpu) + ")") << ", oracle " << E(p.oracle)
      << ", verdict " << E(p.verdict) << "\n" << buf;
    // Recorded sources that are not this build's: the numbers describe older
    // (or newer) code of the variant; replay re-runs this build's.
    const std::string stale = changed_sources(p);
    if (!stale.empty())
      o << "  note: the sources changed since this was recorded (" << E(stale)
        << "); `normgate repro --file` on a case says whether the outputs did\n";
  };
  std::string upgraded;
  if (schema == kCaseSchemaV1 || schema == kMapsSchemaV1) refuse_v1(path, schema);
  if (schema == kCaseSchema) {
    const SavedCase c = read_case(path, false, &upgraded);
    o << E(path) << ": " << kCaseSchema << " (content SHA-256 and inputs SHA-256 " << c.inputs_sha256.substr(0, 16)
      << "... verified)\n";
    if (!upgraded.empty()) o << "  upgraded " << E(upgraded) << "\n";
    line(c.prov, c.maps);
  } else if (schema == kMapsSchema) {
    std::string src, src_sha;
    const auto es = read_maps_entries(path, false, &src, &upgraded, &src_sha);
    o << E(path) << ": " << kMapsSchema << " (content SHA-256 verified), " << es.size() << " entries, exported from "
      << E(src) << (src_sha.empty() ? std::string(" (its SHA-256 not recorded)") : " (SHA-256 " + src_sha + ")")
      << "\n";
    if (!upgraded.empty()) o << "  upgraded " << E(upgraded) << "\n";
    for (const auto& e : es) {
      o << "- window " << (e.prov.window.empty() ? "-" : E(e.prov.window)) << "\n";
      line(e.prov, e.maps);
      // A forward window's case is carried by a backward run (carrier_for):
      // the window gates y and rstd; dx and dw are that backward's.
      if (e.prov.window.rfind("fwd ", 0) == 0 && e.prov.impl != e.prov.fwd)
        o << "  (forward window: it gates y and rstd of " << E(e.prov.fwd) << "; dx, dw and the verdict are "
          << E(e.prov.impl) << "'s, the backward run that carried the case)\n";
      else if (e.prov.window.rfind("fwd ", 0) == 0 && !builtin_backend(e.prov.backend))
        // An external forward (a plugin, a Python callable): its own runs
        // only, no carrier backward (harness impl_variants).
        o << "  (forward window: it gates y and rstd of " << E(e.prov.fwd) << "'s own run, an external "
          << "implementation's; no backward ran after it: dx and dw are not produced and not gated)\n";
      else if (e.prov.window.rfind("fwd ", 0) == 0)  // a forward variant's own run (harness impl_variants)
        o << "  (forward window: it gates y and rstd of " << E(e.prov.fwd) << "'s own run; its dx, dw, and the verdict, "
          << "include the carrier backward that ran after it)\n";
    }
  } else {
    throw std::runtime_error(path + ": unknown schema '" + schema + "'");
  }
  return o.str();
}

}  // namespace normgate::validators
