// A rank program for the launcher tests (launch_test.cc): each mode shows one thing the
// launcher must handle. Modes (argv[1]):
//   env                      print the launcher's variables and detect_rank_info()
//   fail R HOW OTHERS FIFO   rank R fails (HOW: exit:N or kill:SIG) once every other rank is
//                            ready; the others (OTHERS: sleep or ignore-term) sleep for long.
//                            Readiness goes through the FIFO at path FIFO, so no rank waits
//                            by polling.
//   wait-term                print "ready", then wait for SIGTERM and report it
//   store                    reach the launcher's store with the job token; check that a
//                            wrong token is refused
//   shm                      create a file named like the job's shared-memory segments
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "braid/comm/rank_info.h"
#include "braid/comm/store.h"
#include "braid/comm/tcp_store.h"
#include "braid/core/error.h"

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "<unset>";
}

int my_rank() {
  return std::atoi(env("RANK").c_str());
}

int print_env() {
  std::cout << "env RANK=" << env("RANK") << " LOCAL_RANK=" << env("LOCAL_RANK")
            << " WORLD_SIZE=" << env("WORLD_SIZE")
            << " LOCAL_WORLD_SIZE=" << env("LOCAL_WORLD_SIZE")
            << " GROUP_RANK=" << env("GROUP_RANK") << " MASTER_ADDR=" << env("MASTER_ADDR")
            << " MASTER_PORT=" << env("MASTER_PORT")
            << " BRAID_STORE_TOKEN=" << env("BRAID_STORE_TOKEN")
            << " BRAID_STORE_SERVED_BY_LAUNCHER=" << env("BRAID_STORE_SERVED_BY_LAUNCHER")
            << " BRAID_TIMEOUT=" << env("BRAID_TIMEOUT")
            << " BRAID_CONFIG_FILE=" << env("BRAID_CONFIG_FILE") << "\n";
  braid::RankInfo info = braid::detect_rank_info();
  std::cout << "info rank=" << info.rank << " world=" << info.world_size
            << " local=" << info.local_rank << " local_world=" << info.local_world_size
            << " group=" << info.group_rank << " port=" << info.master_port
            << " source=" << info.source << "\n";
  std::cerr << "stderr of rank " << info.rank << "\n";
  std::cout << "partial line of rank " << info.rank << std::flush;  // no newline at the end
  return 0;
}

// The failing rank collects one byte per other rank; writers may come and go one by one,
// so the FIFO is reopened after each end of file.
void wait_for_others(const char* fifo, int others) {
  int got = 0;
  while (got < others) {
    int fd = ::open(fifo, O_RDONLY);
    if (fd < 0) std::exit(90);
    char c;
    while (got < others && ::read(fd, &c, 1) == 1) ++got;
    ::close(fd);
  }
}

void tell_ready(const char* fifo) {
  int fd = ::open(fifo, O_WRONLY);
  if (fd < 0) std::exit(91);
  if (::write(fd, "r", 1) != 1) std::exit(92);
  ::close(fd);
}

int fail(int argc, char** argv) {
  if (argc != 6) return 64;
  int failing = std::atoi(argv[2]);
  std::string how = argv[3], others = argv[4];
  const char* fifo = argv[5];
  if (my_rank() == failing) {
    wait_for_others(fifo, std::atoi(env("WORLD_SIZE").c_str()) - 1);
    std::cout << "failing now" << std::endl;
    if (how.rfind("exit:", 0) == 0) return std::atoi(how.c_str() + 5);
    ::kill(::getpid(), std::atoi(how.c_str() + 5));
    return 65;
  }
  if (others == "ignore-term") ::signal(SIGTERM, SIG_IGN);
  std::cout << "ready" << std::endl;
  tell_ready(fifo);
  ::sleep(300);  // the launcher must stop this rank long before
  std::cout << "slept to the end" << std::endl;
  return 0;
}

volatile sig_atomic_t got_term = 0;

int wait_term() {
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  ::sigprocmask(SIG_BLOCK, &block, &old);
  ::signal(SIGTERM, [](int) { got_term = 1; });
  std::cout << "ready" << std::endl;
  while (!got_term) ::sigsuspend(&old);
  std::cout << "got SIGTERM" << std::endl;
  return 0;
}

int store() {
  auto s = braid::store_from_env(std::chrono::seconds(30));
  int rank = my_rank(), world = std::atoi(env("WORLD_SIZE").c_str());
  s->set("hello/" + std::to_string(rank), std::string("from ") + std::to_string(rank));
  std::vector<std::string> keys;
  for (int r = 0; r < world; ++r) keys.push_back("hello/" + std::to_string(r));
  s->wait(keys);
  std::cout << "store ok: saw " << keys.size() << " ranks" << std::endl;
  try {
    braid::TcpStore wrong(env("MASTER_ADDR"),
                          static_cast<uint16_t>(std::atoi(env("MASTER_PORT").c_str())),
                          "not-the-job-token", std::chrono::seconds(10));
    wrong.set("intruder", "x");
    std::cout << "wrong token accepted" << std::endl;
  } catch (const braid::Error& e) {
    std::cout << "wrong token refused: " << braid::to_string(e.kind()) << std::endl;
  }
  return 0;
}

int shm() {
  std::string name =
      "/dev/shm/braid-" + env("BRAID_STORE_TOKEN").substr(0, 12) + "-helper-" + env("RANK");
  int fd = ::open(name.c_str(), O_CREAT | O_WRONLY, 0600);
  if (fd < 0) return 93;
  ::close(fd);
  std::cout << "created " << name << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "env") return print_env();
  if (mode == "fail") return fail(argc, argv);
  if (mode == "wait-term") return wait_term();
  if (mode == "store") return store();
  if (mode == "shm") return shm();
  std::cerr << "launch_rank_helper: unknown mode '" << mode << "'\n";
  return 64;
}
