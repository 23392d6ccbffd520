"""Re-saves a braid checkpoint through transformers, for quant_large_util.cc.

<class>.from_pretrained(<braid folder>) (GPT2LMHeadModel or LlamaForCausalLM) loads the folder
braid's save_pretrained wrote (no missing, unexpected or mismatched keys allowed), generates
greedily in f32 after a prompt (do_sample=False), takes the logits of that sequence, and
save_pretrained(<out folder>, safe_serialization=True) writes transformers' own checkpoint
(config.json with transformers' fields, model.safetensors without a tied lm_head.weight). The
test then loads <out folder> into braid quantized, and compares braid's f32 tokens and logits
with these.

Runs under the interpreter that has torch and transformers (Debian's python3-torch plus
transformers 4.40 from pip for /usr/bin/python3: scripts/install_deps.sh).
usage: transformers_resave.py <class> <braid folder> <out folder> <generation file>
                              <prompt ids, comma-separated> <new tokens>
The generation file (safetensors) holds tokens i64 [1, P + N] and logits f32 [1, P + N, vocab];
its metadata the torch and transformers versions.
"""
import sys

CLASSES = ("GPT2LMHeadModel", "LlamaForCausalLM")


def main(model_class, braid_folder, out_folder, generation_file, prompt_csv, new_tokens):
    try:
        import torch
        import transformers
        from safetensors.torch import save_file
    except ImportError as e:
        sys.exit(f"FAIL: {sys.executable} cannot import {e.name}: install python3-torch and "
                 "'transformers==4.40.2' for it (scripts/install_deps.sh does)")
    if model_class not in CLASSES:
        sys.exit(f"FAIL: model class {model_class!r} is not one of {', '.join(CLASSES)}")
    torch.set_num_threads(2)
    model, info = getattr(transformers, model_class).from_pretrained(
        braid_folder, torch_dtype=torch.float32, output_loading_info=True)
    if info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"]:
        sys.exit(f"FAIL: transformers loaded braid's folder with {info}")
    model.eval()
    prompt = torch.tensor([[int(t) for t in prompt_csv.split(",")]], dtype=torch.int64)
    with torch.no_grad():
        # eos_token_id=None: braid's generate never stops early, so neither may this one (a
        # Llama config's eos id is a byte-level id too).
        tokens = model.generate(prompt, max_new_tokens=int(new_tokens), do_sample=False,
                                pad_token_id=0, eos_token_id=None,
                                attention_mask=torch.ones_like(prompt))
        logits = model(tokens).logits.float().contiguous()
    model.save_pretrained(out_folder, safe_serialization=True)
    save_file({"tokens": tokens.contiguous(), "logits": logits}, generation_file,
              metadata={"torch": torch.__version__, "transformers": transformers.__version__})
    print(f"transformers {transformers.__version__}, torch {torch.__version__}: "
          f"{tokens.shape[1] - prompt.shape[1]} tokens generated, {out_folder} written")


if __name__ == "__main__":
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    main(*sys.argv[1:])
