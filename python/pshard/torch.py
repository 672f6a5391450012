"""ShardedOptimizer: pshard's sharded optimizer for a PyTorch model, in place
of DDP's gradient averaging plus a torch optimizer.

Each rank keeps the whole model; pshard holds the parameters and gradients in
flat bucket buffers (each parameter's `.data` and `.grad` are re-pointed into
them, as DDP's gradient_as_bucket_view), and optimizer state only for the
buckets this rank owns. A post-accumulate hook on every parameter's
AccumulateGrad node (what DDP's reducer hooks) hands each gradient over as
soon as it is final, so a bucket is reduced to its owner while backward
still runs; step() waits for the owners' updates to come back. Do not wrap
the model in DistributedDataParallel. The first step() re-packs the
buffers (in the order gradients became ready): tensors sharing the
parameters' or gradients' memory from before it (p.detach(),
model.state_dict()) hold other values after it (and, for CUDA tensors,
point into freed memory); take them later, or clone them.

Rules (see worker/api/pshard.h): every rank builds the same model (the
optimizer starts every rank from rank 0's parameters and buffers, as DDP
does), runs one backward per step — or, to
accumulate gradients, several, all but the last inside `with opt.no_sync():`
(DDP's no_sync) — and calls step() every step. float32 or bfloat16
parameters (mixed precision: see `param_dtype`), all on the CPU (reduced
over Gloo) or all on one CUDA device (over NCCL, with pshard's fused CUDA
optimizer, on the stream current when ShardedOptimizer was made: each
gradient's reduction first waits for the caller's current stream, and
step() and the forward waits of overlap_param_broadcast leave the current
stream ordered after what they waited for, on the device).
state_dict() returns CPU tensors there too.
"""

import contextlib
import ctypes
import json

import torch

import pshard
from pshard import _capi
from pshard._capi import PshardError

__all__ = ["ShardedOptimizer"]

_COMM_MODES = {
    "reduce_broadcast": _capi.REDUCE_BROADCAST,
    "allreduce_broadcast": _capi.ALLREDUCE_BROADCAST,
}

# torch dtype ↔ pshardDataType_t, and the ctypes element of each.
_DTYPES = {torch.float32: _capi.FLOAT32, torch.bfloat16: _capi.BFLOAT16}
_TORCH_DTYPES = {code: dtype for dtype, code in _DTYPES.items()}
_ELEMENTS = {torch.float32: ctypes.c_float, torch.bfloat16: ctypes.c_uint16}


def _named_parameters(model):
    """The parameters that require gradients, checked: float32 or bfloat16,
    all on the CPU or all on one CUDA device."""
    if isinstance(model, torch.nn.Module):
        named = list(model.named_parameters())
    else:
        named = list(model)
        if not all(isinstance(item, tuple) and len(item) == 2
                   for item in named):
            raise TypeError("model: a torch.nn.Module or (name, parameter) "
                            "pairs")
    named = [(name, p) for name, p in named if p.requires_grad]
    if not named:
        raise ValueError("model: no parameter requires a gradient")
    first_name, first = named[0]
    names = {}  # id -> the first name of each parameter
    for name, p in named:
        if names.setdefault(id(p), name) != name:
            # Two bucket slots for one tensor would step it twice.
            raise ValueError(f"parameter {name} is {names[id(p)]}, given "
                             "twice (a shared parameter goes in once, as "
                             "model.named_parameters() gives it)")
        if p.dtype not in _DTYPES:
            raise ValueError(f"parameter {name}: dtype {p.dtype} is not "
                             "supported (torch.float32 or torch.bfloat16)")
        if p.device.type not in ("cpu", "cuda"):
            raise ValueError(f"parameter {name}: device {p.device} is not "
                             "supported (CPU or CUDA tensors)")
        if p.device != first.device:
            raise ValueError(f"parameter {name} is on {p.device}, "
                             f"{first_name} on {first.device}: every "
                             "parameter must be on one device")
    return named


# The array-interface type of each dtype's elements. bfloat16 has none: its
# buckets are seen as int16 and viewed as bfloat16.
_TYPESTRS = {torch.float32: "<f4", torch.bfloat16: "<i2"}

# The host memory one broadcast of parameters or buffers stages at most
# (a larger tensor goes alone).
_BROADCAST_CHUNK_BYTES = 64 << 20


class _CudaBuffer:
    """pshard's device memory as __cuda_array_interface__ (version 2: no
    stream; pshard orders its own stream against the program's)."""

    def __init__(self, pointer, numel, dtype):
        self.__cuda_array_interface__ = {
            "shape": (numel,), "typestr": _TYPESTRS[dtype],
            "data": (pointer, False), "version": 2}


def _require_numpy():
    """torch reads __cuda_array_interface__ through numpy: without it
    torch.as_tensor fails later, and less clearly."""
    try:
        import numpy  # noqa: F401 (only its presence matters)
    except ImportError as e:
        raise RuntimeError(
            "pshard.torch: parameters on CUDA need numpy (torch wraps "
            "pshard's device buffers through __cuda_array_interface__, "
            f"which it reads with numpy): {e}") from e


def _view(pointer, numel, shape, dtype=torch.float32, device=None):
    """A tensor of `dtype` over pshard's memory (no copy): the buffer
    protocol over a ctypes array at the C pointer, or for a CUDA `device`
    __cuda_array_interface__."""
    if device is not None and device.type == "cuda":
        flat = torch.as_tensor(_CudaBuffer(pointer, numel, dtype),
                               device=device)
        return flat.view(dtype).view(shape)
    array = (_ELEMENTS[dtype] * numel).from_address(pointer)
    return torch.frombuffer(array, dtype=dtype).view(shape)


def _hyper_parameter(key, value):
    """A param_groups value as pshard takes it: a float, or a tuple of
    floats for "betas" (a torch scheduler may write 0-d tensors)."""
    if key == "betas":
        return tuple(_capi.real(key, b) for b in value)
    return _capi.real(key, value)


def _check_dtype(what, dtype):
    if dtype is not None and dtype not in _DTYPES:
        raise ValueError(f"{what}: torch.float32, torch.bfloat16 or None, "
                         f"got {dtype!r}")


class _StateEntries:
    """Optimizer state entries as pshardImportOptimizerStateSlices takes
    them: parallel lists, and the contiguous CPU tensors the pointers point
    into (kept alive with them)."""

    def __init__(self):
        self.names, self.keys, self.steps = [], [], []
        self.offsets, self.pointers, self.numels = [], [], []
        self._tensors = []

    def add(self, name, key, step, offset, tensor):
        """One entry; `tensor` None for a parameter without state (its
        step only, key "step")."""
        self.names.append(name.encode())
        self.keys.append(key.encode())
        self.steps.append(step)
        self.offsets.append(offset)
        if tensor is None:
            self.pointers.append(ctypes.POINTER(ctypes.c_float)())
            self.numels.append(0)
            return
        tensor = tensor.detach().cpu().contiguous()
        self._tensors.append(tensor)
        self.pointers.append(ctypes.cast(tensor.data_ptr(),
                                         ctypes.POINTER(ctypes.c_float)))
        self.numels.append(tensor.numel())


class ShardedOptimizer(torch.optim.Optimizer):
    """ShardedOptimizer(model, optimizer={...}, bucket_cap_mb=25,
    comm_mode="reduce_broadcast", session=None,
    overlap_param_broadcast=None, param_dtype=None, reduce_dtype=None,
    broadcast_buffers=True)

    `optimizer` is OptimizerSpec as a dict or its JSON text, protobuf's JSON
    mapping: {"kind": "ADAM", "hyper_parameters": {"lr": 1e-3, "betas":
    [0.9, 0.999]}, "param_groups": [{"params": ["*.bias"],
    "hyper_parameters": {"weight_decay": 0}}]} (groups select parameters by
    their names in `model.named_parameters()`, shell globs). `session`:
    pshard.init()'s when omitted.

    `overlap_param_broadcast` (the job spec's field of that name when None,
    off in the local test mode): step() returns without waiting for the
    owners' updated parameters, and the next forward waits for each
    module's own parameters just before that module runs (a forward
    pre-hook on every module that holds parameters directly), so it starts
    on the first layers it really calls while later ones are still
    arriving — whatever order the modules were registered or bucketed in.
    The parameters are the same as without. `model` must then be a
    torch.nn.Module. A parameter read outside its own module's forward
    (a functional call on a child's weight, the model's state_dict, an
    evaluation of your own) needs wait_parameters() first; state_dict(),
    pshard.checkpoint's saves and closing the session wait themselves.

    Mixed precision (the job spec's `precision` when None; torch.float32
    or torch.bfloat16): `param_dtype` is the dtype the model computes in —
    its parameters are re-pointed into bucket buffers of that dtype, on
    every rank (a float32 model becomes bfloat16, as FSDP's
    MixedPrecision(param_dtype=...) casts it) — and `reduce_dtype` the one
    gradients are averaged in. The owner of a bucket keeps float32 master
    weights, started from the model's values before the cast, and float32
    optimizer state, steps those and broadcasts the update rounded to
    param_dtype (half the bytes in bfloat16). Gradients arrive in the
    parameters' dtype, as autograd makes them; when reduce_dtype differs
    they are converted into the buckets as each becomes final.

    `broadcast_buffers`, as DistributedDataParallel's (and on by default,
    as there): the model's buffers (batch norm's running statistics) are
    copied from rank 0 to every rank before a forward of `model` — before
    the first, and before each one that follows a forward with gradients
    enabled outside no_sync(), as DDP's pre-forward sync — so every rank
    evaluates and saves rank 0's. Only for a torch.nn.Module with buffers,
    on more than one rank.

    It is a torch.optim.Optimizer, so torch's schedulers drive it:
    `param_groups[0]` is the spec's default group (the parameters no glob
    matches), `param_groups[i + 1]` the spec's `param_groups[i]`, each with
    its "params" and the group's values in the spec: "lr" (the base rate
    its lr_schedule scales, if it has one; the job's progress shows the
    scheduled rate), "weight_decay" and those of the optimizer's kind among
    "momentum", "betas", "eps", "alpha" and "lr_decay" — the ones that may
    change while training. A value written there (by a scheduler's step(),
    such as OneCycleLR's lr and momentum or betas, or by hand) replaces the
    group's from the next step on ("lr" its lr_schedule too): set it
    between steps — after step(), or before the forward — since buckets
    step during backward; a change made after a step's first gradient was
    handed over raises at that step() (which itself ran with the earlier
    value). A value pshard refuses (out of the job spec's range; momentum
    for a group whose spec momentum is 0, which keeps no momentum buffer)
    raises ValueError at the next step's first gradient, and the group
    keeps what it had. The spec's other hyper-parameters (nesterov,
    amsgrad, ...) are fixed.
    """

    def __init__(self, model, optimizer, bucket_cap_mb=25,
                 comm_mode="reduce_broadcast", session=None,
                 overlap_param_broadcast=None, param_dtype=None,
                 reduce_dtype=None, broadcast_buffers=True):
        if comm_mode not in _COMM_MODES:
            raise ValueError(f"comm_mode: one of {sorted(_COMM_MODES)}, got "
                             f"{comm_mode!r}")
        if overlap_param_broadcast not in (None, True, False):
            raise TypeError("overlap_param_broadcast: None, True or False, "
                            f"got {overlap_param_broadcast!r}")
        if broadcast_buffers not in (True, False):
            raise TypeError("broadcast_buffers: True or False, got "
                            f"{broadcast_buffers!r}")
        _check_dtype("param_dtype", param_dtype)
        _check_dtype("reduce_dtype", reduce_dtype)
        bucket_cap_mb = _capi.real("bucket_cap_mb", bucket_cap_mb)
        if isinstance(optimizer, dict):
            optimizer = json.dumps(optimizer)
        if not isinstance(optimizer, str):
            raise TypeError("optimizer: a dict or a JSON string of "
                            "OptimizerSpec")
        try:
            optimizer_spec = json.loads(optimizer)
        except json.JSONDecodeError as e:
            raise ValueError(f"optimizer: not JSON ({e})") from None
        if session is not None and not isinstance(session, pshard.Session):
            raise TypeError("session: a pshard.Session (or None for "
                            f"pshard.init()'s), got {type(session).__name__}")
        self._session = session if session is not None else pshard.init()
        self._named = _named_parameters(model)
        self._device = self._named[0][1].device
        self._spec = {"optimizer": optimizer_spec,
                      "bucket_cap_mb": bucket_cap_mb,
                      "comm_mode": comm_mode}
        handle = self._session.handle
        _capi.check("pshardSetOptimizer", handle, optimizer.encode())
        _capi.check("pshardSetBucketCapMb", handle, bucket_cap_mb)
        _capi.check("pshardSetCommMode", handle, _COMM_MODES[comm_mode])
        if overlap_param_broadcast is not None:
            _capi.check("pshardSetOverlapParamBroadcast", handle,
                        int(overlap_param_broadcast))
        enabled = ctypes.c_int()
        _capi.check("pshardGetOverlapParamBroadcast", handle,
                    ctypes.byref(enabled))
        self._overlap = bool(enabled.value)
        self._param_dtype, self._reduce_dtype = self._set_precision(
            param_dtype, reduce_dtype)
        # Autograd makes gradients in the parameters' dtype: they are the
        # bucket views only when the buckets hold that dtype too.
        self._grads_in_buckets = self._param_dtype == self._reduce_dtype
        if self._overlap and not isinstance(model, torch.nn.Module):
            raise TypeError("overlap_param_broadcast needs model to be a "
                            "torch.nn.Module (its forward pre-hooks wait for "
                            "the parameters); pass overlap_param_broadcast="
                            "False for (name, parameter) pairs")
        memory = _capi.HOST_MEMORY
        # CUDA: the stream pshard orders its collectives after (autograd
        # accumulates gradients on it: the AccumulateGrad nodes are made
        # below, under it).
        self._stream = None
        if self._device.type == "cuda":
            _require_numpy()
            memory = _capi.CUDA_MEMORY
            self._stream = torch.cuda.current_stream(self._device)
            _capi.check("pshardSetCudaDevice", handle, self._device.index,
                        ctypes.c_void_p(self._stream.cuda_stream or None))
        if self._session.world_size > 1:
            # As DDP at construction: every rank starts from rank 0's
            # parameters and buffers, however it initialised its own.
            states = [p for _, p in self._named]
            if isinstance(model, torch.nn.Module):
                states += list(model.buffers())
            self._broadcast_from_rank_0(states)
        for name, p in self._named:
            shape = (ctypes.c_int64 * max(1, p.dim()))(*p.shape)
            index = ctypes.c_int()
            _capi.check("pshardRegisterParameter", handle, name.encode(),
                        p.dim(), shape, _DTYPES[self._param_dtype],
                        memory, ctypes.byref(index))
        _capi.check("pshardPrepare", handle)
        with torch.no_grad():
            self._point_into_buckets(copy_values=True)
        if self._stream is not None:
            # The model's own parameter memory is free now: back to the
            # device, for the first step's re-pack to allocate.
            torch.cuda.empty_cache()
        self._ready = [False] * len(self._named)
        self._no_sync = False
        # The AccumulateGrad nodes must stay alive for their hooks to run
        # (DDP's reducer keeps them too).
        self._grad_accumulators = []
        for i, (_, p) in enumerate(self._named):
            accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
            accumulator.register_hook(self._make_hook(i))
            self._grad_accumulators.append(accumulator)
        self._forward_hooks = []
        if self._overlap:
            self._register_forward_waits(model)
        # DDP's require_forward_param_sync: whether the next forward copies
        # rank 0's buffers.
        self._sync_buffers_next = True
        # As DDP, only a model with buffers when it is wrapped syncs them.
        if (broadcast_buffers and isinstance(model, torch.nn.Module)
                and self._session.world_size > 1
                and any(True for _ in model.buffers())):
            self._forward_hooks.append(
                model.register_forward_pre_hook(self._sync_buffers))
            self._forward_hooks.append(
                model.register_forward_hook(self._after_forward))
        self._session._on_close.append(self._detach)
        self._init_param_groups()

    def _init_param_groups(self):
        """torch.optim.Optimizer's param_groups (see the class
        docstring)."""
        handle = self._session.handle
        spec = self._spec["optimizer"]
        extra = spec.get("param_groups", spec.get("paramGroups", []))
        # The values pshard steps each group with, as last set.
        self._applied = []
        for group in range(-1, len(extra)):
            text = ctypes.c_char_p()
            _capi.check("pshardGetHyperParameters", handle, group,
                        ctypes.byref(text))
            self._applied.append({
                key: _hyper_parameter(key, value)
                for key, value in json.loads(text.value.decode()).items()})
        members = [[] for _ in self._applied]
        for i, (_, p) in enumerate(self._named):
            group = ctypes.c_int()
            _capi.check("pshardParameterGroup", handle, i, ctypes.byref(group))
            members[group.value + 1].append(p)
        torch.optim.Optimizer.__init__(
            self, [dict(applied, params=params)
                   for params, applied in zip(members, self._applied)],
            dict(self._applied[0]))
        # Whether this step's values are set (before its first gradient is
        # handed over).
        self._hyper_parameters_set = False

    def add_param_group(self, param_group):
        if hasattr(self, "_hyper_parameters_set"):
            raise NotImplementedError(
                "ShardedOptimizer's parameter groups are the optimizer "
                "spec's param_groups, fixed when it is made")
        super().add_param_group(param_group)

    def _changed_hyper_parameters(self, g):
        """Group g's settable values that differ from those pshard steps
        it with: {key: value}."""
        group = self.param_groups[g]
        changed = {}
        for key, applied in self._applied[g].items():
            try:
                value = _hyper_parameter(key, group[key])
            except (TypeError, ValueError):
                kind = "two numbers" if key == "betas" else "a number"
                raise TypeError(f"param_groups[{g}][{key!r}] must be {kind}, "
                                f"got {group[key]!r}") from None
            if value != applied:
                changed[key] = value
        return changed

    def _set_hyper_parameters(self):
        """param_groups' changed values to pshard: once a step, before its
        first gradient is handed over."""
        if self._hyper_parameters_set:
            return
        self._push_hyper_parameters()
        self._hyper_parameters_set = True

    def _push_hyper_parameters(self):
        """Hands pshard each group's changed values; ValueError (the
        group's values not taken, the earlier groups' taken) for one it
        refuses."""
        for g in range(len(self.param_groups)):
            changed = self._changed_hyper_parameters(g)
            if not changed:
                continue
            try:
                _capi.check("pshardSetHyperParameters", self._session.handle,
                            g - 1, json.dumps(changed).encode())
            except PshardError as e:
                if e.code != _capi.INVALID_ARGUMENT:
                    raise
                raise ValueError(f"param_groups[{g}]: {e.message}") from None
            self._applied[g].update(changed)

    def _set_precision(self, param_dtype, reduce_dtype):
        """The session's precision with the arguments that are not None
        over it (the job spec's by default); returns it as torch dtypes."""
        handle = self._session.handle
        param, reduce = ctypes.c_int(), ctypes.c_int()
        _capi.check("pshardGetPrecision", handle, ctypes.byref(param),
                    ctypes.byref(reduce))
        if param_dtype is not None or reduce_dtype is not None:
            if param_dtype is not None:
                param.value = _DTYPES[param_dtype]
            if reduce_dtype is not None:
                reduce.value = _DTYPES[reduce_dtype]
            _capi.check("pshardSetPrecision", handle, param.value,
                        reduce.value)
        return _TORCH_DTYPES[param.value], _TORCH_DTYPES[reduce.value]

    @property
    def param_dtype(self):
        """The dtype of the model's parameters (see the class's
        description)."""
        return self._param_dtype

    @property
    def reduce_dtype(self):
        """The dtype gradients are averaged in."""
        return self._reduce_dtype

    def _register_forward_waits(self, model):
        """A forward pre-hook on every module that holds parameters of its
        own (recurse=False): it waits for them (in registration order within
        the module; cheap once arrived), so that each module waits when the
        forward really reaches it. A parameter shared by several modules is
        waited for by each."""
        index = {id(p): i for i, (_, p) in enumerate(self._named)}
        for module in model.modules():
            own = [index[id(p)] for p in module.parameters(recurse=False)
                   if id(p) in index]
            if own:
                self._forward_hooks.append(module.register_forward_pre_hook(
                    self._make_forward_wait(own)))

    def _sync_buffers(self, module, inputs):
        """Forward pre-hook of the model (broadcast_buffers): rank 0's
        buffers (their bytes, staged in host memory), when DDP would sync
        them."""
        del inputs
        handle = self._session._handle
        if handle is None or not self._sync_buffers_next:
            return
        # Looked up each time: a module may replace a buffer.
        self._broadcast_from_rank_0(list(module.buffers()))

    def _broadcast_from_rank_0(self, tensors):
        """Every rank's `tensors` take rank 0's values: their bytes in one
        broadcast per _BROADCAST_CHUNK_BYTES (a larger tensor alone),
        staged in host memory. Every rank passes tensors of the same sizes
        (PshardError otherwise, on every rank, nothing copied)."""
        chunk, chunk_bytes = [], 0
        for t in tensors:
            size = t.numel() * t.element_size()
            if chunk and chunk_bytes + size > _BROADCAST_CHUNK_BYTES:
                self._broadcast_chunk_from_rank_0(chunk)
                chunk, chunk_bytes = [], 0
            chunk.append(t)
            chunk_bytes += size
        if chunk:
            self._broadcast_chunk_from_rank_0(chunk)

    def _broadcast_chunk_from_rank_0(self, chunk):
        """One broadcast of `chunk`'s bytes from rank 0."""
        with torch.no_grad():
            flat = torch.cat([t.detach().reshape(-1).cpu().view(torch.uint8)
                              for t in chunk])
            _capi.check("pshardBroadcast", self._session.handle,
                        ctypes.c_void_p(flat.data_ptr()), flat.numel(), 0)
            if self._session.rank == 0:
                return
            offset = 0
            for t in chunk:
                size = t.numel() * t.element_size()
                # A copy of the bytes, aligned for t's dtype.
                t.copy_(flat[offset:offset + size].clone().view(
                    t.dtype).view(t.shape))
                offset += size

    def _after_forward(self, module, inputs, output):
        """Forward hook of the model (broadcast_buffers): as DDP, the next
        forward syncs the buffers only after one that will reduce
        gradients (grad enabled, outside no_sync())."""
        del module, inputs, output
        self._sync_buffers_next = torch.is_grad_enabled() and not self._no_sync

    def _make_forward_wait(self, indices):
        def wait(module, inputs):
            del module, inputs
            handle = self._session._handle
            if handle is None:
                return
            for i in indices:
                _capi.check("pshardWaitParameter", handle, i)
            self._order_current_stream()
        return wait

    def _other_current_stream(self):
        """CUDA: the caller's current stream when it is not pshard's own
        (the one current when this optimizer was made); None otherwise."""
        if self._stream is None:
            return None
        current = torch.cuda.current_stream(self._device)
        return None if current == self._stream else current

    def _order_current_stream(self):
        """CUDA: pshard orders what the caller reads (the updates, the
        broadcasts its waits asked for) on its own stream; the caller's
        current stream waits for that one."""
        current = self._other_current_stream()
        if current is not None:
            current.wait_stream(self._stream)

    @property
    def overlap_param_broadcast(self):
        """Whether step() leaves the parameter broadcasts to the next
        forward (see the class's description)."""
        return self._overlap

    def wait_parameters(self):
        """Returns once every parameter holds the last step's update: before
        reading the parameters outside a forward (the model's state_dict, an
        evaluation that bypasses the modules' forwards). Immediate without
        overlap_param_broadcast."""
        handle = self._session.handle
        for i in range(len(self._named)):
            _capi.check("pshardWaitParameter", handle, i)
        self._order_current_stream()

    def _point_into_buckets(self, copy_values):
        """Re-points every parameter's .data (and .grad, when the buckets
        hold the parameters' dtype) into the buckets (after the first step
        too: it may have re-packed them). copy_values: the model's values
        go in first, as float32, so that the owners' masters start from
        them exactly."""
        handle = self._session.handle
        self._params = []
        self._grads = []
        for i, (_, p) in enumerate(self._named):
            pointer = ctypes.c_void_p()
            numel = ctypes.c_int64()
            _capi.check("pshardGetParameter", handle, i, ctypes.byref(pointer),
                        ctypes.byref(numel))
            values = _view(pointer.value, numel.value, p.shape,
                           self._param_dtype, self._device)
            _capi.check("pshardGetGradient", handle, i, ctypes.byref(pointer),
                        ctypes.byref(numel))
            grad = _view(pointer.value, numel.value, p.shape,
                         self._reduce_dtype, self._device)
            old_grad = p.grad
            if copy_values:
                start = p.data.detach().to(
                    device="cpu", dtype=torch.float32).contiguous()
                _capi.check("pshardSetParameterFromFloat32", handle, i,
                            ctypes.cast(start.data_ptr(),
                                        ctypes.POINTER(ctypes.c_float)),
                            start.numel())
                grad.copy_(old_grad if old_grad is not None else
                           torch.zeros_like(grad))
                # A .grad of the old dtype may not sit beside .data of the
                # new one.
                p.grad = None
            p.data = values
            if self._grads_in_buckets:
                p.grad = grad
            elif copy_values and old_grad is not None:
                p.grad = old_grad.to(self._param_dtype)
            self._params.append(values)
            self._grads.append(grad)

    def _make_hook(self, i):
        def hook(grad_inputs, grad_outputs):
            self._gradient_final(i)
        return hook

    def _gradient_final(self, i):
        if self._session._handle is None:
            return
        name, p = self._named[i]
        if self._ready[i]:
            raise PshardError(
                "pshardGradientReady", _capi.INVALID_USAGE,
                f"the gradient of {name} became final twice in one step: one "
                "backward per step, or accumulate the others inside "
                "`with optimizer.no_sync():`")
        if not self._grads_in_buckets:
            # Autograd accumulates into p.grad; it travels converted.
            if not self._no_sync:
                self._hand_over(i)
            return
        self._grad_into_bucket(i)
        if self._no_sync:
            # Accumulated in the bucket in place; nothing travels yet.
            return
        self._mark_ready(i)

    def _grad_into_bucket(self, i):
        """Gradients in the buckets: when zero_grad(set_to_none=True) (torch
        2's default) or an assignment replaced parameter i's bucket view,
        its values go into the view (zeros when it has none, not the last
        step's) and .grad is the view again."""
        p = self._named[i][1]
        if p.grad is self._grads[i]:
            return
        with torch.no_grad():
            if p.grad is None:
                self._grads[i].zero_()
            else:
                self._grads[i].copy_(p.grad)
        p.grad = self._grads[i]

    def _hand_over(self, i):
        """Gradients not in the buckets: parameter i's (zero when it has
        none), converted into its bucket view, is ready."""
        p = self._named[i][1]
        with torch.no_grad():
            if p.grad is None:
                self._grads[i].zero_()
            else:
                self._grads[i].copy_(p.grad)
        self._mark_ready(i)

    def _mark_ready(self, i):
        """Parameter i's bucket gradient is final. On CUDA pshard orders its
        reduction after its own stream: first that stream waits for the
        caller's current one, where autograd or the copies above wrote it."""
        self._set_hyper_parameters()
        current = self._other_current_stream()
        if current is not None:
            self._stream.wait_stream(current)
        self._ready[i] = True
        _capi.check("pshardGradientReady", self._session.handle, i)

    @contextlib.contextmanager
    def no_sync(self):
        """As DistributedDataParallel.no_sync(): gradients of backward passes
        inside the block accumulate in the buckets (autograd adds into each
        parameter's .grad in place) and nothing is communicated; the next
        backward outside it adds its own gradients and hands every bucket
        over, so step() reduces the sum once:

            opt.zero_grad()
            for micro in batches[:-1]:
                with opt.no_sync():
                    (loss_fn(model(micro)) / len(batches)).backward()
            (loss_fn(model(batches[-1])) / len(batches)).backward()
            opt.step()

        As with DDP, scale each micro-batch's loss by 1/N yourself, so that
        the step sees the mean over the N micro-batches (one batch N times
        larger)."""
        previous = self._no_sync
        self._no_sync = True
        try:
            yield
        finally:
            self._no_sync = previous

    def zero_grad(self, set_to_none=False):
        """Zeroes the gradients in place (when they are bucket views they
        must stay in the buckets, so set_to_none is then ignored)."""
        with torch.no_grad():
            if self._grads_in_buckets:
                for grad in self._grads:
                    grad.zero_()
                return
            for _, p in self._named:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.zero_()

    def step(self, closure=None):
        """Ends the step: every rank holds the updated parameters on return.
        Parameters that got no gradient this step count as ready with what
        their buffer holds: zero after either zero_grad (set_to_none too),
        the sum of the no_sync backward passes otherwise."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        handle = self._session.handle
        for i, ready in enumerate(self._ready):
            if ready:
                continue
            if self._grads_in_buckets:
                self._grad_into_bucket(i)
                self._mark_ready(i)
            else:
                self._hand_over(i)
        first = self.steps_finished == 0
        self._ready = [False] * len(self._named)
        changed = [(g, key) for g in range(len(self.param_groups))
                   for key in self._changed_hyper_parameters(g)]
        self._hyper_parameters_set = False
        try:
            _capi.check("pshardFinishStep", handle)
            self._order_current_stream()
        finally:
            # The first step re-packs the buckets, a failed one too: the
            # views follow them (the old buffers are gone).
            if first:
                self._point_into_buckets(copy_values=False)
        if changed:
            g, key = changed[0]
            raise RuntimeError(
                f"param_groups[{g}][{key!r}] changed to "
                f"{self.param_groups[g][key]} during step "
                f"{self.steps_finished}, after its first gradient was handed "
                f"over: pshard steps buckets during backward, so this step "
                f"ran with {self._applied[g][key]}. Change it between steps "
                f"(after step() or before the forward, as torch's schedulers "
                f"do); the new value applies from the next step")
        return loss

    @property
    def last_grad_norm(self):
        """The last step's total gradient norm before clipping, as
        torch.nn.utils.clip_grad_norm_ returns it (a float; NaN or inf when a
        gradient was, and the step went on), when the optimizer spec has
        max_grad_norm; None without clipping or before the first step."""
        norm = ctypes.c_double()
        known = ctypes.c_int()
        _capi.check("pshardLastGradNorm", self._session.handle,
                    ctypes.byref(norm), ctypes.byref(known))
        return norm.value if known.value else None

    @property
    def steps_finished(self):
        steps = ctypes.c_int64()
        _capi.check("pshardStepsFinished", self._session.handle,
                    ctypes.byref(steps))
        return steps.value

    def owned_buckets(self):
        """The buckets whose optimizer state this rank holds (after the
        first step)."""
        handle = self._session.handle
        count = ctypes.c_int()
        _capi.check("pshardOwnedBuckets", handle, None, 0, ctypes.byref(count))
        owned = (ctypes.c_int * max(1, count.value))()
        _capi.check("pshardOwnedBuckets", handle, owned, count.value,
                    ctypes.byref(count))
        return list(owned[:count.value])

    def state_dict(self):
        """This rank's shard of the optimizer state, as
        ZeroRedundancyOptimizer's local state: {"state": {parameter name:
        {"step": n, "exp_avg": tensor, ...}}, "rank", "world_size", and the
        spec: "optimizer" (OptimizerSpec), "bucket_cap_mb", "comm_mode"}.
        Only the parameters whose buckets this rank owns, by torch's names
        for the kind (docs/user-guide.md, "Optimizer"); one that keeps no
        state (SGD without momentum) has its "step" alone, which its
        bucket's lr schedule resumes from. The tensors are copies, in
        the parameters' shapes — except under the SHARDED assignment
        policy, where a rank holds a slice of the parameters its ranges cut:
        such an entry also has "offset" (its first element in the flattened
        parameter) and 1-D tensors of the slice's elements. Waits for the
        parameters' updates first (overlap_param_broadcast). As torch's,
        it has "param_groups": each group's values (a scheduler's too) and
        its "params", by name, which load_state_dict() restores; "steps",
        the optimizer steps finished; and before the first step an empty
        "state" (none is made yet: loaded, it starts a fresh optimizer)."""
        if self.steps_finished == 0:
            return {"state": {}, "param_groups": self._group_values(),
                    "steps": 0, "rank": self._session.rank,
                    "world_size": self._session.world_size, **self._spec}
        self.wait_parameters()
        shapes = {name: p.shape for name, p in self._named}
        handle = ctypes.c_void_p()
        _capi.check("pshardExportOptimizerState", self._session.handle,
                    ctypes.byref(handle))
        try:
            count = ctypes.c_int()
            _capi.check("pshardOptimizerStateNumEntries", handle,
                        ctypes.byref(count))
            state = {}
            for i in range(count.value):
                name, key = ctypes.c_char_p(), ctypes.c_char_p()
                step, numel = ctypes.c_int64(), ctypes.c_int64()
                offset, whole = ctypes.c_int64(), ctypes.c_int64()
                data = ctypes.POINTER(ctypes.c_float)()
                _capi.check("pshardOptimizerStateGetEntrySlice", handle, i,
                            ctypes.byref(name), ctypes.byref(key),
                            ctypes.byref(step), ctypes.byref(data),
                            ctypes.byref(numel), ctypes.byref(offset),
                            ctypes.byref(whole))
                name = name.value.decode()
                entry = state.setdefault(name, {"step": step.value})
                if key.value == b"step":  # no state: the step only
                    continue
                sliced = offset.value != 0 or numel.value != whole.value
                if sliced:
                    entry["offset"] = offset.value
                entry[key.value.decode()] = _view(
                    ctypes.addressof(data.contents), numel.value,
                    (numel.value,) if sliced else shapes[name]).clone()
        finally:
            _capi.check("pshardOptimizerStateFree", handle)
        return {"state": state, "param_groups": self._group_values(),
                "steps": self.steps_finished, "rank": self._session.rank,
                "world_size": self._session.world_size, **self._spec}

    def _group_values(self):
        """param_groups as state_dict() saves them: "params" by name."""
        names = {id(p): name for name, p in self._named}
        return [dict({k: v for k, v in group.items() if k != "params"},
                     params=[names[id(p)] for p in group["params"]])
                for group in self.param_groups]

    def _check_group_values(self, what, saved):
        """`saved` (a state_dict()'s "param_groups") fits this optimizer's
        groups: ValueError or TypeError naming what does not."""
        if not isinstance(saved, list) or not all(
                isinstance(group, dict) for group in saved):
            raise TypeError(f"{what}: a list of dicts, as state_dict() "
                            "gives it")
        if len(saved) != len(self.param_groups):
            raise ValueError(f"{what}: {len(saved)} groups, this optimizer "
                             f"has {len(self.param_groups)}")
        for g, (group, mine) in enumerate(zip(saved, self._group_values())):
            if group.get("params", mine["params"]) != mine["params"]:
                raise ValueError(f"{what}[{g}]['params'] is "
                                 f"{group['params']!r}, this optimizer's "
                                 f"group {g} holds {mine['params']!r}")
            for key in self._applied[g].keys() & group.keys():
                try:
                    _hyper_parameter(key, group[key])
                except (TypeError, ValueError):
                    raise TypeError(f"{what}[{g}][{key!r}]: not a value "
                                    f"for {key!r}, got {group[key]!r}") \
                        from None

    def load_state_dict(self, state_dict):
        """Resumes from state_dict(), keyed by parameter name (and, for a
        slice, offset), so at any rank, world size, bucket size, comm mode
        or assignment policy: `state_dict` is one state_dict() — this rank's
        own at the same configuration — or a list of them, every rank's
        (at another world size or policy: their entries, whole parameters
        or slices, are joined by name and offset). The state must cover the
        parameters this rank comes to own; the rest is ignored. The model
        and optimizer spec must be the same. Call it before the first step.
        Raises ValueError (TypeError for a wrong type) naming what differs;
        pshard itself checks again (PshardError: slices that overlap or an
        entry given twice), and the first step fails naming owned elements
        the state lacks. Its "param_groups" (every rank's the same), when
        there, replace the groups' values as torch's load_state_dict does,
        so that a scheduler's lr and momentum resume where they were;
        pshard takes them at once (ValueError for one out of range). A load
        that is refused leaves the optimizer as it was. For a checkpoint of
        the whole job on disk, see pshard.checkpoint."""
        dicts = (list(state_dict) if isinstance(state_dict, (list, tuple))
                 else [state_dict])
        if not dicts:
            raise ValueError("state_dict: an empty list")
        groups = self._saved_group_values(dicts)
        entries = self._saved_state_entries(dicts)
        # The groups' values first (pshard may refuse one), then the state;
        # a refusal of either leaves both as they were.
        before = (self._replace_group_values(groups) if groups is not None
                  else None)
        try:
            if entries.names or any(one.get("steps") != 0 for one in dicts):
                self._import_state(entries)
            elif self.steps_finished > 0:
                # Saved before any step (torch's empty "state"): the
                # optimizer starts afresh, as torch's does, if it may.
                raise PshardError(
                    "load_state_dict", _capi.INVALID_USAGE,
                    "optimizer state loads before the first step; "
                    f"{self.steps_finished} have finished")
        except BaseException:
            if before is not None:
                self._restore_group_values(before)
            raise

    @staticmethod
    def _what(dicts, d):
        """How errors name dicts[d]."""
        return "state_dict" if len(dicts) == 1 else f"state_dict[{d}]"

    def _saved_group_values(self, dicts):
        """The "param_groups" the dicts carry (None when none does),
        checked against this optimizer's groups and between ranks."""
        groups = None
        for d, one in enumerate(dicts):
            if not isinstance(one, dict) or "param_groups" not in one:
                continue
            what = self._what(dicts, d)
            self._check_group_values(f"{what}['param_groups']",
                                     one["param_groups"])
            if groups is None:
                groups = one["param_groups"]
            elif one["param_groups"] != groups:
                raise ValueError(f"{what}['param_groups'] differs from "
                                 "another rank's")
        return groups

    def _saved_state_entries(self, dicts):
        """The dicts' "state" as the entries pshard imports, each checked
        (ValueError, TypeError naming it)."""
        params = dict(self._named)
        entries = _StateEntries()
        for d, one in enumerate(dicts):
            what = self._what(dicts, d)
            if not isinstance(one, dict):
                raise TypeError(f"{what}: a dict from ShardedOptimizer."
                                "state_dict()")
            missing = {"state", "optimizer"} - set(one)
            if missing:
                raise ValueError(f"{what}: missing {sorted(missing)}")
            if one["optimizer"] != self._spec["optimizer"]:
                raise ValueError(
                    f"{what}['optimizer'] is {one['optimizer']!r}, "
                    f"this optimizer's {self._spec['optimizer']!r}")
            if not isinstance(one["state"], dict):
                raise TypeError(f"{what}['state']: a dict by parameter name, "
                                f"got {type(one['state']).__name__}")
            for name, entry in one["state"].items():
                where = f"{what}['state'][{name!r}]"
                if name not in params:
                    raise ValueError(f"{what}['state']: {name!r} is not a "
                                     "parameter of this model")
                if not isinstance(entry, dict) or not isinstance(
                        entry.get("step"), int) or entry["step"] < 0:
                    raise ValueError(f"{where}: a dict with an integer "
                                     "'step' >= 0")
                sliced = "offset" in entry
                offset = entry.get("offset", 0)
                if not isinstance(offset, int) or offset < 0:
                    raise ValueError(f"{where}['offset']: an integer >= 0, "
                                     f"got {offset!r}")
                if set(entry) <= {"step", "offset"}:
                    # No state (SGD without momentum): the step its bucket's
                    # lr schedule resumes from.
                    entries.add(name, "step", entry["step"], offset, None)
                    continue
                for key, tensor in entry.items():
                    if key in ("step", "offset"):
                        continue
                    at = f"{where}[{key!r}]"
                    if not isinstance(tensor, torch.Tensor):
                        raise TypeError(f"{at}: a tensor, got "
                                        f"{type(tensor).__name__}")
                    if tensor.dtype != torch.float32:
                        raise ValueError(f"{at}: dtype {tensor.dtype}, "
                                         "expected torch.float32")
                    shape = params[name].shape
                    if sliced:
                        if (tensor.dim() != 1 or offset + tensor.numel()
                                > params[name].numel()):
                            raise ValueError(
                                f"{at}: a slice of shape "
                                f"{tuple(tensor.shape)} at offset {offset}, "
                                f"the parameter has {params[name].numel()} "
                                "elements (a slice is 1-D and inside it)")
                    elif tensor.shape != shape:
                        raise ValueError(f"{at}: shape "
                                         f"{tuple(tensor.shape)}, the "
                                         f"parameter's is {tuple(shape)}")
                    entries.add(name, key, entry["step"], offset, tensor)
        return entries

    def _replace_group_values(self, saved):
        """Each group takes its saved values (all but "params") and pshard
        the changed ones; returns the groups as they were. On a value pshard
        refuses (ValueError), every group is as it was."""
        before = [dict(group) for group in self.param_groups]
        try:
            for group, values in zip(self.param_groups, saved):
                group.update({k: v for k, v in values.items()
                              if k != "params"})
            self._push_hyper_parameters()
        except BaseException:
            self._restore_group_values(before)
            raise
        return before

    def _restore_group_values(self, before):
        """param_groups back to `before` (from _replace_group_values), and
        pshard's values with them."""
        for group, old in zip(self.param_groups, before):
            group.clear()
            group.update(old)
        try:
            self._push_hyper_parameters()
        except ValueError:
            pass  # a value the caller set and pshard refuses: step() says so

    def _import_state(self, entries):
        """Hands pshard the optimizer state entries load_state_dict
        gathered."""
        n = len(entries.names)
        _capi.check(
            "pshardImportOptimizerStateSlices", self._session.handle,
            json.dumps(self._spec["optimizer"]).encode(), n,
            (ctypes.c_char_p * max(1, n))(*entries.names),
            (ctypes.c_char_p * max(1, n))(*entries.keys),
            (ctypes.c_int64 * max(1, n))(*entries.steps),
            (ctypes.c_int64 * max(1, n))(*entries.offsets),
            (ctypes.POINTER(ctypes.c_float) * max(1, n))(*entries.pointers),
            (ctypes.c_int64 * max(1, n))(*entries.numels))

    @property
    def session(self):
        """The pshard.Session this optimizer's buckets belong to."""
        return self._session

    def _detach(self):
        """The session is closing: the model keeps copies of its values
        (once the last step's updates have arrived)."""
        for hook in self._forward_hooks:
            hook.remove()
        self._forward_hooks = []
        try:
            self.wait_parameters()
        except PshardError:
            pass  # a failed session: the close that follows reports it
        with torch.no_grad():
            for _, p in self._named:
                p.data = p.data.clone()
                p.grad = p.grad.clone() if p.grad is not None else None
        self._params = []
        self._grads = []
