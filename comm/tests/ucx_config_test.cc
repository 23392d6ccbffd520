// Tests of braid's UCX configuration choices (comm/src/ucx_config.*, Note [tcp copy mode]):
// when tcp copy mode applies, that the user's own UCX settings win, and that the machine's
// transport list and a real ucp_config take it.
#include "braid/core/config.h"

#if BRAID_HAVE_UCX

#include <gtest/gtest.h>
#include <ucp/api/ucp.h>

#include <cstdio>
#include <cstdlib>
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
    out.push_back(s.variable + "=" + s.value);
  }
  return out;
}

const std::vector<std::string> kCopyMode = {"UCX_ZCOPY_THRESH=inf", "UCX_TCP_PUT_ENABLE=n",
                                            "UCX_TCP_TX_SEG_SIZE=64K"};

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
            (std::vector<std::string>{"UCX_TCP_PUT_ENABLE=n", "UCX_TCP_TX_SEG_SIZE=64K"}));
  EXPECT_EQ(keys({"tcp"}, std::nullopt, {{"UCX_TCP_PUT_ENABLE", "y"}}),
            (std::vector<std::string>{"UCX_ZCOPY_THRESH=inf", "UCX_TCP_TX_SEG_SIZE=64K"}));
  EXPECT_TRUE(
      keys(
          {"tcp"}, false,
          {{"UCX_ZCOPY_THRESH", "inf"}, {"UCX_TCP_PUT_ENABLE", "n"}, {"UCX_TCP_TX_SEG_SIZE", "8K"}})
          .empty());
}

TEST(TcpCopyMode, ThisMachineListsTcpAmongItsNetworkTransports) {
  // Every build machine has a network interface UCX's tcp transport can open.
  const std::vector<std::string> tls = ucx_network_transports();
  EXPECT_NE(std::find(tls.begin(), tls.end(), "tcp"), tls.end()) << ::testing::PrintToString(tls);
  EXPECT_TRUE(std::is_sorted(tls.begin(), tls.end()));
}

// What ucp_ep_print_info says of an endpoint to this process's own worker over tcp, with
// `copy_mode` applied to the configuration or not.
std::string endpoint_info(bool copy_mode, std::vector<UcxSetting>* applied) {
  testing::ScopedEnv env({{"UCX_TLS", "tcp"},
                          {"BRAID_UCX_TCP_ZCOPY", copy_mode ? "0" : "1"},
                          {"UCX_ZCOPY_THRESH", ""},
                          {"UCX_TCP_PUT_ENABLE", ""},
                          {"UCX_TCP_TX_SEG_SIZE", ""}});
  ucp_config_t* config = nullptr;
  EXPECT_EQ(ucp_config_read(nullptr, nullptr, &config), UCS_OK);
  *applied = apply_tcp_copy_mode(config);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG;
  ucp_context_h context = nullptr;
  const ucs_status_t init = ucp_init(&params, config, &context);
  ucp_config_release(config);
  if (init != UCS_OK) return "ucp_init failed";
  ucp_worker_params_t wp{};
  ucp_worker_h worker = nullptr;
  EXPECT_EQ(ucp_worker_create(context, &wp, &worker), UCS_OK);
  ucp_address_t* address = nullptr;
  size_t length = 0;
  EXPECT_EQ(ucp_worker_get_address(worker, &address, &length), UCS_OK);
  ucp_ep_params_t ep_params{};
  ep_params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  ep_params.address = address;
  ep_params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ucp_ep_h ep = nullptr;
  std::string info;
  if (ucp_ep_create(worker, &ep_params, &ep) == UCS_OK) {
    char* text = nullptr;
    size_t size = 0;
    FILE* out = open_memstream(&text, &size);
    ucp_ep_print_info(ep, out);
    std::fclose(out);
    info.assign(text, size);
    std::free(text);
    ucp_request_param_t close{};
    close.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    close.flags = UCP_EP_CLOSE_FLAG_FORCE;
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &close);
    while (r != nullptr && !UCS_PTR_IS_ERR(r) && ucp_request_check_status(r) == UCS_INPROGRESS) {
      ucp_worker_progress(worker);
    }
    if (r != nullptr && !UCS_PTR_IS_ERR(r)) ucp_request_free(r);
  }
  ucp_worker_release_address(worker, address);
  ucp_worker_destroy(worker);
  ucp_cleanup(context);
  return info;
}

TEST(TcpCopyMode, UcxTakesTheSettings) {
  // ucp_config_modify accepts any key (an unknown one only warns later), so look at what the
  // endpoint does: UCX's default eager zero-copy range is gone and short messages reach 64 KiB.
  std::vector<UcxSetting> applied;
  const std::string copy = endpoint_info(true, &applied);
  EXPECT_EQ(applied.size(), 3u);
  EXPECT_EQ(copy.find("egr/zcopy"), std::string::npos) << copy;
  EXPECT_NE(copy.find("..65529..<egr/bcopy>"), std::string::npos) << copy;
  const std::string plain = endpoint_info(false, &applied);
  EXPECT_TRUE(applied.empty());
  EXPECT_NE(plain.find("egr/zcopy"), std::string::npos) << plain;  // the check can see zero copy
}

}  // namespace
}  // namespace braid

#endif  // BRAID_HAVE_UCX
