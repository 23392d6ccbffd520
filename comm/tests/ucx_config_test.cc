// Tests of braid's UCX configuration choices (comm/src/ucx_config.*, Note [tcp copy mode]):
// when tcp copy mode applies, that the user's own UCX settings win, and that the machine's
// transport list and a real ucp_config take it.
#include "braid/core/config.h"

#if BRAID_HAVE_UCX

#include <gtest/gtest.h>
#include <ucp/api/ucp.h>

#include <map>
#include <string>
#include <vector>

#include "../src/ucx_config.h"
#include "comm_test_util.h"

namespace braid {
namespace {

using Env = std::map<std::string, std::string>;

std::vector<std::string> keys(const std::vector<std::string>& tls, std::optional<bool> requested,
                              const Env& env = {}) {
  std::vector<std::string> out;
  for (const UcxSetting& s : tcp_copy_mode_settings(tls, requested, [&](const std::string& name) {
         auto it = env.find(name);
         return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
       })) {
    out.push_back(s.key + "=" + s.value);
  }
  return out;
}

const std::vector<std::string> kCopyMode = {"ZCOPY_THRESH=inf", "TCP_PUT_ENABLE=n"};

TEST(TcpCopyMode, AppliesWhenTcpIsTheOnlyNetworkTransport) {
  EXPECT_EQ(keys({"tcp"}, std::nullopt), kCopyMode);
}

TEST(TcpCopyMode, LeavesUcxAloneWhereAnotherNetworkTransportExists) {
  EXPECT_TRUE(keys({"rc_verbs", "tcp", "ud_verbs"}, std::nullopt).empty());
  EXPECT_TRUE(keys({"rc_mlx5"}, std::nullopt).empty());
  EXPECT_TRUE(keys({}, std::nullopt).empty());  // no network transport: nothing to protect
}

TEST(TcpCopyMode, TheKnobOverridesTheDetection) {
  EXPECT_TRUE(keys({"tcp"}, true).empty());                // BRAID_UCX_TCP_ZCOPY=1
  EXPECT_EQ(keys({"rc_verbs", "tcp"}, false), kCopyMode);  // BRAID_UCX_TCP_ZCOPY=0
}

TEST(TcpCopyMode, TheUsersOwnUcxSettingsWin) {
  EXPECT_EQ(keys({"tcp"}, std::nullopt, {{"UCX_ZCOPY_THRESH", "1M"}}),
            std::vector<std::string>{"TCP_PUT_ENABLE=n"});
  EXPECT_EQ(keys({"tcp"}, std::nullopt, {{"UCX_TCP_PUT_ENABLE", "y"}}),
            std::vector<std::string>{"ZCOPY_THRESH=inf"});
  EXPECT_TRUE(
      keys({"tcp"}, false, {{"UCX_ZCOPY_THRESH", "inf"}, {"UCX_TCP_PUT_ENABLE", "n"}}).empty());
}

TEST(TcpCopyMode, ThisMachineListsTcpAmongItsNetworkTransports) {
  // Every build machine has a network interface UCX's tcp transport can open.
  const std::vector<std::string> tls = ucx_network_transports();
  EXPECT_NE(std::find(tls.begin(), tls.end(), "tcp"), tls.end()) << ::testing::PrintToString(tls);
  EXPECT_TRUE(std::is_sorted(tls.begin(), tls.end()));
}

TEST(TcpCopyMode, ARealUcpConfigTakesTheSettings) {
  testing::ScopedEnv knob("BRAID_UCX_TCP_ZCOPY", "0");
  ucp_config_t* config = nullptr;
  ASSERT_EQ(ucp_config_read(nullptr, nullptr, &config), UCS_OK);
  const std::vector<UcxSetting> applied = apply_tcp_copy_mode(config);
  ucp_config_release(config);
  std::vector<std::string> got;
  for (const UcxSetting& s : applied) got.push_back(s.key + "=" + s.value);
  std::vector<std::string> expected;
  for (const std::string& k : kCopyMode) {
    if (!std::getenv(("UCX_" + k.substr(0, k.find('='))).c_str())) expected.push_back(k);
  }
  EXPECT_EQ(got, expected);
}

}  // namespace
}  // namespace braid

#endif  // BRAID_HAVE_UCX
