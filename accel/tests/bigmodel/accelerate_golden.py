# Writes accelerate_golden.json: device maps, balanced memory and module sizes that Hugging Face
# Accelerate computes for the models of the big-model tests (bigmodel_test_util.h's small GPT and
# the toy modules of device_map_test.cc, rebuilt here in torch with the same names, classes,
# shapes and registration order). golden_test.cc compares braid's answers with them.
#
# Generated with accelerate 1.11.0 and Debian's torch 1.13 (the interpreter that has it:
# /usr/bin/python3; torch 1.13 lacks named_parameters(remove_duplicate=...), shimmed below):
#   /usr/bin/python3 -m pip download accelerate==1.11.0 --no-deps -d /tmp/acc
#   (cd /tmp/acc && python3 -m zipfile -e accelerate-1.11.0-py3-none-any.whl pkg)
#   PYTHONHASHSEED=0 PYTHONPATH=/tmp/acc/pkg /usr/bin/python3 accelerate_golden.py \
#       > accelerate_golden.json
# clean_device_map walks a set, so the order of merged entries in a cleaned map follows Python's
# string hashing (hence the fixed seed); golden_test.cc compares cleaned maps as sets, raw maps
# (clean_result=False) in order.
import json, sys, logging, warnings
logging.disable(logging.CRITICAL); warnings.filterwarnings("ignore")
import torch, torch.nn as nn
_orig_np = nn.Module.named_parameters
def _np(self, prefix='', recurse=True, remove_duplicate=True):
    # torch 1.13 has no remove_duplicate (torch 2.0 added it)
    if remove_duplicate:
        yield from _orig_np(self, prefix, recurse)
        return
    mods = self.named_modules(prefix=prefix, remove_duplicate=False) if recurse else [(prefix, self)]
    for mp, m in mods:
        for n, p in m._parameters.items():
            if p is not None:
                yield (mp + ('.' if mp else '') + n, p)
nn.Module.named_parameters = _np
from accelerate.utils.modeling import infer_auto_device_map, get_balanced_memory, compute_module_sizes

def cls(name, base=nn.Module):
    return type(name, (base,), {})

class Lin(nn.Module):
    def __init__(self, i, o, bias=True):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(i, o))
        if bias: self.bias = nn.Parameter(torch.zeros(o))
Conv1D = cls("Linear", Lin)
class LN(nn.Module):
    def __init__(self, d):
        super().__init__(); self.weight = nn.Parameter(torch.zeros(d)); self.bias = nn.Parameter(torch.zeros(d))
LayerNorm = cls("LayerNorm", LN)
class Emb(nn.Module):
    def __init__(self, n, d):
        super().__init__(); self.weight = nn.Parameter(torch.zeros(n, d))
Embedding = cls("Embedding", Emb)
Dropout = cls("Dropout")
GELU = cls("GELU")

def gpt(V=16, P=8, d=8, L=2):
    class GPT2Attention(nn.Module): pass
    class GPT2MLP(nn.Module): pass
    class GPT2Block(nn.Module): pass
    class GPT2Model(nn.Module): pass
    class GPT2LMHeadModel(nn.Module): pass
    m = GPT2LMHeadModel()
    t = GPT2Model(); m.transformer = t
    t.wte = Embedding(V, d); t.wpe = Embedding(P, d); t.drop = Dropout()
    t.h = nn.ModuleList()
    for _ in range(L):
        b = GPT2Block(); b.ln_1 = LayerNorm(d)
        a = GPT2Attention(); a.c_attn = Conv1D(d, 3*d); a.c_proj = Conv1D(d, d); a.attn_dropout = Dropout(); a.resid_dropout = Dropout()
        b.attn = a; b.ln_2 = LayerNorm(d)
        p = GPT2MLP(); p.c_fc = Conv1D(d, 4*d); p.c_proj = Conv1D(4*d, d); p.act = GELU(); p.dropout = Dropout()
        b.mlp = p; t.h.append(b)
    t.ln_f = LayerNorm(d)
    m.lm_head = Conv1D(d, V, bias=False)
    m.lm_head.weight = t.wte.weight
    return m

def toy(name, params):
    m = cls(name)()
    for n, k in params: setattr(m, n, nn.Parameter(torch.zeros(k)))
    return m

def tied_toy():
    r = cls("Root")(); r.emb = toy("Emb", [("weight", 100)]); r.mid = toy("Mid", [("weight", 250)])
    r.head = toy("Head", [("bias", 300)]); r.head.weight = r.emb.weight
    return r

def fallback_toy():
    r = cls("Root")(); r.big = toy("Big", [("w", 1000)]); r.small = toy("Small", [("w", 100)]); r.tiny = toy("Tiny", [("w", 25)])
    return r

def key(k):
    return int(k.split(":")[1]) if k.startswith("cuda:") else k
def dev(v):
    return f"cuda:{v}" if isinstance(v, int) else v
def mm(d):
    return {key(k): v for k, v in d.items()}
def dmap(model, limits, **kw):
    r = infer_auto_device_map(model, mm(limits), **kw)
    return [[k, dev(v)] for k, v in r.items()]

out = {}
g = gpt()
B = ["GPT2Block"]
out["fits"] = dmap(g, {"cuda:0": 100000, "cpu": 100000})
out["blocks_cpu"] = dmap(g, {"cuda:0": 5000, "cpu": 8000}, no_split_module_classes=B)
out["disk"] = dmap(g, {"cuda:0": 5000, "cpu": 5000}, no_split_module_classes=B)
out["cpu_disk"] = dmap(g, {"cpu": 5000, "disk": 0}, no_split_module_classes=B)
out["tied"] = dmap(tied_toy(), {"cuda:0": 3000, "cpu": 100000})
fb = fallback_toy()
out["fallback_off"] = dmap(fb, {"cuda:0": 4200, "cpu": 100000})
out["fallback_on"] = dmap(fb, {"cuda:0": 4200, "cpu": 100000}, fallback_allocation=True)
grid = []
for ns in ([], B):
    for fallback in (False, True):
        for gpu in (0, 700, 2000, 4000, 6000, 9000):
            for cpu in (0, 3000, 6000, 20000):
                lim = {"cuda:0": gpu, "cuda:1": gpu // 2, "cpu": cpu}
                kw = dict(no_split_module_classes=ns, fallback_allocation=fallback)
                grid.append({"no_split": ns, "fallback": fallback, "gpu": gpu, "cpu": cpu,
                             "map": dmap(g, lim, **kw), "raw": dmap(g, lim, clean_result=False, **kw)})
out["grid"] = grid
out["bf16"] = [{"gpu": gpu, "map": dmap(g, {"cuda:0": gpu, "cpu": 3000}, dtype=torch.bfloat16)}
               for gpu in (1000, 2000, 3000, 5000)]
def bal(limits, **kw):
    r = get_balanced_memory(g, mm(limits), **kw)
    return {dev(k): int(v) for k, v in r.items()}
out["bal_two"] = bal({"cuda:0": 10000, "cuda:1": 10000, "cpu": 100000}, no_split_module_classes=B)
out["bal_two_plain"] = bal({"cuda:0": 10000, "cuda:1": 10000, "cpu": 100000})
out["bal_three_low"] = bal({"cuda:0": 3000, "cuda:1": 3000, "cuda:2": 3000, "cpu": 100000}, no_split_module_classes=B, low_zero=True)
out["bal_two_low"] = bal({"cuda:0": 10000, "cuda:1": 10000, "cpu": 100000}, no_split_module_classes=B, low_zero=True)
bal_cases = []
for n in (2, 3):
    for low_zero in (False, True):
        for ns in ([], B):
            for per in (2000, 3000, 5000, 10000):
                lim = {f"cuda:{i}": per for i in range(n)}
                lim["cpu"] = 100000
                bal_cases.append({"gpus": n, "low_zero": low_zero, "no_split": ns, "per": per,
                                  "result": bal(lim, no_split_module_classes=ns, low_zero=low_zero)})
out["balanced"] = bal_cases
out["sizes"] = {k: int(v) for k, v in compute_module_sizes(g).items()}
out["sizes_bf16"] = {k: int(v) for k, v in compute_module_sizes(g, dtype=torch.bfloat16).items()}
print(json.dumps(out, sort_keys=True, separators=(",", ":")).replace("},{", "},\n{"))
