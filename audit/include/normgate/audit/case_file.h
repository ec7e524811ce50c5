// normgate/audit/case_file.h: error maps, and the HDF5 files that keep
// them for audit (schemas: datasets/SCHEMA.md).
//
// Case file (normgate-case/2, `normgate repro --save`): one case's inputs as
// stored bits, one implementation's outputs, the oracle's rstd and dw with
// their bounds, the error maps, and provenance; `normgate repro --file`
// replays it without the generator after checking the inputs' SHA-256.
// Maps file (normgate-maps/2, `normgate export`): error maps of several
// (case, implementation) pairs with provenance, no inputs.
// Both carry /@content_sha256, the SHA-256 of a manifest of every other
// attribute and every dataset (datasets/SCHEMA.md), checked on every read:
// a changed case id, verdict, shape or value is an error naming the file.
// Files are built in memory, written to a temporary file, fsynced and
// renamed; reading a corrupted, truncated or modified file throws
// std::runtime_error naming the file (and the dataset or attribute where one
// is at fault), never std::bad_alloc: every shape is checked against the
// case id before anything is allocated. Files of the older schemas
// (normgate-case/1, normgate-maps/1: no content digest) are refused with a
// message saying how to write them again (upgrade_file).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "normgate/core/types.h"
#include "normgate/oracle/reference.h"
#include "normgate/seeds/generate.h"
#include "normgate/validators/stats.h"

namespace normgate::validators {

/// Where one implementation's errors lie, per output, in err/tol units (budget.h).
struct ErrorMaps {
  int64_t rows = 0, cols = 0;
  int64_t tile = 256;                 ///< tile edge for the pooled maps
  std::vector<double> dw_ratio;       ///< [cols] err/tol of dw
  std::vector<double> dw_bound;       ///< [cols] oracle bound of the reference dw (absolute)
  std::vector<double> dw_bound_tol;   ///< [cols] that bound over tol
  std::vector<double> rstd_ratio;     ///< [rows]
  int64_t tile_rows = 0, tile_cols = 0;  ///< ceil(rows/tile), ceil(cols/tile)
  std::vector<float> y_tiles, dx_tiles;  ///< [tile_rows, tile_cols] max err/tol in each tile
  std::vector<float> dx_full;         ///< [rows, cols] err/tol (only when asked for)
  /// Histogram counts of err/tol per output (y, rstd, dx, dw), Histogram's bins.
  std::array<std::vector<int64_t>, 4> hist;
};

/// Compute the maps of `got` against the oracle (ref: RstdMode::fp64).
/// tile >= 1; full: also the [rows, cols] dx map (4 bytes per element).
/// Throws std::invalid_argument for tile < 1 or sizes that do not match p.
ErrorMaps error_maps(const oracle::Problem& p, const Outputs& got, const oracle::Reference& ref, int64_t tile = 256,
                     bool full = false, int threads = 0);

/// Provenance of a saved case or a maps entry (all strings; "" = unknown).
struct Provenance {
  std::string case_id, impl, impl_sha256, backend, oracle, escalations, window, seed_set, family, budgets, verdict;
  std::string gpu, driver, cuda, normgate_version, normgate_commit, date;
  /// The forward that produced y, rstd (and h_new) and its source hash: a
  /// kernel variant (fwd_rowwise) for kernel rows, `fp32-baseline` for the
  /// baseline (empty in a normgate-case/1 file upgraded from before them).
  std::string fwd, fwd_sha256;
};

/// One saved case (normgate-case/1).
struct SavedCase {
  Provenance prov;
  std::string inputs_sha256;       ///< seeds::digest(inputs).all when written
  seeds::HostInputs inputs;        ///< x, dy, w (plain form)
  Outputs outputs;                 ///< y, rstd, dx, dw of prov.impl
  std::vector<double> ref_rstd, ref_rstd_bound, ref_dw, ref_dw_bound;
  ErrorMaps maps;
};

/// Write a case file atomically (temporary + fsync + rename). Throws
/// std::invalid_argument for inconsistent sizes (or a prov.case_id that is not
/// the inputs' case), std::runtime_error naming the path and the system's
/// error on I/O errors (disk full: nothing is left at path or beside it).
void write_case_file(const std::string& path, const SavedCase& c);

/// Read a case file: schema, shapes (from the case id), the content digest
/// and the inputs' SHA-256 are checked. Throws std::runtime_error naming the
/// file and the dataset or attribute (missing, wrong type or shape, corrupted:
/// Fletcher-32 or HDF5's metadata checksums, not part of the schema), or
/// naming both digests on a mismatch (content or inputs).
SavedCase read_case_file(const std::string& path);

/// One entry of a maps file.
struct MapsEntry {
  Provenance prov;
  ErrorMaps maps;
  std::array<double, 4> max_ratio{};  ///< y, rstd, dx, dw
};

/// Write a maps file (normgate-maps/2) atomically; `source` is what it was
/// exported from (a report path), `source_sha256` the SHA-256 (64 lowercase
/// hex digits) of that report's bytes, or "" for none (a file upgraded from
/// normgate-maps/1): `plot` shows a report's window verdicts beside the maps
/// only when the report hashes to it. Each entry's prov.case_id must parse
/// and its maps have that case's rows (T * heads) and H; a source_sha256
/// that is not 64 hex digits is std::invalid_argument. Throws as
/// write_case_file.
void write_maps_file(const std::string& path, const std::string& source, const std::vector<MapsEntry>& entries,
                     const std::string& source_sha256 = "");

/// Read a maps file back; `source_sha256` receives its /@source_sha256 ("" in
/// a file without one). Throws as read_case_file.
std::vector<MapsEntry> read_maps_file(const std::string& path, std::string* source = nullptr,
                                      std::string* source_sha256 = nullptr);

/// Rewrite a file of an older schema (normgate-case/1, normgate-maps/1) as
/// the current one (with its content digest) at `out`: it is read with every
/// check the old schema had (Fletcher-32, shapes, the inputs' SHA-256), and
/// the new file records /@upgraded = "from <old schema> <note>: its attributes
/// were covered by no digest before". Only for files whose history is
/// trusted (e.g. committed): the digest vouches for nothing older than the
/// upgrade. Returns the new schema. Throws as read_case_file (and
/// write_case_file); a file of another schema is a std::runtime_error.
std::string upgrade_file(const std::string& path, const std::string& out, const std::string& note = "");

/// The recorded variants (p.impl and, when it differs, p.fwd) whose
/// source SHA-256 is not this build's registry hash, as "NAME recorded
/// <12 hex>, this build <12 hex>" joined by ", "; empty when every recorded
/// hash matches (or none was recorded, or the name is not a registered
/// variant, e.g. fp32-baseline). Throws nothing.
std::string changed_sources(const Provenance& p);

/// Layout of any HDF5 file: every dataset path and, for "/" and every group,
/// its attribute names as "OBJ@NAME" (for schema checks). Throws as
/// read_case_file when the file cannot be opened.
std::vector<std::string> list_layout(const std::string& path);

/// A few lines describing an HDF5 file of either schema (`normgate inspect`),
/// after every check read_case_file / read_maps_file makes. Throws as
/// read_case_file.
std::string inspect_file(const std::string& path);

}  // namespace normgate::validators
