// store_from_env(): the job's store from the launcher's variables (docs/store.md,
// "Rendezvous from the environment").
#include <cstdlib>

#include "braid/comm/rank_info.h"
#include "braid/comm/store.h"
#include "braid/comm/tcp_store.h"
#include "braid/core/environment.h"
#include "braid/core/error.h"

namespace braid {

StoreEnv store_env_from_env() {
  StoreEnv env;
  env.host = get_env_string("MASTER_ADDR", "127.0.0.1");
  if (env.host.empty()) env.host = "127.0.0.1";
  int64_t port = get_env_int("MASTER_PORT", -1);
  BRAID_CHECK(port != -1, kInvalidArgument,
              "MASTER_PORT is not set; expected the store server's port (1..65535), as "
              "`braid launch` or torchrun set it");
  BRAID_CHECK(port >= 1 && port <= 65535, kInvalidArgument, "MASTER_PORT=", port,
              " is out of range; expected 1..65535");
  env.port = static_cast<uint16_t>(port);
  env.token = get_env_string("BRAID_STORE_TOKEN", "");
  BRAID_CHECK(!env.token.empty(), kInvalidArgument,
              "BRAID_STORE_TOKEN is not set; every rank needs the job's store token (`braid "
              "launch` sets it; by hand, export the same random string to every rank)");
  // The rank decides who serves the store (rank 0 unless the launcher does). Under mpirun,
  // PMI or Slurm RANK is unset: take the rank from the same discovery ProcessGroup uses, so
  // exactly one process serves.
  if (get_env_string("RANK").has_value()) {
    int64_t rank = get_env_int("RANK", 0);
    BRAID_CHECK(rank >= 0 && rank <= INT32_MAX, kInvalidArgument, "RANK=", rank,
                " is out of range; expected a rank >= 0");
    env.rank = static_cast<int>(rank);
  } else {
    env.rank = detect_rank_info().rank;
  }
  env.served_by_launcher = get_env_bool("BRAID_STORE_SERVED_BY_LAUNCHER", false);
  return env;
}

std::shared_ptr<Store> store_from_env(std::chrono::milliseconds timeout) {
  return store_from_env(store_env_from_env(), timeout);
}

std::shared_ptr<Store> store_from_env(const StoreEnv& env, std::chrono::milliseconds timeout) {
  auto client = std::make_unique<TcpStore>(env.host, env.port, env.token, timeout);
  if (!env.is_server()) return client;
  auto server = std::make_shared<TcpStoreServer>(env.host, env.port, env.token);
  // The deleter owns the server: it outlives the client and goes with the last reference.
  return std::shared_ptr<Store>(client.release(), [server](Store* store) { delete store; });
}

}  // namespace braid
