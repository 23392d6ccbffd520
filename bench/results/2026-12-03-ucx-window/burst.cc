// A standalone mimic of braid's large-message pattern over UCX: per iteration `count` tagged
// messages of `msg` bytes, all posted at once, then waited for (busy progress).
#include <sys/mman.h>
#include <ucp/api/ucp.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>
static void cb_send(void*, ucs_status_t, void*) {}
static void cb_recv(void*, ucs_status_t, const ucp_tag_recv_info_t*, void*) {}
int main(int argc, char** argv) {
  if (argc < 6) {
    fprintf(stderr, "burst send|recv FILE MSG COUNT ITERS\n");
    return 2;
  }
  bool sender = std::string(argv[1]) == "send";
  std::string file = argv[2];
  size_t msg = std::strtoull(argv[3], nullptr, 10);
  int count = atoi(argv[4]), iters = atoi(argv[5]);
  bool eh = getenv("BURST_EH") && atoi(getenv("BURST_EH"));
  int win = getenv(sender ? "BURST_SWIN" : "BURST_RWIN")
                ? atoi(getenv(sender ? "BURST_SWIN" : "BURST_RWIN"))
                : 1 << 30;
  ucp_config_t* cfg;
  ucp_config_read(nullptr, nullptr, &cfg);
  ucp_params_t p{};
  p.field_mask = UCP_PARAM_FIELD_FEATURES;
  p.features = UCP_FEATURE_TAG;
  ucp_context_h ctx;
  if (ucp_init(&p, cfg, &ctx) != UCS_OK) return 1;
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  ucp_worker_h w;
  ucp_worker_create(ctx, &wp, &w);
  // BURST_HUGE=1: the buffer on transparent huge pages (2 MiB aligned, madvise), as
  // ucx_perftest's ucp_mem_map(UCP_MEM_MAP_ALLOCATE) and braid's allocator give large blocks.
  const size_t bytes = msg * count, huge = size_t(2) << 20;
  const size_t whole = (bytes + huge - 1) / huge * huge;  // aligned_alloc wants a multiple
  char* buf = static_cast<char*>(std::aligned_alloc(huge, whole));
  if (getenv("BURST_HUGE") && atoi(getenv("BURST_HUGE"))) madvise(buf, whole, MADV_HUGEPAGE);
  memset(buf, 1, bytes);
  ucp_ep_h e = nullptr;  // the sender's endpoint to the receiver
  if (!sender) {
    ucp_address_t* a;
    size_t len;
    ucp_worker_get_address(w, &a, &len);
    std::ofstream(file + ".tmp", std::ios::binary).write((char*)a, len);
    rename((file + ".tmp").c_str(), file.c_str());
  } else {
    std::string a;
    for (int i = 0; i < 500; ++i) {
      std::ifstream in(file, std::ios::binary);
      if (in) {
        a.assign(std::istreambuf_iterator<char>(in), {});
        if (!a.empty()) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
    ep.address = (ucp_address_t*)a.data();
    ep.err_mode = eh ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
    ucp_ep_create(w, &ep, &e);
  }
  // Per iteration `count` messages from consecutive places of `buf`, at most `win` in flight.
  auto post = [&](int k) -> void* {
    ucp_request_param_t rp{};
    rp.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK;
    if (sender) {
      rp.cb.send = cb_send;
      void* r = ucp_tag_send_nbx(e, buf + k * msg, msg, 7, &rp);
      return UCS_PTR_IS_PTR(r) ? r : nullptr;  // nullptr: done at once
    }
    rp.cb.recv = cb_recv;
    return ucp_tag_recv_nbx(w, buf + k * msg, msg, 7, ~0ull, &rp);
  };
  auto finish = [&](void* r) {
    if (!r) return;
    while (ucp_request_check_status(r) == UCS_INPROGRESS) ucp_worker_progress(w);
    ucp_request_free(r);
  };
  auto t0 = std::chrono::steady_clock::now();
  for (int it = 0; it < iters; ++it) {
    if (it == 2) t0 = std::chrono::steady_clock::now();
    std::vector<void*> q;
    size_t head = 0;
    for (int k = 0; k < count; ++k) {
      while ((int)(q.size() - head) >= win) finish(q[head++]);
      q.push_back(post(k));
    }
    for (; head < q.size(); ++head) finish(q[head]);
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  printf("%s: %.3f GB/s\n", sender ? "send" : "recv", double(msg) * count * (iters - 2) / s / 1e9);
  if (sender) {
    // wait for the receiver to finish before closing
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return 0;
  }
  unlink(file.c_str());
  return 0;
}
