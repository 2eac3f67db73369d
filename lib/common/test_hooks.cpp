#include "common/test_hooks.hpp"

namespace ds4tp {

TestHooks &test_hooks() {
  static TestHooks hooks;
  return hooks;
}

}  // namespace ds4tp
