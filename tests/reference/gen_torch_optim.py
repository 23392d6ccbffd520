#!/usr/bin/env python3
"""Generates torch_optim.safetensors: PyTorch references for optimizers, GradScaler, gradient
clipping and learning-rate schedules.

Run with a Python that has PyTorch (Debian: /usr/bin/python3 with python3-torch 1.13, CPU only):
    /usr/bin/python3 tests/reference/gen_torch_optim.py tests/reference/torch_optim.safetensors
Nothing else is needed: the file is written by hand (header + raw little-endian bytes) as in
gen_torch_reference.py, and every random tensor comes from torch.manual_seed(20261201), so a
rerun with the same torch gives the same bytes. If a `transformers` package is installed its
optimization.py is used as a cross-check of the LR lambdas (see "LR schedules"); it never
changes the stored numbers, only the metadata key "transformers_check" of those cases.

File layout
-----------
Standard safetensors: 8-byte little-endian header length, JSON header, raw data. Dtypes used:
F32, BF16 (raw bf16 bits), F64. Every stored tensor has rank >= 1 (one-element values have
shape [1]). `__metadata__` (string -> string) holds:
  "torch_version": torch.__version__ of the generating run ("1.13.0a0" for the committed file).
  "cases": a JSON list of the case names, in generation order.
  "case.<name>": one JSON object per case. Every object has "kind", one of "optim",
      "grad_scaler", "clip_grad_norm", "clip_grad_value", "lr_schedule". Numbers are JSON
      numbers (Python's repr of a double, so they parse back to the exact double); a
      non-finite number is written as the string "nan", "inf" or "-inf". Booleans are JSON
      booleans; a hyper-parameter that does not apply to an algorithm is null.
Tensor names are "<name>.<...>" below; step numbers are 1-based; <i> is the parameter index.

kind "optim" (cases sgd_plain, sgd_momentum_damp_wd, sgd_nesterov_wd, sgd_maximize,
adam_default, adam_wd_l2, adam_amsgrad, adamw_wd, adamw_amsgrad_wd_lr1e-2, adamw_maximize,
adamw_bf16_master, adam_amsgrad_bf16_master, sgd_momentum_bf16_master)
  JSON: {"kind": "optim", "algo": "sgd"|"adam"|"adamw", "lr", "momentum", "dampening",
         "nesterov", "weight_decay", "maximize", "betas": [b1, b2], "eps", "amsgrad",
         "steps": 5, "params": 3, "shapes": [[7], [5, 13], [129]],
         "param_dtype": "f32"|"bf16", "grad_dtype": "f32"|"bf16", "master": bool}
    For "sgd": "betas" and "eps" are null, "amsgrad" is false. For "adam"/"adamw":
    "momentum" 0, "dampening" 0, "nesterov" false.
  Tensors, for i in 0..2 and step s in 1..5:
    <name>.param.<i>      initial parameter; f32, or bf16 when param_dtype is bf16
    <name>.grad.<s>.<i>   the gradient of step s, in grad_dtype
    <name>.out.<s>.<i>    the parameter after step s, in param_dtype
    <name>.master.<s>.<i> (master cases only) the f32 master after step s
    <name>.state.<i>.<k>  f32 optimizer state after step 5, k among torch's state names:
                          momentum_buffer (sgd with momentum != 0), exp_avg, exp_avg_sq,
                          max_exp_avg_sq (amsgrad), and step (adam/adamw; shape [1], = 5)
  Numerics: torch.optim.SGD / Adam / AdamW with foreach=False (the single-tensor path;
  differentiable=False where 1.13 has the argument: SGD and Adam), one param group, one
  optimizer.step() per step with p.grad set to the stored gradient. Gradients are randn
  times a per-step magnitude (1, 0.01, 30, 1e-4, 3) and a per-param factor (1, 0.5, 2);
  the gradient of param 1 at step 3 is exactly zero. All non-master f32 cases share the same
  initial params and gradients (stored again under each case's name).
  The master cases (master true, param_dtype bf16, grad_dtype bf16): params are the f32
  initial params rounded to bf16 (stored as <name>.param.<i>, bf16); the master is an f32
  copy of them; gradients are the f32 gradients rounded to bf16 (stored bf16) and upcast to
  f32 for the step; the optimizer steps the f32 master exactly as the f32 optimizer does;
  then param = master.to(torch.bfloat16) (round to nearest even) is <name>.out.<s>.<i>.
  torch 1.13's single-tensor formulas (every tensor op is an f32 op; Python scalars are
  doubles, turned into f32 when an op uses them):
    g = -grad if maximize else grad
    SGD:   if wd: g = g.add(p, alpha=wd)
           if momentum: buf = clone(g) at the first step, else buf.mul_(momentum).add_(g, alpha=1-dampening)
                        g = g.add(buf, alpha=momentum) if nesterov else buf
           p.add_(g, alpha=-lr)
    Adam:  if wd: g = g.add(p, alpha=wd)           AdamW: p.mul_(1 - lr*wd)
    both:  exp_avg.mul_(b1).add_(g, alpha=1-b1); exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2)
           bc1 = 1 - b1**step, bc2 = 1 - b2**step (doubles), step_size = lr / bc1
           if amsgrad: torch.maximum(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq), v = max_exp_avg_sq
           else v = exp_avg_sq
           denom = (v.sqrt() / math.sqrt(bc2)).add_(eps); p.addcdiv_(exp_avg, denom, value=-step_size)

kind "grad_scaler" (case grad_scaler_sgd)
  torch's own torch.cuda.amp.GradScaler class, run on CPU: the two CUDA-only kernels it
  calls, aten::_amp_foreach_non_finite_check_and_unscale_ and aten::_amp_update_scale_,
  are given CPU implementations through torch.library.Library("aten", "IMPL"), written
  here in Python as transcriptions of ATen's aten/src/ATen/native/cuda/AmpKernels.cu
  (unscale: per element, found_inf = 1 if the value is not finite, value *= inv_scale in
  f32 unless inv_scale == 1 (non-finite values are multiplied too); update: if found_inf:
  scale = f32(scale * backoff), tracker = 0; else successful = tracker + 1; if successful
  == growth_interval: new_scale = f32(scale * growth), scale = new_scale if finite,
  tracker = 0; else tracker = successful). The is_cuda assertion of
  grad_scaler._MultiDeviceReplicator.__init__ is patched out, grad_scaler's
  amp_definitely_not_available() is patched to False (so the constructor keeps the scaler
  enabled), and the scale/tracker tensors are created by the scaler's own
  _lazy_init_scale_growth_tracker(cpu), which is what scaler.scale() does on its first call
  (scale() itself is not called: it asserts is_cuda). Everything else -- unscale_() with the
  f64 reciprocal inv_scale = f32(1 / f64(scale)), step() skipping optimizer.step() when
  found_inf, update(), state_dict() -- is torch's code unchanged.
  Optimizer: torch.optim.SGD(lr=0.1, momentum=0.9, foreach=False) on 2 params of shapes [7]
  and [5, 13]. GradScaler(init_scale=1024, growth_factor=2, backoff_factor=0.5,
  growth_interval=3), 14 steps. Backward of scaler.scale(loss) is emulated: before step s,
  p.grad = true_grad * scaler.get_scale() in f32; then +inf is written into param 0's grad
  (element 2) at step 4, NaN into param 1's grad (flat element 10) at step 5 and -inf into
  param 1's grad (flat element 0) at step 9; then scaler.step(opt); scaler.update().
  JSON: {"kind": "grad_scaler", "algo": "sgd", "lr": 0.1, "momentum": 0.9, "dampening": 0,
         "nesterov": false, "weight_decay": 0, "maximize": false, "params": 2,
         "shapes": [[7], [5, 13]], "init_scale", "growth_factor", "backoff_factor",
         "growth_interval", "num_steps": 14,
         "steps": [{"step": s, "scale_before", "scale_after", "growth_tracker_after",
                    "found_inf": bool, "skipped": bool}, ...]    (one per step, in order)
         "state_dict": {"scale", "growth_factor", "backoff_factor", "growth_interval",
                        "_growth_tracker"}}                       (scaler.state_dict() at the end)
  Tensors (f32): <name>.param.<i> initial params; <name>.grad.<s>.<i> the scaled grads handed
  to the scaler (with the injected inf/NaN); <name>.unscaled.<s>.<i> p.grad after
  scaler.step() (unscaled in place, also on skipped steps); <name>.out.<s>.<i> params after
  scaler.step() + scaler.update() (unchanged on skipped steps); <name>.state.<i>.momentum_buffer
  after step 14.

kind "clip_grad_norm" (cases clip_norm_l2_clip, clip_norm_l2_noclip, clip_norm_inf,
clip_norm_l2_nan)
  torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type, error_if_nonfinite=False) on 3
  params whose f32 grads have shapes [7], [5, 13], [129] (grad 2 is large, ~1e3; clip_norm_l2_nan
  has grad 1 flat element 7 = NaN).
  JSON: {"kind": "clip_grad_norm", "max_norm", "norm_type": "2"|"inf",
         "error_if_nonfinite": false, "params": 3, "total_norm": float (or "nan"/"inf")}
  Tensors (f32): <name>.grad.<i> before, <name>.out.<i> after, <name>.total_norm [1] (the
  returned tensor, exact bits), <name>.norms [3] (torch.norm(g, norm_type), or g.abs().max()
  for inf, per grad), <name>.clip_coef [1] (clamp(max_norm / (total_norm + 1e-6), max=1.0),
  the factor every grad was multiplied by, also when it is 1).
kind "clip_grad_value" (case clip_value_0.3)
  torch.nn.utils.clip_grad_value_(params, 0.3) = grad.clamp_(-0.3, 0.3) (bounds are f32(0.3)).
  JSON: {"kind": "clip_grad_value", "clip_value": 0.3, "params": 3}
  Tensors (f32): <name>.grad.<i> before (the same grads as clip_norm_l2_clip), <name>.out.<i> after.

kind "lr_schedule" (cases hf_constant, hf_constant_warmup, hf_linear_warmup,
hf_cosine_warmup, hf_cosine_hard_restarts_warmup, hf_polynomial_warmup_p1,
hf_polynomial_warmup_p2, torch_cosine_annealing, torch_linear, torch_polynomial)
  An SGD with one param group, lr 0.1 (base_lr), drives the scheduler; <name>.lr (F64,
  shape [scheduler_steps + 1]) holds optimizer.param_groups[0]["lr"] after the scheduler's
  construction (index 0) and after each of scheduler_steps scheduler.step() calls (index k
  after k calls), each preceded by an optimizer.step() without grads (a no-op, so torch does
  not warn about the call order).
  hf_*: Hugging Face transformers' schedules, i.e. torch.optim.lr_scheduler.LambdaLR with
  the lambdas of transformers/optimization.py, so lr[k] = 0.1 * lambda(k) for k = 0..70
  (num_warmup_steps 10, num_training_steps 60, 70 steps: 10 past the end). The lambdas are
  transcribed below (transformers cannot be imported with torch 1.13: transformers >= 4.5x
  requires torch >= 2, and its optimization module fails to import). When a transformers
  package is installed, its optimization.py is located with importlib (not imported), its
  top-level functions are exec'd from the source and its get_*_schedule* builders are driven
  the same way; the script asserts that they give exactly the same doubles, and the case's
  "transformers_check" says which version was checked ("" when none was found).
  JSON: {"kind": "lr_schedule", "schedule": "<transformers function name>", "base_lr": 0.1,
         "num_warmup_steps": 10, "num_training_steps": 60, "scheduler_steps": 70,
         plus "num_cycles" (cosine: 0.5, hard restarts: 3), "lr_end" and "power"
         (polynomial: 1e-7 and 1.0 / 2.0), "transformers_check": "<version>"|""}
  torch_*: torch's own schedulers stepped 30 times (31 values): CosineAnnealingLR(T_max=20,
  eta_min=0.001), LinearLR(start_factor=0.25, total_iters=8) (end_factor 1.0),
  PolynomialLR(total_iters=20, power=2.0). step() uses their chainable (recursive) get_lr(),
  which differs in the last bits from the closed forms; <name>.lr is what step() gives and
  <name>.lr_closed (F64, same length) is scheduler._get_closed_form_lr() evaluated at each
  last_epoch (k = 0..30) of the same run. CosineAnnealingLR keeps going past T_max (its
  recursive form rises again).
  JSON: {"kind": "lr_schedule", "schedule": "CosineAnnealingLR"|"LinearLR"|"PolynomialLR",
         "base_lr": 0.1, "scheduler_steps": 30, plus "T_max", "eta_min" / "start_factor",
         "end_factor", "total_iters" / "total_iters", "power"}
"""
import ast
import importlib.metadata
import importlib.util
import json
import math
import struct
import sys
from functools import partial

import torch
import torch.cuda.amp.grad_scaler as grad_scaler_module
from torch.optim.lr_scheduler import LambdaLR

torch.manual_seed(20261201)
cases = {}      # name -> dict (JSON-encoded into __metadata__)
tensors = {}    # full tensor name -> torch tensor

DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.bfloat16: "BF16"}
SHORT = {torch.float32: "f32", torch.bfloat16: "bf16"}


def jnum(x):
    """A float for JSON: non-finite values as strings."""
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def put(name, t):
    assert name not in tensors, name
    t = t.detach().clone().contiguous()
    if t.dim() == 0:
        t = t.reshape(1)
    tensors[name] = t


# ---------------------------------------------------------------------------------------------
# 1. Optimizers
SHAPES = [(7,), (5, 13), (129,)]
STEPS = 5
STEP_MAG = [1.0, 0.01, 30.0, 1e-4, 3.0]
PARAM_MAG = [1.0, 0.5, 2.0]
INIT = [torch.randn(s) for s in SHAPES]
GRADS = []  # GRADS[s-1][i]
for s in range(STEPS):
    GRADS.append([torch.randn(sh) * (STEP_MAG[s] * PARAM_MAG[i]) for i, sh in enumerate(SHAPES)])
GRADS[2][1] = torch.zeros(SHAPES[1])  # exact zeros: param 1 at step 3


def make_optimizer(h, params):
    if h["algo"] == "sgd":
        return torch.optim.SGD(params, lr=h["lr"], momentum=h["momentum"], dampening=h["dampening"],
                               weight_decay=h["weight_decay"], nesterov=h["nesterov"],
                               maximize=h["maximize"], foreach=False, differentiable=False)
    if h["algo"] == "adam":
        return torch.optim.Adam(params, lr=h["lr"], betas=tuple(h["betas"]), eps=h["eps"],
                                weight_decay=h["weight_decay"], amsgrad=h["amsgrad"],
                                maximize=h["maximize"], foreach=False, capturable=False,
                                differentiable=False, fused=False)
    if h["algo"] == "adamw":  # 1.13's AdamW has no `differentiable` argument
        return torch.optim.AdamW(params, lr=h["lr"], betas=tuple(h["betas"]), eps=h["eps"],
                                 weight_decay=h["weight_decay"], amsgrad=h["amsgrad"],
                                 maximize=h["maximize"], foreach=False, capturable=False)
    raise ValueError(h["algo"])


def hparams(algo, **kw):
    if algo == "sgd":
        h = {"algo": "sgd", "lr": 0.1, "momentum": 0.0, "dampening": 0.0, "nesterov": False,
             "weight_decay": 0.0, "maximize": False, "betas": None, "eps": None, "amsgrad": False}
    else:
        h = {"algo": algo, "lr": 1e-3, "momentum": 0.0, "dampening": 0.0, "nesterov": False,
             "weight_decay": 0.0 if algo == "adam" else 0.01, "maximize": False,
             "betas": [0.9, 0.999], "eps": 1e-8, "amsgrad": False}
    for k, v in kw.items():
        assert k in h, k
        h[k] = v
    return h


STATE_NAMES = ("momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step")


def optim_case(name, h, master=False):
    meta = {"kind": "optim", **h, "steps": STEPS, "params": len(SHAPES),
            "shapes": [list(s) for s in SHAPES],
            "param_dtype": "bf16" if master else "f32", "grad_dtype": "bf16" if master else "f32",
            "master": master}
    cases[name] = meta
    if master:
        init = [x.to(torch.bfloat16) for x in INIT]
        params = [x.float().clone().requires_grad_(True) for x in init]  # the f32 masters
    else:
        init = INIT
        params = [x.clone().requires_grad_(True) for x in init]
    for i, x in enumerate(init):
        put(f"{name}.param.{i}", x)
    opt = make_optimizer(h, params)
    for s in range(1, STEPS + 1):
        for i, p in enumerate(params):
            g = GRADS[s - 1][i]
            if master:
                g = g.to(torch.bfloat16)
            put(f"{name}.grad.{s}.{i}", g)
            p.grad = g.float().clone()
        opt.step()
        for i, p in enumerate(params):
            if master:
                put(f"{name}.out.{s}.{i}", p.to(torch.bfloat16))
                put(f"{name}.master.{s}.{i}", p)
            else:
                put(f"{name}.out.{s}.{i}", p)
    for i, p in enumerate(params):
        st = opt.state[p]
        assert set(st) <= set(STATE_NAMES), st.keys()
        for k in STATE_NAMES:
            if k in st and st[k] is not None:
                v = st[k]
                assert v.dtype == torch.float32
                put(f"{name}.state.{i}.{k}", v)


def optim_cases():
    optim_case("sgd_plain", hparams("sgd"))
    optim_case("sgd_momentum_damp_wd", hparams("sgd", momentum=0.9, dampening=0.1, weight_decay=0.01))
    optim_case("sgd_nesterov_wd", hparams("sgd", momentum=0.9, nesterov=True, weight_decay=0.01))
    optim_case("sgd_maximize", hparams("sgd", maximize=True))
    optim_case("adam_default", hparams("adam"))
    optim_case("adam_wd_l2", hparams("adam", weight_decay=0.01))
    optim_case("adam_amsgrad", hparams("adam", amsgrad=True))
    optim_case("adamw_wd", hparams("adamw", weight_decay=0.1))
    optim_case("adamw_amsgrad_wd_lr1e-2", hparams("adamw", amsgrad=True, weight_decay=0.01, lr=1e-2))
    optim_case("adamw_maximize", hparams("adamw", maximize=True))
    optim_case("adamw_bf16_master", hparams("adamw", weight_decay=0.1, lr=1e-2), master=True)
    optim_case("adam_amsgrad_bf16_master", hparams("adam", amsgrad=True), master=True)
    optim_case("sgd_momentum_bf16_master",
               hparams("sgd", momentum=0.9, dampening=0.1, weight_decay=0.01), master=True)


# ---------------------------------------------------------------------------------------------
# 2. GradScaler: torch's class on CPU, with CPU kernels for its two CUDA-only ops.
def _amp_foreach_non_finite_check_and_unscale_cpu(scaled_grads, found_inf, inv_scale):
    # Transcription of _amp_foreach_non_finite_check_and_unscale_cuda_ (AmpKernels.cu).
    if len(scaled_grads) == 0:
        return
    assert inv_scale.numel() == 1, "inv_scale must be a 1-element tensor."
    assert found_inf.numel() == 1, "found_inf must be a 1-element tensor."
    assert inv_scale.dtype == torch.float32, "inv_scale must be a float tensor."
    assert found_inf.dtype == torch.float32, "found_inf must be a float tensor."
    inv = inv_scale.item()  # the f32 value, exactly
    for g in scaled_grads:
        assert g.dtype in (torch.float32, torch.float16, torch.bfloat16)
        val = g.float()  # opmath_t
        if not bool(torch.isfinite(val).all()):
            found_inf.fill_(1.0)
        if inv != 1.0:  # inv_scale_val == 1.f ? val : val * inv_scale_val
            g.copy_(val * inv_scale)  # f32 * f32, then cast to scalar_t
    return


def _amp_update_scale_cpu(current_scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                          growth_interval):
    # Transcription of _amp_update_scale_cuda_ / amp_update_scale_cuda_kernel (AmpKernels.cu).
    assert growth_tracker.numel() == 1 and growth_tracker.dtype == torch.int32
    assert current_scale.numel() == 1 and current_scale.dtype == torch.float32
    assert found_inf.numel() == 1 and found_inf.dtype == torch.float32

    def to_f32(x):  # static_cast<float>(double), round to nearest even, overflow -> inf
        return torch.tensor([x], dtype=torch.float64).to(torch.float32)

    if found_inf.item():  # `if (*found_inf)`: any nonzero value (NaN too)
        current_scale.copy_(to_f32(current_scale.item() * backoff_factor))  # float * double
        growth_tracker.fill_(0)
    else:
        successful = growth_tracker.item() + 1
        if successful == growth_interval:
            new_scale = to_f32(current_scale.item() * growth_factor)
            if bool(torch.isfinite(new_scale).all()):
                current_scale.copy_(new_scale)
            growth_tracker.fill_(0)
        else:
            growth_tracker.fill_(successful)
    return current_scale


_AMP_LIB = torch.library.Library("aten", "IMPL")  # kept alive: the registrations live with it
_AMP_LIB.impl("_amp_foreach_non_finite_check_and_unscale_",
              _amp_foreach_non_finite_check_and_unscale_cpu, "CPU")
_AMP_LIB.impl("_amp_update_scale_", _amp_update_scale_cpu, "CPU")


def _replicator_init(self, master_tensor):
    # torch 1.13's _MultiDeviceReplicator.__init__ without `assert master_tensor.is_cuda or ...`
    self.master = master_tensor
    self._per_device_tensors = {}


grad_scaler_module._MultiDeviceReplicator.__init__ = _replicator_init
grad_scaler_module.amp_definitely_not_available = lambda: False


def grad_scaler_case(name="grad_scaler_sgd"):
    shapes = [(7,), (5, 13)]
    n_steps = 14
    init_scale, growth_factor, backoff_factor, growth_interval = 1024.0, 2.0, 0.5, 3
    lr, momentum = 0.1, 0.9
    inject = {4: (0, 2, math.inf), 5: (1, 10, math.nan), 9: (1, 0, -math.inf)}
    mags = [1.0, 0.3, 3.0, 1.0, 1.0, 0.05, 2.0, 1.0, 1.0, 0.5, 10.0, 0.01, 1.0, 4.0]
    true_grads = [[torch.randn(s) * mags[k] for s in shapes] for k in range(n_steps)]
    params = [torch.randn(s).requires_grad_(True) for s in shapes]
    for i, p in enumerate(params):
        put(f"{name}.param.{i}", p)
    opt = torch.optim.SGD(params, lr=lr, momentum=momentum, foreach=False, differentiable=False)
    scaler = torch.cuda.amp.GradScaler(init_scale=init_scale, growth_factor=growth_factor,
                                       backoff_factor=backoff_factor, growth_interval=growth_interval)
    assert scaler.is_enabled()
    scaler._lazy_init_scale_growth_tracker(torch.device("cpu"))  # what scale() does first
    steps = []
    exp_scale, exp_tracker = init_scale, 0  # an independent check of the expected sequence
    for s in range(1, n_steps + 1):
        scale_before = scaler.get_scale()
        for i, p in enumerate(params):
            p.grad = true_grads[s - 1][i] * scale_before
        if s in inject:
            i, j, v = inject[s]
            params[i].grad.view(-1)[j] = v
        for i, p in enumerate(params):
            put(f"{name}.grad.{s}.{i}", p.grad)
        before = [p.detach().clone() for p in params]
        scaler.step(opt)
        found_inf = bool(sum(v.item() for v in scaler._found_inf_per_device(opt).values()))
        for i, p in enumerate(params):
            put(f"{name}.unscaled.{s}.{i}", p.grad)
        scaler.update()
        unchanged = all(torch.equal(a, p.detach()) for a, p in zip(before, params))
        assert unchanged == found_inf, s
        for i, p in enumerate(params):
            put(f"{name}.out.{s}.{i}", p)
        steps.append({"step": s, "scale_before": scale_before, "scale_after": scaler.get_scale(),
                      "growth_tracker_after": scaler._get_growth_tracker(),
                      "found_inf": found_inf, "skipped": found_inf})
        assert found_inf == (s in inject)
        if found_inf:
            exp_scale, exp_tracker = exp_scale * backoff_factor, 0
        elif exp_tracker + 1 == growth_interval:
            exp_scale, exp_tracker = exp_scale * growth_factor, 0
        else:
            exp_tracker += 1
        assert (steps[-1]["scale_after"], steps[-1]["growth_tracker_after"]) == (exp_scale, exp_tracker)
    for i, p in enumerate(params):
        put(f"{name}.state.{i}.momentum_buffer", opt.state[p]["momentum_buffer"])
    sd = scaler.state_dict()
    cases[name] = {"kind": "grad_scaler", "algo": "sgd", "lr": lr, "momentum": momentum,
                   "dampening": 0.0, "nesterov": False, "weight_decay": 0.0, "maximize": False,
                   "params": len(shapes), "shapes": [list(s) for s in shapes],
                   "init_scale": init_scale, "growth_factor": growth_factor,
                   "backoff_factor": backoff_factor, "growth_interval": growth_interval,
                   "num_steps": n_steps, "steps": steps,
                   "state_dict": {"scale": sd["scale"], "growth_factor": sd["growth_factor"],
                                  "backoff_factor": sd["backoff_factor"],
                                  "growth_interval": sd["growth_interval"],
                                  "_growth_tracker": sd["_growth_tracker"]}}


# ---------------------------------------------------------------------------------------------
# 3. Gradient clipping
CLIP_GRADS = [torch.randn(SHAPES[0]), torch.randn(SHAPES[1]) * 0.3, torch.randn(SHAPES[2]) * 1e3]


def clip_norm_case(name, max_norm, norm_type, nan=False):
    grads = [g.clone() for g in CLIP_GRADS]
    if nan:
        grads[1].view(-1)[7] = math.nan
    params = [torch.zeros_like(g).requires_grad_(True) for g in grads]
    for i, (p, g) in enumerate(zip(params, grads)):
        p.grad = g.clone()
        put(f"{name}.grad.{i}", g)
    norm_type_f = math.inf if norm_type == "inf" else float(norm_type)
    if norm_type_f == math.inf:
        norms = torch.stack([g.abs().max() for g in grads])
    else:
        norms = torch.stack([torch.norm(g, norm_type_f) for g in grads])
    total = torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type_f,
                                           error_if_nonfinite=False)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for i, p in enumerate(params):
        put(f"{name}.out.{i}", p.grad)
    put(f"{name}.total_norm", total)
    put(f"{name}.norms", norms)
    put(f"{name}.clip_coef", coef)
    cases[name] = {"kind": "clip_grad_norm", "max_norm": max_norm, "norm_type": norm_type,
                   "error_if_nonfinite": False, "params": len(grads), "total_norm": jnum(total.item())}


def clip_cases():
    clip_norm_case("clip_norm_l2_clip", 1.0, "2")
    clip_norm_case("clip_norm_l2_noclip", 1e6, "2")
    clip_norm_case("clip_norm_inf", 0.5, "inf")
    clip_norm_case("clip_norm_l2_nan", 1.0, "2", nan=True)
    name = "clip_value_0.3"
    params = [torch.zeros_like(g).requires_grad_(True) for g in CLIP_GRADS]
    for i, (p, g) in enumerate(zip(params, CLIP_GRADS)):
        p.grad = g.clone()
        put(f"{name}.grad.{i}", g)
    torch.nn.utils.clip_grad_value_(params, 0.3)
    for i, p in enumerate(params):
        put(f"{name}.out.{i}", p.grad)
    cases[name] = {"kind": "clip_grad_value", "clip_value": 0.3, "params": len(params)}


# ---------------------------------------------------------------------------------------------
# 4. LR schedules. Transcriptions of transformers/optimization.py (checked against 5.24.0).
def _get_constant_lambda(_=None):
    return 1


def _get_constant_schedule_with_warmup_lr_lambda(current_step, *, num_warmup_steps):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1.0, num_warmup_steps))
    return 1.0


def _get_linear_schedule_with_warmup_lr_lambda(current_step, *, num_warmup_steps, num_training_steps):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    return max(0.0, float(num_training_steps - current_step) / float(max(1, num_training_steps - num_warmup_steps)))


def _get_cosine_schedule_with_warmup_lr_lambda(current_step, *, num_warmup_steps, num_training_steps,
                                               num_cycles, min_lr_rate=0.0):
    # transformers defines this name twice; the second definition (with min_lr_rate, which
    # get_cosine_schedule_with_warmup leaves at 0.0) is the one its module uses.
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    progress = float(current_step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
    factor = 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress))
    factor = factor * (1 - min_lr_rate) + min_lr_rate
    return max(0, factor)


def _get_cosine_with_hard_restarts_schedule_with_warmup_lr_lambda(current_step, *, num_warmup_steps,
                                                                  num_training_steps, num_cycles):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    progress = float(current_step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
    if progress >= 1.0:
        return 0.0
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * ((float(num_cycles) * progress) % 1.0))))


def _get_polynomial_decay_schedule_with_warmup_lr_lambda(current_step, *, num_warmup_steps,
                                                         num_training_steps, lr_end, power, lr_init):
    if current_step < num_warmup_steps:
        return float(current_step) / float(max(1, num_warmup_steps))
    elif current_step > num_training_steps:
        return lr_end / lr_init  # as LambdaLR multiplies by lr_init
    else:
        lr_range = lr_init - lr_end
        decay_steps = num_training_steps - num_warmup_steps
        pct_remaining = 1 - (current_step - num_warmup_steps) / decay_steps
        decay = lr_range * pct_remaining**power + lr_end
        return decay / lr_init  # as LambdaLR multiplies by lr_init


def transcribed_schedule(fn_name, optimizer, **kw):
    if fn_name == "get_constant_schedule":
        return LambdaLR(optimizer, _get_constant_lambda)
    if fn_name == "get_constant_schedule_with_warmup":
        return LambdaLR(optimizer, partial(_get_constant_schedule_with_warmup_lr_lambda, **kw))
    if fn_name == "get_linear_schedule_with_warmup":
        return LambdaLR(optimizer, partial(_get_linear_schedule_with_warmup_lr_lambda, **kw))
    if fn_name == "get_cosine_schedule_with_warmup":
        return LambdaLR(optimizer, partial(_get_cosine_schedule_with_warmup_lr_lambda, **kw))
    if fn_name == "get_cosine_with_hard_restarts_schedule_with_warmup":
        return LambdaLR(optimizer, partial(_get_cosine_with_hard_restarts_schedule_with_warmup_lr_lambda, **kw))
    if fn_name == "get_polynomial_decay_schedule_with_warmup":
        lr_init = optimizer.defaults["lr"]
        assert lr_init > kw["lr_end"]
        return LambdaLR(optimizer, partial(_get_polynomial_decay_schedule_with_warmup_lr_lambda,
                                           lr_init=lr_init, **kw))
    raise ValueError(fn_name)


def transformers_functions():
    """transformers' own schedule builders, exec'd from its optimization.py source (the package
    is located, not imported). Returns (version, namespace) or ("", None)."""
    try:
        spec = importlib.util.find_spec("transformers")
    except (ImportError, ValueError):
        return "", None
    if spec is None or not spec.submodule_search_locations:
        return "", None
    path = None
    for loc in spec.submodule_search_locations:
        cand = loc + "/optimization.py"
        try:
            with open(cand, encoding="utf-8") as f:
                source = f.read()
            path = cand
            break
        except OSError:
            pass
    if path is None:
        return "", None
    ns = {"__name__": "transformers_optimization_source", "math": math, "partial": partial,
          "torch": torch, "Optimizer": torch.optim.Optimizer, "LambdaLR": LambdaLR}
    for node in ast.parse(source).body:  # top-level functions in order: later definitions win
        if isinstance(node, ast.FunctionDef):
            mod = ast.Module(body=[node], type_ignores=[])
            try:
                exec(compile(mod, path, "exec"), ns)
            except NameError:
                pass  # a decorator naming something not provided; not a schedule
    try:
        version = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return version, ns


def run_scheduler(make, n_steps, closed=False):
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=0.1)
    sched = make(opt)
    lrs = [opt.param_groups[0]["lr"]]
    closed_lrs = [sched._get_closed_form_lr()[0]] if closed else None
    for _ in range(n_steps):
        opt.step()  # no grads: a no-op, keeps torch from warning about the call order
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
        if closed:
            closed_lrs.append(sched._get_closed_form_lr()[0])
    return lrs, closed_lrs


def lr_cases():
    tf_version, tf = transformers_functions()
    warm, total, n_steps = 10, 60, 70
    hf = [
        ("hf_constant", "get_constant_schedule", {}),
        ("hf_constant_warmup", "get_constant_schedule_with_warmup", {"num_warmup_steps": warm}),
        ("hf_linear_warmup", "get_linear_schedule_with_warmup",
         {"num_warmup_steps": warm, "num_training_steps": total}),
        ("hf_cosine_warmup", "get_cosine_schedule_with_warmup",
         {"num_warmup_steps": warm, "num_training_steps": total, "num_cycles": 0.5}),
        ("hf_cosine_hard_restarts_warmup", "get_cosine_with_hard_restarts_schedule_with_warmup",
         {"num_warmup_steps": warm, "num_training_steps": total, "num_cycles": 3}),
        ("hf_polynomial_warmup_p1", "get_polynomial_decay_schedule_with_warmup",
         {"num_warmup_steps": warm, "num_training_steps": total, "lr_end": 1e-7, "power": 1.0}),
        ("hf_polynomial_warmup_p2", "get_polynomial_decay_schedule_with_warmup",
         {"num_warmup_steps": warm, "num_training_steps": total, "lr_end": 1e-7, "power": 2.0}),
    ]
    for name, fn_name, kw in hf:
        lrs, _ = run_scheduler(lambda opt: transcribed_schedule(fn_name, opt, **kw), n_steps)
        if tf is not None:
            ref, _ = run_scheduler(lambda opt: tf[fn_name](opt, **kw), n_steps)
            assert [struct.pack("<d", x) for x in ref] == [struct.pack("<d", x) for x in lrs], \
                (name, ref, lrs)
        put(f"{name}.lr", torch.tensor(lrs, dtype=torch.float64))
        meta = {"kind": "lr_schedule", "schedule": fn_name, "base_lr": 0.1,
                "num_warmup_steps": warm, "num_training_steps": total, "scheduler_steps": n_steps}
        meta.update({k: v for k, v in kw.items() if k not in meta})
        meta["transformers_check"] = tf_version
        cases[name] = meta
    sched = torch.optim.lr_scheduler
    own = [
        ("torch_cosine_annealing", "CosineAnnealingLR", {"T_max": 20, "eta_min": 0.001},
         lambda opt: sched.CosineAnnealingLR(opt, T_max=20, eta_min=0.001)),
        ("torch_linear", "LinearLR", {"start_factor": 0.25, "end_factor": 1.0, "total_iters": 8},
         lambda opt: sched.LinearLR(opt, start_factor=0.25, total_iters=8)),
        ("torch_polynomial", "PolynomialLR", {"total_iters": 20, "power": 2.0},
         lambda opt: sched.PolynomialLR(opt, total_iters=20, power=2.0)),
    ]
    for name, cls, kw, make in own:
        lrs, closed = run_scheduler(make, 30, closed=True)
        put(f"{name}.lr", torch.tensor(lrs, dtype=torch.float64))
        put(f"{name}.lr_closed", torch.tensor(closed, dtype=torch.float64))
        cases[name] = {"kind": "lr_schedule", "schedule": cls, "base_lr": 0.1, "scheduler_steps": 30, **kw}


# ---------------------------------------------------------------------------------------------
def write(path):
    meta = {"torch_version": torch.__version__, "cases": json.dumps(list(cases))}
    for name, c in cases.items():
        meta["case." + name] = json.dumps(c, allow_nan=False)
    header = {"__metadata__": meta}
    blobs = []
    offset = 0
    for name, t in tensors.items():
        t = t.contiguous()
        if t.dtype == torch.bfloat16:
            raw = t.view(torch.int16).numpy().tobytes()
        else:
            raw = t.numpy().tobytes()
        header[name] = {"dtype": DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":"), allow_nan=False).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for raw in blobs:
            f.write(raw)


assert sys.byteorder == "little"
optim_cases()
grad_scaler_case()
clip_cases()
lr_cases()
write(sys.argv[1])
print(f"{len(cases)} cases, {len(tensors)} tensors, torch {torch.__version__}")
