// A communication thread for one ShardedModel: collectives (and the folds that consume their
// results) run on it in submission order, so a unit's all_gather or all_to_all proceeds while
// the calling thread computes (docs/sharding.md, "Overlap"). Every rank submits the same
// operations in the same order, so the group sees the same collective sequence on every rank.
// Internal to shard/.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace braid::shard {

class CommQueue {
 public:
  // An operation's completion, shared by the queue and whoever waits for it.
  struct Op {
    std::string what;  // for errors: "all_gather of unit 'transformer.h.3'"
    bool done = false;
    std::exception_ptr error;
  };

  // `deadline`: how long a wait may last per operation still ahead of the one awaited (the
  // collectives have their own deadlines; this only bounds a wait on a stuck thread).
  explicit CommQueue(std::chrono::milliseconds deadline);
  ~CommQueue();  // drains (errors dropped), then stops the thread
  CommQueue(const CommQueue&) = delete;
  CommQueue& operator=(const CommQueue&) = delete;

  // Queues fn; after an operation failed, later ones fail at once with that error.
  std::shared_ptr<Op> submit(std::string what, std::function<void()> fn);
  // Waits for op; rethrows its error. kTimeout naming op->what past the deadline.
  void wait(const std::shared_ptr<Op>& op);
  // Waits for everything submitted so far; rethrows the first error.
  void drain();

 private:
  void loop();

  std::chrono::milliseconds deadline_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::pair<std::shared_ptr<Op>, std::function<void()>>> queue_;
  std::shared_ptr<Op> last_;
  std::exception_ptr failed_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace braid::shard
