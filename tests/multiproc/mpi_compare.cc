// braid's shm collectives against OpenMPI on the same inputs (docs/faults.md, "OpenMPI
// comparison"). Run under `mpirun -np N` with MASTER_ADDR / MASTER_PORT / BRAID_STORE_TOKEN
// exported (-x). Every rank builds deterministic inputs, runs MPI_Allreduce / MPI_Allgather /
// MPI_Reduce_scatter_block and braid's all_reduce / all_gather_into / reduce_scatter_from,
// and compares element by element:
//   - integer-valued f32, f64 and i32 inputs: sums are exact in any order, so results must be
//     bit-identical;
//   - one f32 case with non-integer values: MPI and braid may sum in different orders, so
//     |braid - mpi| <= 1e-5 * sum_r |x_r| (a few float ulps of the largest possible partial
//     sum) element by element.
// Exits 1 when any element differs (printing the first few), 3 on a braid error.
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "braid/comm/process_group.h"
#include "braid/comm/rank_info.h"
#include "braid/comm/store.h"
#include "braid/tensor/tensor.h"

namespace braid {
namespace {

int g_rank = 0;
int g_size = 1;
int g_failures = 0;

template <typename T>
struct Traits;
template <>
struct Traits<float> {
  static MPI_Datatype mpi() { return MPI_FLOAT; }
  static constexpr DType kDType = DType::kF32;
};
template <>
struct Traits<double> {
  static MPI_Datatype mpi() { return MPI_DOUBLE; }
  static constexpr DType kDType = DType::kF64;
};
template <>
struct Traits<int32_t> {
  static MPI_Datatype mpi() { return MPI_INT; }
  static constexpr DType kDType = DType::kI32;
};

// Integer values in [-50, 50], different on every rank and element.
template <typename T>
std::vector<T> integer_inputs(int64_t count, int salt) {
  std::vector<T> v(count);
  for (int64_t i = 0; i < count; ++i) v[i] = T(((g_rank + 1) * 37 + i * 13 + salt) % 101 - 50);
  return v;
}

std::vector<float> fractional_inputs(int64_t count) {
  std::vector<float> v(count);
  for (int64_t i = 0; i < count; ++i) v[i] = float(std::sin(0.37 * double(i) + g_rank) * 1000.0);
  return v;
}

template <typename T>
Tensor to_tensor(const std::vector<T>& v) {
  Tensor t = Tensor::empty({int64_t(v.size())}, Traits<T>::kDType);
  std::copy(v.begin(), v.end(), t.data<T>());
  return t;
}

// tolerance[i] (optional): allowed absolute difference per element; empty: exact.
template <typename T>
void compare(const std::string& what, const Tensor& got, const std::vector<T>& want,
             const std::vector<double>& tolerance = {}) {
  const T* p = got.data<T>();
  int shown = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double diff = std::fabs(double(p[i]) - double(want[i]));
    const bool ok = tolerance.empty() ? p[i] == want[i] : diff <= tolerance[i];
    if (ok) continue;
    ++g_failures;
    if (shown++ < 5) {
      std::fprintf(stderr, "rank %d: %s: element %zu: braid %.9g, MPI %.9g\n", g_rank, what.c_str(),
                   i, double(p[i]), double(want[i]));
    }
  }
}

// all_reduce (sum) of `count` elements, all_gather of `block` elements per rank and
// reduce_scatter of `block` elements per rank, integer inputs.
template <typename T>
void exact_case(ProcessGroup& pg, const std::string& name, int64_t count, int64_t block) {
  const MPI_Datatype type = Traits<T>::mpi();
  {
    std::vector<T> in = integer_inputs<T>(count, 1), want(count);
    MPI_Allreduce(in.data(), want.data(), int(count), type, MPI_SUM, MPI_COMM_WORLD);
    Tensor t = to_tensor(in);
    pg.all_reduce(t);
    compare(name + " all_reduce x" + std::to_string(count), t, want);
  }
  {
    std::vector<T> in = integer_inputs<T>(block, 2), want(block * g_size);
    MPI_Allgather(in.data(), int(block), type, want.data(), int(block), type, MPI_COMM_WORLD);
    Tensor out = Tensor::zeros({g_size * block}, Traits<T>::kDType);
    pg.all_gather_into(out, to_tensor(in));
    compare(name + " all_gather x" + std::to_string(block), out, want);
  }
  {
    std::vector<T> in = integer_inputs<T>(block * g_size, 3), want(block);
    MPI_Reduce_scatter_block(in.data(), want.data(), int(block), type, MPI_SUM, MPI_COMM_WORLD);
    Tensor out = Tensor::zeros({block}, Traits<T>::kDType);
    pg.reduce_scatter_from(out, to_tensor(in));
    compare(name + " reduce_scatter x" + std::to_string(block), out, want);
  }
}

void fractional_case(ProcessGroup& pg, int64_t count) {
  std::vector<float> in = fractional_inputs(count), want(count);
  MPI_Allreduce(in.data(), want.data(), int(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  std::vector<double> magnitude(count), tolerance(count);
  for (int64_t i = 0; i < count; ++i) magnitude[i] = std::fabs(double(in[i]));
  MPI_Allreduce(MPI_IN_PLACE, magnitude.data(), int(count), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  for (int64_t i = 0; i < count; ++i) tolerance[i] = 1e-5 * magnitude[i];
  Tensor t = to_tensor(in);
  pg.all_reduce(t);
  compare("f32 fractional all_reduce x" + std::to_string(count), t, want, tolerance);
}

int run() {
  // Ranks from OMPI_COMM_WORLD_* (detect_rank_info); the store from MASTER_ADDR / MASTER_PORT /
  // BRAID_STORE_TOKEN, served by rank 0 (store_from_env takes the rank from detect_rank_info).
  ProcessGroupOptions options;
  options.backend = "shm";  // braid's own collectives against MPI's (auto would pick mpi)
  auto pg = ProcessGroup::create(options);
  if (pg->rank() != g_rank || pg->size() != g_size) {
    std::fprintf(stderr, "rank %d: braid says rank %d of %d, MPI says %d of %d\n", g_rank,
                 pg->rank(), pg->size(), g_rank, g_size);
    return 1;
  }
  exact_case<float>(*pg, "f32", 1000, 333);
  exact_case<float>(*pg, "f32", int64_t{1} << 17, int64_t{1} << 15);  // striped for n > 2
  exact_case<int32_t>(*pg, "i32", 4099, 1001);
  exact_case<double>(*pg, "f64", 2048, 517);
  fractional_case(*pg, 1000);
  fractional_case(*pg, int64_t{1} << 17);
  // Rank 0's store serves the others: nobody leaves before everyone is done with it.
  MPI_Barrier(MPI_COMM_WORLD);
  return g_failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace braid

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &braid::g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &braid::g_size);
  int code = 0;
  try {
    code = braid::run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", braid::g_rank, e.what());
    code = 3;
  }
  int worst = 0;
  MPI_Allreduce(&code, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (braid::g_rank == 0) {
    std::printf("mpi_compare: %d ranks: %s\n", braid::g_size, worst == 0 ? "all equal" : "FAILED");
  }
  MPI_Finalize();
  return code;
}
