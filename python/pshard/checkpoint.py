"""Checkpoints of a program job in pshard's sharded format
(docs/checkpoints.md), the same as a built-in job's: a directory per step
under the job spec's checkpoint.dir, each rank writing the parameters it owns
and their optimizer state keyed by parameter name, committed by the
coordinator once every rank's shard is in. A restarted job (max_restarts)
resumes from the latest complete one, at any world size:

    import pshard, pshard.checkpoint, pshard.torch

    opt = pshard.torch.ShardedOptimizer(model, optimizer={...})
    start = pshard.checkpoint.load(opt)         # 0 on a first run
    saved = pshard.checkpoint.program_state(opt)  # bytes, or None
    for step in range(start + 1, steps + 1):
        ...; opt.step()
        if pshard.checkpoint.due(step):
            pshard.checkpoint.save(opt, step,   # copies, then writes behind
                                   state=pickle.dumps(my_state))

The program's own state beyond the model and optimizer (a scheduler's, a
data loader's position, RNG states) travels as bytes in its rank's shard
(`state`, at most 16 MiB); or make it a function of the step, as pshard's
built-in workloads do, and a resume is exact without it.
"""

import ctypes
import os

from pshard import _capi

__all__ = ["due", "every_steps", "load", "program_state", "restart_count",
           "save"]


def _int_variable(name):
    value = os.environ.get(name, "")
    if not value:
        return 0
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{name}: an integer, got {value!r}") from None
    if number < 0:
        raise ValueError(f"{name}: must be >= 0, got {number}")
    return number


def every_steps():
    """The job spec's checkpoint.every_steps (0: none asked for)."""
    return _int_variable("PSHARD_CHECKPOINT_EVERY_STEPS")


def restart_count():
    """How often the coordinator has restarted this job (0 on a first run)."""
    return _int_variable("PSHARD_RESTART_COUNT")


def due(step, total_steps=None):
    """True when the spec asks for a checkpoint after `step` (never after
    the last step, `total_steps`, whose parameters are the job's output)."""
    step = _capi.integer("step", step)
    every = every_steps()
    if every <= 0 or step % every != 0:
        return False
    return total_steps is None or step < total_steps


def save(optimizer, step, state=None):
    """Starts saving this rank's shard of the checkpoint at `step` (the
    state after `step` optimizer steps; every rank saves the same steps).
    Returns once the shard is copied; it is written in the background.
    `state`: the program's own state as bytes (a scheduler's, a data
    loader's position, RNG states: whatever the program serialises, at most
    16 MiB), stored in this rank's shard; after a restart
    program_state() gives it back. Raises PshardError: no checkpoint.dir in
    the job spec, before the first step, a step not after the last saved
    one, a state over 16 MiB; TypeError: a state that is not bytes-like."""
    handle = optimizer.session.handle
    step = _capi.integer("step", step)
    if state is None:
        _capi.check("pshardSaveCheckpoint", handle, step)
        return
    try:
        data = bytes(memoryview(state))
    except TypeError:
        raise TypeError("state: bytes (or another bytes-like object), got "
                        f"{type(state).__name__}") from None
    _capi.check("pshardSaveCheckpointWithState", handle, step, data,
                len(data))


def load(optimizer, path=None):
    """Before the first step: loads a checkpoint into the model and
    `optimizer` and returns its step (resume at step + 1). `path`: a step
    directory or a checkpoint root (its latest complete checkpoint); None:
    the one this restarted epoch resumes from (PSHARD_RESUME_FROM), and 0
    when there is none. Raises PshardError naming the checkpoint: none there
    (NOT_FOUND), a corrupted shard (DATA_LOSS), another job's model or
    optimizer."""
    if path is not None and not isinstance(path, (str, bytes, os.PathLike)):
        raise TypeError(f"path: a str, bytes or os.PathLike, got "
                        f"{type(path).__name__}")
    step = ctypes.c_int64()
    _capi.check("pshardLoadCheckpoint", optimizer.session.handle,
                None if path is None else os.fsencode(path),
                ctypes.byref(step))
    return step.value


def program_state(optimizer, rank=None):
    """The state (bytes) that rank `rank` (default: this rank) saved with
    the checkpoint load() loaded, or None: that rank saved none, the
    checkpoint was written by fewer ranks, or none was loaded. A state every
    rank shares (a scheduler's) is any rank's, e.g. rank 0's, at any world
    size."""
    session = optimizer.session
    which = (session.rank if rank is None
             else _capi.integer("rank", rank, bits=32))
    data = ctypes.c_void_p()
    size = ctypes.c_int64()
    found = ctypes.c_int()
    _capi.check("pshardGetLoadedProgramState", session.handle, which,
                ctypes.byref(data), ctypes.byref(size), ctypes.byref(found))
    if not found.value:
        return None
    return ctypes.string_at(data, size.value) if size.value else b""
