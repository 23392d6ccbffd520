// braid's UCX configuration choices: tcp copy mode (ucx_config.h, Note [tcp copy mode]).
#include "ucx_config.h"

#include <ucp/api/ucp.h>
#include <uct/api/uct.h>

#include <algorithm>

#include "braid/core/environment.h"
#include "braid/core/error.h"
#include "braid/core/logging.h"

namespace braid {

std::vector<UcxSetting> tcp_copy_mode_settings(
    const std::vector<std::string>& network_tls, std::optional<bool> requested,
    const std::function<std::optional<std::string>(const std::string&)>& env) {
  bool apply;
  if (requested) {
    apply = !*requested;  // BRAID_UCX_TCP_ZCOPY=1 keeps zero copy, =0 forces copy mode
  } else {
    const bool has_tcp =
        std::find(network_tls.begin(), network_tls.end(), "tcp") != network_tls.end();
    apply = has_tcp && std::all_of(network_tls.begin(), network_tls.end(),
                                   [](const std::string& tl) { return tl == "tcp"; });
  }
  std::vector<UcxSetting> out;
  if (!apply) return out;
  // TCP_TX_SEG_SIZE: UCX's copy buffers, 8 KiB by default, as large as its receive segments:
  // a 4 MiB broadcast went from 1.7-1.9 to 3.7-3.8 GB/s between two network namespaces, and
  // with 2 ranks per node on 2 vCPUs the copy mode's cost (0.37 -> 0.31 GB/s busbw all_reduce)
  // went back to 0.36 (docs/performance.md).
  const UcxSetting mode[] = {{"UCX_ZCOPY_THRESH", "ZCOPY_THRESH", "inf"},
                             {"UCX_TCP_PUT_ENABLE", "PUT_ENABLE", "n"},
                             {"UCX_TCP_TX_SEG_SIZE", "TX_SEG_SIZE", "64K"}};
  for (const UcxSetting& s : mode) {
    if (!env(s.variable)) out.push_back(s);  // the user's own setting wins
  }
  return out;
}

std::vector<std::string> ucx_network_transports() {
  std::vector<std::string> out;
  uct_component_h* components = nullptr;
  unsigned num_components = 0;
  if (uct_query_components(&components, &num_components) != UCS_OK) return out;
  for (unsigned c = 0; c < num_components; ++c) {
    uct_component_attr_t attr{};
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    if (uct_component_query(components[c], &attr) != UCS_OK) continue;
    std::vector<uct_md_resource_desc_t> mds(attr.md_resource_count);
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_MD_RESOURCES;
    attr.md_resources = mds.data();
    if (mds.empty() || uct_component_query(components[c], &attr) != UCS_OK) continue;
    for (const uct_md_resource_desc_t& md_desc : mds) {
      uct_md_config_t* md_config = nullptr;
      if (uct_md_config_read(components[c], nullptr, nullptr, &md_config) != UCS_OK) continue;
      uct_md_h md = nullptr;
      const ucs_status_t opened = uct_md_open(components[c], md_desc.md_name, md_config, &md);
      uct_config_release(md_config);
      if (opened != UCS_OK) continue;
      uct_tl_resource_desc_t* resources = nullptr;
      unsigned num_resources = 0;
      if (uct_md_query_tl_resources(md, &resources, &num_resources) == UCS_OK) {
        for (unsigned r = 0; r < num_resources; ++r) {
          if (resources[r].dev_type == UCT_DEVICE_TYPE_NET) out.emplace_back(resources[r].tl_name);
        }
        uct_release_tl_resource_list(resources);
      }
      uct_md_close(md);
    }
  }
  uct_release_component_list(components);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::vector<UcxSetting> apply_tcp_copy_mode(ucp_config* config) {
  const std::optional<std::string> knob = get_env_string("BRAID_UCX_TCP_ZCOPY");
  const std::optional<bool> requested =
      knob && !knob->empty() ? std::optional<bool>(get_env_bool("BRAID_UCX_TCP_ZCOPY", true))
                             : std::nullopt;
  const std::vector<std::string> tls =
      requested ? std::vector<std::string>{} : ucx_network_transports();
  const std::vector<UcxSetting> settings = tcp_copy_mode_settings(
      tls, requested, [](const std::string& name) { return get_env_string(name); });
  for (const UcxSetting& s : settings) {
    const ucs_status_t st = ucp_config_modify(config, s.key.c_str(), s.value.c_str());
    BRAID_CHECK(st == UCS_OK, kInternal, "ucx transport: ucp_config_modify(", s.key, "=", s.value,
                ") for ", s.variable, " failed: ", ucs_status_string(st));
    BRAID_LOG(kDebug) << "ucx transport: tcp copy mode: " << s.variable << "=" << s.value;
  }
  return settings;
}

}  // namespace braid
