// harness/src/digest.cpp: digest_case (digest.h).
#include "normgate/harness/digest.h"

#include <cstdio>
#include <stdexcept>

#include "normgate/core/output_digest.h"
#include "normgate/kernels/models.h"
#include "normgate/seeds/generate.h"

namespace normgate::validators {

kernels::OutputDigests digest_case(const std::string& impl, const seeds::CaseId& c, Backend backend,
                                   bool forward_only, int threads) {
  const kernels::Variant& v = kernels::variant(impl);  // throws, naming it, for an unknown name
  if (v.external)
    throw std::invalid_argument("digest: " + impl + " is an external implementation; only registered kernel "
                                "variants are digested");
  const ImplVariants iv = impl_variants(impl, c);
  const Backend b = resolve_backend(backend);
  if (b == Backend::gpu) {
    for (const kernels::Variant* x : {iv.fwd, iv.bwd})
      if (x->model_only)
        throw std::invalid_argument("digest: " + std::string(x->name) + " has a CPU model only (no GPU kernel)");
    kernels::GpuRunOptions opt;
    opt.fwd = iv.fwd;
    opt.forward_outputs_only = forward_only;
    return kernels::run_gpu_digests(*iv.bwd, c, static_cast<float>(c.eps), opt);
  }
  const seeds::HostInputs in = seeds::generate_host(c, threads);
  const bool res = c.form == Form::res;
  const RowView<uint16_t> u = res ? RowView<uint16_t>::plain(in.u.data(), in.rows, in.cols) : RowView<uint16_t>{};
  const RowView<uint16_t> dh_new =
      res ? RowView<uint16_t>::plain(in.dh_new.data(), in.rows, in.cols) : RowView<uint16_t>{};
  const Outputs o = kernels::run_model(*iv.fwd, *iv.bwd, in.x_view(), in.dy_view(), in.w_view(),
                                       static_cast<float>(c.eps), threads, u, dh_new, c.heads(), forward_only);
  kernels::OutputDigests d;
  d.y = core::digest_u16(o.y.data(), o.y.size());
  d.rstd = core::digest_u32(reinterpret_cast<const uint32_t*>(o.rstd.data()), o.rstd.size());
  d.has_h_new = res;
  if (res) d.h_new = core::digest_u16(o.h_new.data(), o.h_new.size());
  d.has_bwd = !forward_only;
  if (!forward_only) {
    d.dx = core::digest_u16(o.dx.data(), o.dx.size());
    d.dw = core::digest_u32(reinterpret_cast<const uint32_t*>(o.dw.data()), o.dw.size());
  }
  return d;
}

std::string digest_lines_sha256(const std::vector<std::string>& lines) {
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  return seeds::sha256_hex(all.data(), all.size());
}

std::string digests_file_sha256(nlohmann::json doc) {
  doc.erase("file_sha256");
  const std::string body = doc.dump();
  return seeds::sha256_hex(body.data(), body.size());
}

std::string to_string(const kernels::OutputDigests& d) {
  char b[160];
  auto hex = [&b](const char* name, uint64_t v, bool first) {
    std::snprintf(b, sizeof b, "%s%s=%016llx", first ? "" : " ", name, static_cast<unsigned long long>(v));
    return std::string(b);
  };
  std::string s = hex("y", d.y, true) + hex("rstd", d.rstd, false);
  if (d.has_msq) s += hex("msq", d.msq, false);
  if (d.has_h_new) s += hex("h_new", d.h_new, false);
  if (d.has_bwd) s += hex("dx", d.dx, false) + hex("dw", d.dw, false);
  return s;
}

}  // namespace normgate::validators
