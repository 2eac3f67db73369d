// Runs every fuzz target over its seeds and over the committed regression
// inputs (tests/fuzz/regressions/<target>/: crashes found by fuzzing, and
// hand-made edge cases). A broken invariant traps, failing the test.
#include <catch2/catch.hpp>

#include <dirent.h>

#include <fstream>
#include <iterator>

#include "fuzz/fuzz.hpp"

namespace {

std::vector<std::string> files_in(const std::string &dir) {
  std::vector<std::string> out;
  if (DIR *d = opendir(dir.c_str())) {
    while (dirent *e = readdir(d))
      if (e->d_name[0] != '.' && std::string(e->d_name) != "README.md")
        out.push_back(dir + "/" + e->d_name);
    closedir(d);
  }
  return out;
}

}  // namespace

TEST_CASE("fuzz targets pass their seeds and every regression input") {
  const std::string target = GENERATE(from_range(ds4tp::fuzz::targets()));
  INFO(target);
  auto seeds = ds4tp::fuzz::seeds(target);
  REQUIRE(!seeds.empty());
  for (const auto &s : seeds) REQUIRE(ds4tp::fuzz::run(target, s.data(), s.size()) == 0);
  auto files = files_in(std::string(DS4TP_FUZZ_DIR) + "/regressions/" + target);
  for (const auto &f : files) {
    INFO(f);
    std::ifstream in(f, std::ios::binary);
    std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    REQUIRE(ds4tp::fuzz::run(target, b.data(), b.size()) == 0);
  }
  // Every prefix of every seed (truncation is the commonest corruption).
  for (const auto &s : seeds)
    for (size_t n = 0; n < s.size(); n++) REQUIRE(ds4tp::fuzz::run(target, s.data(), n) == 0);
}
