// Pipeline schedules as data (pipeline.h): the compute order of each rank for GPipe, 1F1B and
// interleaved 1F1B, the sends and receives around it, the checks a list must pass before the
// runtime executes it, and a model-clock simulation that draws the timeline and gives the
// bubble (docs/parallelism.md, "Schedules").
#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "braid/core/error.h"
#include "braid/shard/pipeline.h"

namespace braid::shard {
namespace {

using Order = std::vector<std::vector<PipelineAction>>;

PipelineAction act(ActionKind kind, int64_t stage, int64_t mb) {
  return PipelineAction{kind, stage, mb};
}

// Interleaved 1F1B in torch's generalization of Megatron's order: micro-batches go in rounds of
// R (R = p when p divides M); the k-th forward of a rank runs chunk (k / R) mod v on
// micro-batch (k / (R v)) R + k mod R, the k-th backward chunk v - 1 - (k / R) mod v on the same
// micro-batch formula.
int64_t per_round(const ScheduleShape& s) {
  const int64_t rounds = std::max<int64_t>(1, s.micro_batches / s.ranks);
  return s.micro_batches / rounds;
}

std::vector<PipelineAction> interleaved(const ScheduleShape& s, int64_t rank) {
  const int64_t p = s.ranks, v = s.virtual_stages, R = per_round(s);
  const int64_t total = v * s.micro_batches;
  const int64_t warm = warmup_forwards(s, rank);
  auto mb_of = [&](int64_t k) { return (k / (R * v)) * R + k % R; };
  auto fwd = [&](int64_t k) {
    return act(ActionKind::kForward, rank + ((k / R) % v) * p, mb_of(k));
  };
  auto bwd = [&](int64_t k) {
    return act(ActionKind::kBackward, rank + (v - 1 - (k / R) % v) * p, mb_of(k));
  };
  std::vector<PipelineAction> out;
  for (int64_t k = 0; k < warm; ++k) out.push_back(fwd(k));
  for (int64_t i = 0; i < total - warm; ++i) {
    out.push_back(fwd(warm + i));
    out.push_back(bwd(i));
  }
  for (int64_t k = total - warm; k < total; ++k) out.push_back(bwd(k));
  return out;
}

}  // namespace

std::string_view schedule_name(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::kGPipe:
      return "gpipe";
    case PipelineSchedule::k1F1B:
      return "1f1b";
    case PipelineSchedule::kInterleaved1F1B:
      return "interleaved-1f1b";
  }
  return "?";
}

PipelineSchedule parse_pipeline_schedule(std::string_view name) {
  if (name == "gpipe" || name == "GPipe" || name == "ScheduleGPipe")
    return PipelineSchedule::kGPipe;
  if (name == "1f1b" || name == "1F1B" || name == "Schedule1F1B") return PipelineSchedule::k1F1B;
  if (name == "interleaved-1f1b" || name == "interleaved" || name == "Interleaved1F1B" ||
      name == "ScheduleInterleaved1F1B") {
    return PipelineSchedule::kInterleaved1F1B;
  }
  BRAID_FAIL(kInvalidArgument, "unknown pipeline schedule '", name,
             "'; expected gpipe, 1f1b or interleaved-1f1b (or torch's ScheduleGPipe, Schedule1F1B, "
             "ScheduleInterleaved1F1B)");
}

std::string action_str(const PipelineAction& a) {
  static constexpr const char* kNames[] = {"F", "B", "SEND_F", "RECV_F", "SEND_B", "RECV_B"};
  std::ostringstream out;
  out << a.stage << kNames[static_cast<int>(a.kind)] << a.micro_batch;
  return out.str();
}

void check_schedule_shape(const ScheduleShape& s) {
  BRAID_CHECK(s.ranks >= 1, kInvalidArgument, "pipeline: ranks = ", s.ranks, " must be >= 1");
  BRAID_CHECK(s.virtual_stages >= 1, kInvalidArgument,
              "pipeline: virtual_stages = ", s.virtual_stages, " must be >= 1");
  BRAID_CHECK(s.micro_batches >= 1, kInvalidArgument,
              "pipeline: num_micro_batches = ", s.micro_batches, " must be >= 1");
  if (s.schedule != PipelineSchedule::kInterleaved1F1B) {
    BRAID_CHECK(s.virtual_stages == 1, kInvalidArgument, "pipeline: schedule ",
                schedule_name(s.schedule),
                " runs one stage per rank, got virtual_stages = ", s.virtual_stages,
                " (use interleaved-1f1b)");
    return;
  }
  const int64_t rounds = std::max<int64_t>(1, s.micro_batches / s.ranks);
  BRAID_CHECK(s.micro_batches % rounds == 0, kInvalidArgument,
              "pipeline: interleaved-1f1b needs num_micro_batches (", s.micro_batches,
              ") to be a multiple of its rounds max(1, M / p) = ", rounds, " (p = ", s.ranks,
              "); a multiple of p always is");
}

int64_t warmup_forwards(const ScheduleShape& s, int64_t rank) {
  check_schedule_shape(s);
  BRAID_CHECK(rank >= 0 && rank < s.ranks, kOutOfRange, "pipeline: rank ", rank, " is outside [0, ",
              s.ranks, ")");
  switch (s.schedule) {
    case PipelineSchedule::kGPipe:
      return s.micro_batches;
    case PipelineSchedule::k1F1B:
      return std::min(s.ranks - rank - 1, s.micro_batches);
    case PipelineSchedule::kInterleaved1F1B:
      return std::min((s.virtual_stages - 1) * per_round(s) + 2 * (s.ranks - rank - 1),
                      s.virtual_stages * s.micro_batches);
  }
  return 0;
}

std::vector<PipelineAction> compute_actions(const ScheduleShape& s, int64_t rank) {
  const int64_t warm = warmup_forwards(s, rank);  // checks the shape and the rank
  const int64_t M = s.micro_batches;
  std::vector<PipelineAction> out;
  switch (s.schedule) {
    case PipelineSchedule::kGPipe:
      for (int64_t m = 0; m < M; ++m) out.push_back(act(ActionKind::kForward, rank, m));
      // Backwards in micro-batch order (torch's GPipe): the gradients accumulate in the order
      // of single-process gradient accumulation.
      for (int64_t m = 0; m < M; ++m) out.push_back(act(ActionKind::kBackward, rank, m));
      break;
    case PipelineSchedule::k1F1B:
      for (int64_t m = 0; m < warm; ++m) out.push_back(act(ActionKind::kForward, rank, m));
      for (int64_t i = 0; i < M - warm; ++i) {
        out.push_back(act(ActionKind::kForward, rank, warm + i));
        out.push_back(act(ActionKind::kBackward, rank, i));
      }
      for (int64_t m = M - warm; m < M; ++m) out.push_back(act(ActionKind::kBackward, rank, m));
      break;
    case PipelineSchedule::kInterleaved1F1B:
      out = interleaved(s, rank);
      break;
  }
  return out;
}

Order pipeline_order(const ScheduleShape& s) {
  const int64_t S = s.num_stages();
  Order order(static_cast<size_t>(s.ranks));
  for (int64_t r = 0; r < s.ranks; ++r) {
    auto& out = order[static_cast<size_t>(r)];
    for (const PipelineAction& a : compute_actions(s, r)) {
      if (a.kind == ActionKind::kForward) {
        if (a.stage > 0) out.push_back(act(ActionKind::kRecvActivation, a.stage, a.micro_batch));
        out.push_back(a);
        if (a.stage < S - 1) {
          out.push_back(act(ActionKind::kSendActivation, a.stage, a.micro_batch));
        }
      } else {
        if (a.stage < S - 1) out.push_back(act(ActionKind::kRecvGradient, a.stage, a.micro_batch));
        out.push_back(a);
        if (a.stage > 0) out.push_back(act(ActionKind::kSendGradient, a.stage, a.micro_batch));
      }
    }
  }
  return order;
}

std::string format_pipeline_order(const Order& order) {
  std::ostringstream out;
  for (size_t r = 0; r < order.size(); ++r) {
    out << "rank " << r << ":";
    for (const PipelineAction& a : order[r]) out << ' ' << action_str(a);
    out << '\n';
  }
  return out.str();
}

// ---- validation
// ----------------------------------------------------------------------------------

namespace {

// Runs the list on a model of the runtime: compute and sends never block, a receive waits for
// the matching send, and each (sender, receiver, kind) channel delivers in order.
class OrderChecker {
 public:
  OrderChecker(const ScheduleShape& s, const Order& order) : s_(s), order_(order) {}

  void run() {
    check_static();
    std::vector<size_t> pc(order_.size(), 0);
    for (;;) {
      bool progress = false, done = true;
      for (size_t r = 0; r < order_.size(); ++r) {
        while (pc[r] < order_[r].size() && step(static_cast<int64_t>(r), pc[r])) {
          ++pc[r];
          progress = true;
        }
        done = done && pc[r] == order_[r].size();
      }
      if (done) break;
      if (!progress) {
        std::ostringstream stuck;
        for (size_t r = 0; r < order_.size(); ++r) {
          if (pc[r] < order_[r].size()) {
            stuck << " rank " << r << " at position " << pc[r] << " ("
                  << action_str(order_[r][pc[r]]) << ");";
          }
        }
        fail(
            "the ranks cannot all finish: a receive waits for a send that never comes or a "
            "compute for an input it never received:" +
            stuck.str());
      }
    }
    for (auto& [key, q] : channels_) {
      if (!q.empty()) {
        fail("rank " + std::to_string(std::get<0>(key)) + " sends " + std::to_string(q.size()) +
             " message(s) to rank " + std::to_string(std::get<1>(key)) +
             " that no receive takes (the first for stage " + std::to_string(q.front().first) +
             ", micro-batch " + std::to_string(q.front().second) + ")");
      }
    }
  }

 private:
  using Key = std::tuple<int64_t, int64_t, int>;  // sender, receiver, 0 activation / 1 gradient
  using Msg = std::pair<int64_t, int64_t>;        // receiving stage, micro-batch

  [[noreturn]] void fail(const std::string& what) const {
    BRAID_FAIL(kInvalidArgument, "pipeline schedule (", schedule_name(s_.schedule),
               ", p = ", s_.ranks, ", v = ", s_.virtual_stages, ", M = ", s_.micro_batches,
               "): ", what, "\n", format_pipeline_order(order_));
  }
  [[noreturn]] void fail_at(int64_t r, size_t i, const std::string& what) const {
    fail("rank " + std::to_string(r) + ", position " + std::to_string(i) + " (" +
         action_str(order_[static_cast<size_t>(r)][i]) + "): " + what);
  }
  int64_t rank_of(int64_t stage) const { return stage % s_.ranks; }

  void check_static() {
    const int64_t S = s_.num_stages(), M = s_.micro_batches;
    if (static_cast<int64_t>(order_.size()) != s_.ranks) {
      fail("expected actions for " + std::to_string(s_.ranks) + " ranks, got " +
           std::to_string(order_.size()));
    }
    std::map<std::pair<int64_t, int64_t>, int> fwd, bwd;
    for (size_t r = 0; r < order_.size(); ++r) {
      for (size_t i = 0; i < order_[r].size(); ++i) {
        const PipelineAction& a = order_[r][i];
        if (a.stage < 0 || a.stage >= S || a.micro_batch < 0 || a.micro_batch >= M) {
          fail_at(static_cast<int64_t>(r), i, "stage or micro-batch out of range");
        }
        if (rank_of(a.stage) != static_cast<int64_t>(r)) {
          fail_at(static_cast<int64_t>(r), i,
                  "stage " + std::to_string(a.stage) + " runs on rank " +
                      std::to_string(rank_of(a.stage)));
        }
        const bool first = a.stage == 0, last = a.stage == S - 1;
        if ((a.kind == ActionKind::kRecvActivation && first) ||
            (a.kind == ActionKind::kSendGradient && first) ||
            (a.kind == ActionKind::kSendActivation && last) ||
            (a.kind == ActionKind::kRecvGradient && last)) {
          fail_at(static_cast<int64_t>(r), i, "no neighbouring stage on that side");
        }
        if (a.kind == ActionKind::kForward) ++fwd[{a.stage, a.micro_batch}];
        if (a.kind == ActionKind::kBackward) ++bwd[{a.stage, a.micro_batch}];
      }
    }
    for (int64_t st = 0; st < S; ++st) {
      for (int64_t m = 0; m < M; ++m) {
        const int f = fwd[{st, m}], b = bwd[{st, m}];
        if (f != 1 || b != 1) {
          fail("stage " + std::to_string(st) + ", micro-batch " + std::to_string(m) + " has " +
               std::to_string(f) + " forward(s) and " + std::to_string(b) +
               " backward(s); expected one of each");
        }
      }
    }
  }

  // Executes order_[r][i] if it can run now; false when it must wait.
  bool step(int64_t r, size_t i) {
    const PipelineAction& a = order_[static_cast<size_t>(r)][i];
    const std::pair<int64_t, int64_t> sm{a.stage, a.micro_batch};
    const int64_t S = s_.num_stages();
    switch (a.kind) {
      case ActionKind::kForward:
        if (a.stage > 0 && !input_.count(sm)) return false;  // reported as stuck if never
        forwarded_.insert(sm);
        return true;
      case ActionKind::kBackward:
        if (!forwarded_.count(sm)) fail_at(r, i, "backward before its forward");
        if (a.stage < S - 1 && !grad_.count(sm)) return false;
        backwarded_.insert(sm);
        return true;
      case ActionKind::kSendActivation:
        if (!forwarded_.count(sm)) fail_at(r, i, "sends an activation before computing it");
        channels_[{r, rank_of(a.stage + 1), 0}].push_back({a.stage + 1, a.micro_batch});
        return true;
      case ActionKind::kSendGradient:
        if (!backwarded_.count(sm)) fail_at(r, i, "sends a gradient before computing it");
        channels_[{r, rank_of(a.stage - 1), 1}].push_back({a.stage - 1, a.micro_batch});
        return true;
      case ActionKind::kRecvActivation:
      case ActionKind::kRecvGradient: {
        const bool activation = a.kind == ActionKind::kRecvActivation;
        const int64_t from = rank_of(activation ? a.stage - 1 : a.stage + 1);
        auto& q = channels_[{from, r, activation ? 0 : 1}];
        if (q.empty()) return false;
        if (q.front() != sm) {
          fail_at(r, i,
                  "the next " + std::string(activation ? "activation" : "gradient") +
                      " from rank " + std::to_string(from) + " is for stage " +
                      std::to_string(q.front().first) + ", micro-batch " +
                      std::to_string(q.front().second) +
                      " (messages between two ranks arrive in the order sent)");
        }
        q.pop_front();
        (activation ? input_ : grad_).insert(sm);
        return true;
      }
    }
    return false;
  }

  const ScheduleShape& s_;
  const Order& order_;
  std::set<std::pair<int64_t, int64_t>> forwarded_, backwarded_, input_, grad_;
  std::map<Key, std::deque<Msg>> channels_;
};

}  // namespace

void validate_pipeline_order(const ScheduleShape& shape, const Order& order) {
  check_schedule_shape(shape);
  OrderChecker(shape, order).run();
}

// ---- theory and simulation ----------------------------------------------------------------------

double theoretical_bubble(const ScheduleShape& s) {
  check_schedule_shape(s);
  const double p = static_cast<double>(s.ranks);
  return (p - 1) / (static_cast<double>(s.virtual_stages * s.micro_batches) + p - 1);
}

SimulatedPipeline simulate_pipeline(const ScheduleShape& s, int64_t forward_cost,
                                    int64_t backward_cost) {
  check_schedule_shape(s);
  BRAID_CHECK(forward_cost >= 1 && backward_cost >= 1, kInvalidArgument,
              "simulate_pipeline: costs must be >= 1, got ", forward_cost, " and ", backward_cost);
  const int64_t p = s.ranks, S = s.num_stages();
  std::vector<std::vector<PipelineAction>> comp;
  for (int64_t r = 0; r < p; ++r) comp.push_back(compute_actions(s, r));
  // finish[(kind, stage, mb)]: when that computation ends on the model clock.
  std::map<std::tuple<int, int64_t, int64_t>, int64_t> finish;
  struct Span {
    int64_t begin, end;
    PipelineAction a;
  };
  std::vector<std::vector<Span>> spans(static_cast<size_t>(p));
  std::vector<size_t> pc(static_cast<size_t>(p), 0);
  std::vector<int64_t> free_at(static_cast<size_t>(p), 0);
  auto known = [&](int kind, int64_t st, int64_t m, int64_t& t) {
    auto it = finish.find({kind, st, m});
    if (it == finish.end()) return false;
    t = std::max(t, it->second);
    return true;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t r = 0; r < p; ++r) {
      auto& i = pc[static_cast<size_t>(r)];
      while (i < comp[static_cast<size_t>(r)].size()) {
        const PipelineAction& a = comp[static_cast<size_t>(r)][i];
        int64_t ready = free_at[static_cast<size_t>(r)];
        bool ok;
        if (a.kind == ActionKind::kForward) {
          ok = a.stage == 0 || known(0, a.stage - 1, a.micro_batch, ready);
        } else {
          ok = known(0, a.stage, a.micro_batch, ready) &&
               (a.stage == S - 1 || known(1, a.stage + 1, a.micro_batch, ready));
        }
        if (!ok) break;
        const bool fwd = a.kind == ActionKind::kForward;
        const int64_t end = ready + (fwd ? forward_cost : backward_cost);
        finish[{fwd ? 0 : 1, a.stage, a.micro_batch}] = end;
        spans[static_cast<size_t>(r)].push_back({ready, end, a});
        free_at[static_cast<size_t>(r)] = end;
        ++i;
        progress = true;
      }
    }
  }
  for (int64_t r = 0; r < p; ++r) {
    BRAID_ASSERT(pc[static_cast<size_t>(r)] == comp[static_cast<size_t>(r)].size(),
                 "simulate_pipeline: rank ", r, " cannot finish its schedule");
  }
  SimulatedPipeline out;
  for (int64_t t : free_at) out.makespan = std::max(out.makespan, t);
  // Cells: "F3" / "B3", with the chunk as a letter when there are several ("F3b").
  auto label = [&](const PipelineAction& a) {
    std::string l(1, a.kind == ActionKind::kForward ? 'F' : 'B');
    l += std::to_string(a.micro_batch);
    if (s.virtual_stages > 1) l += static_cast<char>('a' + a.stage / p);
    return l;
  };
  size_t width = 1;
  for (auto& rs : spans) {
    for (auto& sp : rs) width = std::max(width, label(sp.a).size());
  }
  std::ostringstream ascii;
  for (int64_t r = 0; r < p; ++r) {
    int64_t busy = 0;
    std::vector<std::string> cells(static_cast<size_t>(out.makespan), ".");
    for (auto& sp : spans[static_cast<size_t>(r)]) {
      busy += sp.end - sp.begin;
      for (int64_t t = sp.begin; t < sp.end; ++t) cells[static_cast<size_t>(t)] = label(sp.a);
    }
    out.busy.push_back(busy);
    out.bubble.push_back(1.0 - static_cast<double>(busy) / static_cast<double>(out.makespan));
    ascii << "rank " << r << " |";
    for (auto& c : cells) ascii << c << std::string(width + 1 - c.size(), ' ');
    ascii << "|\n";
  }
  out.ascii = ascii.str();
  return out;
}

}  // namespace braid::shard
