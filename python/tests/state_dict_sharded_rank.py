"""One rank of the SHARDED state_dict test (the local test mode, SGD with
momentum and a StepLR schedule; the biases and "scale" in a group without
momentum, which keep no state: their entries carry the step alone).

PHASE=save, 2 ranks, SHARDED: 5 straight steps; then, in a new session, 3
steps and state_dict() (slices of the parameters this rank's ranges cut);
then, in a third session holding the 3-step parameters, this rank's own
state_dict loaded back and 2 more steps. Saves all of it.

PHASE=resume (any world size; PSHARD_LOCAL_ASSIGNMENT_POLICY as the test
sets it): a session holding the 3-step parameters loads every saved rank's
state_dict together (STATE_DIR: the save phase's output) and runs steps 4
and 5; then a session given rank 0's state_dict alone, whose first step
must fail naming elements it lacks (unless this rank owns none of rank 1's).

    PHASE=... RANK=r WORLD_SIZE=n state_dict_sharded_rank.py STORE OUT
"""

import os
import sys

import torch

import parity_common as common
import pshard
import pshard.torch

SPEC = {
    "kind": "SGD",
    "hyper_parameters": {"lr": 0.05, "momentum": 0.9, "lr_schedule": {
        "kind": "STEP", "step_size": 1, "gamma": 0.7}},
    "param_groups": [{"params": ["*.bias", "scale"],
                      "hyper_parameters": {"momentum": 0}}]}
SAVED_WORLD = 2


def open_session(store):
    os.makedirs(store, exist_ok=True)
    os.environ["PSHARD_LOCAL_STORE"] = store
    return pshard.Session.open()


def make(session, model=None):
    model = model if model is not None else common.make_model()
    return model, pshard.torch.ShardedOptimizer(
        model, optimizer=SPEC,
        bucket_cap_mb=common.BUCKET_CAP_MB, session=session)


def train(model, optimizer, session, steps):
    share = common.BATCH // session.world_size
    rank = session.rank
    for step in steps:
        x, y = common.batch(step)
        x, y = x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]
        optimizer.zero_grad()
        common.loss_of(model, x, y).backward()
        optimizer.step()


def params_of(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def save_phase(store, out, rank):
    session = open_session(os.path.join(store, "straight"))
    model, optimizer = make(session)
    train(model, optimizer, session, range(1, 6))
    straight = params_of(model)
    session.close()

    session = open_session(os.path.join(store, "first"))
    model, optimizer = make(session)
    train(model, optimizer, session, range(1, 4))
    saved = optimizer.state_dict()
    weights = params_of(model)
    session.close()

    session = open_session(os.path.join(store, "own"))
    model = common.make_model()
    model.load_state_dict(weights)
    model, optimizer = make(session, model)
    optimizer.load_state_dict(saved)
    train(model, optimizer, session, range(4, 6))
    own = params_of(model)
    session.close()
    torch.save({"straight": straight, "weights": weights, "saved": saved,
                "own": own}, os.path.join(out, f"save-rank{rank}.pt"))


def resume_phase(store, out, rank):
    state_dir = os.environ["STATE_DIR"]
    saved = [torch.load(os.path.join(state_dir, f"save-rank{r}.pt"))
             for r in range(SAVED_WORLD)]
    weights = saved[0]["weights"]

    session = open_session(os.path.join(store, "all"))
    model = common.make_model()
    model.load_state_dict(weights)
    model, optimizer = make(session, model)
    optimizer.load_state_dict([s["saved"] for s in saved])
    train(model, optimizer, session, range(4, 6))
    resumed = params_of(model)
    session.close()

    # Rank 0's slices alone: a rank that owns elements only rank 1 held
    # fails its first step naming them (the others stop with it).
    session = open_session(os.path.join(store, "partial"))
    model = common.make_model()
    model.load_state_dict(weights)
    model, optimizer = make(session, model)
    optimizer.load_state_dict(saved[0]["saved"])
    try:
        train(model, optimizer, session, range(4, 5))
        partial = "no error"
    except pshard.PshardError as e:
        partial = str(e)
    try:
        session.close()
    except pshard.PshardError:
        pass
    torch.save({"resumed": resumed, "partial": partial},
               os.path.join(out, f"resume-rank{rank}.pt"))


def main():
    store, out = sys.argv[1], sys.argv[2]
    rank = int(os.environ["RANK"])
    if os.environ["PHASE"] == "save":
        save_phase(store, out, rank)
    else:
        resume_phase(store, out, rank)


if __name__ == "__main__":
    main()
