/* SPDX-License-Identifier: Apache-2.0 */
/* braid.h: braid's C ABI (docs/embedding.md). Shaped like nccl.h and ucc.h:
 *   - every function returns a braidResult_t; on failure braidGetLastError() gives this
 *     thread's message of the last failed call (naming the argument and what was expected);
 *     no C++ exception ever crosses this boundary;
 *   - objects are opaque handles created by ...Create / ...Init and freed by ...Destroy;
 *   - tensors go in as DLPack DLTensor (borrowed for the call) and come out as
 *     DLManagedTensor (the caller owns it and calls its deleter), zero-copy where braid
 *     already holds the memory;
 *   - counts are elements, never bytes; ranks are the communicator's.
 * Compiles as C11 and as C++. Link libbraid (-lbraid); include <dlpack/dlpack.h> (Debian:
 * libdlpack-dev). */
#ifndef BRAID_H_
#define BRAID_H_

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define BRAID_API __declspec(dllexport)
#else
#define BRAID_API __attribute__((visibility("default")))
#endif

/* The enums below have int as their fixed underlying type in C++, so that every int a C caller
 * passes is a value of the type there: C++ leaves a value outside the enumerators' range
 * undefined (and UBSan reports it), C has no such rule. Same size and passing either way. */
#ifdef __cplusplus
#define BRAID_ENUM_BASE : int
#else
#define BRAID_ENUM_BASE
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- version ------------------------------------------------------------------------ */
#define BRAID_MAJOR 0
#define BRAID_MINOR 1
#define BRAID_PATCH 0
#define BRAID_VERSION_CODE(X, Y, Z) ((X)*10000 + (Y)*100 + (Z))
#define BRAID_VERSION BRAID_VERSION_CODE(BRAID_MAJOR, BRAID_MINOR, BRAID_PATCH)

/* The library's version as BRAID_VERSION_CODE (compare with BRAID_VERSION: the header's). */
BRAID_API int braidGetVersion(void);

/* ---- results and errors ------------------------------------------------------------- */
/* The kinds of braid::ErrorKind (docs/errors.md), in its order, plus braidInProgress. */
typedef enum BRAID_ENUM_BASE {
  braidSuccess = 0,
  braidInvalidArgument = 1, /* a value passed is wrong (null pointer, dtype, shape, rank) */
  braidOutOfRange = 2,      /* an index or size is outside what exists */
  braidNotSupported = 3,    /* valid, but this build / device / dtype cannot serve it */
  braidIoError = 4,         /* the OS refused: open, read, write, socket */
  braidCorruptData = 5,     /* bytes from outside (a file, a frame) do not parse */
  braidTimeout = 6,         /* a wait reached its deadline */
  braidPeerLost = 7,        /* another rank died or closed its connection */
  braidOutOfMemory = 8,     /* an allocation failed */
  braidInternalError = 9,   /* a bug in braid */
  braidInProgress = 10      /* braidRequestTest: not finished yet (not an error) */
} braidResult_t;

/* "success", "invalid argument", ... (static storage). */
BRAID_API const char* braidGetErrorString(braidResult_t result);
/* The message of this thread's last failed call ("" when none); valid until this thread's
 * next braid call. */
BRAID_API const char* braidGetLastError(void);

/* ---- data types and reduction operators --------------------------------------------- */
/* braid::DType, in its order. */
typedef enum BRAID_ENUM_BASE {
  braidFloat64 = 0,
  braidFloat32 = 1,
  braidFloat16 = 2,
  braidBfloat16 = 3,
  braidFloat8e4m3 = 4,
  braidFloat8e5m2 = 5,
  braidInt64 = 6,
  braidInt32 = 7,
  braidInt16 = 8,
  braidInt8 = 9,
  braidUint8 = 10,
  braidBool = 11
} braidDataType_t;

typedef enum BRAID_ENUM_BASE {
  braidSum = 0,
  braidProd = 1,
  braidMin = 2,
  braidMax = 3,
  braidAvg = 4
} braidRedOp_t;

/* ---- communicators ------------------------------------------------------------------ */
typedef struct braidComm* braidComm_t;

/* Options for creating a communicator. Start from BRAID_CONFIG_INITIALIZER; `size` lets a
 * newer library read an older caller's struct. */
typedef struct {
  size_t size;         /* sizeof(braidConfig_t) */
  const char* backend; /* "shm", "ucx", "mpi", "hier", "nccl", ...; NULL or "auto": chosen */
  int64_t timeout_ms;  /* the default deadline of every call; 0: BRAID_TIMEOUT or 300 s */
} braidConfig_t;
#define BRAID_CONFIG_INITIALIZER \
  { sizeof(braidConfig_t), NULL, 0 }

/* From the launcher's environment: braid launch, torchrun (RANK, WORLD_SIZE, MASTER_ADDR,
 * MASTER_PORT), mpirun (OMPI_COMM_WORLD_*), Slurm (SLURM_PROCID, ...). Collective over the
 * job. config may be NULL. */
BRAID_API braidResult_t braidCommInitFromEnv(braidComm_t* comm, const braidConfig_t* config);

/* Explicit rendezvous, as torch's tcp:// init: rank 0 hosts the store on
 * store_host:store_port (a port it can bind), every rank connects there presenting `token`
 * (any non-empty string the job agrees on). Collective over the `size` ranks. */
BRAID_API braidResult_t braidCommInitExplicit(braidComm_t* comm, const char* store_host,
                                              int store_port, const char* token, int rank, int size,
                                              const braidConfig_t* config);

/* nccl.h's pattern: one process calls braidGetUniqueId, sends the id to the others by its
 * own means (MPI_Bcast, a file), and every rank calls braidCommInitRank with it. The id names
 * a store the calling process hosts (on BRAID_UNIQUE_ID_ADDR, default 127.0.0.1: one node)
 * until the communicator made from it in that process is destroyed. */
#define BRAID_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[BRAID_UNIQUE_ID_BYTES];
} braidUniqueId;
BRAID_API braidResult_t braidGetUniqueId(braidUniqueId* unique_id);
BRAID_API braidResult_t braidCommInitRank(braidComm_t* comm, int nranks, braidUniqueId id, int rank,
                                          const braidConfig_t* config);

/* ncclCommSplit: every rank of comm calls it; ranks with the same color form a new
 * communicator, ordered by key (ties by rank in comm). color BRAID_SPLIT_NOCOLOR: this rank
 * joins none and gets *newcomm = NULL. */
#define BRAID_SPLIT_NOCOLOR (-1)
BRAID_API braidResult_t braidCommSplit(braidComm_t comm, int color, int key, braidComm_t* newcomm);

BRAID_API braidResult_t braidCommCount(braidComm_t comm, int* count);
BRAID_API braidResult_t braidCommUserRank(braidComm_t comm, int* rank);
/* The backend's name ("shm", ...; static storage while comm lives). */
BRAID_API braidResult_t braidCommGetBackend(braidComm_t comm, const char** name);

/* Frees the communicator after its outstanding requests finish (each within its deadline). */
BRAID_API braidResult_t braidCommDestroy(braidComm_t comm);
/* Frees it now: outstanding requests fail with braidPeerLost (their handles must still be
 * freed), later calls on other ranks fail at their deadline or when they see this rank
 * gone. For error paths: the ncclCommAbort of a communicator that may be stuck. */
BRAID_API braidResult_t braidCommAbort(braidComm_t comm);

/* ---- collectives on raw buffers ----------------------------------------------------- */
/* Per-call options; NULL means the defaults. */
typedef struct {
  size_t size;        /* sizeof(braidCallOptions_t) */
  int64_t timeout_ms; /* this call's deadline; 0: the communicator's */
  void* stream;       /* device memory (nccl): the cudaStream_t the call is ordered with */
} braidCallOptions_t;
#define BRAID_CALL_OPTIONS_INITIALIZER \
  { sizeof(braidCallOptions_t), 0, NULL }

/* An in-flight collective. Every call below takes `braidRequest_t* request`: NULL blocks until
 * the collective is done (or failed); non-NULL returns at once with a request to test / wait
 * and then free. The buffers must stay valid until the request is done. */
typedef struct braidRequest* braidRequest_t;
/* *done = 1 once finished (successfully or not: the result says which), else 0. */
BRAID_API braidResult_t braidRequestTest(braidRequest_t request, int* done);
/* Blocks until finished or the call's deadline; the collective's own error otherwise. */
BRAID_API braidResult_t braidRequestWait(braidRequest_t request);
/* Frees the handle (waits for the collective first, as braidRequestWait, when still running). */
BRAID_API braidResult_t braidRequestFree(braidRequest_t request);

/* In place where sendbuff == recvbuff (all_gather: sendbuff == recvbuff + rank * sendcount;
 * reduce_scatter: recvbuff == sendbuff + rank * recvcount), as NCCL. */
BRAID_API braidResult_t braidAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                                       braidDataType_t datatype, braidRedOp_t op, braidComm_t comm,
                                       const braidCallOptions_t* options, braidRequest_t* request);
/* Root's sendbuff to every rank's recvbuff. */
BRAID_API braidResult_t braidBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                                       braidDataType_t datatype, int root, braidComm_t comm,
                                       const braidCallOptions_t* options, braidRequest_t* request);
/* The reduction lands in root's recvbuff (recvbuff is ignored elsewhere and may be NULL). */
BRAID_API braidResult_t braidReduce(const void* sendbuff, void* recvbuff, size_t count,
                                    braidDataType_t datatype, braidRedOp_t op, int root,
                                    braidComm_t comm, const braidCallOptions_t* options,
                                    braidRequest_t* request);
/* recvbuff: nranks blocks of sendcount, rank r's at r * sendcount. */
BRAID_API braidResult_t braidAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                       braidDataType_t datatype, braidComm_t comm,
                                       const braidCallOptions_t* options, braidRequest_t* request);
/* sendbuff: nranks blocks of recvcount; recvbuff gets the reduction of every rank's block r. */
BRAID_API braidResult_t braidReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                           braidDataType_t datatype, braidRedOp_t op,
                                           braidComm_t comm, const braidCallOptions_t* options,
                                           braidRequest_t* request);
/* Equal blocks of count elements: block r of sendbuff goes to rank r, block r of recvbuff
 * comes from rank r. */
BRAID_API braidResult_t braidAllToAll(const void* sendbuff, void* recvbuff, size_t count,
                                      braidDataType_t datatype, braidComm_t comm,
                                      const braidCallOptions_t* options, braidRequest_t* request);
/* MPI_Alltoallv: nranks counts and displacements (elements) on each side. */
BRAID_API braidResult_t braidAllToAllv(const void* sendbuff, const size_t* sendcounts,
                                       const size_t* sdispls, void* recvbuff,
                                       const size_t* recvcounts, const size_t* rdispls,
                                       braidDataType_t datatype, braidComm_t comm,
                                       const braidCallOptions_t* options, braidRequest_t* request);
/* Root's recvbuff gets nranks blocks of sendcount (ignored elsewhere, may be NULL). */
BRAID_API braidResult_t braidGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                                    braidDataType_t datatype, int root, braidComm_t comm,
                                    const braidCallOptions_t* options, braidRequest_t* request);
/* Block r of root's sendbuff (nranks blocks of recvcount) goes to rank r's recvbuff. */
BRAID_API braidResult_t braidScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                     braidDataType_t datatype, int root, braidComm_t comm,
                                     const braidCallOptions_t* options, braidRequest_t* request);
BRAID_API braidResult_t braidBarrier(braidComm_t comm, const braidCallOptions_t* options,
                                     braidRequest_t* request);
/* Point to point; a send matches the recv of the same peer pair and tag, in order. */
BRAID_API braidResult_t braidSend(const void* sendbuff, size_t count, braidDataType_t datatype,
                                  int peer, int64_t tag, braidComm_t comm,
                                  const braidCallOptions_t* options, braidRequest_t* request);
BRAID_API braidResult_t braidRecv(void* recvbuff, size_t count, braidDataType_t datatype, int peer,
                                  int64_t tag, braidComm_t comm, const braidCallOptions_t* options,
                                  braidRequest_t* request);

/* ---- tensors through DLPack ----------------------------------------------------------- */
/* All-reduce of a DLPack tensor in place (contiguous, a braid data type, host memory or the
 * backend's device): for callers that hold their arrays as DLPack already. */
BRAID_API braidResult_t braidAllReduceTensor(DLTensor* tensor, braidRedOp_t op, braidComm_t comm,
                                             const braidCallOptions_t* options,
                                             braidRequest_t* request);
/* The braid data type of a DLDataType; braidNotSupported naming it when braid has none. */
BRAID_API braidResult_t braidDataTypeFromDLPack(DLDataType dtype, braidDataType_t* out);

/* A list of named tensors braid owns (a loaded file, a state dict). */
typedef struct braidTensorList* braidTensorList_t;
BRAID_API braidResult_t braidTensorListSize(braidTensorList_t list, size_t* size);
/* Entry i: its name (valid while the list lives) and a new DLManagedTensor viewing its memory
 * (zero-copy; it keeps the memory alive after the list is freed: call its deleter). */
BRAID_API braidResult_t braidTensorListGet(braidTensorList_t list, size_t i, const char** name,
                                           DLManagedTensor** tensor);
BRAID_API braidResult_t braidTensorListFree(braidTensorList_t list);

/* ---- safetensors ------------------------------------------------------------------- */
/* Writes n named tensors (borrowed; host memory, any strides) to one .safetensors file,
 * atomically, with nmeta string pairs of metadata (keys / values may be NULL when nmeta = 0). */
BRAID_API braidResult_t braidSafetensorsSave(const char* path, size_t n, const char* const* names,
                                             const DLTensor* const* tensors, size_t nmeta,
                                             const char* const* meta_keys,
                                             const char* const* meta_values);
/* The same split into shards of at most max_shard_size ("5GB", "500MiB", bytes) in a folder,
 * with model.safetensors.index.json when there are several: transformers' layout. */
BRAID_API braidResult_t braidSafetensorsSaveSharded(const char* folder, size_t n,
                                                    const char* const* names,
                                                    const DLTensor* const* tensors,
                                                    const char* max_shard_size);
/* Every tensor of a .safetensors file, a model.safetensors.index.json, or a folder holding
 * one of them, in file order. */
BRAID_API braidResult_t braidSafetensorsLoad(const char* path, braidTensorList_t* list);

/* ---- ZeRO for frameworks with their own autograd (docs/embedding.md, "ZeRO") ------------ */
/* braid::shard::FlatParameters: the framework's parameters, registered per unit, live as f32
 * shards split over the communicator's ranks; the framework brackets each unit's use:
 *
 *   braidZeroBeginForward(z);
 *   for each unit u: braidZeroGather(z, u); braidZeroParam(z, u, i, &t) ...; run u;
 *                    braidZeroRelease(z, u);
 *   braidZeroEndForward(z);
 *   braidZeroBeginBackward(z);
 *   for each unit u, reversed: braidZeroGather(z, u); backward of u;
 *                    braidZeroReduceGradients(z, u, n, grads);
 *   braidZeroEndBackward(z);
 *   ... more micro-batches ...
 *   braidZeroFinishGradients(z, 1.0 / global_micro_batches);
 *   braidZeroStep(z);                                   (the AdamW step on this rank's shards)
 *
 * The reduced gradient is the same bits for every world size (ShardedModel's ordered fold).*/
typedef struct braidZero* braidZero_t;

typedef struct {
  size_t size;                  /* sizeof(braidZeroConfig_t) */
  int stage;                    /* 0..3 (DeepSpeed's zero_stage) */
  braidDataType_t param_dtype;  /* what gathered parameters hold: f32, bf16 or f16 */
  braidDataType_t reduce_dtype; /* what gradients are exchanged in: f32, bf16 or f16 */
  int reshard_after_forward;    /* stage 3: 1 frees a unit after its forward (FULL_SHARD) */
  int sync_module_states;       /* 1: rank 0's initial values go to every rank */
  int overlap;                  /* -1 auto, 0 off, 1 on: collectives on their own thread */
  int prefetch;                 /* with overlap, stage 3: gather the next unit ahead */
} braidZeroConfig_t;
#define BRAID_ZERO_CONFIG_INITIALIZER \
  { sizeof(braidZeroConfig_t), 3, braidFloat32, braidFloat32, 1, 1, -1, 1 }

/* Starts a registration on comm (which must outlive z). */
BRAID_API braidResult_t braidZeroCreate(braidComm_t comm, const braidZeroConfig_t* config,
                                        braidZero_t* zero);
/* Registers a unit (a non-empty dotted name such as "transformer.h.0", not inside another
 * unit) and its n parameters: names relative to the unit ("attn.weight"; the checkpoint name
 * is "<unit>.<name>") and their initial values (f32, host memory, copied). Returns its index
 * (0, 1, ... in registration order). Before braidZeroFinalize only. */
BRAID_API braidResult_t braidZeroAddUnit(braidZero_t zero, const char* unit_name, size_t n,
                                         const char* const* param_names,
                                         const DLTensor* const* initial_values, int* unit);
/* Collective: splits every unit over the ranks (broadcasting rank 0's values first with
 * sync_module_states) and creates the AdamW optimizer on the shards. */
BRAID_API braidResult_t braidZeroFinalize(braidZero_t zero, double lr, double beta1, double beta2,
                                          double eps, double weight_decay);
BRAID_API braidResult_t braidZeroNumUnits(braidZero_t zero, int* count);

BRAID_API braidResult_t braidZeroBeginForward(braidZero_t zero);
BRAID_API braidResult_t braidZeroEndForward(braidZero_t zero);
BRAID_API braidResult_t braidZeroBeginBackward(braidZero_t zero);
BRAID_API braidResult_t braidZeroEndBackward(braidZero_t zero);
/* Makes unit's full parameters available (stage 3: all_gather of the shards). */
BRAID_API braidResult_t braidZeroGather(braidZero_t zero, int unit);
/* Parameter i of a gathered unit as a new DLManagedTensor (param_dtype, host memory) viewing
 * braid's buffer: zero-copy, writes are seen by braid. At stage 3 each gather makes a new
 * buffer: ask again after every braidZeroGather. */
BRAID_API braidResult_t braidZeroParam(braidZero_t zero, int unit, size_t i,
                                       DLManagedTensor** tensor);
/* Forward only: the unit may be freed (stage 3 with reshard_after_forward). */
BRAID_API braidResult_t braidZeroRelease(braidZero_t zero, int unit);
/* Backward only: this micro-batch's gradients of unit's n parameters (every parameter of the
 * unit, in order; f32 / bf16 / f16 host memory shaped as the parameter; a NULL entry means
 * zero), read before the call returns; then the unit is freed. */
BRAID_API braidResult_t braidZeroReduceGradients(braidZero_t zero, int unit, size_t n,
                                                 const DLTensor* const* grads);
/* Ends the step's accumulation: the reduced gradient times scale is the optimizer's. */
BRAID_API braidResult_t braidZeroFinishGradients(braidZero_t zero, double scale);
/* Clips the global gradient 2-norm to max_norm (after FinishGradients); *norm: before clipping. */
BRAID_API braidResult_t braidZeroClipGradNorm(braidZero_t zero, double max_norm, double* norm);
BRAID_API braidResult_t braidZeroSetLearningRate(braidZero_t zero, double lr);
/* The optimizer step on this rank's shards, then (stages 1-2) the new parameters gathered. */
BRAID_API braidResult_t braidZeroStep(braidZero_t zero);
/* Every parameter whole, under its checkpoint name (collective at stage 3). */
BRAID_API braidResult_t braidZeroFullStateDict(braidZero_t zero, braidTensorList_t* list);
/* Sharded checkpoint of parameters and optimizer state (collective; loads at any world size
 * and stage: docs/sharding.md, "Checkpoints"). */
BRAID_API braidResult_t braidZeroSaveCheckpoint(braidZero_t zero, const char* folder);
BRAID_API braidResult_t braidZeroLoadCheckpoint(braidZero_t zero, const char* folder);
/* NULL is a no-op. */
BRAID_API braidResult_t braidZeroDestroy(braidZero_t zero);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* BRAID_H_ */
