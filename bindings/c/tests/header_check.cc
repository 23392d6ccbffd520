// braid.h compiles as C++ on its own, with every warning an error (built as C++11 and C++20
// by bindings/c/tests/CMakeLists.txt; the C tests compile it as C11). The initializer macros
// must make valid C++ aggregates too.
#include <braid.h>

static_assert(sizeof(braidUniqueId) == BRAID_UNIQUE_ID_BYTES, "braidUniqueId is its bytes");

int braid_header_check_cxx() {
  braidConfig_t config = BRAID_CONFIG_INITIALIZER;
  braidCallOptions_t options = BRAID_CALL_OPTIONS_INITIALIZER;
  braidZeroConfig_t zero = BRAID_ZERO_CONFIG_INITIALIZER;
  return static_cast<int>(config.size + options.size + zero.size) + BRAID_VERSION;
}
