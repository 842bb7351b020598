#!/usr/bin/python3
"""Checks the C++ float64 MoE reference (src/meshlayout/models/hf_moe_reference.h) against
PyTorch: the same decoders written here in torch, float64, from transformers' modelling code
(modeling_mixtral.py, modeling_qwen2_moe.py, modeling_qwen3_moe.py: attention with repeat_kv
and the causal/sliding-window mask, apply_rotary_pos_emb, RMSNorm, the SparseMoeBlock's
softmax → topk → (renormalise) → per-expert index_add_, Qwen2-MoE's sigmoid-gated shared
expert, the decoder layer's MoE/dense rule, load_balancing_loss_func), reading only each
model's config.json and model.safetensors.

    /usr/bin/python3 tools/moe_reference_torch_check.py [--test-binary build/src/meshlayout/models/models_test]

It runs the test HfMoeReference.TorchComparisonFixture with MESHLAYOUT_MOE_TORCH_DIR set (the
test writes each family's random model and the reference's logits and losses there), then
compares; prints the largest differences and exits 1 when one exceeds --tolerance (relative to
the largest |logit|, default 1e-9). Needs python3-torch (1.13) and numpy; not part of CI.
"""
import argparse
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

DTYPES = {"F32": np.float32, "F64": np.float64, "I32": np.int32}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        a = np.frombuffer(data[8 + n + begin : 8 + n + end], dtype=DTYPES[info["dtype"]])
        out[name] = torch.from_numpy(a.reshape(info["shape"]).copy())
    return out


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x, n_rep):
    b, h, s, d = x.shape
    return x[:, :, None].expand(b, h, n_rep, s, d).reshape(b, h * n_rep, s, d)


def mlp(x, gate, up, down):
    return F.linear(F.silu(F.linear(x, gate)) * F.linear(x, up), down)


def load_balancing_loss_func(gate_logits, num_experts, top_k):
    if len(gate_logits) == 0:
        return torch.tensor(0.0, dtype=torch.float64)
    concatenated = torch.cat(list(gate_logits), dim=0)
    routing_weights = F.softmax(concatenated, dim=-1)
    _, selected_experts = torch.topk(routing_weights, top_k, dim=-1)
    expert_mask = F.one_hot(selected_experts, num_experts)
    tokens_per_expert = torch.mean(expert_mask.to(routing_weights.dtype), dim=0)
    router_prob_per_expert = torch.mean(routing_weights, dim=0)
    return torch.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0)) * num_experts


class Model:
    def __init__(self, cfg, w):
        self.c, self.w = cfg, {k: v.double() for k, v in w.items()}
        t = cfg["model_type"]
        self.mixtral = t == "mixtral"
        self.H, self.Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.d = cfg["hidden_size"]
        self.D = cfg.get("head_dim") or self.d // self.H
        self.eps = cfg["rms_norm_eps"]
        self.E = cfg["num_local_experts"] if self.mixtral else cfg["num_experts"]
        self.k = cfg["num_experts_per_tok"]
        self.renorm = True if self.mixtral else cfg.get("norm_topk_prob", False)
        self.window = cfg.get("sliding_window") if (self.mixtral or cfg.get("use_sliding_window")) else None
        self.step = cfg.get("decoder_sparse_step", 1)
        self.mlp_only = cfg.get("mlp_only_layers") or []

    def is_moe(self, i):
        if self.mixtral:
            return True
        return i not in self.mlp_only and self.E > 0 and (i + 1) % self.step == 0

    def sparse_block(self, p, x):
        w = self.w
        B, T, d = x.shape
        x = x.view(-1, d)
        router_logits = F.linear(x, w[p + "gate.weight"])
        routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float64)
        routing_weights, selected = torch.topk(routing_weights, self.k, dim=-1)
        if self.renorm:
            routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
        out = torch.zeros_like(x)
        mask = F.one_hot(selected, num_classes=self.E).permute(2, 1, 0)
        names = ("w1", "w3", "w2") if self.mixtral else ("gate_proj", "up_proj", "down_proj")
        for e in range(self.E):
            idx, top_x = torch.where(mask[e])
            if top_x.numel() == 0:
                continue
            q = p + f"experts.{e}."
            y = mlp(x[top_x], *(w[q + n + ".weight"] for n in names)) * routing_weights[top_x, idx, None]
            out.index_add_(0, top_x, y)
        if self.c["model_type"] == "qwen2_moe":
            s = p + "shared_expert."
            shared = mlp(x, w[s + "gate_proj.weight"], w[s + "up_proj.weight"], w[s + "down_proj.weight"])
            out = out + torch.sigmoid(F.linear(x, w[p + "shared_expert_gate.weight"])) * shared
        return out.view(B, T, d), router_logits

    def forward(self, ids):
        w, c = self.w, self.c
        B, T = ids.shape
        h = w["model.embed_tokens.weight"][ids]
        inv_freq = 1.0 / (c.get("rope_theta", 10000.0) ** (torch.arange(0, self.D, 2, dtype=torch.float64) / self.D))
        freqs = torch.outer(torch.arange(T, dtype=torch.float64), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        pos = torch.arange(T)
        masked = pos[None, :] > pos[:, None]  # _prepare_4d_causal_attention_mask_with_cache_position
        if self.window is not None:
            masked |= pos[None, :] <= pos[:, None] - self.window
        mask = torch.zeros(T, T, dtype=torch.float64).masked_fill(masked, float("-inf"))
        router_logits = []
        for i in range(c["num_hidden_layers"]):
            p = f"model.layers.{i}."
            n = rms(h, w[p + "input_layernorm.weight"], self.eps)

            def proj(name, heads):
                y = F.linear(n, w[p + f"self_attn.{name}_proj.weight"], w.get(p + f"self_attn.{name}_proj.bias"))
                return y.view(B, T, heads, self.D).transpose(1, 2)

            q, k, v = proj("q", self.H), proj("k", self.Hkv), proj("v", self.Hkv)
            if p + "self_attn.q_norm.weight" in w:  # Qwen3MoeAttention: norm over head_dim before RoPE
                q = rms(q, w[p + "self_attn.q_norm.weight"], self.eps)
                k = rms(k, w[p + "self_attn.k_norm.weight"], self.eps)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            k, v = repeat_kv(k, self.H // self.Hkv), repeat_kv(v, self.H // self.Hkv)
            s = q @ k.transpose(2, 3) / math.sqrt(self.D) + mask
            a = (F.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, T, self.H * self.D)
            h = h + F.linear(a, w[p + "self_attn.o_proj.weight"], w.get(p + "self_attn.o_proj.bias"))
            n = rms(h, w[p + "post_attention_layernorm.weight"], self.eps)
            if self.is_moe(i):
                y, logits = self.sparse_block(p + ("block_sparse_moe." if self.mixtral else "mlp."), n)
                router_logits.append(logits)
            else:
                y = mlp(n, w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"], w[p + "mlp.down_proj.weight"])
            h = h + y
        h = rms(h, w["model.norm.weight"], self.eps)
        head = w["model.embed_tokens.weight"] if c.get("tie_word_embeddings") else w["lm_head.weight"]
        return F.linear(h, head), router_logits


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--test-binary", default=os.path.join(here, "..", "build", "src", "meshlayout", "models", "models_test"))
    ap.add_argument("--tolerance", type=float, default=1e-9)
    args = ap.parse_args()
    worst = 0.0
    with tempfile.TemporaryDirectory() as root:
        env = dict(os.environ, MESHLAYOUT_MOE_TORCH_DIR=root, MESHLAYOUT_CPU_DEVICES="1")
        run = subprocess.run([args.test_binary, "--gtest_filter=HfMoeReference.TorchComparisonFixture"],
                             env=env, capture_output=True, text=True)
        if run.returncode != 0 or "[  PASSED  ] 1 test" not in run.stdout:
            sys.exit(f"the fixture test failed:\n{run.stdout}\n{run.stderr}")
        for family in ("mixtral", "qwen2_moe", "qwen3_moe"):
            d = os.path.join(root, family)
            with open(os.path.join(d, "config.json")) as f:
                cfg = json.load(f)
            model = Model(cfg, read_safetensors(os.path.join(d, "model.safetensors")))
            ref = read_safetensors(os.path.join(d, "reference.safetensors"))
            ids, targets = ref["inputs"].long(), ref["targets"].long()
            logits, router_logits = model.forward(ids)
            V = logits.shape[-1]
            ce = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1))
            aux = load_balancing_loss_func(tuple(router_logits), model.E, model.k)
            total = ce + cfg["router_aux_loss_coef"] * aux
            scale = ref["logits"].abs().max().item()
            dl = (logits - ref["logits"]).abs().max().item()
            dloss = [abs(a - b) for a, b in zip((ce.item(), aux.item(), total.item()), ref["losses"].tolist())]
            print(f"{family}: logits max |torch - reference| {dl:.3g} (max |logit| {scale:.3g}, relative {dl / scale:.3g}); "
                  f"ce {ce.item():.6f} (diff {dloss[0]:.3g}), aux {aux.item():.6f} (diff {dloss[1]:.3g}), "
                  f"total diff {dloss[2]:.3g}; {len(router_logits)} MoE layers")
            worst = max(worst, dl / scale, *(x / max(1.0, abs(v)) for x, v in zip(dloss, ref["losses"].tolist())))
    print(f"worst relative difference {worst:.3g} (tolerance {args.tolerance:g})")
    sys.exit(0 if worst <= args.tolerance else 1)


if __name__ == "__main__":
    main()
