// normgate/core/file_target.h: the file a temp-then-rename writer replaces.
#pragma once

#include <string>

namespace normgate::core {

/// The path a writer that writes a temporary file and renames it over
/// `path` must rename onto: `path` itself, or, when `path` is a symbolic
/// link (a chain of them), the file the chain ends at (absolute; it need not
/// exist yet: a dangling link's target is created). Renaming onto the link
/// itself would replace the link with a plain file and leave the file it
/// pointed to stale (an approvals file linked to a shared copy, a report
/// linked elsewhere). Never throws: a link that cannot be resolved (a loop)
/// gives `path`, and the write then fails or replaces the link as before.
std::string rename_target(const std::string& path);

}  // namespace normgate::core
