"""The package on one rank (local test mode): library errors arrive as
PshardError with the C API's code and text, ShardedOptimizer checks its
arguments, the model survives close, and torch 2's zero_grad(set_to_none)
cannot pull gradients out of the buckets."""

import copy
import os
import sys
import tempfile
import unittest

try:
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

import pshard
from local_ranks import run_local_ranks
from pshard import _capi

# For the two ranks of FailedStepTest (their collective timeout is 60 s).
RUN_TIMEOUT_SECONDS = 120


def local_environment():
    os.environ.pop("PSHARD_COORDINATOR", None)
    os.environ["PSHARD_LOCAL_STORE"] = tempfile.mkdtemp(
        dir=os.environ.get("TEST_TMPDIR"))
    os.environ["RANK"] = "0"
    os.environ["WORLD_SIZE"] = "1"
    os.environ["PSHARD_COLLECTIVE_TIMEOUT_SECONDS"] = "10"


def ones_step(model, optimizer, x):
    """A training step of `model` on sum(model(x)), as a function."""
    def train_step():
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.step()
    return train_step


class SessionTest(unittest.TestCase):

    def test_open_without_an_environment_names_what_is_missing(self):
        saved = {k: os.environ.pop(k, None)
                 for k in ("PSHARD_COORDINATOR", "PSHARD_LOCAL_STORE")}
        try:
            with self.assertRaises(pshard.PshardError) as raised:
                pshard.Session.open()
            self.assertEqual(raised.exception.code, _capi.INVALID_ARGUMENT)
            self.assertIn("PSHARD_COORDINATOR is not set",
                          str(raised.exception))
        finally:
            os.environ.update({k: v for k, v in saved.items() if v})

    def test_device_is_the_agents_and_cpu_without_one(self):
        saved = os.environ.pop("PSHARD_DEVICE", None)
        try:
            self.assertEqual(pshard.device(), "cpu")
            for value in ("cpu", "cuda:0", "cuda:7", "cuda:15"):
                os.environ["PSHARD_DEVICE"] = value
                self.assertEqual(pshard.device(), value)
            for value in ("gpu", "cuda", "cuda:", "cuda:01", "cuda:-1",
                          "cuda:0 NVIDIA H100", " cpu"):
                os.environ["PSHARD_DEVICE"] = value
                with self.assertRaises(pshard.PshardError) as raised:
                    pshard.device()
                self.assertEqual(raised.exception.code,
                                 _capi.INVALID_ARGUMENT)
                self.assertIn("PSHARD_DEVICE", str(raised.exception))
                self.assertIn(repr(value), str(raised.exception))
        finally:
            os.environ.pop("PSHARD_DEVICE", None)
            if saved is not None:
                os.environ["PSHARD_DEVICE"] = saved

    def test_report_checks_its_arguments_and_close_is_idempotent(self):
        local_environment()
        session = pshard.Session.open()
        self.assertEqual((session.rank, session.world_size), (0, 1))
        with self.assertRaises(pshard.PshardError) as raised:
            session.report(step=0, loss=1.0, samples=1)
        self.assertEqual(raised.exception.code, _capi.INVALID_ARGUMENT)
        self.assertIn("step: must be >= 1", str(raised.exception))
        session.report(step=1, loss=1.0, samples=4)
        self.assertEqual(session.average_loss(2.5), 2.5)
        # Integers and numbers as torch holds them are taken; anything
        # else is refused, named, before the library.
        session.report(step=torch.tensor(2), loss=torch.tensor(0.5),
                       samples=torch.tensor(4))
        self.assertEqual(session.average_loss(torch.tensor(1.5)), 1.5)
        for arguments, error in [
                (dict(step=2.0), "step: an integer, got 2.0"),
                (dict(step=True), "step: an integer, got True"),
                (dict(step=torch.tensor(2.5)), "step: an integer"),
                (dict(step=2, loss="low"), "loss: a number, got 'low'"),
                (dict(step=2, samples=4.5), "samples: an integer, got 4.5")]:
            with self.assertRaisesRegex(TypeError, error):
                session.report(**arguments)
        with self.assertRaisesRegex(ValueError, "step: 36893488147419103232 "
                                    "is outside the 64-bit range"):
            session.report(step=2**65)
        with self.assertRaisesRegex(TypeError, "loss: a number, got None"):
            session.average_loss(None)
        session.close()
        session.close()
        with self.assertRaises(pshard.PshardError):
            session.report(step=2)

    def test_init_returns_the_process_session(self):
        local_environment()
        first = pshard.init()
        self.assertIs(pshard.init(), first)
        first.close()
        second = pshard.init()
        self.assertIsNot(second, first)
        second.close()


@unittest.skipIf(torch is None, "PyTorch is not installed for "
                 f"{sys.executable}; install python3-torch (tools/setup.sh)")
class ShardedOptimizerTest(unittest.TestCase):

    def setUp(self):
        local_environment()
        self.session = pshard.Session.open()

    def tearDown(self):
        self.session.close()

    def make(self, model, **kwargs):
        import pshard.torch
        options = dict(optimizer={"kind": "SGD",
                                  "hyper_parameters": {"lr": 0.5}},
                       session=self.session)
        options.update(kwargs)
        return pshard.torch.ShardedOptimizer(model, **options)

    def test_checkpoint_program_state_is_checked_at_the_call(self):
        import pshard.checkpoint
        model = torch.nn.Linear(3, 2)
        optimizer = self.make(model)
        # Nothing loaded: no rank's state.
        self.assertIsNone(pshard.checkpoint.program_state(optimizer))
        self.assertIsNone(pshard.checkpoint.program_state(optimizer, rank=0))
        with self.assertRaisesRegex(pshard.PshardError, "rank must be >= 0"):
            pshard.checkpoint.program_state(optimizer, rank=-1)
        with self.assertRaisesRegex(TypeError, "rank: an integer, got '0'"):
            pshard.checkpoint.program_state(optimizer, rank="0")
        with self.assertRaisesRegex(ValueError, "rank: 4294967296 is outside "
                                    "the 32-bit range"):
            pshard.checkpoint.program_state(optimizer, rank=2**32)
        for bad in (12, "text", [1, 2]):
            with self.assertRaisesRegex(TypeError, "state: bytes"):
                pshard.checkpoint.save(optimizer, 1, state=bad)
        for bad in (1.5, "1", None):
            with self.assertRaisesRegex(TypeError, "step: an integer, got "
                                        f"{bad!r}"):
                pshard.checkpoint.save(optimizer, bad)
        with self.assertRaisesRegex(TypeError, "step: an integer, got '3'"):
            pshard.checkpoint.due("3")
        with self.assertRaisesRegex(TypeError, "path: a str, bytes or "
                                    "os.PathLike, got int"):
            pshard.checkpoint.load(optimizer, 12)
        optimizer.zero_grad()
        model(torch.ones(4, 3)).sum().backward()
        optimizer.step()
        # Bytes-like is taken; only a coordinator commits checkpoints.
        with self.assertRaisesRegex(pshard.PshardError, "local test mode"):
            pshard.checkpoint.save(optimizer, 1, state=bytearray(b"x"))

    def test_a_state_dict_before_the_first_step_starts_afresh(self):
        # As torch's: an empty "state", the groups' values; loaded, a fresh
        # optimizer with those values.
        spec = {"kind": "SGD", "hyper_parameters": {"lr": 0.5,
                                                    "momentum": 0.9}}
        optimizer = self.make(torch.nn.Linear(3, 2), optimizer=spec)
        optimizer.param_groups[0]["lr"] = 0.25
        saved = optimizer.state_dict()
        self.assertEqual((saved["state"], saved["steps"]), ({}, 0))
        self.assertEqual(saved["param_groups"][0]["lr"], 0.25)
        self.session.close()
        self.session = pshard.Session.open()
        model = torch.nn.Linear(3, 2)
        optimizer = self.make(model, optimizer=spec)
        # A saved value pshard refuses is refused at the load, named.
        with self.assertRaisesRegex(ValueError, r"param_groups\[0\]: "
                                    r"optimizer.hyper_parameters.lr: must be "
                                    r"in \(0, 1e\+06\], got 0"):
            optimizer.load_state_dict(dict(saved, param_groups=[
                dict(saved["param_groups"][0], lr=0.0)]))
        self.assertEqual(optimizer.param_groups[0]["lr"], 0.5)
        optimizer.load_state_dict(saved)
        self.assertEqual(optimizer.param_groups[0]["lr"], 0.25)
        bias = model.bias.detach().clone()
        ones_step(model, optimizer, torch.ones(4, 3))()
        # The first momentum step: the buffer is the gradient, 4.
        torch.testing.assert_close(model.bias.detach(), bias - 1.0)
        with self.assertRaisesRegex(pshard.PshardError, "before the first "
                                    "step; 1 have finished"):
            optimizer.load_state_dict(saved)

    def test_a_refused_load_leaves_the_optimizer_as_it_was(self):
        # SGD with momentum 0.5: "weight" in the default group at lr 0.5,
        # "bias" in the spec's group 0 at 0.25. Both gradients are 4 a step
        # (4 rows of ones), so after a saved step the buffer B = 4 and the
        # next step's is 6.
        spec = {"kind": "SGD",
                "hyper_parameters": {"lr": 0.5, "momentum": 0.5},
                "param_groups": [{"params": ["bias"],
                                  "hyper_parameters": {"lr": 0.25}}]}
        model = torch.nn.Linear(3, 2)
        optimizer = self.make(model, optimizer=spec)
        x = torch.ones(4, 3)
        ones_step(model, optimizer, x)()
        saved = optimizer.state_dict()
        self.session.close()
        self.session = pshard.Session.open()
        model = torch.nn.Linear(3, 2)
        optimizer = self.make(model, optimizer=spec)

        def groups_with(*lrs):
            return [dict(group, lr=lr)
                    for group, lr in zip(saved["param_groups"], lrs)]
        # Group 0's value is taken, group 1's refused: neither stays.
        with self.assertRaisesRegex(ValueError, r"param_groups\[1\]: .*lr: "
                                    r"must be in \(0, 1e\+06\], got 0"):
            optimizer.load_state_dict(dict(saved,
                                           param_groups=groups_with(0.125, 0)))
        self.assertEqual([g["lr"] for g in optimizer.param_groups],
                         [0.5, 0.25])
        with self.assertRaisesRegex(TypeError, r"state_dict\['state'\]: a "
                                    "dict by parameter name, got list"):
            optimizer.load_state_dict(dict(saved, state=[]))
        # The values are taken, the state (every entry twice) refused:
        # neither stays.
        twice = dict(saved, param_groups=groups_with(0.125, 0.125))
        with self.assertRaisesRegex(pshard.PshardError, "twice"):
            optimizer.load_state_dict([twice, twice])
        self.assertEqual([g["lr"] for g in optimizer.param_groups],
                         [0.5, 0.25])
        optimizer.load_state_dict(saved)
        weight = model.weight.detach().clone()
        bias = model.bias.detach().clone()
        ones_step(model, optimizer, x)()  # B = 6, at the spec's rates
        torch.testing.assert_close(model.weight.detach(), weight - 3.0)
        torch.testing.assert_close(model.bias.detach(), bias - 1.5)

    def test_autocast_trains_as_torch_does(self):
        # Under torch.autocast the parameters stay float32 and so do their
        # gradients: pshard's step is torch's Adam's, bit for bit.
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                    torch.nn.Linear(16, 4))
        reference = copy.deepcopy(model)
        initial = model[0].weight.detach().clone()
        spec = {"kind": "ADAM", "hyper_parameters": {"lr": 0.01}}
        optimizers = [self.make(model, optimizer=spec),
                      torch.optim.Adam(reference.parameters(), lr=0.01)]
        x = torch.randn(32, 8)
        for _ in range(3):
            for net, optimizer in zip((model, reference), optimizers):
                optimizer.zero_grad()
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    out = net(x)
                self.assertEqual(out.dtype, torch.bfloat16)
                out.float().pow(2).mean().backward()
                optimizer.step()
        for (name, got), want in zip(model.named_parameters(),
                                     reference.parameters()):
            self.assertEqual(got.dtype, torch.float32, name)
            torch.testing.assert_close(got, want, rtol=0, atol=0, msg=name)
        self.assertFalse(torch.equal(model[0].weight, initial))  # it trained

    def test_activation_checkpointing_and_tied_weights_train_as_torch(self):
        # Recomputed forwards (reentrant: the gradients of the checkpointed
        # layers become final inside a nested backward) and an embedding
        # tied to the output (two uses, one gradient) over several buckets:
        # torch's Adam's parameters, bit for bit.
        from torch.utils import checkpoint

        class TiedModel(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.embedding = torch.nn.Embedding(10, 8)
                self.first = torch.nn.Linear(8, 8)
                self.second = torch.nn.Linear(8, 8)
                self.reentrant = True

            def forward(self, tokens):
                h = self.embedding(tokens)
                for layer in (self.first, self.second):
                    h = checkpoint.checkpoint(
                        lambda t, layer=layer: torch.relu(layer(t)), h,
                        use_reentrant=self.reentrant)
                return h @ self.embedding.weight.t()

        tokens = torch.randint(0, 10, (16,))
        for reentrant in (True, False):
            with self.subTest(reentrant=reentrant):
                torch.manual_seed(0)
                model = TiedModel()
                model.reentrant = reentrant
                reference = copy.deepcopy(model)
                spec = {"kind": "ADAM", "hyper_parameters": {"lr": 0.01}}
                optimizers = [
                    self.make(model, optimizer=spec, bucket_cap_mb=0.0005),
                    torch.optim.Adam(reference.parameters(), lr=0.01)]
                for _ in range(3):
                    for net, optimizer in zip((model, reference), optimizers):
                        optimizer.zero_grad()
                        net(tokens).pow(2).mean().backward()
                        optimizer.step()
                for (name, got), want in zip(model.named_parameters(),
                                             reference.parameters()):
                    torch.testing.assert_close(got, want, rtol=0, atol=0,
                                               msg=name)
                self.session.close()
                self.session = pshard.Session.open()

    def test_frozen_parameters_stay_out_and_unchanged(self):
        # requires_grad=False: not in pshard's buckets or param_groups, as
        # a torch optimizer given only the trainable ones.
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 4),
                                    torch.nn.Linear(4, 2))
        model[0].weight.requires_grad_(False)
        frozen = model[0].weight.detach().clone()
        reference = copy.deepcopy(model)
        optimizers = [self.make(model),
                      torch.optim.SGD([p for p in reference.parameters()
                                       if p.requires_grad], lr=0.5)]
        self.assertEqual(sum(len(g["params"])
                             for g in optimizers[0].param_groups), 3)
        x = torch.randn(8, 4)
        for _ in range(3):
            for net, optimizer in zip((model, reference), optimizers):
                optimizer.zero_grad()
                net(x).pow(2).mean().backward()
                optimizer.step()
        self.assertTrue(torch.equal(model[0].weight, frozen))
        self.assertNotIn("0.weight", optimizers[0].state_dict()["state"])
        for got, want in zip(model.parameters(), reference.parameters()):
            torch.testing.assert_close(got, want, rtol=0, atol=0)

    def test_bad_optimizer_json_names_the_field(self):
        with self.assertRaises(pshard.PshardError) as raised:
            self.make(torch.nn.Linear(2, 2),
                      optimizer={"kind": "ADAM",
                                 "hyper_parameters": {"eps": 0}})
        self.assertEqual(raised.exception.code, _capi.INVALID_ARGUMENT)
        self.assertIn("optimizer.hyper_parameters.eps", str(raised.exception))

    def test_bad_arguments_are_refused_before_the_library(self):
        with self.assertRaisesRegex(ValueError, "comm_mode"):
            self.make(torch.nn.Linear(2, 2), comm_mode="ring")
        with self.assertRaisesRegex(ValueError,
                                    "float64 is not supported"):
            self.make(torch.nn.Linear(2, 2).double())
        with self.assertRaisesRegex(ValueError, "param_dtype: torch.float32, "
                                    "torch.bfloat16 or None"):
            self.make(torch.nn.Linear(2, 2), param_dtype=torch.float16)
        with self.assertRaisesRegex(ValueError, "reduce_dtype"):
            self.make(torch.nn.Linear(2, 2), reduce_dtype="bf16")
        with self.assertRaisesRegex(pshard.PshardError, "bucket_cap_mb"):
            self.make(torch.nn.Linear(2, 2), bucket_cap_mb=-1)
        for bad in ("25", None, True):
            with self.assertRaisesRegex(TypeError, "bucket_cap_mb: a number, "
                                        f"got {bad!r}"):
                self.make(torch.nn.Linear(2, 2), bucket_cap_mb=bad)
        with self.assertRaisesRegex(ValueError, r"optimizer: not JSON \("):
            self.make(torch.nn.Linear(2, 2), optimizer='{"kind": SGD}')
        with self.assertRaisesRegex(TypeError, "broadcast_buffers: True or "
                                    "False, got 'yes'"):
            self.make(torch.nn.Linear(2, 2), broadcast_buffers="yes")
        linear = torch.nn.Linear(2, 2)
        with self.assertRaisesRegex(ValueError, "parameter b is a, given "
                                    "twice"):
            self.make([("a", linear.weight), ("b", linear.weight),
                       ("c", linear.bias)])
        with self.assertRaisesRegex(TypeError, "session: a pshard.Session "
                                    r"\(or None for pshard.init\(\)'s\), "
                                    "got str"):
            self.make(torch.nn.Linear(2, 2), session="rank 0")
        with self.assertRaisesRegex(ValueError, "device meta is not "
                                    r"supported \(CPU or CUDA tensors\)"):
            self.make(torch.nn.Linear(2, 2, device="meta"))

    def test_no_gradient_after_set_to_none_is_zero_not_the_last_steps(self):
        # `unused` gets a gradient in step 1 only; before step 2 the model's
        # zero_grad(set_to_none=True) drops the bucket views. Plain SGD: a
        # zero gradient leaves it where step 1 put it (the stale one would
        # move it again).
        used, unused = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
        model = torch.nn.ModuleDict({"used": used, "unused": unused})
        optimizer = self.make(model)
        x = torch.ones(4, 3)
        (used(x).sum() + unused(x).sum()).backward()
        optimizer.step()
        after_first = {n: p.detach().clone()
                       for n, p in unused.named_parameters()}
        for n, p in model.named_parameters():
            self.assertEqual(torch.count_nonzero(p.grad).item(), p.numel(), n)
        model.zero_grad(set_to_none=True)
        used(x).sum().backward()
        optimizer.step()
        for n, p in unused.named_parameters():
            torch.testing.assert_close(p.detach(), after_first[n])
            # Its .grad is its bucket view again, zero.
            self.assertEqual(torch.count_nonzero(p.grad).item(), 0, n)
        # And the bucket view keeps working: step 3 moves it again.
        optimizer.zero_grad()
        unused(x).sum().backward()
        optimizer.step()
        torch.testing.assert_close(unused.bias.detach(),
                                   after_first["bias"] - 2.0)

    def test_param_groups_drive_the_rate_between_steps_only(self):
        # SGD on sum(Wx + b) over 4 rows of ones: b moves by -4 * lr a step.
        # The default group holds "weight", the spec's group 0 "bias".
        model = torch.nn.Linear(3, 2)
        optimizer = self.make(model, optimizer={
            "kind": "SGD", "hyper_parameters": {"lr": 0.5},
            "param_groups": [{"params": ["bias"],
                              "hyper_parameters": {"lr": 0.25}}]})
        self.assertIsInstance(optimizer, torch.optim.Optimizer)
        self.assertEqual([g["lr"] for g in optimizer.param_groups],
                         [0.5, 0.25])
        self.assertEqual([[p is model.weight for p in g["params"]]
                          for g in optimizer.param_groups], [[True], [False]])
        with self.assertRaises(NotImplementedError):
            optimizer.add_param_group({"params": []})
        x = torch.ones(4, 3)
        bias = model.bias.detach().clone()
        train_step = ones_step(model, optimizer, x)

        # torch's StepLR halves both groups' rates after every step.
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1, gamma=0.5)
        train_step()  # at 0.25
        scheduler.step()
        train_step()  # at 0.125
        torch.testing.assert_close(model.bias.detach(), bias - 1.5)
        # Changed during the backward pass: that step ran at the old rate
        # and says so; the new one applies from the next step.
        optimizer.zero_grad()
        model(x).sum().backward()
        optimizer.param_groups[1]["lr"] = 1.0
        with self.assertRaisesRegex(RuntimeError, r"param_groups\[1\]\['lr'\] "
                                    r"changed to 1.0 during step 3.*ran "
                                    r"with 0.125"):
            optimizer.step()
        torch.testing.assert_close(model.bias.detach(), bias - 2.0)
        train_step()  # at 1.0
        torch.testing.assert_close(model.bias.detach(), bias - 6.0)
        optimizer.param_groups[0]["lr"] = 0.0
        with self.assertRaisesRegex(ValueError, r"param_groups\[0\]: "
                                    r"optimizer.hyper_parameters.lr: must be "
                                    r"in \(0, 1e\+06\], got 0"):
            optimizer.zero_grad()
            model(x).sum().backward()

    def test_param_groups_carry_what_may_change_and_check_it(self):
        # SGD with momentum in the default group ("weight") and none in the
        # spec's group 0 ("bias"): b's gradient is 4 a step (4 rows of
        # ones), so with lr 0.125 and momentum m its buffer B = m B + 4 and
        # b moves by -0.125 B.
        model = torch.nn.Linear(3, 2)
        optimizer = self.make(model, optimizer={
            "kind": "SGD",
            "hyper_parameters": {"lr": 0.125, "momentum": 0.5},
            "param_groups": [{"params": ["weight"],
                              "hyper_parameters": {"momentum": 0}}]})
        self.assertEqual(
            [{k: v for k, v in g.items() if k != "params"}
             for g in optimizer.param_groups],
            [{"lr": 0.125, "momentum": 0.5, "weight_decay": 0.0},
             {"lr": 0.125, "momentum": 0.0, "weight_decay": 0.0}])
        self.assertEqual(optimizer.defaults["momentum"], 0.5)
        x = torch.ones(4, 3)
        bias = model.bias.detach().clone()
        train_step = ones_step(model, optimizer, x)

        train_step()  # B = 4
        optimizer.param_groups[0]["momentum"] = 0.25
        train_step()  # B = 5
        torch.testing.assert_close(model.bias.detach(), bias - 1.125)
        for key, value, error in [
                ("momentum", 1.5, r"param_groups\[0\]: optimizer."
                 r"hyper_parameters.momentum: must be in \[0, 1\), got 1.5"),
                ("momentum", 0.0, r"must be > 0 while training")]:
            optimizer.param_groups[0][key] = value
            with self.assertRaisesRegex(ValueError, error):
                optimizer.zero_grad()
                model(x).sum().backward()
            optimizer.param_groups[0][key] = 0.25
        optimizer.param_groups[1]["momentum"] = 0.9
        with self.assertRaisesRegex(ValueError, r"param_groups\[1\]: "
                                    r"optimizer.param_groups\[0\]."
                                    r"hyper_parameters.momentum: the group "
                                    r"keeps no momentum buffer"):
            train_step()
        optimizer.param_groups[1]["momentum"] = 0.0
        for text in ("fast", "0.5"):  # torch's kernels take no strings
            optimizer.param_groups[0]["momentum"] = text
            with self.assertRaisesRegex(TypeError, r"param_groups\[0\]"
                                        r"\['momentum'\] must be a number, "
                                        f"got '{text}'"):
                train_step()
        optimizer.param_groups[0]["momentum"] = 0.25
        # Nothing above changed what pshard steps with.
        train_step()  # B = 5.25
        torch.testing.assert_close(model.bias.detach(), bias - 1.78125)

    def test_parameters_live_in_the_buckets_and_survive_close(self):
        model = torch.nn.Linear(3, 2)
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        optimizer = self.make(model)
        for n, p in model.named_parameters():
            torch.testing.assert_close(p.detach(), before[n])
        x = torch.ones(4, 3)
        for _ in range(2):
            # torch 2's default; must not take the gradient out of pshard's
            # buffers.
            model.zero_grad(set_to_none=True)
            model(x).sum().backward()
            optimizer.step()
        # SGD lr 0.5 on sum(Wx + b) over 4 rows of ones: each step moves W
        # by -0.5 * 4 and b by -0.5 * 4.
        torch.testing.assert_close(model.weight.detach(),
                                   before["weight"] - 4.0)
        torch.testing.assert_close(model.bias.detach(), before["bias"] - 4.0)
        with self.assertRaisesRegex(pshard.PshardError, "twice in one step"):
            model(x).sum().backward()
            model(x).sum().backward()
        self.session.close()
        # Copied out of the freed buckets: still readable and trainable.
        self.assertEqual(model.weight.sum().item(), model.weight.sum().item())
        model.weight.data.add_(1)


@unittest.skipIf(torch is None, "PyTorch is not installed for "
                 f"{sys.executable}; install python3-torch (tools/setup.sh)")
class FailedStepTest(unittest.TestCase):

    def test_a_failed_first_step_leaves_the_model_readable(self):
        out = run_local_ranks(self, "failed_step_rank.py", 2,
                              RUN_TIMEOUT_SECONDS)
        result = torch.load(os.path.join(out, "rank0.pt"))
        self.assertIsNotNone(result["error"], "the step did not fail")
        self.assertIn("rank 1", result["error"])
        for name, value in result["before"].items():
            with self.subTest(param=name):
                self.assertTrue(torch.equal(result["after"][name], value))


if __name__ == "__main__":
    unittest.main()
