// Pipeline schedules as data (docs/parallelism.md, "Schedules"): every generated action list
// forwards and backwards each (stage, micro-batch) once on its rank and passes the runtime's
// checks; 1F1B's warmup; GPipe's and interleaved 1F1B's orders written out by hand; the
// validator's errors; the model-clock bubble against theory; stage partitioning.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <numeric>
#include <set>

#include "braid/core/error.h"
#include "braid/nn/gpt.h"
#include "braid/shard/pipeline.h"

namespace braid::shard {
namespace {

using ::testing::HasSubstr;
using Order = std::vector<std::vector<PipelineAction>>;

std::vector<ScheduleShape> all_shapes() {
  std::vector<ScheduleShape> out;
  for (int64_t p = 1; p <= 5; ++p) {
    for (int64_t M = 1; M <= 9; ++M) {
      out.push_back({PipelineSchedule::kGPipe, p, 1, M});
      out.push_back({PipelineSchedule::k1F1B, p, 1, M});
      for (int64_t v = 1; v <= 3; ++v) {
        ScheduleShape s{PipelineSchedule::kInterleaved1F1B, p, v, M};
        const int64_t rounds = std::max<int64_t>(1, M / p);
        if (M % rounds == 0) out.push_back(s);
      }
    }
  }
  return out;
}

std::string name(const ScheduleShape& s) {
  return std::string(schedule_name(s.schedule)) + " p=" + std::to_string(s.ranks) +
         " v=" + std::to_string(s.virtual_stages) + " M=" + std::to_string(s.micro_batches);
}

std::vector<std::string> strs(const std::vector<PipelineAction>& actions) {
  std::vector<std::string> out;
  for (auto& a : actions) out.push_back(action_str(a));
  return out;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : text) {
    if (c == ' ') {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

// ---- every schedule ----

TEST(PipelineSchedule, EveryMicroBatchIsForwardedAndBackwardedOncePerStageOnItsRank) {
  for (const ScheduleShape& s : all_shapes()) {
    SCOPED_TRACE(name(s));
    const Order order = pipeline_order(s);
    ASSERT_EQ(static_cast<int64_t>(order.size()), s.ranks);
    std::map<std::tuple<int, int64_t, int64_t>, int> count;  // (F 0 / B 1, stage, mb)
    for (int64_t r = 0; r < s.ranks; ++r) {
      std::set<std::pair<int64_t, int64_t>> forwarded;
      for (const PipelineAction& a : order[static_cast<size_t>(r)]) {
        EXPECT_EQ(a.stage % s.ranks, r) << action_str(a);
        if (a.kind == ActionKind::kForward) {
          ++count[{0, a.stage, a.micro_batch}];
          forwarded.insert({a.stage, a.micro_batch});
        } else if (a.kind == ActionKind::kBackward) {
          ++count[{1, a.stage, a.micro_batch}];
          EXPECT_TRUE(forwarded.count({a.stage, a.micro_batch})) << "backward before forward";
        }
      }
    }
    EXPECT_EQ(static_cast<int64_t>(count.size()), 2 * s.num_stages() * s.micro_batches);
    for (auto& [k, n] : count) EXPECT_EQ(n, 1);
    EXPECT_NO_THROW(validate_pipeline_order(s, order));
  }
}

TEST(PipelineSchedule, GradientsAccumulateInMicroBatchOrderOnEveryStage) {
  // Single-process gradient accumulation adds micro-batch 0's gradient first, then 1, ...: every
  // schedule backwards each stage's micro-batches in that order.
  for (const ScheduleShape& s : all_shapes()) {
    SCOPED_TRACE(name(s));
    for (int64_t r = 0; r < s.ranks; ++r) {
      std::map<int64_t, int64_t> next;  // stage -> next micro-batch expected
      for (const PipelineAction& a : compute_actions(s, r)) {
        if (a.kind != ActionKind::kBackward) continue;
        EXPECT_EQ(a.micro_batch, next[a.stage]++) << "stage " << a.stage;
      }
    }
  }
}

TEST(PipelineSchedule, ReceivesComeRightBeforeTheirComputeAndSendsRightAfter) {
  const ScheduleShape s{PipelineSchedule::k1F1B, 3, 1, 4};
  const Order order = pipeline_order(s);
  EXPECT_EQ(strs(order[1]),
            split("1RECV_F0 1F0 1SEND_F0 1RECV_F1 1F1 1SEND_F1 1RECV_B0 1B0 1SEND_B0 1RECV_F2 1F2 "
                  "1SEND_F2 1RECV_B1 1B1 1SEND_B1 1RECV_F3 1F3 1SEND_F3 1RECV_B2 1B2 1SEND_B2 "
                  "1RECV_B3 1B3 1SEND_B3"));
  EXPECT_EQ(strs(order[2]).front(), "2RECV_F0");  // the last stage sends no activation
  EXPECT_THAT(format_pipeline_order(order), HasSubstr("rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0F2"));
}

// ---- GPipe ----

TEST(PipelineSchedule, GPipeRunsEveryForwardThenEveryBackward) {
  const ScheduleShape s{PipelineSchedule::kGPipe, 4, 1, 3};
  for (int64_t r = 0; r < 4; ++r) {
    const std::string st = std::to_string(r);
    EXPECT_EQ(strs(compute_actions(s, r)),
              split(st + "F0 " + st + "F1 " + st + "F2 " + st + "B0 " + st + "B1 " + st + "B2"));
    EXPECT_EQ(warmup_forwards(s, r), 3);
  }
}

// ---- 1F1B ----

TEST(PipelineSchedule, OneFOneBWarmsUpWithPMinusRMinusOneForwards) {
  for (int64_t p = 1; p <= 6; ++p) {
    for (int64_t M = 1; M <= 10; ++M) {
      const ScheduleShape s{PipelineSchedule::k1F1B, p, 1, M};
      for (int64_t r = 0; r < p; ++r) {
        SCOPED_TRACE(name(s) + " rank " + std::to_string(r));
        const int64_t expected = std::min(p - r - 1, M);
        EXPECT_EQ(warmup_forwards(s, r), expected);
        const auto acts = compute_actions(s, r);
        // Forwards before the first backward: the warmup plus the steady phase's first forward.
        int64_t before = 0, in_flight = 0, peak = 0;
        bool seen_backward = false;
        for (auto& a : acts) {
          if (a.kind == ActionKind::kForward) {
            if (!seen_backward) ++before;
            peak = std::max(peak, ++in_flight);
          } else {
            seen_backward = true;
            --in_flight;
          }
        }
        EXPECT_EQ(before, std::min(expected + 1, M));
        // 1F1B's point: at most p - r micro-batches' activations are held at once (GPipe: M).
        EXPECT_EQ(peak, std::min(p - r, M));
        // Steady state: forward and backward alternate.
        const auto steady_end = static_cast<size_t>(expected + 2 * (M - expected));
        for (auto i = static_cast<size_t>(expected); i < steady_end; i += 2) {
          EXPECT_EQ(acts[i].kind, ActionKind::kForward);
          EXPECT_EQ(acts[i + 1].kind, ActionKind::kBackward);
        }
      }
    }
  }
}

TEST(PipelineSchedule, OneFOneBOnFourRanksIsMegatronsOrder) {
  const ScheduleShape s{PipelineSchedule::k1F1B, 4, 1, 6};
  EXPECT_EQ(strs(compute_actions(s, 0)), split("0F0 0F1 0F2 0F3 0B0 0F4 0B1 0F5 0B2 0B3 0B4 0B5"));
  EXPECT_EQ(strs(compute_actions(s, 2)), split("2F0 2F1 2B0 2F2 2B1 2F3 2B2 2F4 2B3 2F5 2B4 2B5"));
  EXPECT_EQ(strs(compute_actions(s, 3)), split("3F0 3B0 3F1 3B1 3F2 3B2 3F3 3B3 3F4 3B4 3F5 3B5"));
}

// ---- interleaved 1F1B ----

TEST(PipelineSchedule, InterleavedFollowsMegatronsChunkOrder) {
  // p = 2, v = 2, M = 4: stage s on rank s % 2. Forward k runs chunk (k / 2) % 2 on micro-batch
  // (k / 4) * 2 + k % 2; backward k chunk 1 - (k / 2) % 2; warmup (v - 1) p + 2 (p - 1 - r).
  const ScheduleShape s{PipelineSchedule::kInterleaved1F1B, 2, 2, 4};
  EXPECT_EQ(warmup_forwards(s, 0), 4);
  EXPECT_EQ(warmup_forwards(s, 1), 2);
  EXPECT_EQ(strs(compute_actions(s, 0)),
            split("0F0 0F1 2F0 2F1 0F2 2B0 0F3 2B1 2F2 0B0 2F3 0B1 2B2 2B3 0B2 0B3"));
  EXPECT_EQ(strs(compute_actions(s, 1)),
            split("1F0 1F1 3F0 3B0 3F1 3B1 1F2 1B0 1F3 1B1 3F2 3B2 3F3 3B3 1B2 1B3"));
}

TEST(PipelineSchedule, InterleavedWarmupIsCappedAtEveryForward) {
  // M = p: everything is warmup on the first rank (v M forwards), as Megatron's
  // num_warmup_microbatches = total when it would exceed it.
  const ScheduleShape s{PipelineSchedule::kInterleaved1F1B, 4, 2, 4};
  EXPECT_EQ(warmup_forwards(s, 0), 8);
  EXPECT_EQ(warmup_forwards(s, 3), 4);
  const auto acts = compute_actions(s, 0);
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(acts[i].kind, ActionKind::kForward);
}

TEST(PipelineSchedule, ShapesAreChecked) {
  auto expect_invalid = [](const ScheduleShape& s, const std::string& part) {
    try {
      check_schedule_shape(s);
      ADD_FAILURE() << "no error for " << name(s);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      EXPECT_THAT(e.message(), HasSubstr(part));
    }
  };
  expect_invalid({PipelineSchedule::k1F1B, 2, 2, 4}, "virtual_stages = 2");
  expect_invalid({PipelineSchedule::kGPipe, 0, 1, 4}, "ranks = 0");
  expect_invalid({PipelineSchedule::k1F1B, 2, 1, 0}, "num_micro_batches = 0");
  expect_invalid({PipelineSchedule::kInterleaved1F1B, 4, 2, 9}, "multiple of its rounds");
  EXPECT_EQ(parse_pipeline_schedule("Schedule1F1B"), PipelineSchedule::k1F1B);
  EXPECT_EQ(parse_pipeline_schedule("interleaved-1f1b"), PipelineSchedule::kInterleaved1F1B);
  EXPECT_THROW(parse_pipeline_schedule("zb"), Error);
}

// ---- the validator ----

void expect_rejected(const ScheduleShape& s, const Order& order, const std::string& part) {
  try {
    validate_pipeline_order(s, order);
    ADD_FAILURE() << "accepted:\n" << format_pipeline_order(order);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_THAT(e.message(), HasSubstr(part));
  }
}

TEST(PipelineSchedule, ValidatorRejectsBrokenLists) {
  const ScheduleShape s{PipelineSchedule::k1F1B, 2, 1, 2};
  const Order good = pipeline_order(s);
  // rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0B0 0RECV_B1 0B1
  Order o = good;
  std::swap(o[0][4], o[0][6]);  // receives gradient 1 before gradient 0
  expect_rejected(s, o, "arrive in the order sent");

  o = good;
  o[0].erase(o[0].begin() + 6);  // 0RECV_B1 missing: its B waits forever, rank 1's send unmatched
  expect_rejected(s, o, "cannot all finish");

  o = good;
  o[0].push_back({ActionKind::kForward, 0, 0});
  expect_rejected(s, o, "2 forward(s)");

  o = good;  // rank 1: 1RECV_F0 1F0 1B0 ... -> 1RECV_F0 1B0 1F0
  std::swap(o[1][1], o[1][2]);
  expect_rejected(s, o, "backward before its forward");

  o = good;
  o[1].push_back({ActionKind::kForward, 0, 1});
  expect_rejected(s, o, "runs on rank 0");

  // Both ranks receive before sending: a deadlock.
  const ScheduleShape g{PipelineSchedule::kGPipe, 2, 1, 1};
  o = pipeline_order(g);
  o[0].insert(o[0].begin(), PipelineAction{ActionKind::kRecvGradient, 0, 0});
  o[0].erase(
      std::find(o[0].begin() + 1, o[0].end(), PipelineAction{ActionKind::kRecvGradient, 0, 0}));
  expect_rejected(g, o, "rank 0 at position 0 (0RECV_B0)");
}

// ---- bubble: theory and the model clock ----

TEST(PipelineSchedule, SimulatedBubbleOfGPipeAndOneFOneBIsTheTheory) {
  for (auto kind : {PipelineSchedule::kGPipe, PipelineSchedule::k1F1B}) {
    for (int64_t p = 1; p <= 6; ++p) {
      for (int64_t M = 1; M <= 12; ++M) {
        const ScheduleShape s{kind, p, 1, M};
        SCOPED_TRACE(name(s));
        for (auto [f, b] : {std::pair<int64_t, int64_t>{1, 1}, {1, 2}, {2, 3}}) {
          const SimulatedPipeline sim = simulate_pipeline(s, f, b);
          EXPECT_EQ(sim.makespan, (M + p - 1) * (f + b));
          for (double bubble : sim.bubble) EXPECT_NEAR(bubble, theoretical_bubble(s), 1e-12);
        }
      }
    }
  }
}

TEST(PipelineSchedule, SimulatedInterleavedBubbleIsTheTheoryDividedByV) {
  // Equal forward and backward times, M a multiple of p: Megatron's (p - 1) / v bubble units
  // against v M units of work, i.e. (p - 1) / (v M + p - 1) of the step.
  for (int64_t p = 2; p <= 4; ++p) {
    for (int64_t v = 1; v <= 3; ++v) {
      for (int64_t M = p; M <= 3 * p; M += p) {
        const ScheduleShape s{PipelineSchedule::kInterleaved1F1B, p, v, M};
        SCOPED_TRACE(name(s));
        const SimulatedPipeline sim = simulate_pipeline(s, 1, 1);
        EXPECT_EQ(sim.makespan, 2 * (v * M + p - 1));
        for (double bubble : sim.bubble) EXPECT_NEAR(bubble, theoretical_bubble(s), 1e-12);
      }
    }
  }
  EXPECT_DOUBLE_EQ(theoretical_bubble({PipelineSchedule::kInterleaved1F1B, 4, 2, 8}), 3.0 / 19.0);
}

TEST(PipelineSchedule, TimelineDrawsOneCellPerTimeUnit) {
  const SimulatedPipeline sim = simulate_pipeline({PipelineSchedule::kGPipe, 2, 1, 2}, 1, 1);
  EXPECT_EQ(sim.ascii,
            "rank 0 |F0 F1 .  .  B0 B1 |\n"
            "rank 1 |.  F0 F1 B0 B1 .  |\n");
}

// ---- partitioning ----

// The smallest possible largest stage, by trying every split (small cases only).
double brute_force_max(const std::vector<int64_t>& w, int64_t first, int64_t last, int64_t S) {
  double best = 1e300;
  const auto n = static_cast<int64_t>(w.size());
  std::vector<int64_t> counts(static_cast<size_t>(S), 0);
  std::function<void(int64_t, int64_t)> rec = [&](int64_t k, int64_t used) {
    if (k == S - 1) {
      counts[static_cast<size_t>(k)] = n - used;
      int64_t pos = 0;
      double mx = 0;
      for (int64_t s = 0; s < S; ++s) {
        const int64_t c = counts[static_cast<size_t>(s)];
        if (c == 0 && !((s == 0 && first > 0) || (s == S - 1 && last > 0))) return;
        double load = (s == 0 ? first : 0) + (s == S - 1 ? last : 0);
        for (int64_t i = 0; i < c; ++i) load += w[static_cast<size_t>(pos + i)];
        pos += c;
        mx = std::max(mx, load);
      }
      best = std::min(best, mx);
      return;
    }
    for (int64_t c = 0; used + c <= n; ++c) {
      counts[static_cast<size_t>(k)] = c;
      rec(k + 1, used + c);
    }
  };
  rec(0, 0);
  return best;
}

TEST(PipelinePartition, ParameterBalanceReachesTheSmallestLargestStage) {
  const std::vector<std::vector<int64_t>> weights = {
      {5, 5, 5, 5, 5, 5}, {1, 9, 2, 8, 3, 7, 4}, {10, 1, 1, 1, 1, 10}, {3, 3, 3}};
  for (const auto& w : weights) {
    for (int64_t S = 1; S <= 4; ++S) {
      for (auto [first, last] : {std::pair<int64_t, int64_t>{0, 0}, {12, 7}, {30, 0}}) {
        if (static_cast<int64_t>(w.size()) < S - (first > 0) - (last > 0)) continue;
        const auto counts = balance_stages(w, first, last, S);
        ASSERT_EQ(static_cast<int64_t>(counts.size()), S);
        EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), int64_t{0}),
                  static_cast<int64_t>(w.size()));
        double mx = 0;
        int64_t pos = 0;
        for (int64_t s = 0; s < S; ++s) {
          double load = (s == 0 ? first : 0) + (s == S - 1 ? last : 0);
          for (int64_t i = 0; i < counts[static_cast<size_t>(s)]; ++i) {
            load += w[static_cast<size_t>(pos + i)];
          }
          pos += counts[static_cast<size_t>(s)];
          mx = std::max(mx, load);
        }
        EXPECT_EQ(mx, brute_force_max(w, first, last, S));
      }
    }
  }
}

TEST(PipelinePartition, UniformAndExplicitSplits) {
  EXPECT_EQ(balance_stages(std::vector<int64_t>(10, 1), 0, 0, 4, PartitionMethod::kUniform),
            (std::vector<int64_t>{3, 3, 2, 2}));
  nn::GPTConfig cfg;
  cfg.vocab_size = 50;
  cfg.n_positions = 16;
  cfg.n_embd = 16;
  cfg.n_layer = 6;
  cfg.n_head = 2;
  const auto specs = partition_stages(*nn::make_meta<nn::GPT>(cfg), 3, {1, 3, 2});
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[0].first_block, 0);
  EXPECT_EQ(specs[0].end_block, 1);
  EXPECT_TRUE(specs[0].embedding);
  EXPECT_FALSE(specs[0].head);
  EXPECT_EQ(specs[1].first_block, 1);
  EXPECT_EQ(specs[1].end_block, 4);
  EXPECT_TRUE(specs[2].head);
  EXPECT_EQ(specs[2].end_block, 6);
  EXPECT_THROW(partition_stages(*nn::make_meta<nn::GPT>(cfg), 3, {1, 3}),
               Error);  // one count per stage
  EXPECT_THROW(partition_stages(*nn::make_meta<nn::GPT>(cfg), 3, {1, 3, 3}),
               Error);  // must sum to n_layer
  EXPECT_THROW(partition_stages(*nn::make_meta<nn::GPT>(cfg), 3, {3, 0, 3}),
               Error);  // a middle stage with nothing
  EXPECT_NO_THROW(partition_stages(*nn::make_meta<nn::GPT>(cfg), 3,
                                   {0, 6, 0}));  // first and last hold more than blocks
  EXPECT_THROW(partition_stages(*nn::make_meta<nn::GPT>(cfg), 9, {}),
               Error);  // 6 blocks cannot fill 7 middle stages
}

TEST(PipelinePartition, GPT2SmallOnFourStagesBalancesTheEmbeddingAndTheHead) {
  nn::GPTConfig cfg;  // GPT-2 small: wte 38.6M, wpe 0.8M, blocks 7.1M each
  const auto specs = partition_stages(*nn::make_meta<nn::GPT>(cfg), 4);
  std::vector<int64_t> counts;
  for (auto& s : specs) counts.push_back(s.end_block - s.first_block);
  EXPECT_EQ(counts, (std::vector<int64_t>{0, 6, 6, 0}));
  const auto uniform =
      partition_stages(*nn::make_meta<nn::GPT>(cfg), 4, {}, PartitionMethod::kUniform);
  EXPECT_EQ(uniform[1].first_block, 3);
}

}  // namespace
}  // namespace braid::shard
