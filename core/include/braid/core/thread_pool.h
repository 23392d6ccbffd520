// SPDX-License-Identifier: Apache-2.0
// Intra-op threads for CPU kernels (torch.set_num_threads): one process-wide pool that splits a
// kernel's independent pieces (GEMM column blocks, attention heads) over a few threads.
// Kernels that use it split only where each output element is computed exactly as on one
// thread, so results are bit-identical for every thread count (docs/kernels.md, "Threads").
//
//   braid::set_num_threads(2);                       // or BRAID_NUM_THREADS=2
//   braid::parallel_for(pieces, [&](int64_t i) { work(i); });
//
// The default is 1: braid usually runs one rank per core, and a rank that owns more cores
// says so. Waits sleep on condition variables (design.md: never spin blind); a wait has no
// deadline because it waits only for this process's own computation.
#pragma once

#include <cstdint>
#include <functional>

namespace braid {

// Threads parallel_for may use, the calling thread included (>= 1; kInvalidArgument
// otherwise). The initial value is BRAID_NUM_THREADS (default 1). Not to be called while a
// parallel_for runs.
void set_num_threads(int threads);
int get_num_threads();

// Runs fn(i) for every i in [0, n), spread over get_num_threads() threads, and returns when all
// have run. Pieces go to threads dynamically, so fn must not depend on which thread runs it.
// The first exception fn throws is rethrown here after every started piece has finished (the
// remaining pieces are skipped). A parallel_for called from inside fn runs inline.
void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);

}  // namespace braid
