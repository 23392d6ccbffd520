"""braid's Llama against transformers' LlamaForCausalLM, both directions (docs/nn.md, "Llama").

1. transformers -> braid: transformers builds a seeded LlamaForCausalLM in f32 (eager
   attention), moves its RMSNorm weights away from 1, saves it (save_pretrained, safetensors),
   runs a batch forward, a mean cross-entropy against fixed targets and its backward, and writes
   ids, targets, logits, loss and every parameter's gradient to a safetensors file. braid's
   llama_from_pretrained loads the folder, runs the same step, and compares logits, loss and
   every gradient as normalized errors max |braid - torch| / max |torch| <= TOL. Two models:
     a. grouped keys / values (4 heads, 2 kv heads), untied head, one model.safetensors;
     b. plain multi-head (4 / 4), tied head, attention biases, sharded with an index.
2. braid -> transformers: braid saves a seeded Llama (6 heads, 2 kv heads, untied) and its
   logits; LlamaForCausalLM.from_pretrained loads the folder with no missing, unexpected or
   mismatched keys and gives the same logits.

Runs under the interpreter that has torch and transformers (Debian's python3-torch plus
transformers 4.40.2 from pip, for /usr/bin/python3: scripts/install_deps.sh).
usage: llama_transformers.py <llama_interop_tool> <work folder>
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
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

# f32 end to end; the two differ only in summation order (GEMM blocking, softmax and norm
# reductions) and in cos / sin / pow of one ulp. Measured about 1e-7 (logits) and a few 1e-7
# (worst gradient); the bound leaves room for other CPUs' BLAS.
TOL = 1e-5


def transformers_to_braid(tool, work, name, seed, save_kwargs, **config):
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                      max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=1000.0,
                      attn_implementation="eager", **config)
    hf = LlamaForCausalLM(cfg).float().train()
    with torch.no_grad():
        for pname, p in hf.named_parameters():
            if pname.endswith("norm.weight") or pname.endswith(".bias"):
                p.add_(0.1 * torch.randn_like(p))
    folder = os.path.join(work, name)
    hf.save_pretrained(folder, safe_serialization=True, **save_kwargs)
    ids = torch.randint(0, cfg.vocab_size, (3, 19))
    targets = torch.randint(0, cfg.vocab_size, (3, 19))
    logits = hf(ids).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.vocab_size),
                                             targets.reshape(-1))
    loss.backward()
    ref = {"ids": ids, "targets": targets, "logits": logits.detach().contiguous(),
           "loss": loss.detach().reshape(())}
    for pname, p in hf.named_parameters():  # a tied weight once, under its first name
        ref["grad." + pname] = p.grad.detach().contiguous()
    ref_path = os.path.join(work, name + "_reference.safetensors")
    save_file(ref, ref_path)
    print(f"== transformers -> braid ({name}: {config}, {save_kwargs or 'one file'})")
    sys.stdout.flush()
    subprocess.run([tool, "check", folder, ref_path, str(TOL)], check=True)


def braid_to_transformers(tool, work):
    subprocess.run([tool, "save", work], check=True)
    model, info = LlamaForCausalLM.from_pretrained(os.path.join(work, "model"),
                                                   output_loading_info=True,
                                                   attn_implementation="eager")
    if info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"]:
        sys.exit(f"FAIL: transformers loaded braid's folder with {info}")
    if model.config.num_key_value_heads != 2 or model.config.tie_word_embeddings:
        sys.exit(f"FAIL: braid's config.json read as {model.config}")
    braid = load_file(os.path.join(work, "braid_logits.safetensors"))
    with torch.no_grad():
        logits = model.float().eval()(braid["ids"]).logits
    err = (braid["logits"].double() - logits.double()).abs().max().item()
    scale = logits.double().abs().max().item()
    print(f"== braid -> transformers: logits max |diff| {err:.3g}, normalized {err / scale:.3g}")
    if not err <= TOL * scale:
        sys.exit(f"FAIL: braid -> transformers: logits differ by {err} > {TOL * scale}")


def main(tool, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    transformers_to_braid(tool, work, "gqa_untied", 5, {}, num_attention_heads=4,
                          num_key_value_heads=2, tie_word_embeddings=False)
    transformers_to_braid(tool, work, "mha_tied_bias", 6, {"max_shard_size": "60KB"},
                          num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=True,
                          attention_bias=True)
    if not os.path.exists(os.path.join(work, "mha_tied_bias", "model.safetensors.index.json")):
        sys.exit("FAIL: expected transformers to write a sharded folder")
    braid_to_transformers(tool, work)
    print("OK")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
