// apps/cmd_families.cpp: normgate families [NAME]: the input families, or one described.
#include "commands.h"

#include <cstdio>
#include <memory>
#include <string>

#include "normgate/seeds/case_id.h"
#include "normgate/seeds/family_docs.h"

namespace normgate::app {

namespace {

constexpr seeds::Family kAllFamilies[] = {seeds::Family::normal, seeds::Family::llm,  seeds::Family::cancel,
                                          seeds::Family::epsnear, seeds::Family::zeros, seeds::Family::tiny,
                                          seeds::Family::huge,   seeds::Family::specials};

}  // namespace

void add_families(CLI::App& app, Commands& cmds) {
  auto* sub = app.add_subcommand("families", "List the input families, or describe one");
  auto name = std::make_shared<std::string>();
  sub->add_option("name", *name, "Family to describe (default: list all)");
  sub->callback([&cmds, name] {
    cmds.run = [name] {
      if (!name->empty()) {
        const auto f = seeds::parse_family(*name);
        std::printf("%s%s\n\n%s\n", std::string(seeds::to_string(f)).c_str(),
                    seeds::is_gate_family(f) ? " (gate family)" : " (robustness family, not gated by default)",
                    std::string(seeds::family_details(f)).c_str());
        return 0;
      }
      std::printf("%-9s %-6s %s\n", "family", "gated", "purpose");
      for (auto f : kAllFamilies)
        std::printf("%-9s %-6s %s\n", std::string(seeds::to_string(f)).c_str(),
                    seeds::is_gate_family(f) ? "yes" : "no", std::string(seeds::family_summary(f)).c_str());
      std::printf("\n'normgate families NAME' describes one family's distributions.\n");
      return 0;
    };
  });
}

}  // namespace normgate::app
