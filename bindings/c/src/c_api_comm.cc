// Communicators through the C ABI (docs/embedding.md, "Communicators"): creation from the
// launcher's environment, from an explicit store address or from a unique id, splitting,
// queries, destroy and abort. The collectives are in c_api_collectives.cc.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "braid/comm/rank_info.h"
#include "braid/comm/tcp_store.h"
#include "braid/core/device_runtime.h"
#include "braid/core/environment.h"
#include "braid/core/error.h"
#include "c_api_internal.h"

namespace braid::capi {
namespace {

using std::chrono::milliseconds;

// What braidConfig_t asks for, checked.
struct CommConfig {
  std::string backend = "auto";
  std::optional<milliseconds> timeout;  // null: BRAID_TIMEOUT or 300 s (the group's rule)
};

CommConfig read_config(const braidConfig_t* config) {
  CommConfig c;
  if (config == nullptr) return c;
  check_struct_size(config->size, sizeof(braidConfig_t), "config");
  if (config->backend != nullptr) {
    BRAID_CHECK(*config->backend != '\0', kInvalidArgument,
                "config->backend is ''; expected a backend name (shm, ucx, hier, mpi, nccl), "
                "'auto' or NULL");
    c.backend = config->backend;
  }
  BRAID_CHECK(config->timeout_ms >= 0, kInvalidArgument, "config->timeout_ms is ",
              config->timeout_ms, "; expected > 0, or 0 for BRAID_TIMEOUT (default 300 s)");
  if (config->timeout_ms > 0) c.timeout = milliseconds(config->timeout_ms);
  return c;
}

// The deadline a store client uses to connect and wait: the group's timeout, resolved by the
// same rule ProcessGroup::create applies (which reports a bad BRAID_TIMEOUT itself).
milliseconds store_timeout(const CommConfig& c) {
  if (c.timeout) return *c.timeout;
  const double seconds = get_env_double("BRAID_TIMEOUT", 300.0);
  if (!(seconds > 0 && seconds < 1e9)) return Store::kDefaultTimeout;
  return milliseconds(std::max<int64_t>(1, std::llround(seconds * 1000.0)));
}

ProcessGroupOptions group_options(const CommConfig& c) {
  ProcessGroupOptions o;
  o.backend = c.backend;
  o.timeout = c.timeout;
  return o;
}

void check_rank_and_size(int rank, int size, const char* rank_name, const char* size_name) {
  BRAID_CHECK(size >= 1, kInvalidArgument, size_name, " is ", size, "; expected >= 1");
  BRAID_CHECK(rank >= 0 && rank < size, kInvalidArgument, rank_name, " ", rank, " is outside [0, ",
              size_name, " = ", size, ")");
}

// Note [Creation ends with a barrier]: a store hosted by a rank (braidCommInitExplicit's rank
// 0, braidGetUniqueId's process, rank 0 under torchrun) goes away with that rank's
// communicator. The other ranks use the store while they create their part of a group (the
// backend's rendezvous), so a host that destroyed its communicator right after creating it
// could cut them off. A barrier on the new group makes creation end on every rank before any
// returns; collectives themselves never use the store.
std::shared_ptr<ProcessGroup> create_group(const ProcessGroupOptions& options) {
  std::shared_ptr<ProcessGroup> pg = ProcessGroup::create(options);
  pg->barrier();
  return pg;
}

// Where raw buffers live for this group's backend: cpu when it serves host memory, else the
// device a device-only backend chose (nccl: docs/comm.md, "Device").
Device buffer_device_of(const ProcessGroup& pg) {
  const std::vector<DeviceType>& devices = pg.backend().capabilities().devices;
  if (devices.empty() ||
      std::find(devices.begin(), devices.end(), DeviceType::kCPU) != devices.end()) {
    return kCPU;
  }
  const DeviceType type = devices.front();
  const int count = device_runtime(type).device_count();
  return Device(type, default_device_index(detect_rank_info().local_rank, count));
}

// ---- unique ids ---------------------------------------------------------------------------

constexpr const char* kUniqueIdMagic = "braid-uid-1";

// The store servers this process started for braidGetUniqueId, by token, until a
// communicator made from the id takes its own reference (then the entry goes).
struct UniqueIdRegistry {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<TcpStoreServer>> servers;
};
UniqueIdRegistry& registry() {
  static UniqueIdRegistry r;
  return r;
}

struct UniqueIdFields {
  std::string host;
  uint16_t port = 0;
  std::string token;
};

// The id's text for messages: printable characters, the rest as '?'.
std::string printable_prefix(const char* bytes, size_t n) {
  std::string out;
  for (size_t i = 0; i < n && bytes[i] != '\0' && out.size() < 64; ++i) {
    out += std::isprint(static_cast<unsigned char>(bytes[i])) ? bytes[i] : '?';
  }
  return out;
}

UniqueIdFields parse_unique_id(const braidUniqueId& id) {
  const char* bytes = id.internal;
  const auto bad = [&](const std::string& why) {
    BRAID_FAIL(kInvalidArgument, "id does not parse (", why,
               "): expected the bytes braidGetUniqueId wrote, '", kUniqueIdMagic,
               " <host> <port> <token>', got '", printable_prefix(bytes, BRAID_UNIQUE_ID_BYTES),
               "'");
  };
  const void* end = std::memchr(bytes, '\0', BRAID_UNIQUE_ID_BYTES);
  if (end == nullptr) bad("no terminating NUL in its 128 bytes");
  std::istringstream in(std::string(bytes, static_cast<const char*>(end)));
  std::string magic, port_text;
  UniqueIdFields f;
  if (!(in >> magic >> f.host >> port_text >> f.token) || magic != kUniqueIdMagic) {
    bad("not a braid unique id");
  }
  std::string rest;
  if (in >> rest) bad("trailing text");
  const bool digits = !port_text.empty() && port_text.size() <= 5 &&
                      std::all_of(port_text.begin(), port_text.end(),
                                  [](char ch) { return ch >= '0' && ch <= '9'; });
  const long port = digits ? std::strtol(port_text.c_str(), nullptr, 10) : 0;
  if (port < 1 || port > 65535) bad("port '" + port_text + "' is not in 1..65535");
  f.port = static_cast<uint16_t>(port);
  const bool hex = f.token.size() == 32 && std::all_of(f.token.begin(), f.token.end(), [](char ch) {
                     return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f');
                   });
  if (!hex) bad("the token is not 32 hex digits");
  return f;
}

std::string unique_id_host() {
  std::string host = get_env_string("BRAID_UNIQUE_ID_ADDR", "127.0.0.1");
  if (host.empty()) host = "127.0.0.1";
  const bool ok = host.size() <= 64 && std::none_of(host.begin(), host.end(), [](char ch) {
                    return std::isspace(static_cast<unsigned char>(ch)) ||
                           !std::isprint(static_cast<unsigned char>(ch));
                  });
  BRAID_CHECK(ok, kInvalidArgument, "BRAID_UNIQUE_ID_ADDR='", printable_prefix(host.c_str(), 64),
              "' is not a host; expected an address or name of at most 64 characters without "
              "spaces, e.g. 10.0.0.1");
  return host;
}

}  // namespace

braidComm* make_comm(std::shared_ptr<ProcessGroup> pg, std::shared_ptr<void> keep_alive) {
  auto comm = std::make_unique<braidComm>();
  comm->backend_name = std::string(pg->backend().name());
  comm->buffer_device = buffer_device_of(*pg);
  comm->state = std::make_shared<CommState>();
  comm->state->keep_alive = keep_alive;
  comm->state->pg = pg;
  comm->keep_alive = std::move(keep_alive);
  comm->pg = std::move(pg);
  return comm.release();
}

namespace {

// Releases a communicator: the group first, the store server it may host after it. A group
// still held by running requests (after braidCommAbort) stays with them.
void release(std::unique_ptr<braidComm> comm, bool take_from_state) {
  std::shared_ptr<ProcessGroup> pg;
  std::shared_ptr<void> keep_alive;
  if (take_from_state) {
    std::lock_guard<std::mutex> lock(comm->state->mu);
    pg = std::move(comm->state->pg);
    keep_alive = std::move(comm->state->keep_alive);
  }
  comm->pg.reset();
  pg.reset();
  comm->keep_alive.reset();
  keep_alive.reset();
}

// The (color, key) of every rank of `pg`, in rank order.
std::vector<std::pair<int64_t, int64_t>> gather_colors(braidComm& comm, int color, int key) {
  const int n = comm.pg->size();
  Tensor mine = Tensor::empty({2}, DType::kI64);
  mine.data<int64_t>()[0] = color;
  mine.data<int64_t>()[1] = key;
  Tensor all = Tensor::empty({n, 2}, DType::kI64, comm.buffer_device);
  Tensor in = comm.buffer_device.is_cpu() ? mine : mine.to(comm.buffer_device);
  comm.pg->all_gather_into(all, in);
  const Tensor host = all.to(kCPU).contiguous();
  std::vector<std::pair<int64_t, int64_t>> out(n);
  for (int r = 0; r < n; ++r)
    out[r] = {host.data<int64_t>()[2 * r], host.data<int64_t>()[2 * r + 1]};
  return out;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < ranks.size(); ++i) out << (i ? ", " : "") << ranks[i];
  out << "]";
  return out.str();
}

}  // namespace
}  // namespace braid::capi

using braid::capi::guard;
using braid::capi::require;

extern "C" {

BRAID_API braidResult_t braidCommInitFromEnv(braidComm_t* comm, const braidConfig_t* config) {
  return guard("braidCommInitFromEnv", [&] {
    require(comm, "comm");
    *comm = nullptr;
    const braid::capi::CommConfig c = braid::capi::read_config(config);
    auto pg = braid::capi::create_group(braid::capi::group_options(c));
    *comm = braid::capi::make_comm(std::move(pg), nullptr);
  });
}

BRAID_API braidResult_t braidCommInitExplicit(braidComm_t* comm, const char* store_host,
                                              int store_port, const char* token, int rank, int size,
                                              const braidConfig_t* config) {
  return guard("braidCommInitExplicit", [&] {
    require(comm, "comm");
    *comm = nullptr;
    require(store_host, "store_host");
    require(token, "token");
    BRAID_CHECK(*store_host != '\0', kInvalidArgument,
                "store_host is ''; expected the address rank 0 binds, e.g. 127.0.0.1");
    BRAID_CHECK(store_port >= 1 && store_port <= 65535, kInvalidArgument, "store_port ", store_port,
                " is not in 1..65535 (every rank must know it, so 0 cannot be used)");
    BRAID_CHECK(*token != '\0', kInvalidArgument,
                "token is ''; expected a non-empty string every rank of the job passes");
    braid::capi::check_rank_and_size(rank, size, "rank", "size");
    const braid::capi::CommConfig c = braid::capi::read_config(config);
    const auto port = static_cast<uint16_t>(store_port);
    std::shared_ptr<braid::TcpStoreServer> server;
    if (rank == 0) server = std::make_shared<braid::TcpStoreServer>(store_host, port, token);
    braid::ProcessGroupOptions o = braid::capi::group_options(c);
    o.store =
        std::make_shared<braid::TcpStore>(store_host, port, token, braid::capi::store_timeout(c));
    o.rank = rank;
    o.size = size;
    auto pg = braid::capi::create_group(o);
    *comm = braid::capi::make_comm(std::move(pg), std::move(server));
  });
}

BRAID_API braidResult_t braidGetUniqueId(braidUniqueId* unique_id) {
  return guard("braidGetUniqueId", [&] {
    require(unique_id, "unique_id");
    const std::string host = braid::capi::unique_id_host();
    const std::string token = braid::generate_store_token();
    auto server = std::make_shared<braid::TcpStoreServer>(host, 0, token);
    const std::string text = std::string(braid::capi::kUniqueIdMagic) + " " + host + " " +
                             std::to_string(server->port()) + " " + token;
    BRAID_ASSERT(text.size() < BRAID_UNIQUE_ID_BYTES, "unique id '", text, "' is too long");
    {
      auto& r = braid::capi::registry();
      std::lock_guard<std::mutex> lock(r.mu);
      r.servers[token] = std::move(server);
    }
    std::memset(unique_id->internal, 0, BRAID_UNIQUE_ID_BYTES);
    std::memcpy(unique_id->internal, text.data(), text.size());
  });
}

BRAID_API braidResult_t braidCommInitRank(braidComm_t* comm, int nranks, braidUniqueId id, int rank,
                                          const braidConfig_t* config) {
  return guard("braidCommInitRank", [&] {
    require(comm, "comm");
    *comm = nullptr;
    braid::capi::check_rank_and_size(rank, nranks, "rank", "nranks");
    const braid::capi::UniqueIdFields f = braid::capi::parse_unique_id(id);
    const braid::capi::CommConfig c = braid::capi::read_config(config);
    // This process's server for the id, if it made it: held through creation, then by the
    // communicator (a failed creation leaves it in the registry, so the id stays served).
    std::shared_ptr<braid::TcpStoreServer> server;
    auto& r = braid::capi::registry();
    {
      std::lock_guard<std::mutex> lock(r.mu);
      if (auto it = r.servers.find(f.token); it != r.servers.end()) server = it->second;
    }
    braid::ProcessGroupOptions o = braid::capi::group_options(c);
    o.store =
        std::make_shared<braid::TcpStore>(f.host, f.port, f.token, braid::capi::store_timeout(c));
    o.rank = rank;
    o.size = nranks;
    auto pg = braid::capi::create_group(o);
    if (server) {
      std::lock_guard<std::mutex> lock(r.mu);
      r.servers.erase(f.token);
    }
    *comm = braid::capi::make_comm(std::move(pg), std::move(server));
  });
}

BRAID_API braidResult_t braidCommSplit(braidComm_t comm, int color, int key, braidComm_t* newcomm) {
  return guard("braidCommSplit", [&] {
    require(comm, "comm");
    require(newcomm, "newcomm");
    *newcomm = nullptr;
    braid::ProcessGroup& pg = *comm->pg;
    const int n = pg.size();
    // Agree first, validate after: every rank sees every rank's arguments and fails alike.
    const auto all = braid::capi::gather_colors(*comm, color, key);
    for (int r = 0; r < n; ++r) {
      BRAID_CHECK(all[r].first >= 0 || all[r].first == BRAID_SPLIT_NOCOLOR, kInvalidArgument,
                  "rank ", r, " passed color ", all[r].first,
                  "; expected >= 0 or BRAID_SPLIT_NOCOLOR (-1)");
    }
    std::vector<int64_t> colors;
    for (const auto& [c, k] : all) {
      if (c >= 0) colors.push_back(c);
    }
    std::sort(colors.begin(), colors.end());
    colors.erase(std::unique(colors.begin(), colors.end()), colors.end());
    std::vector<std::vector<int>> members(colors.size());
    for (size_t i = 0; i < colors.size(); ++i) {
      for (int r = 0; r < n; ++r) {
        if (all[r].first == colors[i]) members[i].push_back(r);
      }
      // Ordered by (key, rank). braid's subgroups number their ranks in the parent's order
      // (ProcessGroup::new_group sorts), so keys may break ties but not reorder ranks.
      std::vector<int> by_key = members[i];
      std::stable_sort(by_key.begin(), by_key.end(),
                       [&](int a, int b) { return all[a].second < all[b].second; });
      BRAID_CHECK(by_key == members[i], kNotSupported, "color ", colors[i],
                  " orders its ranks by key as ", braid::capi::rank_list(by_key),
                  " (ranks of comm), but braid's subgroups keep comm's rank order ",
                  braid::capi::rank_list(members[i]),
                  "; expected keys that do not decrease with the rank (or all equal)");
    }
    std::shared_ptr<braid::ProcessGroup> mine;
    for (size_t i = 0; i < colors.size(); ++i) {
      auto g = pg.new_group(members[i]);  // collective over comm: every rank, every color
      if (colors[i] == color) mine = std::move(g);
    }
    pg.barrier();  // Note [Creation ends with a barrier]
    if (mine) *newcomm = braid::capi::make_comm(std::move(mine), comm->keep_alive);
  });
}

BRAID_API braidResult_t braidCommCount(braidComm_t comm, int* count) {
  return guard("braidCommCount", [&] {
    require(comm, "comm");
    require(count, "count");
    *count = comm->pg->size();
  });
}

BRAID_API braidResult_t braidCommUserRank(braidComm_t comm, int* rank) {
  return guard("braidCommUserRank", [&] {
    require(comm, "comm");
    require(rank, "rank");
    *rank = comm->pg->rank();
  });
}

BRAID_API braidResult_t braidCommGetBackend(braidComm_t comm, const char** name) {
  return guard("braidCommGetBackend", [&] {
    require(comm, "comm");
    require(name, "name");
    *name = comm->backend_name.c_str();
  });
}

BRAID_API braidResult_t braidCommDestroy(braidComm_t comm) {
  return guard("braidCommDestroy", [&] {
    if (comm == nullptr) return;  // as free(NULL)
    std::unique_ptr<braidComm> owned(comm);
    std::vector<std::shared_ptr<braid::Work>> running;
    {
      std::lock_guard<std::mutex> lock(owned->state->mu);
      for (braidRequest* r : owned->state->requests) running.push_back(r->work);
    }
    // Each ends by its own deadline; its error is the request's to report.
    for (const auto& work : running) {
      try {
        work->wait();
      } catch (...) {
      }
    }
    braid::capi::release(std::move(owned), /*take_from_state=*/true);
  });
}

BRAID_API braidResult_t braidCommAbort(braidComm_t comm) {
  return guard("braidCommAbort", [&] {
    if (comm == nullptr) return;
    std::unique_ptr<braidComm> owned(comm);
    bool running = false;
    {
      std::lock_guard<std::mutex> lock(owned->state->mu);
      for (braidRequest* r : owned->state->requests) {
        if (!r->work->test()) {
          r->aborted = true;
          running = true;
        }
      }
    }
    // Calls still running keep the group (through their requests) until they end and are
    // freed; with none, the group goes now.
    braid::capi::release(std::move(owned), /*take_from_state=*/!running);
  });
}

}  // extern "C"
