// The meta backend: see meta_backend.h.
#include "meta_backend.h"

#include <memory>
#include <string>

#include "braid/comm/backend.h"
#include "braid/comm/work.h"

namespace braid {
namespace {

class MetaBackend final : public Backend {
 public:
  MetaBackend() {
    caps_.devices = {DeviceType::kMeta};
#define BRAID_META_DTYPE(e, n, st, T, sz, fl) caps_.dtypes.push_back(DType::e);
    BRAID_FOR_EACH_DTYPE(BRAID_META_DTYPE)
#undef BRAID_META_DTYPE
    for (int k = 0; k <= static_cast<int>(CollectiveKind::kRecv); ++k) {
      caps_.collectives.push_back(static_cast<CollectiveKind>(k));
    }
    caps_.point_to_point = true;
    caps_.runs_on_any_thread = true;  // run() finishes every call at once
  }
  std::string_view name() const override {
    return kMetaBackendName;
  }
  const BackendCapabilities& capabilities() const override {
    return caps_;
  }
  // Meta tensors hold no data: every rank's contribution is a shape, checked by the front.
  std::shared_ptr<Work> run(const CollectiveDesc&) override {
    return completed_work();
  }

 private:
  BackendCapabilities caps_;
};

}  // namespace

void register_meta_backend() {
  register_backend(std::string(kMetaBackendName),
                   [](const BackendContext&) { return std::make_unique<MetaBackend>(); });
}

}  // namespace braid
