#!/usr/bin/env python3
"""The model of bench/gpu_llama_bench.cc in PyTorch on one GPU, through Hugging Face transformers.

    python3 bench/gpu_llama_torch.py [--layers L] [--prompt T] [--decode-prompt P] [--new N]
                                     [--reps R] [--json FILE] [--ours gpu_llama.json]

Meant for the GPU machine (torch 2.x with CUDA, transformers 4.5x or 5.x); no test needs it, and
without a GPU it prints "skipped: no GPU" and exits 0.

Model: LlamaForCausalLM built from a LlamaConfig with Llama-3-8B shapes (hidden 4096, intermediate
14336, 32 heads, 8 key-value heads, head_dim 128, vocab 128256, rope theta 500000, RMSNorm eps
1e-5, untied embeddings) and L layers (default 32), transformers' own random initial weights,
created on the GPU (no disk). Default attention implementation (SDPA), eager mode, no_grad.
Two rows: torch.float32 with TF32 off (torch.backends.cuda.matmul.allow_tf32 = False, matmul
precision "highest": the arithmetic meshlayout's F32 matmuls use), then the same weights cast
to torch.bfloat16.

Measured as bench/gpu_llama_bench.cc does, the median of R runs (default 3) after one warm-up,
timed with time.perf_counter between torch.cuda.synchronize() calls:
  prefill: one forward of a T-token prompt (default 2048, batch 1) with use_cache=True and the
    logits of the last position only (logits_to_keep=1, as meshlayout's generate()), then the
    argmax. TFLOP/s with gpu_llama_bench's count: 2·(block linear parameters)·T + 2·4096·vocab
    + attention 4·head_dim·heads·T(T+1)/2 per layer.
  decode: a P-token prompt (default 128), then N greedy steps (default 32) of one token each with
    the dynamic key/value cache (DynamicCache) the prefill returned; tokens/s = N / their time.
    The argmax stays on the GPU (no host round trip per step, unlike generate()).
Output: `name value unit` lines (torch_f32_… and torch_bf16_…); --json FILE writes them;
--ours FILE (gpu_llama_bench's --json output) adds the ratios meshlayout / PyTorch F32.
"""
import argparse
import json
import statistics
import sys
import time

HIDDEN, INTERMEDIATE, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 4096, 14336, 32, 8, 128, 128256
THETA = 500000.0


def prefill_flops(layers, tokens):
    """gpu_llama_bench.cc's count: the linear maps of the blocks, the last position's logits,
    and the attention products over the causal pairs."""
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    block = 2 * HIDDEN * q + 2 * HIDDEN * kv + 3 * HIDDEN * INTERMEDIATE
    linear = 2.0 * block * tokens * layers + 2.0 * HIDDEN * VOCAB
    attention = 4.0 * HEAD_DIM * HEADS * tokens * (tokens + 1) / 2 * layers
    return linear + attention


def prompt_of(length):
    return [(i * 7919 + 13) % VOCAB for i in range(length)]


def write_json(path, figures, extra):
    out = dict(extra)
    for name, value, unit in figures:
        out[name] = {"value": value, "unit": unit}
    with open(path, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--prompt", type=int, default=2048)
    p.add_argument("--decode-prompt", type=int, default=128)
    p.add_argument("--new", type=int, default=32)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--json", default="")
    p.add_argument("--ours", default="", help="gpu_llama_bench --json output, for the ratios")
    args = p.parse_args()
    for name in ("layers", "prompt", "decode_prompt", "new", "reps"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, not {getattr(args, name)}")

    import torch

    if not torch.cuda.is_available():
        print("skipped: no GPU")
        if args.json:
            write_json(args.json, [], {"device": "", "layers": args.layers, "skipped": "no GPU"})
        return 0
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")

    common = dict(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=INTERMEDIATE,
        num_hidden_layers=args.layers,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
        rms_norm_eps=1e-5,
        max_position_embeddings=max(8192, args.prompt + 1, args.decode_prompt + args.new + 1),
        tie_word_embeddings=False,
        attention_bias=False,
        mlp_bias=False,
    )
    # transformers 5 keeps theta in rope_parameters, 4.x in rope_theta (and accepts unknown
    # keywords silently): set it either way, then check the model's frequencies below.
    try:
        config = LlamaConfig(**common, rope_parameters={"rope_type": "default", "rope_theta": THETA})
    except TypeError:
        config = LlamaConfig(**common, rope_theta=THETA)
    rope = getattr(config, "rope_parameters", None)
    if isinstance(rope, dict):
        rope["rope_theta"] = THETA
    config.rope_theta = THETA

    torch.manual_seed(0)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.device("cuda"):
        model = LlamaForCausalLM(config)
    model.eval()
    torch.cuda.synchronize()
    build_seconds = time.perf_counter() - t0
    params = sum(x.numel() for x in model.parameters())
    device = torch.cuda.get_device_name(0)
    attn = getattr(model.config, "_attn_implementation", "?")
    print(
        f"{device}; torch {torch.__version__}, transformers {transformers.__version__}; "
        f"{args.layers} layers, {params / 1e9:.2f}B parameters, attention {attn}; "
        f"built and initialised on the GPU in {build_seconds:.2f} s",
        file=sys.stderr,
    )

    # RoPE: the model's inverse frequencies must be theta^(-2i/head_dim) with theta = 500000.
    inv_freq = next((b for n, b in model.named_buffers() if n.endswith("inv_freq")), None)
    want = 1.0 / THETA ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float64) / HEAD_DIM)
    if inv_freq is None or not torch.allclose(inv_freq.double().cpu(), want, rtol=1e-5):
        sys.exit(f"gpu_llama_torch: the model's RoPE frequencies are not theta {THETA}'s "
                 f"(config {config!r})")

    long_ids = torch.tensor([prompt_of(args.prompt)], device="cuda")
    short_ids = torch.tensor([prompt_of(args.decode_prompt)], device="cuda")
    # The logits of the last position only: logits_to_keep (transformers >= 4.50, 5.x),
    # num_logits_to_keep (4.45-4.49), else all of them (said on stderr).
    keep = {}
    with torch.no_grad():
        for candidate in ({"logits_to_keep": 1}, {"num_logits_to_keep": 1}):
            try:
                out = model(input_ids=short_ids[:, :4], use_cache=True, **candidate)
            except (TypeError, ValueError):
                continue
            if out.logits.shape[1] == 1:
                keep = candidate
                break
    if not keep:
        print("note: this transformers computes the logits of every position", file=sys.stderr)

    def prefill_once():
        torch.cuda.synchronize()
        start = time.perf_counter()
        out = model(input_ids=long_ids, use_cache=True, **keep)
        token = out.logits[:, -1].argmax(-1)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        del out
        return seconds, int(token[0])

    def decode_once():
        out = model(input_ids=short_ids, use_cache=True, **keep)
        cache = out.past_key_values
        token = out.logits[:, -1:].argmax(-1)
        first = int(token[0, 0])
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(args.new):
            out = model(input_ids=token, past_key_values=cache, use_cache=True, **keep)
            cache = out.past_key_values
            token = out.logits[:, -1:].argmax(-1)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        del out, cache
        return seconds, first

    flops = prefill_flops(args.layers, args.prompt)
    figures = []

    def report(name, value, unit):
        print(f"{name} {value:.4g} {unit}", flush=True)
        figures.append((name, value, unit))

    print(f"layers {args.layers} layers")  # in the JSON file as "layers": L
    report("torch_parameters", params / 1e9, "billion")
    report("torch_build_and_init_seconds", build_seconds, "s")

    with torch.no_grad():
        for row, dtype in (("f32", torch.float32), ("bf16", torch.bfloat16)):
            if dtype != torch.float32:
                model.to(dtype)
                torch.cuda.empty_cache()
            prefill, decode = [], []
            for r in range(args.reps + 1):  # run 0 is the warm-up
                ps, pt = prefill_once()
                ds, dt = decode_once()
                print(f"  {row} run {r}{' (warm-up)' if r == 0 else ''}: prefill {ps:.4f} s, "
                      f"decode {ds:.4f} s ({args.new} steps), first tokens {pt} {dt}",
                      file=sys.stderr)
                if r > 0:
                    prefill.append(ps)
                    decode.append(ds)
            ps, ds = statistics.median(prefill), statistics.median(decode)
            report(f"torch_{row}_prefill_seconds", ps, "s")
            report(f"torch_{row}_prefill_tokens_per_s", args.prompt / ps, "tokens/s")
            report(f"torch_{row}_prefill_tflops", flops / ps / 1e12, "TFLOP/s")
            report(f"torch_{row}_decode_tokens_per_s", args.new / ds, "tokens/s")
            report(f"torch_{row}_decode_ms_per_token", 1e3 * ds / args.new, "ms")
            report(f"torch_{row}_peak_memory", torch.cuda.max_memory_allocated() / 2**30, "GiB")
            torch.cuda.reset_peak_memory_stats()

    if args.ours:
        with open(args.ours) as f:
            ours = json.load(f)
        if "skipped" in ours or "prefill_tokens_per_s" not in ours:
            print(f"note: {args.ours} holds no meshlayout figures; no ratios", file=sys.stderr)
        else:
            if ours.get("layers") != args.layers:
                print(f"note: {args.ours} ran {ours.get('layers')} layers, this run "
                      f"{args.layers}: the ratios compare different models", file=sys.stderr)
            by_name = {name: value for name, value, _ in figures}
            report("meshlayout_vs_torch_f32_prefill",
                   ours["prefill_tokens_per_s"]["value"] / by_name["torch_f32_prefill_tokens_per_s"],
                   "ratio")
            report("meshlayout_vs_torch_f32_decode",
                   ours["decode_tokens_per_s"]["value"] / by_name["torch_f32_decode_tokens_per_s"],
                   "ratio")
    if args.json:
        write_json(args.json, figures,
                   {"device": device, "layers": args.layers, "torch": torch.__version__,
                    "transformers": transformers.__version__, "attention": attn})
    return 0


if __name__ == "__main__":
    sys.exit(main())
