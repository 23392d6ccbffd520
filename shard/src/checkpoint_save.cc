// save_sharded_checkpoint: the collective save and its atomic publish (docs/sharding.md,
// "Checkpoints"). Two rounds over the ProcessGroup, each a gather to rank 0 and a broadcast
// of rank 0's verdict, so that every rank either returns or throws the same error:
//   1. every rank describes its pieces; rank 0 checks that they cover each tensor exactly
//      once, clears leftovers of an interrupted save and creates "<folder>.partial/";
//   2. every rank writes its file there and reports its size and CRC32C; rank 0 reads every
//      file back, checks both and the pieces' records, writes index.json, and swaps the
//      folder into place in one step (Note [Publish by exchange]; where the file system
//      cannot: old one renamed aside, .partial renamed in), then removes the old one.
// A rank that dies makes the others' next collective fail (peer lost, or the group's
// timeout); the published folder is touched only in step 2's last renames, so the previous
// checkpoint stays whole.
#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc 2.28)
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <mutex>
#include <sstream>

#include "braid/comm/object.h"
#include "braid/core/error.h"
#include "braid/core/file_util.h"
#include "braid/core/logging.h"
#include "braid/shard/checkpoint.h"
#include "checkpoint_internal.h"

namespace braid::shard {
namespace fs = std::filesystem;
using namespace detail;

namespace detail {
namespace {
std::mutex g_hook_mutex;
SaveHook g_hook;
}  // namespace

void set_save_hook(SaveHook hook) {
  std::lock_guard<std::mutex> lock(g_hook_mutex);
  g_hook = std::move(hook);
}

namespace {
std::atomic<bool> g_rename_exchange{true};
}  // namespace

void set_rename_exchange(bool enabled) {
  g_rename_exchange.store(enabled);
}

bool rename_exchange_enabled() {
  return g_rename_exchange.load();
}

void run_save_hook(std::string_view stage, int rank) {
  SaveHook hook;
  {
    std::lock_guard<std::mutex> lock(g_hook_mutex);
    hook = g_hook;
  }
  if (hook) hook(stage, rank);
}
}  // namespace detail

namespace {

constexpr int kOk = -1;  // Verdict::kind when nothing failed

// An outcome every rank agrees on: rank 0's, broadcast.
struct Verdict {
  int kind = kOk;
  std::string message;
};

template <typename Fn>
Verdict attempt(Fn&& fn) {
  try {
    fn();
    return {};
  } catch (const Error& e) {
    return {static_cast<int>(e.kind()), e.message()};
  } catch (const fs::filesystem_error& e) {
    return {static_cast<int>(ErrorKind::kIo), e.what()};
  } catch (const std::exception& e) {
    return {static_cast<int>(ErrorKind::kInternal), e.what()};
  }
}

Tree to_tree(const Verdict& v) {
  return Tree::map({{"kind", Tree(int64_t{v.kind})}, {"message", Tree(v.message)}});
}
Verdict verdict_of(const Tree& t) {
  return {static_cast<int>(t.at("kind").as_int()), t.at("message").as_string()};
}

// Broadcasts rank 0's verdict and throws it on every rank.
void agree(ProcessGroup& pg, const Verdict& mine) {
  std::vector<Tree> v;
  if (pg.rank() == 0) v = {to_tree(mine)};
  broadcast_object_list(pg, v, 0);
  BRAID_ASSERT(v.size() == 1);
  const Verdict agreed = verdict_of(v[0]);
  if (agreed.kind != kOk) {
    throw Error(static_cast<ErrorKind>(agreed.kind), agreed.message);
  }
}

std::string shape_str(const Shape& s) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < s.size(); ++i) out << (i ? ", " : "") << s[i];
  out << ']';
  return out.str();
}

// ---- round 1: what each rank holds ----

struct PieceInfo {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  int64_t offset = 0;
  int64_t count = 0;
};

// The first thing wrong with this rank's own pieces, or "".
std::string check_local(const std::vector<Piece>& pieces) {
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    const std::string what = "piece " + std::to_string(i) + " ('" + p.name + "')";
    if (p.name.empty()) return "piece " + std::to_string(i) + " has an empty name";
    int64_t numel = 1;
    for (int64_t d : p.shape) {
      if (d < 0) return what + " has shape " + shape_str(p.shape) + " with a negative size";
      if (d != 0 && numel > std::numeric_limits<int64_t>::max() / d) {
        return what + " has shape " + shape_str(p.shape) + ", more than 2^63-1 elements";
      }
      numel *= d;
    }
    if (!p.data.defined()) return what + " has no data (an undefined tensor)";
    if (p.data.device() != kCPU) return what + ": data must be on the CPU";
    if (p.data.dim() != 1 || !p.data.is_contiguous()) {
      return what + ": data must be a contiguous 1-D tensor, got shape " +
             shape_str(p.data.shape());
    }
    const int64_t count = p.data.numel();
    if (p.offset < 0 || p.offset > numel || count > numel - p.offset) {
      return what + " covers elements [" + std::to_string(p.offset) + ", " +
             std::to_string(p.offset + count) + ") but the tensor of shape " + shape_str(p.shape) +
             " has " + std::to_string(numel);
    }
  }
  return "";
}

Tree describe(const std::vector<Piece>& pieces, const std::string& error) {
  Tree::List list;
  if (error.empty()) {
    for (const Piece& p : pieces) {
      Tree::List shape;
      for (int64_t d : p.shape) shape.emplace_back(d);
      list.push_back(Tree::map({{"name", Tree(p.name)},
                                {"dtype", Tree(int64_t(p.data.dtype()))},
                                {"shape", Tree(std::move(shape))},
                                {"offset", Tree(p.offset)},
                                {"count", Tree(p.data.numel())}}));
    }
  }
  return Tree::map({{"error", Tree(error)}, {"pieces", Tree(std::move(list))}});
}

PieceInfo piece_of(const Tree& t) {
  PieceInfo p;
  p.name = t.at("name").as_string();
  p.dtype = static_cast<DType>(t.at("dtype").as_int());
  for (const Tree& d : t.at("shape").list()) p.shape.push_back(d.as_int());
  p.offset = t.at("offset").as_int();
  p.count = t.at("count").as_int();
  return p;
}

// Rank 0: checks that the pieces of all ranks cover every tensor exactly once, with one dtype
// and shape per name, and returns the index (without file sizes and checksums yet).
CheckpointIndex plan_index(const std::vector<Tree>& described, int world,
                           const StringMap& metadata) {
  for (int r = 0; r < world; ++r) {
    const std::string& err = described[r].at("error").as_string();
    BRAID_CHECK(err.empty(), kInvalidArgument, "save_sharded_checkpoint: rank ", r, ": ", err);
  }
  struct Held {
    int rank;
    PieceInfo piece;
  };
  std::map<std::string, std::vector<Held>> by_name;
  for (int r = 0; r < world; ++r) {
    for (const Tree& t : described[r].at("pieces").list()) {
      PieceInfo p = piece_of(t);
      by_name[p.name].push_back({r, std::move(p)});
    }
  }

  CheckpointIndex index;
  index.world_size = world;
  index.metadata = metadata;
  for (int r = 0; r < world; ++r) index.files[rank_file_name(r, world)] = {};
  for (auto& [name, held] : by_name) {
    const Held& first = held.front();
    for (const Held& h : held) {
      BRAID_CHECK(h.piece.shape == first.piece.shape, kInvalidArgument,
                  "save_sharded_checkpoint: tensor '", name, "': rank ", h.rank, " gives shape ",
                  shape_str(h.piece.shape), " but rank ", first.rank, " gives ",
                  shape_str(first.piece.shape));
      BRAID_CHECK(h.piece.dtype == first.piece.dtype, kInvalidArgument,
                  "save_sharded_checkpoint: tensor '", name, "': rank ", h.rank, " gives dtype ",
                  h.piece.dtype, " but rank ", first.rank, " gives ", first.piece.dtype);
    }
    std::stable_sort(held.begin(), held.end(),
                     [](const Held& a, const Held& b) { return a.piece.offset < b.piece.offset; });
    IndexTensor t;
    t.dtype = first.piece.dtype;
    t.shape = first.piece.shape;
    t.numel = 1;
    for (int64_t d : t.shape) t.numel *= d;
    int64_t covered = 0;
    const Held* last = nullptr;  // the piece that reaches `covered`
    for (const Held& h : held) {
      const PieceInfo& p = h.piece;
      if (p.count == 0) continue;
      BRAID_CHECK(p.offset <= covered, kInvalidArgument, "save_sharded_checkpoint: tensor '", name,
                  "' (", t.numel, " elements): elements [", covered, ", ", p.offset,
                  ") are in no rank's piece");
      BRAID_CHECK(p.offset == covered, kInvalidArgument, "save_sharded_checkpoint: tensor '", name,
                  "': elements [", p.offset, ", ", std::min(covered, p.offset + p.count),
                  ") are in two pieces, rank ", last->rank, "'s [", last->piece.offset, ", ",
                  last->piece.offset + last->piece.count, ") and rank ", h.rank, "'s [", p.offset,
                  ", ", p.offset + p.count, ")");
      t.pieces.push_back(
          {rank_file_name(h.rank, world), piece_key(name, p.offset), p.offset, p.count});
      covered = p.offset + p.count;
      last = &h;
    }
    BRAID_CHECK(covered == t.numel, kInvalidArgument, "save_sharded_checkpoint: tensor '", name,
                "' (", t.numel, " elements): elements [", covered, ", ", t.numel,
                ") are in no rank's piece");
    index.tensors.emplace(name, std::move(t));
  }
  return index;
}

// Rank 0, before anyone writes: finishes or undoes what an interrupted save left, refuses to
// replace a folder that is not a checkpoint, and creates an empty "<folder>.partial".
void prepare_folders(const fs::path& target) {
  const fs::path partial = partial_folder(target);
  const fs::path aside = aside_folder(target);
  if (target.has_parent_path()) fs::create_directories(target.parent_path());
  if (fs::exists(target)) {
    BRAID_CHECK(fs::is_directory(target), kInvalidArgument, "save_sharded_checkpoint: ", target,
                " exists and is not a folder");
    BRAID_CHECK(fs::exists(target / kIndexName) || fs::is_empty(target), kInvalidArgument,
                "save_sharded_checkpoint: ", target, " exists, is not empty and has no ",
                kIndexName, ": not a sharded checkpoint, refusing to replace it");
    fs::remove_all(aside);  // a publish finished but was stopped before removing the old one
  } else if (fs::exists(aside)) {
    if (fs::exists(aside / kIndexName)) {
      // Stopped between the two renames of a publish: put the previous checkpoint back.
      BRAID_LOG(kWarning) << "save_sharded_checkpoint: restoring " << aside << " to " << target
                          << " (left by an interrupted save)";
      fs::rename(aside, target);
    } else {
      fs::remove_all(aside);
    }
  }
  fs::remove_all(partial);  // an interrupted save's files
  fs::create_directory(partial);
}

// ---- round 2: the files ----

struct FileReport {
  Verdict error;
  IndexFile file;
};

IndexFile checksum_file(const fs::path& path) {
  const MappedFile map = MappedFile::open(path);
  return {map.size(), crc32c(map.bytes())};
}

IndexFile write_rank_file(const fs::path& path, const std::vector<Piece>& pieces) {
  NamedTensors named;
  for (const Piece& p : pieces) {
    if (p.data.numel() > 0) named.emplace_back(piece_key(p.name, p.offset), p.data);
  }
  save_safetensors(path, named);
  return checksum_file(path);
}

// Rank 0: every rank's file is there, with the size and checksum its rank reported, and holds
// the pieces the index gives it.
void verify_files(const fs::path& partial, CheckpointIndex& index,
                  const std::vector<Tree>& reports) {
  const int world = static_cast<int>(index.world_size);
  for (int r = 0; r < world; ++r) {
    const Verdict err = verdict_of(reports[r].at("error"));
    if (err.kind != kOk) {
      throw Error(static_cast<ErrorKind>(err.kind),
                  "save_sharded_checkpoint: rank " + std::to_string(r) + ": " + err.message);
    }
  }
  std::map<std::string, std::vector<std::pair<std::string, const IndexPiece*>>> expected;
  for (const auto& [name, t] : index.tensors) {
    for (const IndexPiece& p : t.pieces) expected[p.file].emplace_back(name, &p);
  }
  for (int r = 0; r < world; ++r) {
    const std::string file = rank_file_name(r, world);
    const fs::path path = partial / file;
    const IndexFile reported{static_cast<uint64_t>(reports[r].at("bytes").as_int()),
                             static_cast<uint32_t>(reports[r].at("crc32c").as_int())};
    BRAID_CHECK(fs::exists(path), kIo, "save_sharded_checkpoint: rank ", r, " wrote ", path,
                " but rank 0 does not see it (is the folder on a file system every rank shares?)");
    const IndexFile seen = checksum_file(path);
    BRAID_CHECK(seen.bytes == reported.bytes, kCorruptData, "save_sharded_checkpoint: ", path,
                " holds ", seen.bytes, " bytes but rank ", r, " wrote ", reported.bytes);
    BRAID_CHECK(seen.crc32c == reported.crc32c, kCorruptData, "save_sharded_checkpoint: ", path,
                " has CRC32C ", crc32c_hex(seen.crc32c), " but rank ", r, " wrote ",
                crc32c_hex(reported.crc32c));
    const SafetensorsFile f = SafetensorsFile::open(path);
    for (const auto& [name, p] : expected[file]) {
      BRAID_CHECK(f.contains(p->key), kCorruptData, "save_sharded_checkpoint: ", path, " lacks '",
                  p->key, "' (tensor '", name, "')");
      const SafetensorsEntry& e = f.info(p->key);
      BRAID_CHECK(e.dtype == index.tensors.at(name).dtype && e.shape == Shape{p->count},
                  kCorruptData, "save_sharded_checkpoint: ", path, " holds '", p->key, "' as ",
                  e.dtype, " ", shape_str(e.shape), ", expected ", index.tensors.at(name).dtype,
                  " [", p->count, "]");
    }
    index.files[file] = seen;
  }
}

void fsync_folder(const fs::path& folder) {
  const fs::path p = folder.empty() ? fs::path(".") : folder;
  const int fd = ::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  BRAID_CHECK(fd >= 0, kIo, "open ", p, " to fsync it: ", std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  BRAID_CHECK(rc == 0, kIo, "fsync ", p, ": ", std::strerror(err));
}

// Swaps the two folders in one step (renameat2 RENAME_EXCHANGE). False, with nothing changed,
// where the file system or kernel cannot (EINVAL, ENOSYS) or detail::set_rename_exchange
// turned it off; any other failure is kIo.
bool exchange_folders(const fs::path& a, const fs::path& b) {
  if (!rename_exchange_enabled()) return false;
  if (::renameat2(AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return true;
  const int err = errno;
  BRAID_CHECK(err == EINVAL || err == ENOSYS, kIo, "save_sharded_checkpoint: exchange ", a, " and ",
              b, ": ", std::strerror(err));
  return false;
}

// Rank 0, replacing an existing checkpoint: Note [Publish by exchange]. The previous
// checkpoint ends in "<folder>.partial" and is removed.
bool publish_by_exchange(const fs::path& target) {
  const fs::path partial = partial_folder(target);
  if (!exchange_folders(partial, target)) return false;
  try {
    run_save_hook("exchanged", 0);
    fsync_folder(target.parent_path());
  } catch (...) {
    // An error (not a crash) fails the save: the previous checkpoint goes back in place.
    exchange_folders(partial, target);
    throw;
  }
  std::error_code ec;
  fs::remove_all(partial, ec);
  if (ec) {
    BRAID_LOG(kWarning) << "save_sharded_checkpoint: could not remove the previous checkpoint "
                        << partial << ": " << ec.message();
  }
  run_save_hook("published", 0);
  return true;
}

// Note [Publish by exchange]
// Replacing <folder> by two renames (<folder> to <folder>.old, then <folder>.partial to
// <folder>) leaves a moment without <folder>: a crash there (the kill soak aims at such
// moments) leaves the previous checkpoint in <folder>.old, which readers refuse until the
// next save puts it back. renameat2(RENAME_EXCHANGE) swaps the two names atomically, so
// <folder> always names a complete checkpoint, the previous or the new one. ext4, xfs, btrfs,
// tmpfs and overlayfs support it; elsewhere (EINVAL: NFS, some FUSE file systems) the two
// renames remain.

// Rank 0: index last, then the swap. If renaming the new folder in fails, the old one is put
// back, so the target always names a complete checkpoint (with the two-rename fallback:
// except between its two renames).
void publish(const fs::path& target, const CheckpointIndex& index) {
  const fs::path partial = partial_folder(target);
  const fs::path aside = aside_folder(target);
  write_file_atomic(partial / kIndexName, format_checkpoint_index(index));
  run_save_hook("index-written", 0);
  const bool had_old = fs::exists(target);
  if (had_old && publish_by_exchange(target)) return;
  if (had_old) fs::rename(target, aside);
  try {
    run_save_hook("old-moved-aside", 0);
    fs::rename(partial, target);
  } catch (...) {
    std::error_code ec;
    if (had_old) fs::rename(aside, target, ec);
    throw;
  }
  fsync_folder(target.parent_path());
  std::error_code ec;
  fs::remove_all(aside, ec);
  if (ec) {
    BRAID_LOG(kWarning) << "save_sharded_checkpoint: could not remove the previous checkpoint "
                        << aside << ": " << ec.message();
  }
  run_save_hook("published", 0);
}

}  // namespace

void save_sharded_checkpoint(const fs::path& folder, const std::vector<Piece>& pieces,
                             ProcessGroup& pg, const StringMap& metadata) {
  BRAID_CHECK(pg.rank() >= 0, kInvalidArgument,
              "save_sharded_checkpoint: this process is not a member of the group");
  const fs::path target = canonical_folder(folder);
  BRAID_CHECK(target.has_filename() && target.filename() != "." && target.filename() != "..",
              kInvalidArgument, "save_sharded_checkpoint: ", folder, " does not name a folder");
  const int rank = pg.rank();
  const int world = pg.size();

  // Round 1: coverage, and a clean .partial folder.
  const std::vector<Tree> described = gather_object(pg, describe(pieces, check_local(pieces)), 0);
  CheckpointIndex index;
  Verdict verdict;
  if (rank == 0) {
    verdict = attempt([&] {
      index = plan_index(described, world, metadata);
      format_checkpoint_index(index);  // names and metadata must be valid UTF-8
      prepare_folders(target);
    });
  }
  agree(pg, verdict);
  run_save_hook("checked", rank);

  // Round 2: the files, checked by rank 0, then the publish.
  FileReport report;
  report.error = attempt([&] {
    report.file = write_rank_file(partial_folder(target) / rank_file_name(rank, world), pieces);
    run_save_hook("file-written", rank);
  });
  const Tree report_tree = Tree::map({{"error", to_tree(report.error)},
                                      {"bytes", Tree(static_cast<int64_t>(report.file.bytes))},
                                      {"crc32c", Tree(static_cast<int64_t>(report.file.crc32c))}});
  const std::vector<Tree> reports = gather_object(pg, report_tree, 0);
  if (rank == 0) {
    verdict = attempt([&] {
      verify_files(partial_folder(target), index, reports);
      publish(target, index);
    });
    if (verdict.kind != kOk) {
      std::error_code ec;
      fs::remove_all(partial_folder(target), ec);
    }
  }
  agree(pg, verdict);
}

}  // namespace braid::shard
