"""pshard for a training script of your own: the rank's session, and (in
`pshard.torch`) a sharded optimizer for PyTorch models.

    import pshard
    import pshard.torch

    session = pshard.init()                    # this rank of the job
    model.to(pshard.device())                  # its worker's CPU or GPU
    opt = pshard.torch.ShardedOptimizer(
        model, optimizer={"kind": "ADAMW", "hyper_parameters": {"lr": 3e-4}})
    for step in range(1, steps + 1):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()                        # buckets travel meanwhile
        opt.step()                             # parameters updated
        session.report(step=step, loss=loss.item(), samples=len(x))
    session.close()

Pure Python over libpshard's C API (ctypes), so one build serves every
CPython >= 3.9. The job's agent (pshard-worker) sets the environment
`init()` reads; see worker/api/pshard.h for the variables and the local test
mode (PSHARD_LOCAL_STORE, for tests only).
"""

import atexit
import ctypes
import math
import os
import re
import weakref

from pshard import _capi
from pshard._capi import PshardError

__all__ = ["PshardError", "Session", "device", "init"]

_process_session = None


class Session:
    """One rank's session: its communicator, joined at open, and at most one
    ShardedOptimizer's buckets. Close it at the end (a final barrier, so no
    rank leaves while a peer still receives); a session left open is closed
    when the interpreter exits."""

    def __init__(self, handle):
        self._handle = handle
        self._on_close = []
        rank = ctypes.c_int()
        world = ctypes.c_int()
        _capi.check("pshardSessionRank", handle, ctypes.byref(rank))
        _capi.check("pshardSessionWorldSize", handle, ctypes.byref(world))
        self.rank = rank.value
        self.world_size = world.value
        self_ref = weakref.ref(self)
        self._exit_hook = lambda: self_ref() is not None and self_ref().close()
        atexit.register(self._exit_hook)

    @classmethod
    def open(cls):
        """A new session from the environment (every rank calls it)."""
        handle = ctypes.c_void_p()
        _capi.check("pshardSessionOpen", ctypes.byref(handle))
        return cls(handle)

    @property
    def handle(self):
        if self._handle is None:
            raise PshardError("pshard", _capi.INVALID_USAGE,
                              "the session is closed")
        return self._handle

    def report(self, step, loss=math.nan, samples=0):
        """Progress after `step` (>= 1): its loss (this rank's, or averaged
        with average_loss) and the samples this rank processed in it. Rank 0
        sends it to the coordinator without waiting; raises PshardError
        (code ABORTED) once the coordinator has stopped the job."""
        _capi.check("pshardReportProgress", self.handle,
                    _capi.integer("step", step), _capi.real("loss", loss),
                    _capi.integer("samples", samples))

    def average_loss(self, loss):
        """The mean of `loss` over ranks (every rank calls it)."""
        mean = ctypes.c_double()
        _capi.check("pshardAverageLoss", self.handle,
                    _capi.real("loss", loss), ctypes.byref(mean))
        return mean.value

    def barrier(self):
        _capi.check("pshardBarrier", self.handle)

    def close(self):
        """Final barrier, then everything is released. Parameters that lived
        in pshard's buffers are copied out first, so the model stays usable.
        Idempotent."""
        if self._handle is None:
            return
        for callback in self._on_close:
            callback()
        self._on_close.clear()
        handle, self._handle = self._handle, None
        atexit.unregister(self._exit_hook)
        _capi.check("pshardSessionClose", handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def init():
    """This process's session (opened at the first call, the same one after
    it): the rank the agent started, from its environment. After close(), a
    new one (every rank must then open its next session too)."""
    global _process_session
    if _process_session is None or _process_session._handle is None:
        _process_session = Session.open()
    return _process_session


def device():
    """The device of this rank's worker, for `model.to(...)`: "cpu", or
    "cuda:N" on a GPU worker (pshard-worker --device, as the agent passes it
    in PSHARD_DEVICE). "cpu" where the variable is unset: a plain process, or
    the local test mode. Raises PshardError (INVALID_ARGUMENT) naming the
    variable for any other value."""
    value = os.environ.get("PSHARD_DEVICE", "")
    if value == "":
        return "cpu"
    if value == "cpu" or re.fullmatch(r"cuda:(0|[1-9][0-9]{0,3})", value):
        return value
    raise PshardError("pshard.device", _capi.INVALID_ARGUMENT,
                      f"PSHARD_DEVICE is {value!r}; expected cpu or cuda:N")
