// docs/store.md's example: ranks meeting through the job's store. ctest runs it under braid
// launch --nproc-per-node 2; exits 1 unless every rank reads the other's address and the
// arrivals count both ranks.
#include <cstdio>
#include <string>
#include <thread>

#include "braid/comm/rank_info.h"
#include "braid/comm/store.h"

int main() {
  const int rank = braid::detect_rank_info().rank;
  const std::string my_address = "host-" + std::to_string(rank) + ":4000";
  // [snippet]
  auto store = braid::store_from_env();  // MASTER_ADDR / MASTER_PORT / BRAID_STORE_TOKEN
  store->set("addr/" + std::to_string(rank), my_address);
  store->wait({"addr/0", "addr/1"});  // throws kTimeout after store->timeout()
  auto peer = store->get_string("addr/1");
  int64_t arrived = store->add("arrived", 1);
  auto group = std::make_shared<braid::PrefixStore>("group3", store);  // a subgroup's namespace
  // [end snippet]

  group->set("leader", std::to_string(rank));  // both ranks: the key is in group3's namespace only
  bool ok = peer == "host-1:4000" && (arrived == 1 || arrived == 2) && !store->check({"leader"}) &&
            group->check({"leader"});
  // Rank 0 serves the store (unless the launcher does): it leaves after every rank's last call.
  store->add("done", 1);
  while (rank == 0 && store->add("done", 0) < 2) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!ok) std::fprintf(stderr, "FAIL: rank %d read a wrong value from the store\n", rank);
  return ok ? 0 : 1;
}
