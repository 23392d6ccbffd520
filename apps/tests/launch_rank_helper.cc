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
//   resume DIR KILLS         a job that resumes from a checkpoint after a restart: rank 0 counts
//                            attempts in DIR/attempts; every rank starts at the step in
//                            DIR/checkpoint (0 without it) and counts to kResumeSteps; on the
//                            first KILLS attempts rank 1 writes checkpoint 3 at step 3 and
//                            SIGKILLs itself. Ranks meet in the store before the first step
//                            and after the last.
//   allreduce-resume DIR     kAllReduceSteps checked all_reduces on the world ProcessGroup,
//                            rank 0 checkpointing the next step in DIR/checkpoint after each;
//                            on attempt 0 rank 1 SIGKILLs itself inside all_reduce #6.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include "braid/comm/process_group.h"
#include "braid/comm/rank_info.h"
#include "braid/comm/store.h"
#include "braid/comm/tcp_store.h"
#include "braid/core/error.h"
#include "braid/tensor/tensor.h"

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

// The restart count the launcher set; both spellings must agree.
int restart_count() {
  if (env("BRAID_RESTART_COUNT") != env("TORCHELASTIC_RESTART_COUNT")) {
    std::cerr << "BRAID_RESTART_COUNT=" << env("BRAID_RESTART_COUNT")
              << " but TORCHELASTIC_RESTART_COUNT=" << env("TORCHELASTIC_RESTART_COUNT") << "\n";
    std::exit(94);
  }
  return std::atoi(env("BRAID_RESTART_COUNT").c_str());
}

int read_checkpoint(const std::filesystem::path& dir) {
  std::ifstream in(dir / "checkpoint");
  int step = 0;
  return in >> step ? step : 0;
}

// Written whole or not at all (a temporary name, then rename), as a real checkpoint is.
void write_checkpoint(const std::filesystem::path& dir, int step) {
  std::filesystem::path tmp = dir / ("checkpoint.tmp" + env("RANK"));
  std::ofstream(tmp) << step << "\n";
  std::filesystem::rename(tmp, dir / "checkpoint");
}

constexpr int kResumeSteps = 6;

int resume(int argc, char** argv) {
  if (argc != 4) return 64;
  std::filesystem::path dir = argv[2];
  int kills = std::atoi(argv[3]);
  int attempt = restart_count(), rank = my_rank(), world = std::atoi(env("WORLD_SIZE").c_str());
  if (rank == 0) std::ofstream(dir / "attempts", std::ios::app) << "attempt " << attempt << "\n";
  int start = read_checkpoint(dir);
  std::cout << "attempt " << attempt << " starts at step " << start << std::endl;
  auto s = braid::store_from_env(std::chrono::seconds(60));
  // Every rank is here (and rank 0 has counted the attempt) before rank 1 may die.
  auto meet = [&](const std::string& what) {
    s->set(what + "/" + std::to_string(rank), "1");
    std::vector<std::string> keys;
    for (int r = 0; r < world; ++r) keys.push_back(what + "/" + std::to_string(r));
    s->wait(keys);
  };
  meet("started");
  for (int step = start; step < kResumeSteps; ++step) {
    if (rank == 1 && step == 3 && attempt < kills) {
      write_checkpoint(dir, step);
      std::cout << "checkpoint at step 3, SIGKILL myself" << std::endl;
      ::kill(::getpid(), SIGKILL);
    }
    std::cout << "step " << step << std::endl;
  }
  meet("done");  // rank 0 waits here for rank 1, which may be gone
  std::cout << "finished after resuming from step " << start << std::endl;
  return 0;
}

constexpr int kAllReduceSteps = 12;
constexpr int kAllReduceKillAt = 6;
constexpr int64_t kAllReduceElements = int64_t{1} << 20;  // 4 MiB: several chunks on shm

int allreduce_resume(int argc, char** argv) {
  if (argc != 3) return 64;
  std::filesystem::path dir = argv[2];
  int attempt = restart_count();
  auto pg = braid::ProcessGroup::create({});
  const int rank = pg->rank(), world = pg->size();
  // Read after the rendezvous: rank 0 writes the file only after a collective every rank is in.
  int start = read_checkpoint(dir);
  std::cout << "attempt " << attempt << " starts at step " << start << std::endl;
  for (int step = start; step < kAllReduceSteps; ++step) {
    if (rank == 1 && attempt == 0 && step == kAllReduceKillAt) {
      std::cout << "SIGKILL myself inside all_reduce #" << step << std::endl;
      // The killer races this thread into the collective, so the kill lands inside it.
      std::thread([] { ::kill(::getpid(), SIGKILL); }).detach();
    }
    braid::Tensor t = braid::Tensor::full({kAllReduceElements}, double(rank + 1 + step));
    pg->all_reduce(t);
    const double expected = world * (world + 1) / 2.0 + double(world) * step;
    const float* p = t.data<float>();
    for (int64_t i = 0; i < kAllReduceElements; i += 4099) {
      if (p[i] != expected) {
        std::cerr << "all_reduce step " << step << " element " << i << " = " << p[i]
                  << ", expected " << expected << std::endl;
        return 4;
      }
    }
    if (rank == 0) write_checkpoint(dir, step + 1);
  }
  if (rank == 1 && attempt == 0) ::pause();  // the killer thread was slow: it lands here
  std::cout << "finished " << kAllReduceSteps << " all_reduces after resuming from step " << start
            << std::endl;
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
  if (mode == "resume") return resume(argc, argv);
  if (mode == "allreduce-resume") {
    try {
      return allreduce_resume(argc, argv);
    } catch (const braid::Error& e) {
      std::cerr << "error: " << e.what() << std::endl;
      return 3;
    }
  }
  std::cerr << "launch_rank_helper: unknown mode '" << mode << "'\n";
  return 64;
}
