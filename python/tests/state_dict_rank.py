"""One rank of the state_dict test: for each optimizer, 5 straight steps in
one session; then 3 steps, state_dict(), and in a new session (a fresh
model holding the 3-step parameters and a new ShardedOptimizer)
load_state_dict and 2 more steps. Saves both runs' final parameters, the
state it saved, and what the bad loads raised (the last in a 4th session,
which it ends).

    RANK=r WORLD_SIZE=n state_dict_rank.py STORE_BASE OUT_DIR
"""

import os
import sys

import torch

import parity_common as common
import pshard
import pshard.torch

CONFIGS = ["sgd_momentum", "adam", "rmsprop", "lion", "adamw_torch_onecycle",
           "sgd_plain_step"]

# Plain SGD keeps no state: its state_dict holds each parameter's step
# alone, which the StepLR schedule (halving the lr every step) resumes from.
# adamw_torch_onecycle: torch's OneCycleLR steps the lr and beta1; the resumed
# run loads the scheduler's state_dict as well, and the param_groups from
# the optimizer's.
SPECS = {name: common.OPTIMIZERS[name][0] for name in CONFIGS[:-1]}
SPECS["sgd_plain_step"] = {
    "kind": "SGD",
    "hyper_parameters": {"lr": 0.1, "lr_schedule": {
        "kind": "STEP", "step_size": 1, "gamma": 0.5}}}


def open_session(store):
    os.makedirs(store, exist_ok=True)  # by whichever rank comes first
    os.environ["PSHARD_LOCAL_STORE"] = store
    return pshard.Session.open()


def train(model, optimizer, session, steps, scheduler=None):
    share = common.BATCH // session.world_size
    rank = session.rank
    for step in steps:
        x, y = common.batch(step)
        x, y = x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]
        optimizer.zero_grad()
        common.loss_of(model, x, y).backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()


def make(session, name, model=None):
    """The model, its ShardedOptimizer and the configuration's torch
    scheduler on it (or None)."""
    model = model if model is not None else common.make_model()
    optimizer = pshard.torch.ShardedOptimizer(
        model, optimizer=SPECS[name],
        bucket_cap_mb=common.BUCKET_CAP_MB, session=session)
    return model, optimizer, common.pshard_scheduler(name, optimizer)


def error_of(call):
    try:
        call()
    except (ValueError, TypeError, pshard.PshardError) as e:
        return f"{type(e).__name__}: {e}"
    return "no error"


def run(name, store, out):
    session = open_session(os.path.join(store, "straight"))
    model, optimizer, scheduler = make(session, name)
    train(model, optimizer, session, range(1, 6), scheduler)
    straight = {n: p.detach().clone() for n, p in model.named_parameters()}
    session.close()

    session = open_session(os.path.join(store, "first"))
    model, optimizer, scheduler = make(session, name)
    train(model, optimizer, session, range(1, 4), scheduler)
    saved = optimizer.state_dict()
    saved_scheduler = scheduler.state_dict() if scheduler else None
    weights = {n: p.detach().clone() for n, p in model.named_parameters()}
    errors = {"after_first_step": error_of(
        lambda: optimizer.load_state_dict(saved))}
    session.close()

    session = open_session(os.path.join(store, "resumed"))
    model = common.make_model()
    model.load_state_dict(weights)
    model, optimizer, scheduler = make(session, name, model)
    # A parameter with state tensors, if any (plain SGD has none).
    some = next((n for n, e in saved["state"].items() if len(e) > 1),
                next(iter(saved["state"])))
    key = next((k for k in saved["state"][some] if k != "step"), None)
    if key is not None:
        bad_shape = {k: v for k, v in saved["state"][some].items()}
        bad_shape[key] = bad_shape[key].reshape(-1)[:-1] \
            if bad_shape[key].numel() > 1 else torch.zeros(2)
        errors["bad_shape"] = error_of(lambda: optimizer.load_state_dict(
            dict(saved, state=dict(saved["state"], **{some: bad_shape}))))
        errors["bad_dtype"] = error_of(lambda: optimizer.load_state_dict(
            dict(saved, state=dict(saved["state"], **{some: dict(
                saved["state"][some],
                **{key: saved["state"][some][key].double()})}))))
    errors["unknown_name"] = error_of(lambda: optimizer.load_state_dict(
        dict(saved, state=dict(saved["state"], nope=saved["state"][some]))))
    errors["other_spec"] = error_of(lambda: optimizer.load_state_dict(
        dict(saved, optimizer=dict(saved["optimizer"], kind=(
            "ADAM" if saved["optimizer"]["kind"] == "ADAMW" else "ADAMW")))))
    groups = saved["param_groups"]
    errors["fewer_groups"] = error_of(lambda: optimizer.load_state_dict(
        dict(saved, param_groups=groups[:-1])))
    errors["other_group_params"] = error_of(lambda: optimizer.load_state_dict(
        dict(saved, param_groups=[dict(groups[0], params=groups[0]["params"]
                                       [::-1])] + groups[1:])))
    errors["bad_group_value"] = error_of(lambda: optimizer.load_state_dict(
        dict(saved, param_groups=[dict(groups[0], lr="high")] + groups[1:])))
    # As with torch: the scheduler made on the new optimizer, then both
    # loaded.
    optimizer.load_state_dict(saved)
    if scheduler is not None:
        scheduler.load_state_dict(saved_scheduler)
    train(model, optimizer, session, range(4, 6), scheduler)
    resumed = {n: p.detach().clone() for n, p in model.named_parameters()}
    session.close()

    # A state without one of the parameters this rank owns: the first step
    # names it (the state is keyed by name, so only the first step, which
    # settles the owners, can tell).
    session = open_session(os.path.join(store, "missing"))
    model = common.make_model()
    model.load_state_dict(weights)
    model, optimizer, _ = make(session, name, model)
    optimizer.load_state_dict(dict(saved, state={
        n: v for n, v in saved["state"].items() if n != some}))
    errors["missing_owned"] = error_of(
        lambda: train(model, optimizer, session, range(4, 5)))
    error_of(session.close)
    torch.save({"straight": straight, "resumed": resumed, "saved": saved,
                "errors": errors}, out)


def main():
    store_base, out_dir = sys.argv[1], sys.argv[2]
    rank = os.environ["RANK"]
    for name in CONFIGS:
        run(name, os.path.join(store_base, name),
            os.path.join(out_dir, f"{name}-rank{rank}.pt"))


if __name__ == "__main__":
    main()
