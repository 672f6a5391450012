/* libpshard: pshard's C API, for a training program of your own (the Python
 * package `pshard` drives it through ctypes). In NCCL's style: opaque
 * handles, a result code from every call, a thread-local description of the
 * last failure, every argument checked; nothing is thrown across it.
 *
 * One session per rank at a time (a program may close it and open another,
 * every rank alike: each session of a process meets its peers' sessions of
 * the same ordinal). The rank's agent (pshard-worker, for a `program` job)
 * starts the program with the environment the session reads:
 *
 *   pshardSession_t s;
 *   pshardSessionOpen(&s);                 joins the job's communicator
 *   pshardSetOptimizer(s, "{\"kind\":\"ADAM\",\"hyper_parameters\":{\"lr\":1e-3}}");
 *   pshardRegisterParameter(s, "fc.weight", 2, shape, pshardFloat32,
 *                           pshardHostMemory, &index);   ... every parameter,
 *                                          in forward order
 *   pshardPrepare(s);                      bucket buffers allocated
 *   pshardGetParameter(s, i, &ptr, &n);    write initial values (same on
 *                                          every rank), compute into them
 *                                          (bf16: see pshardSetPrecision)
 *   for each step:
 *     forward (with overlap_param_broadcast: pshardWaitParameter(s, i)
 *       before it first reads parameter i);
 *     backward; for each parameter as its gradient becomes final:
 *       write it into pshardGetGradient's buffer, pshardGradientReady(s, i)
 *     pshardFinishStep(s);                 parameters updated on every rank
 *     pshardReportProgress(s, step, loss, samples);
 *   pshardSessionClose(s);                 final barrier, then everything
 *                                          is released
 *
 * Environment (set by the agent; see docs/design.md's program contract):
 *   PSHARD_COORDINATOR, PSHARD_JOB_ID, PSHARD_EPOCH, PSHARD_RANK,
 *   PSHARD_WORLD_SIZE, PSHARD_WORKER_ID, PSHARD_HOSTNAME,
 *   PSHARD_COLLECTIVE_TIMEOUT_SECONDS (optional, default 60);
 *   for checkpoints (see pshardSaveCheckpoint): PSHARD_CHECKPOINT_DIR,
 *   PSHARD_CHECKPOINT_EVERY_STEPS, PSHARD_CHECKPOINT_FINGERPRINT (when the
 *   spec has `checkpoint`), PSHARD_RESTART_COUNT, and PSHARD_RESUME_FROM /
 *   PSHARD_RESUME_STEP (when the epoch resumes from a checkpoint).
 * Local test mode, FOR TESTS ONLY: with PSHARD_COORDINATOR unset and
 *   PSHARD_LOCAL_STORE=<directory> set, ranks started by a test meet through
 *   files in that directory (a fresh one per run) and compute the bucket
 *   owners themselves; the rank and world size come from RANK and
 *   WORLD_SIZE; nothing is reported anywhere.
 *
 * Rules (as worker/api/trainer.h's, which this API is built on):
 *  - Every rank registers the same parameters in the same order, writes the
 *    same initial values (pshardBroadcast copies rank 0's, as pshard.torch
 *    and DDP do), and marks every gradient ready once per step
 *    before pshardFinishStep. Gradients are this rank's own; pshard averages
 *    them over ranks, as DDP does.
 *  - The first pshardFinishStep may move the buffers (it re-packs them in the
 *    order gradients became ready): fetch the pointers again after it, even
 *    when it failed. Host memory is re-packed in place (an old pointer
 *    still points into pshard's memory, at other values); device memory
 *    moves (the old buffers are gone). They are stable from then on, until
 *    pshardSessionClose.
 *  - After an error in a collective (a peer gone, a timeout, the job
 *    cancelled) the session can only be closed.
 *  - A session is used from one thread at a time (calls are serialised).
 */
#ifndef PSHARD_WORKER_API_PSHARD_H_
#define PSHARD_WORKER_API_PSHARD_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: checkpoints (pshardSaveCheckpoint, pshardLoadCheckpoint), pshardNotFound
 * and pshardDataLoss, optimizer state imported at any world size.
 * 3: overlap_param_broadcast (pshardSetOverlapParamBroadcast,
 * pshardGetOverlapParamBroadcast, pshardWaitParameter); optimizer state
 * slices under SHARDED (pshardOptimizerStateGetEntrySlice,
 * pshardImportOptimizerStateSlices).
 * 4: bf16 mixed precision (pshardBFloat16, pshardSetPrecision,
 * pshardGetPrecision, pshardSetParameterFromFloat32).
 * 5: parameters in CUDA device memory (pshardCudaMemory,
 * pshardSetCudaDevice).
 * 6: optimizer-state exports carry a "step" entry (numel 0) for each
 * owned parameter without state, and imports take it back.
 * 7: learning rates set while training (pshardSetLearningRate,
 * pshardGetLearningRate, pshardParameterGroup).
 * 8: every settable hyper-parameter set while training
 * (pshardSetHyperParameters, pshardGetHyperParameters).
 * 9: the program's own state in checkpoints
 * (pshardSaveCheckpointWithState, pshardGetLoadedProgramState).
 * 10: bytes broadcast from one rank (pshardBroadcast). */
#define PSHARD_API_VERSION 10

/* The enums below are ints. In C++ they have int as their fixed underlying
 * type, so every int a C caller passes is a value of the enum: an unknown one
 * is refused as pshardInvalidArgument, not undefined behaviour. The size and
 * calling convention are those of C's int either way. */
#ifdef __cplusplus
#define PSHARD_ENUM_BASE : int
#else
#define PSHARD_ENUM_BASE
#endif

typedef enum PSHARD_ENUM_BASE {
  pshardSuccess = 0,
  /* A bad argument: a null pointer, an unknown enum value, invalid optimizer
   * JSON (the last error names the field), a bad environment variable (the
   * last error names it). */
  pshardInvalidArgument = 1,
  /* A call out of order: registering after pshardPrepare, stepping before
   * it, marking a gradient ready twice in a step. */
  pshardInvalidUsage = 2,
  pshardInternalError = 3,
  /* A collective or the rendezvous did not finish within the collective
   * timeout. */
  pshardTimeout = 4,
  /* A peer, the coordinator or a file is unreachable. */
  pshardUnavailable = 5,
  /* The job was stopped (cancelled, failed elsewhere, replaced by a newer
   * attempt) or the session failed earlier. */
  pshardAborted = 6,
  /* No checkpoint where one was asked for, or a parameter it lacks. */
  pshardNotFound = 7,
  /* A checkpoint's shard is truncated or corrupted (the file is named). */
  pshardDataLoss = 8,
  pshardNumResults = 9
} pshardResult_t;

/* bfloat16: the upper 16 bits of a float32 (as torch.bfloat16). */
typedef enum PSHARD_ENUM_BASE {
  pshardFloat32 = 0,
  pshardBFloat16 = 1,
  pshardNumDataTypes = 2
} pshardDataType_t;

/* Where a parameter's buckets live: host memory (reduced over Gloo), or
 * CUDA device memory (over NCCL, with the fused CUDA optimizer; see
 * pshardSetCudaDevice). One kind for every parameter of a session. */
typedef enum PSHARD_ENUM_BASE {
  pshardHostMemory = 0,
  pshardCudaMemory = 1,
  pshardNumMemoryKinds = 2
} pshardMemory_t;

/* JobSpec.CommMode. */
typedef enum PSHARD_ENUM_BASE {
  pshardReduceBroadcast = 0,
  pshardAllreduceBroadcast = 1,
  pshardNumCommModes = 2
} pshardCommMode_t;

typedef struct pshardSession* pshardSession_t;

/* A static description of `result` ("invalid argument", ...). */
const char* pshardGetErrorString(pshardResult_t result);
/* What went wrong in this thread's last failed call ("" if none yet). Valid
 * until this thread's next pshard call. */
const char* pshardGetLastError(void);
/* PSHARD_API_VERSION of the library. */
int pshardGetVersion(void);

/* Opens this rank's session from the environment and joins the job's
 * communicator (waits up to the collective timeout for every rank).
 * InvalidArgument: a missing or malformed variable (named); Timeout: the
 * other ranks did not show up. *session is NULL on failure. */
pshardResult_t pshardSessionOpen(pshardSession_t* session);

pshardResult_t pshardSessionRank(pshardSession_t session, int* rank);
pshardResult_t pshardSessionWorldSize(pshardSession_t session, int* world);

/* Configuration, before pshardPrepare. The optimizer is OptimizerSpec in
 * protobuf's JSON mapping (param_groups select parameters by name globs),
 * checked with the rules of a JobSpec's `optimizer` field; the default is
 * none, so it is required. bucket_cap_mb: (0, 4096], default 25. */
pshardResult_t pshardSetOptimizer(pshardSession_t session, const char* json);
pshardResult_t pshardSetBucketCapMb(pshardSession_t session, double mb);
pshardResult_t pshardSetCommMode(pshardSession_t session,
                                 pshardCommMode_t mode);

/* overlap_param_broadcast (JobSpec field 30): with `enable` 1,
 * pshardFinishStep returns without waiting for the parameter broadcasts of
 * the step, and the program calls pshardWaitParameter(s, i) before it reads
 * parameter i — in its next forward, in the order it really reads them, so
 * that the first layers compute while later ones are still arriving. A
 * program that reads a parameter without waiting may see the value before
 * the update. The default is the job spec's overlap_param_broadcast
 * (PSHARD_OVERLAP_PARAM_BROADCAST, set by the agent; off in the local test
 * mode unless set); a program that cannot wait per parameter turns it off
 * with `enable` 0. Before pshardPrepare. InvalidArgument: `enable` not 0 or
 * 1. pshardGetOverlapParamBroadcast: whether it is on (*enabled 0 or 1). */
pshardResult_t pshardSetOverlapParamBroadcast(pshardSession_t session,
                                              int enable);
pshardResult_t pshardGetOverlapParamBroadcast(pshardSession_t session,
                                              int* enabled);

/* Mixed precision (JobSpec.precision): every parameter's buffer holds
 * `param_dtype` on every rank, every gradient buffer `reduce_dtype` (what
 * the gradients are reduced in), and the owner of a bucket keeps fp32
 * master weights and fp32 optimizer state for it, steps those and writes
 * the update, rounded to nearest even, into the parameters it broadcasts.
 * With bf16 parameters the broadcast carries half the bytes, with a bf16
 * reduction the reduction too. The default is the job spec's precision
 * (PSHARD_PARAM_DTYPE, PSHARD_REDUCE_DTYPE, set by the agent: "FP32" or
 * "BF16"; fp32 throughout when unset). Before the first
 * pshardRegisterParameter. InvalidArgument: not a pshardDataType_t;
 * InvalidUsage: a parameter is already registered. */
pshardResult_t pshardSetPrecision(pshardSession_t session,
                                  pshardDataType_t param_dtype,
                                  pshardDataType_t reduce_dtype);
pshardResult_t pshardGetPrecision(pshardSession_t session,
                                  pshardDataType_t* param_dtype,
                                  pshardDataType_t* reduce_dtype);

/* Parameters in CUDA device memory: `device` is the CUDA device they live
 * on (the program's, e.g. torch's LOCAL_RANK device) and `stream` (a
 * cudaStream_t; NULL: the legacy default stream) the one the program
 * computes on. pshardGradientReady takes a gradient as final once the
 * work enqueued on `stream` so far has run (no host wait), and
 * pshardFinishStep returns with `stream` ordered after the step's
 * broadcasts, so that the next forward on it reads the updated parameters.
 * Before pshardPrepare (default: device 0, the legacy default stream).
 * pshardPrepare then opens an NCCL communicator among the ranks (every
 * rank's Prepare meets the others' through the job's rendezvous, within
 * the collective timeout). Optimizer-state export/import and checkpoints
 * work as on the host (the state is copied between the device and host
 * memory). With overlap_param_broadcast, pshardWaitParameter makes the
 * stream wait on the device for the parameter's broadcasts and returns at
 * once. pshardPrepare fails with Unavailable in a libpshard built without CUDA
 * or on a machine without a CUDA device, and with InvalidArgument for a
 * device that does not exist. InvalidArgument here: device < 0. */
pshardResult_t pshardSetCudaDevice(pshardSession_t session, int device,
                                   void* stream);

/* Registers the next parameter (in forward order): `name` unique, 1..256
 * bytes; `ndim` 0..16 dimensions each >= 1 (ndim 0: a scalar); `dtype` the
 * session's param_dtype (see pshardSetPrecision; InvalidArgument naming
 * both otherwise); `memory` the first parameter's (InvalidArgument
 * otherwise). *index gets its index (0, 1, ...). */
pshardResult_t pshardRegisterParameter(pshardSession_t session,
                                       const char* name, int ndim,
                                       const int64_t* shape,
                                       pshardDataType_t dtype,
                                       pshardMemory_t memory, int* index);

/* Allocates the bucket buffers; registration and configuration end.
 * InvalidArgument: no optimizer, no parameters. */
pshardResult_t pshardPrepare(pshardSession_t session);

pshardResult_t pshardNumParameters(pshardSession_t session, int* count);
/* Parameter `index`'s values and its gradient inside the bucket buffers:
 * `*numel` elements of param_dtype (the parameter) and of reduce_dtype (the
 * gradient); device pointers in CUDA device memory. After pshardPrepare,
 * on a failed session too (the buffers hold what the last step left); the
 * first pshardFinishStep may move them (ask again after it, whatever it
 * returned). */
pshardResult_t pshardGetParameter(pshardSession_t session, int index,
                                  void** data, int64_t* numel);
pshardResult_t pshardGetGradient(pshardSession_t session, int index,
                                 void** data, int64_t* numel);

/* After pshardPrepare, before the first step: parameter `index` takes
 * `numel` (its element count) float32 `values` (host memory, whatever the
 * parameters' memory), rounded to nearest even into
 * a bf16 buffer; the owner's fp32 master weights start from `values`
 * themselves rather than from the rounded copy (those of a parameter never
 * set this way start from its buffer, widened). Writing the buffer
 * directly afterwards does not change the masters: use one way per
 * parameter. InvalidArgument: a bad index, a numel that is not the
 * parameter's; InvalidUsage: after the first step. */
pshardResult_t pshardSetParameterFromFloat32(pshardSession_t session,
                                             int index, const float* values,
                                             int64_t numel);

/* Gradient `index` is final for this step: its bucket may start travelling.
 * InvalidUsage if it was already marked in this step. */
pshardResult_t pshardGradientReady(pshardSession_t session, int index);
/* Ends the step: on return every rank holds the updated parameters. */
pshardResult_t pshardFinishStep(pshardSession_t session);
/* Returns once parameter `index` holds the last step's update: at once
 * without overlap_param_broadcast, before the first step, or when its
 * broadcast has already arrived (cheap: call it before every read). Device
 * memory: returns at once, with the session's stream (pshardSetCudaDevice)
 * ordered after the update on the device; read it on that stream. After
 * pshardPrepare. InvalidArgument: an index that is not a parameter's;
 * Timeout/Unavailable/Aborted: the broadcast failed (the session can only
 * be closed). pshardSaveCheckpoint and pshardSessionClose wait for every
 * parameter themselves, and pshardFinishStep for those of the previous step
 * nobody waited for; anything else that reads the parameters outside a
 * forward (the program's own copy of the model) waits for each first. */
pshardResult_t pshardWaitParameter(pshardSession_t session, int index);
/* Parameter group `group` steps with the hyper-parameters in `json` from
 * the next step on: what torch's schedulers write into param_groups[i]
 * ("lr"; OneCycleLR's and CyclicLR's "momentum" or "betas"). `json` is an
 * OptimizerHyperParameters object (the job spec's hyper_parameters) with
 * the fields to change, e.g. {"lr": 0.01, "betas": [0.9, 0.99]}: lr (it
 * replaces the group's lr_schedule), weight_decay, and those of the
 * optimizer's kind among momentum (> 0, for a group whose spec momentum is
 * > 0: the one with a momentum buffer), betas, eps, alpha and lr_decay,
 * each in the job spec's range; the other fields keep their values.
 * `group` -1 is the optimizer's default group, 0..n-1 its param_groups in
 * order. Between steps only (before the first pshardGradientReady of a
 * step), so that a whole step runs with one set; every rank sets the same
 * (each owner steps its buckets with its own). After pshardPrepare.
 * InvalidArgument: no such group, malformed JSON, a field not settable or
 * out of range (named as the job spec field it replaces, e.g.
 * "optimizer.param_groups[0].hyper_parameters.momentum: ..."; nothing
 * changes and the session stays usable); InvalidUsage: mid-step. */
pshardResult_t pshardSetHyperParameters(pshardSession_t session, int group,
                                        const char* json);
/* Group `group`'s settable hyper-parameters for the next step (those
 * pshardSetHyperParameters takes for the optimizer's kind, every one set:
 * the changed ones, else the spec's; lr the base the group's lr_schedule
 * scales when it has one) as OptimizerHyperParameters JSON with the
 * job spec's field names. *json stays valid until the next
 * pshardGetHyperParameters on the same thread. After pshardPrepare;
 * InvalidArgument: no such group. */
pshardResult_t pshardGetHyperParameters(pshardSession_t session, int group,
                                        const char** json);
/* pshardSetHyperParameters with {"lr": lr}; errors as its. */
pshardResult_t pshardSetLearningRate(pshardSession_t session, int group,
                                     double lr);
/* Group `group`'s lr as pshardGetHyperParameters gives it. */
pshardResult_t pshardGetLearningRate(pshardSession_t session, int group,
                                     double* lr);
/* The parameter group of parameter `index` (-1: the default group, else
 * the first of the optimizer's param_groups whose glob matches its name).
 * After pshardPrepare; InvalidArgument: an index that is not a
 * parameter's. */
pshardResult_t pshardParameterGroup(pshardSession_t session, int index,
                                    int* group);
/* Steps finished so far. */
pshardResult_t pshardStepsFinished(pshardSession_t session, int64_t* steps);
/* The last step's total gradient norm before clipping, when the optimizer
 * clips (OptimizerSpec max_grad_norm, norm_type): *known 1 and *norm as
 * torch.nn.utils.clip_grad_norm_ returns it (the same on every rank; NaN or
 * infinite when a gradient was, and the step went on with it); *known 0
 * without clipping or before the first step. After pshardPrepare. */
pshardResult_t pshardLastGradNorm(pshardSession_t session, double* norm,
                                  int* known);

/* The mean of `loss` over ranks (a collective: every rank calls it). */
pshardResult_t pshardAverageLoss(pshardSession_t session, double loss,
                                 double* mean);
/* Copies `size` bytes at `data` (host memory) on rank `root` to `data` on
 * every rank (a collective: every rank calls it with the same root and
 * size), as DDP broadcasts a model's buffers from rank 0. InvalidArgument:
 * `data` NULL with size > 0, size < 0, a root outside the world, or a size
 * that differs from root's (every rank fails; nothing is copied). */
pshardResult_t pshardBroadcast(pshardSession_t session, void* data,
                               int64_t size, int root);
/* Progress after step `step` (>= 1): `loss` (NaN if none), `samples` this
 * rank processed in it. Rank 0 sends it to the coordinator without waiting;
 * other ranks' calls only check their arguments. Aborted if the coordinator
 * has stopped the job. */
pshardResult_t pshardReportProgress(pshardSession_t session, int64_t step,
                                    double loss, int64_t samples);

/* Buckets and those this rank owns (after the first step; under the
 * SHARDED policy, those in which its element range is not empty). `owned`
 * holds up to `capacity` bucket indices; *count gets how many this rank
 * owns. */
pshardResult_t pshardNumBuckets(pshardSession_t session, int* count);
pshardResult_t pshardOwnedBuckets(pshardSession_t session, int* owned,
                                  int capacity, int* count);

/* Checkpoints of this rank's shard of the optimizer state (as
 * ZeroRedundancyOptimizer's local state): for each parameter whose bucket
 * this rank owns, its state tensors by PyTorch's names
 * (SGD "momentum_buffer"; Adam/AdamW "exp_avg", "exp_avg_sq" and, with
 * amsgrad, "max_exp_avg_sq"; Adagrad "sum"; RMSprop "square_avg",
 * "momentum_buffer", "grad_avg"; Lion "exp_avg"; each the parameter's numel
 * floats) and its step count, plus the optimizer spec. A parameter that
 * keeps no state (SGD without momentum) has one entry with key "step",
 * numel 0 and offset 0 (data points at no elements): its step count, which
 * its bucket's lr_schedule resumes from. Import takes such an entry back
 * (its data may be NULL; numel must be 0), from any number of ranks.
 *
 *   pshardOptimizerState_t st;
 *   pshardExportOptimizerState(s, &st);     after the first step: a copy
 *   pshardOptimizerStateNumEntries(st, &n); for i < n:
 *     pshardOptimizerStateGetEntry(st, i, &param, &key, &step, &data, &numel);
 *   pshardOptimizerStateSpec(st, &json);
 *   pshardOptimizerStateFree(st);
 *
 * and, in a new session with the same parameters and optimizer (any rank,
 * world size or bucket size), after pshardPrepare and before the first step:
 *   pshardImportOptimizerState(s2, json, n, params, keys, steps, data, numels);
 * with entries covering at least the parameters s2 comes to own (the entries
 * of every rank's export together cover all of them; the others are
 * ignored). For a checkpoint of the whole job, see pshardSaveCheckpoint.
 */
typedef struct pshardOptimizerState* pshardOptimizerState_t;

/* InvalidUsage before the first step has finished. *state is NULL on
 * failure. */
pshardResult_t pshardExportOptimizerState(pshardSession_t session,
                                          pshardOptimizerState_t* state);
pshardResult_t pshardOptimizerStateNumEntries(pshardOptimizerState_t state,
                                              int* count);
/* Entry `index` (one state tensor of one parameter): pointers valid until
 * pshardOptimizerStateFree. InvalidUsage for a slice (see
 * pshardOptimizerStateGetEntrySlice), so that a caller that expects whole
 * parameters never mistakes one for a whole parameter. */
pshardResult_t pshardOptimizerStateGetEntry(pshardOptimizerState_t state,
                                            int index, const char** parameter,
                                            const char** key, int64_t* step,
                                            const float** data,
                                            int64_t* numel);
/* Any entry, whole or a slice: `*numel` elements holding elements
 * [*offset, *offset + *numel) of the parameter, which has
 * *parameter_numel in all (whole: offset 0 and numel == parameter_numel;
 * a "step" entry: offset 0, numel 0). Under assignment_policy SHARDED a
 * rank holds slices of the parameters its ranges cut. */
pshardResult_t pshardOptimizerStateGetEntrySlice(
    pshardOptimizerState_t state, int index, const char** parameter,
    const char** key, int64_t* step, const float** data, int64_t* numel,
    int64_t* offset, int64_t* parameter_numel);
/* The OptimizerSpec the state belongs to, as JSON. */
pshardResult_t pshardOptimizerStateSpec(pshardOptimizerState_t state,
                                        const char** optimizer_json);
/* NULL is accepted (no-op). */
pshardResult_t pshardOptimizerStateFree(pshardOptimizerState_t state);

/* Loads `count` entries (as GetEntry gives them; arrays of `count`; entries
 * of one parameter carry the same step). The values are copied; the first
 * pshardFinishStep resumes from them. InvalidArgument: a NULL array or
 * element (data may be NULL for a "step" entry), count < 0,
 * `optimizer_json` not this session's optimizer, an unknown or repeated
 * (parameter, key) ("step" may repeat), a numel that is not the
 * parameter's (0 for "step"), a negative step or steps of one parameter
 * that differ; at the first pshardFinishStep, a parameter this rank owns
 * whose state is missing.
 * Entries of parameters this rank does not own are ignored.
 * InvalidUsage: before pshardPrepare or after the first step. */
pshardResult_t pshardImportOptimizerState(
    pshardSession_t session, const char* optimizer_json, int count,
    const char* const* parameters, const char* const* keys,
    const int64_t* steps, const float* const* data, const int64_t* numels);
/* The same with slices (as GetEntrySlice gives them): entry i holds
 * elements [offsets[i], offsets[i] + numels[i]) of its parameter. Entries
 * are keyed by (parameter, offset): the slices of every rank's export
 * together (any world size, bucket size or policy), or this rank's own at
 * the same configuration. InvalidArgument also: a NULL `offsets` (count >
 * 0), a slice outside its parameter, slices of one parameter that overlap
 * or hold different numels for one offset; at the first pshardFinishStep,
 * owned elements no slice covers. */
pshardResult_t pshardImportOptimizerStateSlices(
    pshardSession_t session, const char* optimizer_json, int count,
    const char* const* parameters, const char* const* keys,
    const int64_t* steps, const int64_t* offsets, const float* const* data,
    const int64_t* numels);

/* Checkpoints of the whole job in its sharded format (docs/checkpoints.md),
 * the same as a built-in job's: one directory per step under the job spec's
 * checkpoint.dir, each rank's shard holding the parameters it owns and
 * their optimizer state, keyed by parameter name, so that a checkpoint
 * loads at any world size. A checkpoint is complete only when the
 * coordinator has every rank's shard and has written its manifest; a
 * restarted job resumes from the latest complete one.
 *
 *   int64_t start = 0;
 *   pshardLoadCheckpoint(s, NULL, &start);  after pshardPrepare: the one
 *                                           this epoch resumes from (0 if
 *                                           none)
 *   for (step = start + 1; ...) {
 *     ... pshardFinishStep(s);
 *     if (step % every_steps == 0) pshardSaveCheckpoint(s, step);
 *   }
 *
 * Save: every rank calls it at the same steps, after pshardFinishStep of
 * `step` (the state after `step` updates). It copies this rank's shard and
 * returns; the file is written on a background thread and reported to the
 * coordinator at a later pshardFinishStep or at pshardSessionClose.
 * InvalidUsage: no checkpoint.dir in the job's spec, the local test mode
 * (only a coordinator commits checkpoints), before the first step.
 * InvalidArgument: step < 1 or not after the last saved step. A write that
 * fails (a full disk) fails that checkpoint only: the coordinator records it
 * FAILED and training goes on. */
pshardResult_t pshardSaveCheckpoint(pshardSession_t session, int64_t step);

/* pshardSaveCheckpoint with the program's own state: `size` bytes at
 * `state` (what the program serialises: a scheduler's state, a data
 * loader's position, RNG states), stored in this rank's shard, copied
 * before it returns. After a restart every rank may read any rank's
 * (pshardGetLoadedProgramState). InvalidArgument also: `state` NULL with
 * size > 0, size < 0 or over 16 MiB. */
pshardResult_t pshardSaveCheckpointWithState(pshardSession_t session,
                                             int64_t step, const void* state,
                                             int64_t size);

/* Load: after pshardPrepare, before the first step, on every rank. `path`:
 * a step directory, or a checkpoint root (its latest complete checkpoint);
 * NULL or "": the checkpoint this epoch resumes from (PSHARD_RESUME_FROM),
 * and nothing (*step = 0, success) when there is none. The parameters are
 * read by name into the buffers (every rank the same values); the
 * optimizer state of the parameters this rank comes to own is read by name
 * at the first pshardFinishStep. *step gets the checkpoint's step: resume
 * at *step + 1. NotFound: no checkpoint there, or a parameter it lacks
 * (named); DataLoss: a shard's size or SHA-256 does not match (named);
 * InvalidUsage: another job's model, optimizer or seed, after the first
 * step. */
pshardResult_t pshardLoadCheckpoint(pshardSession_t session, const char* path,
                                    int64_t* step);

/* The program state rank `rank` saved (pshardSaveCheckpointWithState) with
 * the checkpoint pshardLoadCheckpoint loaded: *found 1, *state and *size
 * its bytes (valid until the session loads another or is closed); or
 * *found 0 (*state NULL, *size 0) when that rank saved none, the
 * checkpoint has no rank `rank` (it was written at a smaller world size),
 * or nothing was loaded. InvalidArgument: rank < 0, a NULL pointer. */
pshardResult_t pshardGetLoadedProgramState(pshardSession_t session, int rank,
                                           const void** state, int64_t* size,
                                           int* found);

/* Every rank waits for every other (a collective). */
pshardResult_t pshardBarrier(pshardSession_t session);

/* Ends the session: a final barrier if it is healthy and prepared (so that
 * no rank closes its connections while a peer still receives the last
 * broadcasts), then frees everything. The handle is invalid afterwards,
 * whatever the result. NULL is accepted (no-op). */
pshardResult_t pshardSessionClose(pshardSession_t session);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* PSHARD_WORKER_API_PSHARD_H_ */
