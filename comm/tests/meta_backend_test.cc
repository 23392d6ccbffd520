// The meta backend (comm/src/meta_backend.h): one process stands for rank r of a group of W,
// with no rendezvous; collectives on meta tensors complete at once after the front's checks,
// which still refuse wrong sizes, dtypes outside the call's contract and cpu tensors.
#include <gtest/gtest.h>

#include "braid/comm/backend.h"
#include "braid/comm/object.h"
#include "braid/comm/process_group.h"
#include "braid/core/error.h"

namespace braid {
namespace {

std::shared_ptr<ProcessGroup> meta_group(int rank, int size) {
  ProcessGroupOptions o;
  o.backend = "meta";
  o.rank = rank;
  o.size = size;
  return ProcessGroup::create(o);  // no store given and no peer: nothing to wait for
}

TEST(MetaBackend, IsRegistered) {
  const auto names = backend_names();
  EXPECT_NE(std::find(names.begin(), names.end(), "meta"), names.end());
}

TEST(MetaBackend, OneProcessStandsForAnyRankOfAnySize) {
  auto pg = meta_group(2, 4);
  EXPECT_EQ(pg->rank(), 2);
  EXPECT_EQ(pg->size(), 4);
  EXPECT_EQ(pg->backend().name(), "meta");
  Tensor t = Tensor::empty({1000}, DType::kBF16, kMeta);
  pg->all_reduce(t);
  Tensor whole = Tensor::empty({4 * 1000}, DType::kBF16, kMeta);
  pg->all_gather_into(whole, t);
  pg->reduce_scatter_from(t, whole);
  pg->all_to_all(whole, whole);
  pg->broadcast(t, 0);
  pg->barrier();
  // An async call completes at once.
  CallOptions async;
  async.async = AsyncOp::kYes;
  auto work = pg->all_reduce(t, async);
  EXPECT_TRUE(work->wait());
}

TEST(MetaBackend, SubgroupsAreMetaAndNeedNoPeers) {
  auto pg = meta_group(1, 4);
  auto sub = pg->new_group({0, 1});
  EXPECT_EQ(sub->rank(), 1);
  EXPECT_EQ(sub->size(), 2);
  auto outside = pg->new_group({2, 3});
  EXPECT_EQ(outside->rank(), -1);
  try {
    pg->new_group({0, 1}, "shm");
    FAIL() << "a shm subgroup of a meta group must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be 'meta'"), std::string::npos) << e.what();
  }
}

// Object collectives: every simulated rank runs the same program, so each holds this rank's
// object (DeviceMesh compares its arguments this way).
TEST(MetaBackend, ObjectCollectivesSeeThisRanksObjectEverywhere) {
  auto pg = meta_group(1, 3);
  const std::vector<Tree> all = all_gather_object(*pg, Tree(std::string("mine")));
  ASSERT_EQ(all.size(), 3u);
  for (const Tree& t : all) EXPECT_EQ(t.as_string(), "mine");
  EXPECT_EQ(gather_object(*pg, Tree(int64_t{7}), /*root=*/1).size(), 3u);
  EXPECT_TRUE(gather_object(*pg, Tree(int64_t{7}), /*root=*/0).empty());
  std::vector<Tree> list = {Tree(int64_t{1}), Tree(int64_t{2})};
  broadcast_object_list(*pg, list, 0);
  EXPECT_EQ(list.size(), 2u);
}

TEST(MetaBackend, TheFrontStillChecksShapesAndDevices) {
  auto pg = meta_group(0, 3);
  Tensor t = Tensor::empty({10}, DType::kF32, kMeta);
  Tensor wrong = Tensor::empty({20}, DType::kF32, kMeta);  // not 3 x 10
  EXPECT_THROW(pg->all_gather_into(wrong, t), Error);
  Tensor cpu = Tensor::zeros({10}, DType::kF32);
  try {
    pg->all_reduce(cpu);
    FAIL() << "a cpu tensor on the meta backend must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace braid
