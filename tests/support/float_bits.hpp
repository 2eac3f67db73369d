// A float's bits and back, for tests that sweep or compare floats bit for bit.
#pragma once

#include <cstdint>
#include <cstring>

namespace ds4tp::test {

inline uint32_t fbits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float ffrom(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace ds4tp::test
