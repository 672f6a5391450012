"""ShardedOptimizer.state_dict()/load_state_dict() on 2 ranks (real
processes, the local test mode): 3 steps, state_dict, a new session and
optimizer, load, 2 more steps give the parameters of 5 straight steps bit
for bit (SGD with momentum, Adam, RMSprop centered with momentum in one
group and plain in the other, Lion, AdamW under torch's OneCycleLR, whose
lr and beta1 resume from the state_dict's param_groups, and plain SGD whose
StepLR schedule resumes from the step its state_dict carries); each rank's
state holds only the parameters of its buckets, by name, with torch's state
names for the kind and group; bad states are refused naming what is wrong.
"""

import os
import sys
import unittest

from local_ranks import run_local_ranks

try:
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    torch = None

WORLD = 2
RUN_TIMEOUT_SECONDS = 240


def expected_keys(config, name, second_group):
    """torch's state names of parameter `name` under `config`."""
    if config in ("adam", "adamw_torch_onecycle"):
        return {"step", "exp_avg", "exp_avg_sq"}
    if config == "rmsprop":  # the second group is neither centered nor momentum
        return ({"step", "square_avg"} if second_group(name)
                else {"step", "square_avg", "momentum_buffer", "grad_avg"})
    if config == "lion":
        return {"step", "exp_avg"}
    if config == "sgd_plain_step":  # no state: the step alone
        return {"step"}
    return {"step", "momentum_buffer"}


@unittest.skipIf(torch is None, "PyTorch is not installed for "
                 f"{sys.executable}; install python3-torch (tools/setup.sh)")
class StateDictTest(unittest.TestCase):

    def test_resumed_training_is_bit_identical(self):
        import parity_common as common
        import state_dict_rank
        out = run_local_ranks(self, "state_dict_rank.py", WORLD, RUN_TIMEOUT_SECONDS)

        names = {n for n, _ in common.make_model().named_parameters()}
        for config in state_dict_rank.CONFIGS:
            owned = []
            for rank in range(WORLD):
                got = torch.load(os.path.join(out, f"{config}-rank{rank}.pt"))
                for name, value in got["straight"].items():
                    with self.subTest(config=config, rank=rank, param=name):
                        self.assertTrue(torch.equal(got["resumed"][name], value),
                                        (got["resumed"][name] - value).abs().max())
                saved = got["saved"]
                self.assertEqual(saved["rank"], rank)
                self.assertEqual(saved["world_size"], WORLD)
                self.assertEqual(saved["optimizer"], state_dict_rank.SPECS[config])
                owned.append(set(saved["state"]))
                for name, entry in saved["state"].items():
                    keys = expected_keys(config, name, common.second_group)
                    self.assertEqual(set(entry), keys, name)
                    self.assertEqual(entry["step"], 3)
                    shape = dict(common.make_model().named_parameters())[name].shape
                    for key in keys - {"step"}:
                        self.assertEqual(entry[key].shape, shape)
                        self.assertGreater(entry[key].abs().sum(), 0)
                errors = got["errors"]
                with self.subTest(config=config, rank=rank):
                    self.assertIn("PshardError", errors["after_first_step"])
                    self.assertIn("before the first step",
                                  errors["after_first_step"])
                    if config == "sgd_plain_step":
                        # Nothing to miss: a missing step falls back to
                        # the step the other entries share.
                        self.assertEqual(errors["missing_owned"], "no error")
                    else:
                        self.assertIn("has no entry for parameter",
                                      errors["missing_owned"])
                        self.assertIn("shape", errors["bad_shape"])
                        self.assertIn("torch.float64", errors["bad_dtype"])
                    self.assertIn("'nope' is not a parameter",
                                  errors["unknown_name"])
                    self.assertIn("state_dict['optimizer']",
                                  errors["other_spec"])
                    self.assertIn("ValueError: state_dict['param_groups']: ",
                                  errors["fewer_groups"])
                    self.assertIn("state_dict['param_groups'][0]['params'] "
                                  "is ", errors["other_group_params"])
                    self.assertIn("TypeError: state_dict['param_groups'][0]"
                                  "['lr']: not a value for 'lr', got 'high'",
                                  errors["bad_group_value"])
                # As torch's: every group's values, its parameters by name.
                groups = saved["param_groups"]
                self.assertEqual(sorted(n for g in groups for n in g["params"]),
                                 sorted(names))
                for group in groups:
                    self.assertIn("lr", group)
            # This rank's shard only: the ranks' parameters do not overlap
            # and together are the model's.
            self.assertFalse(owned[0] & owned[1], config)
            self.assertEqual(owned[0] | owned[1], names, config)


if __name__ == "__main__":
    unittest.main()
