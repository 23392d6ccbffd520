// docs/p2p.md: the declaration of make_p2p_backend, as comm/src/p2p_collectives.h has it
// (private to comm/). The program takes the address of the function the page declares: were
// the page's signature not the real one, it would declare a new overload that nothing defines,
// and this program would not link.
#include <cstdio>

#include "p2p_collectives.h"  // comm/src

// [snippet]
namespace braid::p2p {
std::unique_ptr<Backend> make_p2p_backend(std::string name, const BackendContext& ctx,
                                          std::unique_ptr<Transport> transport);
}
// [end snippet]

int main() {
  using Fn = std::unique_ptr<braid::Backend> (*)(std::string, const braid::BackendContext&,
                                                 std::unique_ptr<braid::p2p::Transport>);
  volatile Fn f = &braid::p2p::make_p2p_backend;
  std::printf("make_p2p_backend at %p\n", reinterpret_cast<void*>(f));
  return f != nullptr ? 0 : 1;
}
