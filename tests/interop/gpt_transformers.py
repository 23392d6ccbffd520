"""braid's GPT and transformers' GPT2LMHeadModel read each other's folders (docs/nn.md, "GPT").

1. braid saves a seeded GPT (save_pretrained: config.json + model.safetensors) and its logits
   on a fixed batch; GPT2LMHeadModel.from_pretrained loads the folder with no missing or
   unexpected keys and gives the same logits.
2. transformers saves a GPT2LMHeadModel of its own (save_pretrained, safetensors, sharded by a
   small max_shard_size so braid reads an index) with the exact GELU ("gelu"); braid's
   from_pretrained loads it and gives transformers' logits.

Runs under the interpreter that has torch and transformers (Debian's python3-torch plus
transformers from pip, for /usr/bin/python3: scripts/install_deps.sh).
usage: gpt_transformers.py <gpt_interop_tool> <work folder>
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import interop_common as ic  # noqa: E402

torch, transformers = ic.require(
    ["torch", "transformers"],
    "apt-get install python3-torch; /usr/bin/python3 -m pip install --break-system-packages "
    "'transformers==4.40.2'")
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

TOL = 2e-5  # f32 end to end; differences come from summation order only


def check_close(what, ours, theirs):
    err = (ours.double() - theirs.double()).abs().max().item()
    scale = theirs.double().abs().max().item()
    print(f"{what}: max |diff| {err:.3g} (max |logit| {scale:.3g})")
    if not err <= TOL * max(scale, 1.0):
        sys.exit(f"FAIL: {what}: logits differ by {err} > {TOL * max(scale, 1.0)}")


def main(tool, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)

    # 1. braid -> transformers
    subprocess.run([tool, "save", work], check=True)
    model, info = GPT2LMHeadModel.from_pretrained(os.path.join(work, "model"),
                                                  output_loading_info=True)
    if info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"]:
        sys.exit(f"FAIL: transformers loaded braid's folder with {info}")
    if model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr():
        sys.exit("FAIL: lm_head is not tied to wte after loading braid's folder")
    braid = load_file(os.path.join(work, "braid_logits.safetensors"))
    with torch.no_grad():
        logits = model.eval()(braid["ids"]).logits
    check_close("braid -> transformers", braid["logits"], logits)

    # 2. transformers -> braid (sharded, exact GELU)
    torch.manual_seed(5)
    cfg = GPT2Config(vocab_size=40, n_positions=24, n_embd=32, n_layer=3, n_head=4,
                     activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0,
                     attn_pdrop=0.0)
    hf = GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
    hf_dir = os.path.join(work, "hf_model")
    hf.save_pretrained(hf_dir, safe_serialization=True, max_shard_size="20KB")
    if not os.path.exists(os.path.join(hf_dir, "model.safetensors.index.json")):
        sys.exit("FAIL: expected transformers to write a sharded folder")
    ids = torch.randint(0, cfg.vocab_size, (3, 17))
    save_file({"ids": ids}, os.path.join(work, "ids.safetensors"))
    out = os.path.join(work, "braid_from_hf.safetensors")
    subprocess.run([tool, "run", hf_dir, os.path.join(work, "ids.safetensors"), out], check=True)
    with torch.no_grad():
        logits = hf(ids).logits
    check_close("transformers -> braid", load_file(out)["logits"], logits)
    print("OK")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
