// run_job (job.h): the order of a launch. Signals are blocked before the store's thread
// starts (supervisor.h, SignalWatch), the store outlives every rank, and the job's
// shared-memory segments are removed whatever way the job ended; a failed job is started again
// while --max-restarts allow (Note [Whole-job restarts]).
#include <unistd.h>

#include <iostream>
#include <memory>

#include "braid/comm/tcp_store.h"
#include "braid/core/error.h"
#include "launch/job.h"
#include "launch/supervisor.h"

extern char** environ;

namespace braid::launch {
namespace {

std::vector<std::string> current_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

std::vector<RankProcess> rank_processes(const LaunchOptions& options, const JobSetup& job,
                                        const std::string& path) {
  std::vector<std::string> base = current_environment();
  std::vector<RankProcess> ranks;
  for (int local = 0; local < options.nproc_per_node; ++local) {
    RankProcess p;
    p.rank = options.node_rank * options.nproc_per_node + local;
    p.path = path;
    p.argv = options.command;
    p.env = merge_environment(base, rank_environment(options, job, local));
    ranks.push_back(std::move(p));
  }
  return ranks;
}

void report_shm_cleanup(const std::vector<std::string>& removed) {
  if (removed.empty()) return;
  std::string names;
  for (size_t i = 0; i < removed.size() && i < 4; ++i) names += (i ? ", " : "") + removed[i];
  if (removed.size() > 4) names += ", ...";
  std::cerr << "braid launch: removed " << removed.size()
            << " leftover shared-memory segment(s) of this job from /dev/shm: " << names << '\n';
}

// One attempt: a fresh store (node 0) and fresh ranks; the job's shared memory is removed
// afterwards, however it ended.
JobOutcome run_attempt(const LaunchOptions& options, const std::string& path, int restart_count,
                       const SignalWatch& signals) {
  JobSetup job;
  job.token = job_token_for(options);
  job.master_addr = options.master_addr.empty() ? "127.0.0.1" : options.master_addr;
  job.master_port = options.master_port;
  job.restart_count = restart_count;
  std::unique_ptr<TcpStoreServer> store;
  if (options.node_rank == 0) {
    store = std::make_unique<TcpStoreServer>(job.master_addr,
                                             static_cast<uint16_t>(options.master_port), job.token);
    job.master_port = store->port();
    job.store_served = true;
  }

  SuperviseOptions supervise_options;
  supervise_options.grace_period_s = options.grace_period_s;
  supervise_options.log_dir = options.log_dir;
  std::cout.flush();
  JobOutcome outcome;
  try {
    outcome = supervise(rank_processes(options, job, path), supervise_options, signals);
  } catch (...) {
    remove_job_shm(job.token);
    throw;
  }
  if (store) store->stop();
  report_shm_cleanup(remove_job_shm(job.token));
  return outcome;
}

}  // namespace

int run_job(const LaunchOptions& options) {
  validate(options);  // before blocking signals: a bad option needs no cleanup
  SignalWatch signals;
  return run_job(options, signals);
}

// Note [Whole-job restarts]: as torchrun's elastic agent, a failure of any rank stops every
// rank, and the job starts again from its program's beginning with every rank new; the
// program resumes from its own checkpoint (BRAID_RESTART_COUNT tells it which attempt it is).
// A launcher that was told to stop (SIGINT / SIGTERM) never restarts.
int run_job(const LaunchOptions& options, const SignalWatch& signals) {
  validate(options);
  std::string path = resolve_program(options.command.front());
  for (int attempt = 0;; ++attempt) {
    JobOutcome outcome = run_attempt(options, path, attempt, signals);
    if (outcome.exit_code == 0) return 0;
    if (outcome.interrupted || attempt >= options.max_restarts) return outcome.exit_code;
    std::cerr << "braid launch: restarting the job (attempt " << attempt + 1 << " of "
              << options.max_restarts << ") after " << outcome.summary << '\n';
  }
}

}  // namespace braid::launch
