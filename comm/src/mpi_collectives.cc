// The MPI backend's collectives that move data, and send / recv (docs/mpi.md). Each starts one
// MPI nonblocking call and completes it through MpiGroup::wait; the element type is a
// contiguous MPI_BYTE type of the element size. Buffers that overlap in a way MPI_IN_PLACE
// cannot express are staged through a private copy first. Reductions: mpi_reduce.cc.
#include <cstring>

#include "braid/core/error.h"
#include "mpi_backend.h"

namespace braid::mpi {
namespace {

const void* in_place_or(const void* buffer, bool in_place) {
  return in_place ? MPI_IN_PLACE : buffer;
}

}  // namespace

// ---- data movement --------------------------------------------------------------------------

void MpiGroup::broadcast(Call& c) {
  const CollectiveDesc& d = c.desc;
  const size_t esz = dtype_size(d.dtype);
  if (me_ == d.root && d.send != d.recv && d.count > 0) std::memmove(d.recv, d.send, d.count * esz);
  MPI_Request request = MPI_REQUEST_NULL;
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    check_mpi(
        MPI_Ibcast(d.recv, static_cast<int>(d.count), bytes_type(esz), d.root, comm_, &request), c,
        "MPI_Ibcast");
  }
  wait(c, &request);
}

void MpiGroup::all_gather(Call& c) {
  const CollectiveDesc& d = c.desc;
  const size_t esz = dtype_size(d.dtype), block = d.count * esz;
  const MPI_Datatype type = bytes_type(esz);
  const uint8_t* my_block = static_cast<uint8_t*>(d.recv) + me_ * block;
  const void* in = d.send;
  const bool in_place = d.send == my_block;
  if (!in_place && overlaps(d.send, block, d.recv, n_ * block)) {
    uint8_t* copy = c.scratch_bytes(block);
    std::memcpy(copy, d.send, block);
    in = copy;
  }
  const int n = static_cast<int>(d.count);
  MPI_Request request = MPI_REQUEST_NULL;
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    check_mpi(MPI_Iallgather(in_place_or(in, in_place), n, type, d.recv, n, type, comm_, &request),
              c, "MPI_Iallgather");
  }
  wait(c, &request);
}

void MpiGroup::gather(Call& c) {
  const CollectiveDesc& d = c.desc;
  const size_t esz = dtype_size(d.dtype), block = d.count * esz;
  const MPI_Datatype type = bytes_type(esz);
  const bool root = me_ == d.root;
  const void* in = d.send;
  const bool in_place = root && d.send == static_cast<uint8_t*>(d.recv) + me_ * block;
  if (root && !in_place && overlaps(d.send, block, d.recv, n_ * block)) {
    uint8_t* copy = c.scratch_bytes(block);
    std::memcpy(copy, d.send, block);
    in = copy;
  }
  const int n = static_cast<int>(d.count);
  MPI_Request request = MPI_REQUEST_NULL;
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    check_mpi(MPI_Igather(in_place_or(in, in_place), n, type, root ? d.recv : nullptr, n, type,
                          d.root, comm_, &request),
              c, "MPI_Igather");
  }
  wait(c, &request);
}

void MpiGroup::scatter(Call& c) {
  const CollectiveDesc& d = c.desc;
  const size_t esz = dtype_size(d.dtype), block = d.count * esz;
  const MPI_Datatype type = bytes_type(esz);
  const bool root = me_ == d.root;
  const void* in = d.send;
  const bool in_place = root && d.recv == static_cast<const uint8_t*>(d.send) + me_ * block;
  if (root && !in_place && overlaps(d.send, n_ * block, d.recv, block)) {
    uint8_t* copy = c.scratch_bytes(n_ * block);
    std::memcpy(copy, d.send, n_ * block);
    in = copy;
  }
  void* out = in_place ? MPI_IN_PLACE : d.recv;
  const int n = static_cast<int>(d.count);
  MPI_Request request = MPI_REQUEST_NULL;
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    check_mpi(MPI_Iscatter(root ? in : nullptr, n, type, out, n, type, d.root, comm_, &request), c,
              "MPI_Iscatter");
  }
  wait(c, &request);
}

void MpiGroup::all_to_all(Call& c) {
  const CollectiveDesc& d = c.desc;
  const size_t esz = dtype_size(d.dtype), bytes = n_ * d.count * esz;
  const MPI_Datatype type = bytes_type(esz);
  const void* in = d.send;
  if (overlaps(d.send, bytes, d.recv, bytes)) {
    uint8_t* copy = c.scratch_bytes(bytes);
    std::memcpy(copy, d.send, bytes);
    in = copy;
  }
  const int n = static_cast<int>(d.count);
  MPI_Request request = MPI_REQUEST_NULL;
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    check_mpi(MPI_Ialltoall(in, n, type, d.recv, n, type, comm_, &request), c, "MPI_Ialltoall");
  }
  wait(c, &request);
}

// Every rank's counts and offsets, all-gathered: every rank checks every pair, so all of them
// fail alike (a rank that failed alone would leave the others waiting for it).
void MpiGroup::check_v_counts(Call& c) {
  const CollectiveDesc& d = c.desc;
  const int row = 4 * n_;
  auto* table = reinterpret_cast<int64_t*>(c.scratch_bytes(sizeof(int64_t) * row * (n_ + 1)));
  int64_t* mine = table + row * n_;
  for (int q = 0; q < n_; ++q) {
    mine[q] = d.send_counts[q];
    mine[n_ + q] = d.recv_counts[q];
    mine[2 * n_ + q] = d.send_offsets[q] + d.send_counts[q];
    mine[3 * n_ + q] = d.recv_offsets[q] + d.recv_counts[q];
  }
  MPI_Request request = MPI_REQUEST_NULL;
  c.phase = "the all-gather of all_to_all_v counts";
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    check_mpi(MPI_Iallgather(mine, row, MPI_INT64_T, table, row, MPI_INT64_T, comm_, &request), c,
              "MPI_Iallgather (all_to_all_v counts)");
  }
  wait(c, &request);
  c.phase = "the MPI collective (every rank entered it and the calls agree)";
  for (int p = 0; p < n_; ++p) {
    for (int q = 0; q < n_; ++q) {
      const int64_t sent = table[p * row + q], expected = table[q * row + n_ + p];
      BRAID_CHECK(sent == expected, kInvalidArgument, "mpi: ", describe_call(c),
                  ": all_to_all_v counts disagree: group rank ", p, " (world rank ",
                  context_.global_ranks[p], ") sends ", sent, " elements to group rank ", q,
                  " (world rank ", context_.global_ranks[q], "), whose recv_counts[", p, "] is ",
                  expected, "; expected them equal");
    }
    for (int i = 2 * n_; i < row; ++i) {
      BRAID_CHECK(table[p * row + i] <= INT32_MAX, kNotSupported, "mpi: ", describe_call(c),
                  ": group rank ", p, "'s all_to_all_v buffers reach element ", table[p * row + i],
                  ", beyond MPI's int count limit ", INT32_MAX, "; split the call");
    }
  }
}

void MpiGroup::all_to_all_v(Call& c) {
  check_v_counts(c);
  const CollectiveDesc& d = c.desc;
  const size_t esz = dtype_size(d.dtype);
  const MPI_Datatype type = bytes_type(esz);
  // MPI reads the count arrays until the call completes: they live in the call's scratch.
  int* ints = reinterpret_cast<int*>(c.scratch_bytes(sizeof(int) * 4 * n_));
  int64_t send_end = 0, recv_end = 0;
  for (int q = 0; q < n_; ++q) {
    ints[q] = static_cast<int>(d.send_counts[q]);
    ints[n_ + q] = static_cast<int>(d.send_offsets[q]);
    ints[2 * n_ + q] = static_cast<int>(d.recv_counts[q]);
    ints[3 * n_ + q] = static_cast<int>(d.recv_offsets[q]);
    send_end = std::max(send_end, d.send_offsets[q] + d.send_counts[q]);
    recv_end = std::max(recv_end, d.recv_offsets[q] + d.recv_counts[q]);
  }
  const void* in = d.send;
  if (overlaps(d.send, send_end * esz, d.recv, recv_end * esz)) {
    uint8_t* copy = c.scratch_bytes(send_end * esz);
    std::memcpy(copy, d.send, send_end * esz);
    in = copy;
  }
  MPI_Request request = MPI_REQUEST_NULL;
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    check_mpi(MPI_Ialltoallv(in, ints, ints + n_, type, d.recv, ints + 2 * n_, ints + 3 * n_, type,
                             comm_, &request),
              c, "MPI_Ialltoallv");
  }
  wait(c, &request);
}

// ---- point to point -------------------------------------------------------------------------
// The MPI tag is user tag * 16 + dtype, so a recv can name the dtype a peer sent.

void MpiGroup::send(Call& c) {
  const CollectiveDesc& d = c.desc;
  const size_t esz = dtype_size(d.dtype);
  const int tag = static_cast<int>(d.tag * 16 + static_cast<int>(d.dtype));
  MPI_Request request = MPI_REQUEST_NULL;
  c.phase = "the send (the peer has not received it)";
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    check_mpi(
        MPI_Isend(d.send, static_cast<int>(d.count), bytes_type(esz), d.peer, tag, comm_, &request),
        c, "MPI_Isend");
  }
  wait(c, &request);
}

void MpiGroup::recv(Call& c) {
  const CollectiveDesc& d = c.desc;
  const size_t esz = dtype_size(d.dtype);
  // Messages between a pair match in order, whatever their tag (as the shm backend): probe the
  // next one from the peer, then check its tag, dtype and size before receiving it.
  MPI_Message message = MPI_MESSAGE_NULL;
  MPI_Status status;
  c.phase = "the recv (no message from the peer yet)";
  wait_for(c, [&] {
    int found = 0;
    check_mpi(MPI_Improbe(d.peer, MPI_ANY_TAG, comm_, &found, &message, &status), c, "MPI_Improbe");
    return found != 0;
  });
  int bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    MPI_Get_count(&status, MPI_BYTE, &bytes);
  }
  const int64_t tag = status.MPI_TAG / 16;
  const auto dtype = static_cast<DType>(status.MPI_TAG % 16);
  const int64_t want = d.count * static_cast<int64_t>(esz);
  BRAID_CHECK(tag == d.tag && dtype == d.dtype && bytes == want, kInvalidArgument,
              "mpi: ", describe_call(c), ": the next message from group rank ", d.peer, " has tag ",
              tag, ", ", bytes, " bytes of ", dtype, "; expected tag ", d.tag, ", ", want,
              " bytes of ", d.dtype,
              " (messages between two ranks are received in the order they were sent)");
  MPI_Request request = MPI_REQUEST_NULL;
  c.phase = "the recv (receiving the matched message)";
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    check_mpi(MPI_Imrecv(d.recv, static_cast<int>(d.count), bytes_type(esz), &message, &request), c,
              "MPI_Imrecv");
  }
  wait(c, &request);
}

}  // namespace braid::mpi
