"""ctypes binding of libpshard's C API (worker/api/pshard.h).

One module owns the library handle and the prototypes; every call goes
through `check`, which turns a result code into a PshardError carrying
pshardGetLastError()'s text. Pure Python: the same files serve every CPython
>= 3.9.
"""

import ctypes
import operator
import os

SUCCESS = 0
INVALID_ARGUMENT = 1
INVALID_USAGE = 2
INTERNAL_ERROR = 3
TIMEOUT = 4
UNAVAILABLE = 5
ABORTED = 6
NOT_FOUND = 7
DATA_LOSS = 8

FLOAT32 = 0
BFLOAT16 = 1
HOST_MEMORY = 0
CUDA_MEMORY = 1

REDUCE_BROADCAST = 0
ALLREDUCE_BROADCAST = 1

API_VERSION = 10

_LIBRARY_NAME = "libpshard.so"


class PshardError(RuntimeError):
    """A failed libpshard call: `code` is the pshardResult_t, the message
    pshardGetLastError()'s text."""

    def __init__(self, call, code, message):
        super().__init__(f"{call}: {message}")
        self.call = call
        self.code = code
        self.message = message


def integer(what, value, bits=64):
    """`value` as the signed `bits`-bit integer a C argument takes: an
    integer (Python's, numpy's, an integer tensor of one element), not a
    bool. TypeError or ValueError naming the argument `what`; the library
    checks the range that matters."""
    try:
        if isinstance(value, bool):
            raise TypeError
        number = operator.index(value)
    except TypeError:
        raise TypeError(f"{what}: an integer, got {value!r}") from None
    if not -2**(bits - 1) <= number < 2**(bits - 1):
        raise ValueError(f"{what}: {number} is outside the {bits}-bit range")
    return number


def real(what, value):
    """`value` as the double a C argument takes: a real number (an int,
    float, numpy scalar or one-element tensor), not a bool or a string.
    TypeError naming the argument `what`; the library checks the range."""
    try:
        if isinstance(value, (bool, str, bytes, bytearray)):
            raise TypeError
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{what}: a number, got {value!r}") from None


def _candidates():
    """Where libpshard.so may be, first match wins: $PSHARD_LIBRARY; next to
    this package (an installed copy, tools/install_python.sh); the repository
    tree this package sits in (Bazel runfiles: worker/api/libpshard.so; a
    checkout after `bazel build //worker/api:libpshard.so`: bazel-bin/...)."""
    explicit = os.environ.get("PSHARD_LIBRARY")
    if explicit:
        yield explicit
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, _LIBRARY_NAME)
    root = os.path.dirname(os.path.dirname(here))
    yield os.path.join(root, "worker", "api", _LIBRARY_NAME)
    yield os.path.join(root, "bazel-bin", "worker", "api", _LIBRARY_NAME)


def _load():
    tried = []
    for path in _candidates():
        if os.path.exists(path):
            return ctypes.CDLL(path)
        tried.append(path)
    raise ImportError(
        "libpshard.so not found (set PSHARD_LIBRARY to its path); looked in: "
        + ", ".join(tried))


_lib = _load()

_c_int_p = ctypes.POINTER(ctypes.c_int)
_c_int64_p = ctypes.POINTER(ctypes.c_int64)
_session_p = ctypes.POINTER(ctypes.c_void_p)

_PROTOTYPES = {
    "pshardGetErrorString": (ctypes.c_char_p, [ctypes.c_int]),
    "pshardGetLastError": (ctypes.c_char_p, []),
    "pshardGetVersion": (ctypes.c_int, []),
    "pshardSessionOpen": (ctypes.c_int, [_session_p]),
    "pshardSessionRank": (ctypes.c_int, [ctypes.c_void_p, _c_int_p]),
    "pshardSessionWorldSize": (ctypes.c_int, [ctypes.c_void_p, _c_int_p]),
    "pshardSetOptimizer": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p]),
    "pshardSetBucketCapMb": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_double]),
    "pshardSetCommMode": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "pshardSetOverlapParamBroadcast": (ctypes.c_int, [ctypes.c_void_p,
                                                      ctypes.c_int]),
    "pshardGetOverlapParamBroadcast": (ctypes.c_int, [ctypes.c_void_p,
                                                      _c_int_p]),
    "pshardSetPrecision": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int,
                                          ctypes.c_int]),
    "pshardGetPrecision": (ctypes.c_int, [ctypes.c_void_p, _c_int_p,
                                          _c_int_p]),
    "pshardSetParameterFromFloat32": (ctypes.c_int, [
        ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_float),
        ctypes.c_int64]),
    "pshardWaitParameter": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "pshardSetCudaDevice": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int,
                                           ctypes.c_void_p]),
    "pshardRegisterParameter": (ctypes.c_int, [
        ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, _c_int64_p,
        ctypes.c_int, ctypes.c_int, _c_int_p]),
    "pshardPrepare": (ctypes.c_int, [ctypes.c_void_p]),
    "pshardNumParameters": (ctypes.c_int, [ctypes.c_void_p, _c_int_p]),
    "pshardGetParameter": (ctypes.c_int, [
        ctypes.c_void_p, ctypes.c_int, _session_p, _c_int64_p]),
    "pshardGetGradient": (ctypes.c_int, [
        ctypes.c_void_p, ctypes.c_int, _session_p, _c_int64_p]),
    "pshardGradientReady": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int]),
    "pshardFinishStep": (ctypes.c_int, [ctypes.c_void_p]),
    "pshardSetHyperParameters": (ctypes.c_int, [
        ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p]),
    "pshardGetHyperParameters": (ctypes.c_int, [
        ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]),
    "pshardSetLearningRate": (ctypes.c_int, [
        ctypes.c_void_p, ctypes.c_int, ctypes.c_double]),
    "pshardGetLearningRate": (ctypes.c_int, [
        ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_double)]),
    "pshardParameterGroup": (ctypes.c_int, [
        ctypes.c_void_p, ctypes.c_int, _c_int_p]),
    "pshardStepsFinished": (ctypes.c_int, [ctypes.c_void_p, _c_int64_p]),
    "pshardLastGradNorm": (ctypes.c_int, [
        ctypes.c_void_p, ctypes.POINTER(ctypes.c_double), _c_int_p]),
    "pshardAverageLoss": (ctypes.c_int, [
        ctypes.c_void_p, ctypes.c_double, ctypes.POINTER(ctypes.c_double)]),
    "pshardReportProgress": (ctypes.c_int, [
        ctypes.c_void_p, ctypes.c_int64, ctypes.c_double, ctypes.c_int64]),
    "pshardNumBuckets": (ctypes.c_int, [ctypes.c_void_p, _c_int_p]),
    "pshardOwnedBuckets": (ctypes.c_int, [
        ctypes.c_void_p, _c_int_p, ctypes.c_int, _c_int_p]),
    "pshardExportOptimizerState": (ctypes.c_int, [ctypes.c_void_p,
                                                  _session_p]),
    "pshardOptimizerStateNumEntries": (ctypes.c_int, [ctypes.c_void_p,
                                                      _c_int_p]),
    "pshardOptimizerStateGetEntry": (ctypes.c_int, [
        ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
        ctypes.POINTER(ctypes.c_char_p), _c_int64_p,
        ctypes.POINTER(ctypes.POINTER(ctypes.c_float)), _c_int64_p]),
    "pshardOptimizerStateGetEntrySlice": (ctypes.c_int, [
        ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p),
        ctypes.POINTER(ctypes.c_char_p), _c_int64_p,
        ctypes.POINTER(ctypes.POINTER(ctypes.c_float)), _c_int64_p,
        _c_int64_p, _c_int64_p]),
    "pshardOptimizerStateSpec": (ctypes.c_int, [
        ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p)]),
    "pshardOptimizerStateFree": (ctypes.c_int, [ctypes.c_void_p]),
    "pshardImportOptimizerState": (ctypes.c_int, [
        ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
        ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p),
        _c_int64_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_float)),
        _c_int64_p]),
    "pshardImportOptimizerStateSlices": (ctypes.c_int, [
        ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int,
        ctypes.POINTER(ctypes.c_char_p), ctypes.POINTER(ctypes.c_char_p),
        _c_int64_p, _c_int64_p, ctypes.POINTER(ctypes.POINTER(ctypes.c_float)),
        _c_int64_p]),
    "pshardSaveCheckpoint": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int64]),
    "pshardSaveCheckpointWithState": (ctypes.c_int, [
        ctypes.c_void_p, ctypes.c_int64, ctypes.c_char_p, ctypes.c_int64]),
    "pshardGetLoadedProgramState": (ctypes.c_int, [
        ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p),
        _c_int64_p, _c_int_p]),
    "pshardLoadCheckpoint": (ctypes.c_int, [
        ctypes.c_void_p, ctypes.c_char_p, _c_int64_p]),
    "pshardBroadcast": (ctypes.c_int, [
        ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int]),
    "pshardBarrier": (ctypes.c_int, [ctypes.c_void_p]),
    "pshardSessionClose": (ctypes.c_int, [ctypes.c_void_p]),
}

for _name, (_restype, _argtypes) in _PROTOTYPES.items():
    _function = getattr(_lib, _name)
    _function.restype = _restype
    _function.argtypes = _argtypes

if _lib.pshardGetVersion() != API_VERSION:
    raise ImportError(
        f"libpshard.so has API version {_lib.pshardGetVersion()}, this "
        f"package needs {API_VERSION}")


def check(call, *args):
    """Calls lib.<call>(*args); raises PshardError unless it succeeded."""
    code = getattr(_lib, call)(*args)
    if code != SUCCESS:
        message = _lib.pshardGetLastError().decode("utf-8", "replace")
        raise PshardError(call, code, message)


lib = _lib
