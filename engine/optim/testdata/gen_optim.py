"""PyTorch reference trajectories for engine/optim: optimizers, gradient clipping, LR schedules.

Run with Debian's /usr/bin/python3 (python3-torch 1.13, CPU), in this directory:

    /usr/bin/python3 gen_optim.py        # writes optim.safetensors

The layout of the file is described in README.md.
"""
import inspect, json, math, os, sys
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../tools/torchfix"))
from torchfix import write_safetensors  # noqa: E402

OUT = "optim.safetensors"
SHAPES = [(4, 3), (3,), (2, 2, 2)]
STEPS = 5

tensors, meta = {}, {"_generator": "gen_optim.py", "_torch": torch.__version__}


def write(path):
    write_safetensors(path, tensors, meta)


def put(name, t):
    tensors[name] = t.detach().clone()
    return name


def jsonable(v, names):
    """A state_dict value as JSON: tensors become the name of the fixture tensor that holds them."""
    if isinstance(v, torch.Tensor):
        return names[id(v)]
    if isinstance(v, dict):
        return {str(k): jsonable(x, names) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x, names) for x in v]
    return v


def trajectory(name, cls, groups, skip=None, steps=STEPS, **kwargs):
    """Runs steps steps (STEPS unless said) of cls over three seeded parameters. groups lists the
    parameter indices of each param group with its own options (None: one group with kwargs); skip maps
    a parameter index to the steps (1-based) on which its .grad is None."""
    skip = skip or {}
    torch.manual_seed(sum(map(ord, name)))
    params = [torch.nn.Parameter(torch.randn(s)) for s in SHAPES]
    for j, p in enumerate(params):
        put(f"{name}/p{j}/init", p)
    if groups is None:
        opt = cls(params, **kwargs)
    else:
        opt = cls([{"params": [params[j] for j in idx], **extra} for idx, extra in groups], **kwargs)
    names = {}
    for s in range(1, steps + 1):
        for j, p in enumerate(params):
            g = torch.randn(p.shape)
            if s in skip.get(j, ()):
                p.grad = None
            else:
                p.grad = g
                put(f"{name}/step{s}/p{j}/grad", g)
        opt.step()
        for j, p in enumerate(params):
            put(f"{name}/step{s}/p{j}/param", p)
            for key, v in opt.state[p].items():
                if isinstance(v, torch.Tensor):
                    names[id(v)] = put(f"{name}/step{s}/p{j}/{key}", v)
    meta[name] = json.dumps({
        "optimizer": cls.__name__,
        "kwargs": kwargs,
        "groups": None if groups is None else [{"params": idx, **extra} for idx, extra in groups],
        "steps": steps,
        "no_grad": {str(j): steps for j, steps in skip.items()},
        "state_dict": jsonable(opt.state_dict(), names),
    })


SGD, Adam, AdamW = torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW
trajectory("sgd", SGD, None, lr=0.1)
trajectory("sgd_momentum", SGD, None, lr=0.1, momentum=0.9)
trajectory("sgd_dampening", SGD, None, lr=0.1, momentum=0.9, dampening=0.1)
trajectory("sgd_nesterov", SGD, None, lr=0.1, momentum=0.9, nesterov=True)
trajectory("sgd_weight_decay", SGD, None, lr=0.1, weight_decay=0.01)
trajectory("sgd_maximize", SGD, None, lr=0.1, maximize=True)
trajectory("sgd_momentum_skip", SGD, None, skip={1: [2, 4]}, lr=0.1, momentum=0.9)
trajectory("adam", Adam, None)
trajectory("adam_weight_decay", Adam, None, weight_decay=0.1)
trajectory("adam_amsgrad", Adam, None, amsgrad=True)
trajectory("adam_maximize", Adam, None, maximize=True)
trajectory("adam_betas_eps", Adam, None, betas=(0.8, 0.9), eps=1e-6)
trajectory("adam_skip", Adam, None, skip={1: [2, 4]})
trajectory("adamw", AdamW, None)
trajectory("adamw_weight_decay", AdamW, None, weight_decay=0.1)
trajectory("adamw_amsgrad", AdamW, None, amsgrad=True)
trajectory("adamw_groups", AdamW, [([0, 1], {"lr": 1e-2, "weight_decay": 0.1}), ([2], {"lr": 1e-3, "weight_decay": 0.0})])
RMSprop, Adagrad, Adamax = torch.optim.RMSprop, torch.optim.Adagrad, torch.optim.Adamax
trajectory("rmsprop", RMSprop, None)
trajectory("rmsprop_momentum", RMSprop, None, momentum=0.9)
trajectory("rmsprop_centered", RMSprop, None, centered=True)
trajectory("rmsprop_centered_momentum_wd", RMSprop, None, centered=True, momentum=0.5, weight_decay=0.1, alpha=0.9)
trajectory("rmsprop_maximize", RMSprop, None, maximize=True, eps=1e-6)
trajectory("rmsprop_skip", RMSprop, None, skip={1: [2, 4]}, momentum=0.9)
trajectory("adagrad", Adagrad, None)
trajectory("adagrad_lr_decay", Adagrad, None, lr_decay=0.1, initial_accumulator_value=0.5)
trajectory("adagrad_weight_decay", Adagrad, None, weight_decay=0.1, eps=1e-6)
trajectory("adagrad_maximize", Adagrad, None, maximize=True)
trajectory("adagrad_skip", Adagrad, None, skip={1: [2, 4]})
trajectory("adamax", Adamax, None)
trajectory("adamax_weight_decay", Adamax, None, weight_decay=0.1)
trajectory("adamax_betas_eps", Adamax, None, betas=(0.8, 0.9), eps=1e-6)
trajectory("adamax_maximize", Adamax, None, maximize=True)
trajectory("adamax_skip", Adamax, None, skip={1: [2, 4]})
# NAdam keeps mu_product, a 0-d float32 tensor, beside step. RAdam rectifies its update only once
# rho_t > 5, from step 6 with beta2 = 0.999 (from step 7 with beta2 = 0.9): its runs have 8 steps.
NAdam, RAdam = torch.optim.NAdam, torch.optim.RAdam
trajectory("nadam", NAdam, None)
trajectory("nadam_weight_decay", NAdam, None, weight_decay=0.1)
trajectory("nadam_momentum_decay", NAdam, None, momentum_decay=0.1, betas=(0.8, 0.9), eps=1e-6)
trajectory("nadam_skip", NAdam, None, skip={1: [2, 4]})
trajectory("radam", RAdam, None, steps=8)
trajectory("radam_weight_decay", RAdam, None, steps=8, weight_decay=0.1)
trajectory("radam_betas_eps", RAdam, None, steps=8, betas=(0.8, 0.9), eps=1e-6)
trajectory("radam_skip", RAdam, None, steps=8, skip={1: [2, 7]})

# ---- mixed precision: half-precision parameters with float32 master weights ---------------------------
def master_trajectory(name, cls, dt, skip=None, steps=STEPS, **kwargs):
    """Like trajectory, for parameters of dtype dt (bfloat16, float16) updated through float32 master
    copies, as DeepSpeed's bf16 optimizer and llm.c do: the optimizer runs on the masters with the
    gradients widened to float32, and each parameter is its master rounded to dt after every step.
    The state of parameter j gains master_param, its master."""
    skip = skip or {}
    torch.manual_seed(sum(map(ord, name)))
    params = [torch.randn(s).to(dt) for s in SHAPES]
    masters = [torch.nn.Parameter(p.float()) for p in params]
    for j, p in enumerate(params):
        put(f"{name}/p{j}/init", p)
    opt = cls(masters, **kwargs)
    names = {}
    for s in range(1, steps + 1):
        for j, m in enumerate(masters):
            g = torch.randn(m.shape).to(dt)
            if s in skip.get(j, ()):
                m.grad = None
            else:
                m.grad = g.float()
                put(f"{name}/step{s}/p{j}/grad", g)
        opt.step()
        for j, m in enumerate(masters):
            params[j] = m.detach().to(dt)
            put(f"{name}/step{s}/p{j}/param", params[j])
            if opt.state[m]:
                names[id(m)] = put(f"{name}/step{s}/p{j}/master_param", m)
            for key, v in opt.state[m].items():
                if isinstance(v, torch.Tensor):
                    names[id(v)] = put(f"{name}/step{s}/p{j}/{key}", v)
    sd = opt.state_dict()
    for j, m in enumerate(masters):
        if j in sd["state"]:
            sd["state"][j]["master_param"] = m
    meta[name] = json.dumps({
        "optimizer": cls.__name__,
        "dtype": str(dt).removeprefix("torch."),
        "kwargs": kwargs,
        "groups": None,
        "steps": steps,
        "no_grad": {str(j): steps for j, steps in skip.items()},
        "state_dict": jsonable(sd, names),
    })


master_trajectory("bf16_adamw", AdamW, torch.bfloat16, weight_decay=0.1)
master_trajectory("bf16_adamw_skip", AdamW, torch.bfloat16, skip={1: [2, 4]})
master_trajectory("bf16_sgd_momentum", SGD, torch.bfloat16, lr=0.01, momentum=0.9)
master_trajectory("fp16_adam", Adam, torch.float16, lr=1e-4)
master_trajectory("bf16_rmsprop", RMSprop, torch.bfloat16, lr=1e-3, momentum=0.9)
master_trajectory("bf16_adamax", Adamax, torch.bfloat16)
master_trajectory("bf16_nadam", NAdam, torch.bfloat16)
master_trajectory("bf16_radam", RAdam, torch.bfloat16, steps=8)

# ---- clip_grad_norm_ ----------------------------------------------------------------------------------
torch.manual_seed(7)
clip_in = [torch.randn(s) for s in SHAPES]  # total 2-norm ~4.6
for j, g in enumerate(clip_in):
    put(f"clip/in/g{j}", g)
for tag, max_norm, norm_type in (("max1", 1.0, 2.0), ("max0.1", 0.1, 2.0), ("max10", 10.0, 2.0), ("inf_max1", 1.0, math.inf)):
    params = [torch.nn.Parameter(torch.zeros(s)) for s in SHAPES]
    for p, g in zip(params, clip_in):
        p.grad = g.clone()
    total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type)
    name = f"clip_{tag}"
    put(f"{name}/total_norm", total)
    for j, p in enumerate(params):
        put(f"{name}/g{j}", p.grad)
    meta[name] = json.dumps({"function": "clip_grad_norm_", "max_norm": max_norm,
                             "norm_type": "inf" if math.isinf(norm_type) else norm_type, "grads": "clip/in/g<j>"})


# ---- learning-rate schedules ------------------------------------------------------------------------------
def lrs(make_sched, n, lr=0.1):
    """get_last_lr() right after construction and after each of n scheduler steps."""
    opt = SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    sched = make_sched(opt)
    out = [sched.get_last_lr()[0]]
    for _ in range(n):
        opt.step()
        sched.step()
        out.append(sched.get_last_lr()[0])
    return out


v = lrs(lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5), 6)
put("steplr/lr", torch.tensor(v, dtype=torch.float64))
meta["steplr"] = json.dumps({"scheduler": "StepLR", "lr": 0.1, "step_size": 2, "gamma": 0.5, "steps": 6, "lrs": v})

WARMUP, TOTAL, MIN_RATIO = 3, 10, 0.1


def warmup_cosine(step):
    if step < WARMUP:
        return (step + 1) / WARMUP
    progress = min(1.0, (step - WARMUP) / (TOTAL - WARMUP))
    return MIN_RATIO + (1 - MIN_RATIO) * 0.5 * (1 + math.cos(math.pi * progress))


v = lrs(lambda o: torch.optim.lr_scheduler.LambdaLR(o, warmup_cosine), TOTAL + 2)
put("warmup_cosine/lr", torch.tensor(v, dtype=torch.float64))
meta["warmup_cosine"] = json.dumps({"scheduler": "LambdaLR", "lr": 0.1, "warmup": WARMUP, "total": TOTAL,
                                    "min_ratio": MIN_RATIO, "steps": TOTAL + 2, "lr_lambda": inspect.getsource(warmup_cosine),
                                    "lrs": v})

# The other schedulers of torch.optim.lr_scheduler, in PyTorch 1.13's chainable forms.
for name, make, steps in [
    ("exponentiallr", lambda o: torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.9), 8),
    ("multisteplr", lambda o: torch.optim.lr_scheduler.MultiStepLR(o, milestones=[2, 5, 5], gamma=0.5), 8),
    ("linearlr", lambda o: torch.optim.lr_scheduler.LinearLR(o, start_factor=0.25, end_factor=0.9, total_iters=4), 8),
    ("cosineannealinglr", lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5, eta_min=0.01), 17),
]:
    v = lrs(make, steps)
    put(f"{name}/lr", torch.tensor(v, dtype=torch.float64))
    meta[name] = json.dumps({"scheduler": name, "lr": 0.1, "steps": steps, "lrs": v})

# ConstantLR and PolynomialLR (chainable forms).
for name, make, steps in [
    ("constantlr", lambda o: torch.optim.lr_scheduler.ConstantLR(o, factor=0.4, total_iters=3), 6),
    ("polynomiallr", lambda o: torch.optim.lr_scheduler.PolynomialLR(o, total_iters=4, power=2.0), 7),
]:
    v = lrs(make, steps)
    put(f"{name}/lr", torch.tensor(v, dtype=torch.float64))
    meta[name] = json.dumps({"scheduler": name, "lr": 0.1, "steps": steps, "lrs": v})

# OneCycleLR: the rate of the first group and the momentum it cycles (Adam's beta1, SGD's momentum)
# after construction and after each step up to total_steps.
def one_cycle(name, opt_cls, opt_kw, sched_kw, momentum):
    opt = opt_cls([torch.nn.Parameter(torch.zeros(1))], **opt_kw)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, **sched_kw)
    total = sched.total_steps
    lr_v, mom_v = [], []
    for i in range(total):
        g = opt.param_groups[0]
        lr_v.append(g["lr"])
        mom_v.append(g["betas"][0] if momentum == "beta1" else g["momentum"])
        opt.step()
        if i < total - 1:
            sched.step()
    put(f"{name}/lr", torch.tensor(lr_v, dtype=torch.float64))
    put(f"{name}/momentum", torch.tensor(mom_v, dtype=torch.float64))
    meta[name] = json.dumps({"scheduler": "OneCycleLR", "options": sched_kw, "lrs": lr_v, "momenta": mom_v})


one_cycle("onecycle_cos_adam", torch.optim.Adam, dict(lr=0.1), dict(max_lr=0.5, total_steps=11), "beta1")
one_cycle("onecycle_linear_sgd", SGD, dict(lr=0.1, momentum=0.9), dict(max_lr=0.5, epochs=3, steps_per_epoch=4, anneal_strategy="linear", pct_start=0.25, base_momentum=0.8, max_momentum=0.9, div_factor=10.0, final_div_factor=100.0), "momentum")
one_cycle("onecycle_three_phase_adamw", torch.optim.AdamW, dict(lr=0.1), dict(max_lr=0.3, total_steps=13, three_phase=True), "beta1")

# SequentialLR: warm-up then decay, restarting each scheduler at its milestone.
for name, make, steps in [
    ("sequential_linear_cosine", lambda o: torch.optim.lr_scheduler.SequentialLR(o, [
        torch.optim.lr_scheduler.LinearLR(o, start_factor=0.1, total_iters=3),
        torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=6, eta_min=0.001)], milestones=[3]), 12),
    ("sequential_constant_exp_step", lambda o: torch.optim.lr_scheduler.SequentialLR(o, [
        torch.optim.lr_scheduler.ConstantLR(o, factor=0.5, total_iters=2),
        torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.9),
        torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5)], milestones=[2, 5]), 10),
]:
    v = lrs(make, steps)
    put(f"{name}/lr", torch.tensor(v, dtype=torch.float64))
    meta[name] = json.dumps({"scheduler": "SequentialLR", "lr": 0.1, "steps": steps, "lrs": v})

# ReduceLROnPlateau, stepped with a metric.
PLATEAU_METRICS = [1.0, 0.9, 0.95, 0.95, 0.91, 0.96, 0.97, 0.5, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.4]
for name, kw in [("plateau_min", dict(factor=0.5, patience=1, cooldown=1, min_lr=0.02)),
                 ("plateau_max_abs", dict(mode="max", factor=0.3, patience=2, threshold=0.05, threshold_mode="abs"))]:
    opt = SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, **kw)
    v = []
    for m in PLATEAU_METRICS:
        opt.step()
        sched.step(m)
        v.append(opt.param_groups[0]["lr"])
    put(f"{name}/lr", torch.tensor(v, dtype=torch.float64))
    meta[name] = json.dumps({"scheduler": "ReduceLROnPlateau", "lr": 0.1, "options": kw, "metrics": PLATEAU_METRICS, "lrs": v})

write(OUT)
print(f"{OUT}: {sum(1 for k in meta if not k.startswith('_'))} entries, {len(tensors)} tensors")
