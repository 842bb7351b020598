#!/usr/bin/python3
"""A training step of the Llama of bench/llama_train_bench.cc in PyTorch (Debian's python3-torch, 1.13).

    /usr/bin/python3 bench/llama_train_torch_bench.py [--reps R] [--batch B] [--seq T] [--layers L]

The model of llama_torch_bench.py (d=1024, 16 heads, 8 key-value heads, ff 2816, vocab 32000,
untied, F32), torch.set_num_threads(2). One step: logits of every position, mean sparse
categorical cross-entropy against the next tokens, backward, AdamW (lr 1e-3, betas 0.9/0.999,
eps 1e-7, weight decay 0.004: Keras' defaults). One warm-up step, then the best of R (default
3). Last line, for bench/llama_train_bench.sh:
    RESULT torch_train_tokens_per_s=...
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_torch_bench import Llama, random_weights  # noqa: E402


def logits(model, tokens):
    B, T = tokens.shape
    x = model.embed(tokens)
    rep = model.h // model.kv
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for m in model.layers:
        n = model.rms(x, m.n1)
        q = model.rope(m.q(n).view(B, T, model.h, model.hd).transpose(1, 2), 0)
        k = model.rope(m.k(n).view(B, T, model.kv, model.hd).transpose(1, 2), 0).repeat_interleave(rep, dim=1)
        v = m.v(n).view(B, T, model.kv, model.hd).transpose(1, 2).repeat_interleave(rep, dim=1)
        s = (q @ k.transpose(-1, -2) / model.hd ** 0.5).masked_fill(~mask, float("-inf"))
        a = (s.softmax(-1) @ v).transpose(1, 2).reshape(B, T, model.h * model.hd)
        x = x + m.o(a)
        x = x + model.mlp(m, model.rms(x, m.n2))
    return model.lm_head(model.rms(x, model.norm))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--layers", type=int, default=8)
    args = p.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    vocab, d, heads, kv_heads, ff = 32000, 1024, 16, 8, 2816
    model = Llama(vocab, d, args.layers, heads, kv_heads, ff).train()
    random_weights(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-7, weight_decay=0.004)
    params = sum(x.numel() for x in model.parameters())
    print(f"torch {torch.__version__}: {params / 1e6:.1f}M parameters, F32, {torch.get_num_threads()} threads, "
          f"batch {args.batch} x {args.seq} tokens, AdamW")
    rows = torch.tensor([[(r * 131 + i * 7919 + 13) % vocab for i in range(args.seq + 1)] for r in range(args.batch)])
    inputs, targets = rows[:, :-1], rows[:, 1:]
    best = float("inf")
    for r in range(args.reps + 1):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(logits(model, inputs).reshape(-1, vocab), targets.reshape(-1))
        loss.backward()
        opt.step()
        step = time.perf_counter() - t0
        print(f"  step {r}{' (warm-up)' if r == 0 else ''}: {step:.3f} s, loss {loss.item():.4f}")
        if r > 0:
            best = min(best, step)
    tps = args.batch * args.seq / best
    print(f"train step: torch {tps:.1f} tokens/s ({best:.3f} s)")
    print(f"RESULT torch_train_tokens_per_s={tps:.2f}")


if __name__ == "__main__":
    main()
