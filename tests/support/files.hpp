// Files a suite writes and reads back: a whole file as text, and a fresh
// temporary folder removed (with what is in it) when the suite is done.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

namespace ds4tp::test {

// The file's bytes; empty when it cannot be read.
inline std::string read_file(const std::string &path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// /tmp/<prefix>-XXXXXX. Only the process that made it removes it: ranks
// forked under it leave it to their parent.
class TempDir {
 public:
  explicit TempDir(const std::string &prefix) {
    std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ignore;
    if (!path_.empty() && getpid() == owner_) std::filesystem::remove_all(path_, ignore);
  }
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  // Empty when mkdtemp failed.
  const std::string &path() const { return path_; }

 private:
  std::string path_;
  pid_t owner_ = getpid();
};

}  // namespace ds4tp::test
