#!/usr/bin/python3
"""A Mixtral-class mixture of experts in PyTorch (Debian's python3-torch, 1.13), the peer of
meshlayout's MoE benchmark, as bench/llama_torch_bench.py is for the Llama one.

    /usr/bin/python3 bench/moe_torch.py [--reps R] [--prompt T] [--new N] [--layers L]
                                        [--experts E] [--top-k K] [--ff F]

Shape: the Llama bench's attention (d=1024, 16 heads, 8 key-value heads, head_dim 64, vocab
32000, untied embeddings, RMSNorm, rotate-half RoPE) with every MLP a Mixtral sparse block:
a router (E, d), softmax, top-k (default 8 experts, top-2), the k weights renormalised to sum
1, each expert down(silu(gate(x)) * up(x)) with ff F (default 2816, the Llama bench's MLP
size), tokens gathered per expert and scattered back with index_add_ as transformers'
MixtralSparseMoeBlock does. Random weights (normal, std 0.05), F32, torch.set_num_threads(2),
no_grad. Greedy generation with a preallocated key/value cache: prefill of a T-token prompt
(default 128, batch 1; logits of the last position only), then N new tokens (default 16).
Best of R runs (default 3). Last line, for a bench script:
    RESULT torch_prefill_tokens_per_s=... torch_decode_tokens_per_s=...
"""
import argparse
import time

import torch


class Moe(torch.nn.Module):
    def __init__(self, vocab, d, layers, heads, kv_heads, ff, experts, top_k, eps=1e-5, theta=10000.0):
        super().__init__()
        self.h, self.kv, self.hd, self.eps, self.top_k = heads, kv_heads, d // heads, eps, top_k
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)
        self.embed = torch.nn.Embedding(vocab, d)
        self.layers = torch.nn.ModuleList()
        for _ in range(layers):
            m = torch.nn.Module()
            m.q, m.k, m.v = lin(d, heads * self.hd), lin(d, kv_heads * self.hd), lin(d, kv_heads * self.hd)
            m.o = lin(heads * self.hd, d)
            m.router = lin(d, experts)
            m.experts = torch.nn.ModuleList()
            for _ in range(experts):
                e = torch.nn.Module()
                e.w1, e.w3, e.w2 = lin(d, ff), lin(d, ff), lin(ff, d)  # gate, up, down
                m.experts.append(e)
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

    def sparse_moe(self, m, x):  # transformers' MixtralSparseMoeBlock.forward, no jitter
        B, T, d = x.shape
        x = x.reshape(-1, d)
        weights = torch.nn.functional.softmax(m.router(x), dim=1, dtype=torch.float)
        weights, selected = torch.topk(weights, self.top_k, dim=-1)
        weights /= weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(x)
        mask = torch.nn.functional.one_hot(selected, num_classes=len(m.experts)).permute(2, 1, 0)
        for e in (mask.sum(dim=(-1, -2)) > 0).nonzero(as_tuple=True)[0].tolist():
            idx, rows = torch.where(mask[e])
            xe = x[rows]
            ex = m.experts[e]
            ye = ex.w2(torch.nn.functional.silu(ex.w1(xe)) * ex.w3(xe)) * weights[rows, idx, None]
            out.index_add_(0, rows, ye)
        return out.reshape(B, T, d)

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
            x = x + self.sparse_moe(m, self.rms(x, m.n2))
        return self.lm_head(self.rms(x[:, -1:], self.norm))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=16)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--ff", type=int, default=2816)
    args = p.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    vocab, d, heads, kv_heads = 32000, 1024, 16, 8
    model = Moe(vocab, d, args.layers, heads, kv_heads, args.ff, args.experts, args.top_k).eval()
    with torch.no_grad():
        for prm in model.parameters():
            if prm.dim() > 1:
                prm.normal_(0.0, 0.05)
    params = sum(x.numel() for x in model.parameters())
    print(f"torch {torch.__version__}: {params / 1e6:.1f}M parameters ({args.experts} experts, top-{args.top_k}, "
          f"ff {args.ff}), F32, {torch.get_num_threads()} threads")
    prompt = torch.tensor([[(i * 7919 + 13) % vocab for i in range(args.prompt)]])
    max_len = args.prompt + args.new
    best_prefill = best_decode = float("inf")
    with torch.no_grad():
        for r in range(args.reps):
            cache = [(torch.zeros(1, kv_heads, max_len, d // heads), torch.zeros(1, kv_heads, max_len, d // heads))
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


if __name__ == "__main__":
    main()
