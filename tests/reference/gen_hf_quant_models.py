#!/usr/bin/env python3
"""Writes tests/reference/hf_quant/: a small transformers GPT2LMHeadModel and LlamaForCausalLM,
each trained briefly to continue a token cycle and saved with
save_pretrained(safe_serialization=True), plus the greedy tokens and logits transformers itself
computes in f32. accel/tests/quant/hf_quant_test.cc loads the folders into braid in f32, 8-bit
and 4-bit (load_and_quantize_model) and compares (docs/quantization.md, "What is verified").

Run with Debian's interpreter (python3-torch 1.13, transformers 4.40):
    /usr/bin/python3 tests/reference/gen_hf_quant_models.py tests/reference/hf_quant
Every random number comes from torch.manual_seed(20261206); training runs on the CPU in f32 with
torch's deterministic kernels, so a rerun with the same versions gives the same bytes.

Why trained: a random model's greedy choices are decided by tiny logit differences (its logits
are nearly flat), so 4-bit rounding would flip them and the comparison would say nothing. After
300 Adam steps on the cycle the margins are large, and the test can require exact tokens.

Models (tiny, to keep the committed files near 0.8 MB):
  gpt2/   GPT2Config(vocab_size=64, n_positions=32, n_embd=64, n_layer=2, n_head=4,
          dropouts 0), tied lm_head (save_pretrained leaves lm_head.weight out)
  llama/  LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=128,
          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
          max_position_embeddings=32, bos_token_id=62, eos_token_id=63), untied head
          (Llama's default eos id 2 is in the cycle and would stop generate early)
Each folder: config.json, model.safetensors (f32), generation.safetensors:
  prompt  i64 [1, 3]          the first three tokens of the cycle
  tokens  i64 [1, 3 + 16]     model.generate(prompt, max_new_tokens=16, do_sample=False)
  logits  f32 [1, 19, 64]     model(tokens).logits
Metadata: torch and transformers versions.
"""
import os
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

VOCAB = 64
CYCLE = [(i * 7 + 3) % VOCAB for i in range(20)]
NEW_TOKENS = 16


def train(model):
    b, t = 4, 24
    ids = torch.tensor([[CYCLE[(r * 5 + k) % len(CYCLE)] for k in range(t)] for r in range(b)])
    tgt = torch.tensor([[CYCLE[(r * 5 + k + 1) % len(CYCLE)] for k in range(t)]
                        for r in range(b)])
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(300):
        opt.zero_grad()
        logits = model(ids).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tgt.reshape(-1))
        loss.backward()
        opt.step()
    model.eval()
    return loss.item()


def write(model, folder):
    model.save_pretrained(folder, safe_serialization=True)
    prompt = torch.tensor([CYCLE[:3]])
    with torch.no_grad():
        tokens = model.generate(prompt, max_new_tokens=NEW_TOKENS, do_sample=False,
                                pad_token_id=0, attention_mask=torch.ones_like(prompt))
        logits = model(tokens).logits.float().contiguous()
    save_file({"prompt": prompt, "tokens": tokens.contiguous(), "logits": logits},
              os.path.join(folder, "generation.safetensors"),
              metadata={"torch": torch.__version__, "transformers": transformers.__version__})
    for f in os.listdir(folder):
        os.chmod(os.path.join(folder, f), 0o644)
    return tokens


def main(out):
    torch.manual_seed(20261206)
    torch.use_deterministic_algorithms(True)
    gpt = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=64, n_layer=2,
                                     n_head=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                                         num_hidden_layers=2, num_attention_heads=4,
                                         num_key_value_heads=2, max_position_embeddings=32,
                                         bos_token_id=62, eos_token_id=63))
    for name, model in (("gpt2", gpt), ("llama", llama)):
        loss = train(model)
        tokens = write(model, os.path.join(out, name))
        print(name, "final loss", round(loss, 4), "tokens", tokens[0].tolist())
        assert tokens[0].tolist() == [CYCLE[i % len(CYCLE)] for i in range(3 + NEW_TOKENS)], \
            name + " did not learn the cycle"


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "hf_quant"))
