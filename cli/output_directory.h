// WriteOutputDirectory: a directory of files a command writes (`fragscope view --out DIR`), whole
// or not at all, never through a link someone planted.
//
// The files are written into a fresh directory beside DIR (mkdtemp: an unguessable name, mode
// 0700 until done), each created with O_CREAT|O_EXCL|O_NOFOLLOW, and then the directory takes
// DIR's place in one rename: DIR that does not exist is created; DIR that is empty or holds an
// earlier output of the same kind (it has `marker`) is exchanged with it (renameat2
// RENAME_EXCHANGE) and the old one removed. Anything else at DIR (a file, a link, a directory of
// other files) is an error naming it and nothing is written. A failure removes the temporary and
// leaves DIR as it was.
#pragma once

#include <map>
#include <string>

#include "absl/status/status.h"

namespace fragscope::cli {

// `files`: paths relative to `dir` ("index.html", "data/meta.js", "data/s0/meta.js"; no empty,
// "." or ".." component) -> content.
absl::Status WriteOutputDirectory(const std::string& dir,
                                  const std::map<std::string, std::string>& files,
                                  const std::string& marker);

}  // namespace fragscope::cli
