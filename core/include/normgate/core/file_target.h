// normgate/core/file_target.h: the file a temp-then-rename writer replaces.
#pragma once

#include <string>
#include <vector>

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

/// Every step of `path`'s symbolic-link chain, absolute (not normalized:
/// "link/.." resolves through the link): `path` itself first, then each link's target in turn, the last
/// being what is not a link (or does not exist). Empty when the chain
/// cannot be followed (a loop: more than 40 links, or an unreadable link).
/// rename_target gives the end of it; an output check needs every step
/// (/dev/stdout -> /proc/self/fd/1 -> the file stdout is redirected to).
/// Never throws.
std::vector<std::string> link_chain(const std::string& path);

/// A name for a temporary file beside `target` (rename_target's result):
/// "TARGET.KIND.PID.N", N counting the calls of this process (from 1). Two
/// writers of one file, in two threads of a process or in two processes,
/// never share a temporary (a shared one would let one rename the other's
/// half-written bytes onto `target`); a name left by a process that died
/// may be reused by a later one with its pid (create_replacement truncates
/// it). `kind` is "tmp" for the file to be renamed, "old" for a link that
/// keeps the previous file. Never throws except std::bad_alloc.
std::string temp_name_beside(const std::string& target, const char* kind = "tmp");

/// Create (O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC) the temporary `tmp`
/// that will be renamed onto `target` (rename_target's result), with the
/// permission bits the result should have: those of `target` when it exists
/// (rwx for user, group and other; never setuid, setgid or sticky), else
/// 0644 less the umask. It is created with those bits, so it is never
/// readable by more than `target` was, then set to them exactly (the umask
/// may have narrowed them). Returns the descriptor, or -1 with errno set;
/// on a failed chmod the temporary is closed and removed.
int create_replacement(const std::string& tmp, const std::string& target);

/// Why `path` cannot be written by a temporary-then-rename writer, checked
/// before any work: "" when it can, else the reason, worded to follow
/// "cannot write 'PATH': ": the folder the write goes to (that of the file a
/// link names) is missing or not writable, `path` is a folder, exists and
/// is not a regular file (a device, FIFO or socket: the rename would
/// replace it), or exists and is not writable. "" for an empty path (nothing
/// to write). Never throws.
std::string write_problem(const std::string& path);

/// True when `a` and `b` name one file: the same inode when both exist,
/// else the same canonical absolute path of the file a write would create
/// (through links, dangling or not, and any spelling of one new file: a
/// relative "x.json" and "./x.json" alike). False when only one exists.
/// Never throws.
bool same_file(const std::string& a, const std::string& b);

/// Why `path` is not a regular file to read: "" when it is (through any
/// links), else "no such file" (also for a path through a file, which the
/// standard library reports as not found), "is a directory", "not a regular
/// file", or the system's reason when its status cannot be read ("Too many
/// levels of symbolic links", "Permission denied"). For input errors that
/// name the real problem. Never throws.
std::string regular_file_problem(const std::string& path);

}  // namespace normgate::core
