#!/usr/bin/python3
"""The Llama of bench/llama_bench.cc in PyTorch (Debian's python3-torch, 1.13), for comparison.

    /usr/bin/python3 bench/llama_torch_bench.py [--reps R] [--prompt T] [--new N] [--layers L]
                                                [--family qwen2]

Same shape: d=1024, 8 layers, 16 heads (8 key-value heads, head_dim 64), ff 2816, vocab 32000,
untied embeddings, random weights, F32, torch.set_num_threads(2), no_grad. Greedy generation
with a preallocated key/value cache: prefill of a T-token prompt (default 128, batch 1; logits
of the last position only, as meshlayout's generate()), then N new tokens (default 16). Best of
R runs (default 3). --family qwen2: the Qwen-class model (q/k/v projections with biases).
Last line, for bench/llama_bench.sh:
    RESULT torch_prefill_tokens_per_s=... torch_decode_tokens_per_s=...

The other PyTorch peers build on this file: moe_torch.py (Llama with another MLP, add_mlp and
mlp; random_weights and time_generation) and llama_train_torch_bench.py (Llama, random_weights).
"""
import argparse
import time

import torch


def dense_mlp(m, d, ff):
    """The Llama MLP's linear maps on layer module m: gate, up and down."""
    lin = lambda i, o: torch.nn.Linear(i, o, bias=False)
    m.gate, m.up, m.down = lin(d, ff), lin(d, ff), lin(ff, d)


class Llama(torch.nn.Module):
    """add_mlp(m, d, ff) adds a layer's MLP modules (dense_mlp by default; after q, k, v and o,
    before the norms, so the parameters come in the same order); mlp(m, x) applies them."""

    def __init__(self, vocab, d, layers, heads, kv_heads, ff, eps=1e-5, theta=10000.0, qkv_bias=False,
                 add_mlp=dense_mlp):
        super().__init__()
        self.h, self.kv, self.hd, self.eps = heads, kv_heads, d // heads, eps
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)
        self.embed = torch.nn.Embedding(vocab, d)
        self.layers = torch.nn.ModuleList()
        for _ in range(layers):
            m = torch.nn.Module()
            qkv = lambda i, o: torch.nn.Linear(i, o, bias=qkv_bias)
            m.q, m.k, m.v, m.o = qkv(d, heads * self.hd), qkv(d, kv_heads * self.hd), qkv(d, kv_heads * self.hd), lin(heads * self.hd, d)
            add_mlp(m, d, ff)
            m.n1, m.n2 = torch.nn.Parameter(torch.ones(d)), torch.nn.Parameter(torch.ones(d))
            self.layers.append(m)
        self.norm = torch.nn.Parameter(torch.ones(d))
        self.lm_head = lin(d, vocab)
        self.inv_freq = 1.0 / theta ** (torch.arange(0, self.hd, 2).float() / self.hd)

    def rms(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    def rope(self, x, start):  # x (B, H, T, hd), half-split
        t = torch.arange(start, start + x.shape[2]).float()
        f = torch.outer(t, self.inv_freq)
        emb = torch.cat([f, f], dim=-1)
        x1, x2 = x[..., : self.hd // 2], x[..., self.hd // 2 :]
        return x * emb.cos() + torch.cat([-x2, x1], dim=-1) * emb.sin()

    def mlp(self, m, x):
        return m.down(torch.nn.functional.silu(m.gate(x)) * m.up(x))

    def forward(self, tokens, cache, start):
        B, T = tokens.shape
        x = self.embed(tokens)
        rep = self.h // self.kv
        for i, m in enumerate(self.layers):
            n = self.rms(x, m.n1)
            q = self.rope(m.q(n).view(B, T, self.h, self.hd).transpose(1, 2), start)
            k = self.rope(m.k(n).view(B, T, self.kv, self.hd).transpose(1, 2), start)
            v = m.v(n).view(B, T, self.kv, self.hd).transpose(1, 2)
            kc, vc = cache[i]
            kc[:, :, start : start + T] = k
            vc[:, :, start : start + T] = v
            K = kc[:, :, : start + T].repeat_interleave(rep, dim=1)
            V = vc[:, :, : start + T].repeat_interleave(rep, dim=1)
            s = q @ K.transpose(-1, -2) / self.hd ** 0.5
            if T > 1:
                mask = torch.ones(T, start + T, dtype=torch.bool).tril(start)
                s = s.masked_fill(~mask, float("-inf"))
            a = (s.softmax(-1) @ V).transpose(1, 2).reshape(B, T, self.h * self.hd)
            x = x + m.o(a)
            x = x + self.mlp(m, self.rms(x, m.n2))
        return self.lm_head(self.rms(x[:, -1:], self.norm))


def generation_arguments():
    """The options time_generation reads: --reps, --prompt, --new and --layers."""
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=16)
    p.add_argument("--layers", type=int, default=8)
    return p


def random_weights(model):
    """Every matrix of the model drawn from normal(0, 0.05); the norms' ones kept."""
    with torch.no_grad():
        for prm in model.parameters():
            if prm.dim() > 1:
                prm.normal_(0.0, 0.05)


def time_generation(model, vocab, kv_heads, head_dim, args):
    """Greedy generation with a preallocated key/value cache, args.reps times: prefill of an
    args.prompt-token prompt (batch 1), then args.new new tokens. Prints each run, the best
    rates, and the RESULT line of the bench scripts."""
    prompt = torch.tensor([[(i * 7919 + 13) % vocab for i in range(args.prompt)]])
    max_len = args.prompt + args.new
    best_prefill = best_decode = float("inf")
    with torch.no_grad():
        for r in range(args.reps):
            cache = [(torch.zeros(1, kv_heads, max_len, head_dim), torch.zeros(1, kv_heads, max_len, head_dim))
                     for _ in range(args.layers)]
            t0 = time.perf_counter()
            logits = model(prompt, cache, 0)
            prefill = time.perf_counter() - t0
            t0 = time.perf_counter()
            tokens = []
            for step in range(args.new):
                tok = int(logits[0, -1].argmax())
                tokens.append(tok)
                if step + 1 == args.new:
                    break
                logits = model(torch.tensor([[tok]]), cache, args.prompt + step)
            decode = time.perf_counter() - t0
            best_prefill, best_decode = min(best_prefill, prefill), min(best_decode, decode)
            print(f"  run {r}: prefill {prefill:.3f} s, decode {decode:.3f} s ({args.new - 1} tokens)")
    prefill_tps = args.prompt / best_prefill
    decode_tps = (args.new - 1) / best_decode
    print(f"prefill ({args.prompt} tokens): torch {prefill_tps:.1f} tokens/s; decode: torch {decode_tps:.1f} tokens/s")
    print(f"RESULT torch_prefill_tokens_per_s={prefill_tps:.2f} torch_decode_tokens_per_s={decode_tps:.2f}")
    return tokens


def main():
    p = generation_arguments()
    p.add_argument("--family", default="llama", choices=["llama", "qwen2"])
    args = p.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    vocab, d, heads, kv_heads, ff = 32000, 1024, 16, 8, 2816
    model = Llama(vocab, d, args.layers, heads, kv_heads, ff, qkv_bias=args.family == "qwen2").eval()
    random_weights(model)
    params = sum(x.numel() for x in model.parameters())
    print(f"torch {torch.__version__}: {params / 1e6:.1f}M parameters, F32, {torch.get_num_threads()} threads")
    time_generation(model, vocab, kv_heads, d // heads, args)


if __name__ == "__main__":
    main()
