// ds4tp_fuzz_seeds DIR: writes every target's seed corpus to DIR/<target>/.
#include <cstdio>
#include <string>

#include <sys/stat.h>

#include "fuzz/fuzz.hpp"

int main(int argc, char **argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  std::string root = argv[1];
  mkdir(root.c_str(), 0755);
  for (const std::string &t : ds4tp::fuzz::targets()) {
    std::string dir = root + "/" + t;
    mkdir(dir.c_str(), 0755);
    int i = 0;
    for (const auto &s : ds4tp::fuzz::seeds(t)) {
      std::string path = dir + "/seed-" + std::to_string(i++);
      FILE *f = std::fopen(path.c_str(), "wb");
      if (!f) return 1;
      std::fwrite(s.data(), 1, s.size(), f);
      std::fclose(f);
    }
    std::printf("%s: %d seeds\n", t.c_str(), i);
  }
  return 0;
}
