"""Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms") as
a torch.optim.Optimizer, for pshard's golden and parity tests: torch 1.13 has
no Lion. The update is lion-pytorch's (github.com/lucidrains/lion-pytorch,
update_fn), torch operation for torch operation, so that the fp32 rounding is
the one pshard's LION kernels reproduce (worker/optim/cpu_kernels.h):

    p.mul_(1 - lr * weight_decay)                      # decoupled decay
    c = exp_avg.clone().mul_(beta1).add(grad, alpha=1 - beta1)
    p.add_(c.sign_(), alpha=-lr)
    exp_avg.mul_(beta2).add_(grad, alpha=1 - beta2)

Defaults as lion-pytorch's: lr 1e-4, betas (0.9, 0.99), weight_decay 0.
State per parameter: "exp_avg" (and "step", as torch's own optimizers keep
one, so that state_dict comparisons line up).
"""
import torch


class Lion(torch.optim.Optimizer):
    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0,
                 foreach=None):
        # `foreach` is accepted (and ignored) so callers can pass the same
        # keywords as to torch's own optimizers.
        if not lr > 0.0:
            raise ValueError("Invalid learning rate: {}".format(lr))
        if not all(0.0 <= beta <= 1.0 for beta in betas):
            raise ValueError("Invalid betas: {}".format(betas))
        super().__init__(params, dict(lr=lr, betas=betas,
                                      weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr = group["lr"]
            wd = group["weight_decay"]
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if len(state) == 0:
                    state["step"] = torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p)
                state["step"] += 1
                exp_avg = state["exp_avg"]
                grad = p.grad
                p.mul_(1 - lr * wd)
                update = exp_avg.clone().mul_(beta1).add(grad, alpha=1 - beta1)
                p.add_(update.sign_(), alpha=-lr)
                exp_avg.mul_(beta2).add_(grad, alpha=1 - beta2)
        return loss
