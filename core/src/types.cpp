#include "normgate/core/types.h"

namespace normgate {

std::string_view to_string(WDtype d) { return d == WDtype::bf16 ? "bf16" : "fp32"; }

std::string_view to_string(Form f) {
  switch (f) {
    case Form::plain: return "plain";
    case Form::res: return "res";
    case Form::heads24: return "heads24";
    case Form::heads4: return "heads4";
  }
  return "?";
}

WDtype parse_wdtype(std::string_view s) {
  if (s == "bf16") return WDtype::bf16;
  if (s == "fp32") return WDtype::fp32;
  throw std::invalid_argument("bad weight dtype '" + std::string(s) + "' (expected bf16 or fp32)");
}

Form parse_form(std::string_view s) {
  for (Form f : {Form::plain, Form::res, Form::heads24, Form::heads4})
    if (s == to_string(f)) return f;
  throw std::invalid_argument("bad form '" + std::string(s) +
                              "' (expected plain, res, heads24 or heads4)");
}

}  // namespace normgate
