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
Best of R runs (default 3): llama_torch_bench.py's Llama (attention, norms, rope) and timing loop,
the MLP replaced. Last line, for a bench script:
    RESULT torch_prefill_tokens_per_s=... torch_decode_tokens_per_s=...
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_torch_bench import Llama, generation_arguments, random_weights, time_generation  # noqa: E402


class Moe(Llama):
    """llama_torch_bench's Llama with every MLP a sparse block: a router and the experts."""

    def __init__(self, vocab, d, layers, heads, kv_heads, ff, experts, top_k, eps=1e-5, theta=10000.0):
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)

        def add_experts(m, d, ff):
            m.router = lin(d, experts)
            m.experts = torch.nn.ModuleList()
            for _ in range(experts):
                e = torch.nn.Module()
                e.w1, e.w3, e.w2 = lin(d, ff), lin(d, ff), lin(ff, d)  # gate, up, down
                m.experts.append(e)

        super().__init__(vocab, d, layers, heads, kv_heads, ff, eps, theta, add_mlp=add_experts)
        self.top_k = top_k

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

    def mlp(self, m, x):
        return self.sparse_moe(m, x)


def main():
    p = generation_arguments()
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--top-k", type=int, default=2)
    p.add_argument("--ff", type=int, default=2816)
    args = p.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    vocab, d, heads, kv_heads = 32000, 1024, 16, 8
    model = Moe(vocab, d, args.layers, heads, kv_heads, args.ff, args.experts, args.top_k).eval()
    random_weights(model)
    params = sum(x.numel() for x in model.parameters())
    print(f"torch {torch.__version__}: {params / 1e6:.1f}M parameters ({args.experts} experts, top-{args.top_k}, "
          f"ff {args.ff}), F32, {torch.get_num_threads()} threads")
    time_generation(model, vocab, kv_heads, d // heads, args)


if __name__ == "__main__":
    main()
