"""make_tokenizers.py - builds the small tokenizers the reference test compares: BPE merges
learnt by the textbook algorithm (count adjacent pairs, merge the most frequent, repeat) on a
training text, written as Hugging Face tokenizer.json files in the layouts of Llama 3,
Qwen 2 and Qwen 2.5 (byte-level; Qwen 2.5 with its NFC normalizer) and of Llama 2 and Mistral (byte fallback); and a SentencePiece model
(BPE with byte fallback, as Gemma's) trained by SentencePiece itself.

Example:
    make_all("/tmp/toks")   # /tmp/toks/{llama3,qwen2,qwen25,llama2,mistral,spm}/
"""
import collections
import json
import os

import bpe_reference as ref

TRAIN = """The quick brown fox jumps over the lazy dog. It's what they'd've wanted, isn't it?
Meshes of devices hold the shards of every tensor; layouts say which axis splits which dimension.
def main():\n    return 1234567 + 89\n\n\tprint("hello world")  # comment
Hello hello HELLO world World WORLD, the the the and and of of to to in in is is.
日本語のテキストと中文的文本。한국어 텍스트. Ünïcödé façade naïve café résumé.
Numbers: 3.14159, 2.71828, 1,000,000 and 42. Emoji: 🦙🔥👍 ok.
""" * 3


def learn_merges(words, n_merges):
    """words: Counter of tuples of symbols. Returns the merges, most frequent pair first."""
    words = dict(words)
    merges = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        if pairs[best] < 2:
            break
        merges.append(best)
        new_words = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_words[tuple(out)] = new_words.get(tuple(out), 0) + c
        words = new_words
    return merges


def added(i, content, special=True, **kw):
    a = {"id": i, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
         "normalized": False, "special": special}
    a.update(kw)
    return a


def template(token, token_id):
    return {"type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": token, "type_id": 0}},
                       {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": token, "type_id": 0}},
                     {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {token: {"id": token, "ids": [token_id], "tokens": [token]}}}


def byte_level(pattern, merge_pairs, ignore_merges, specials, bos, normalizer=None):
    words = collections.Counter()
    for line in TRAIN.splitlines(keepends=True):
        for piece in ref.split_isolated(pattern, line):
            words[tuple(ref.BYTE_TO_CHAR[b] for b in piece.encode())] += 1
    merges = learn_merges(words, 300)
    vocab = {ref.BYTE_TO_CHAR[b]: b for b in range(256)}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    if ignore_merges:  # whole words no merge builds: only ignore_merges finds them
        for w in (" HELLO", " naïve"):
            vocab.setdefault("".join(ref.BYTE_TO_CHAR[b] for b in w.encode()), len(vocab))
    n = len(vocab)
    added_tokens = [added(n + k, t) for k, t in enumerate(specials)]
    added_tokens.append(added(n + len(specials), "<mask>", lstrip=True))
    added_tokens.append(added(n + len(specials) + 1, "[TOOL]", special=False, normalized=True))
    post = {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
            "use_regex": True}
    if bos:
        post = {"type": "Sequence", "processors": [post, template(specials[0], n)]}
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added_tokens,
        "normalizer": normalizer,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]},
        "post_processor": post,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": ignore_merges,
                  "vocab": vocab,
                  "merges": [list(m) if merge_pairs else " ".join(m) for m in merges]}}


def byte_fallback(mistral):
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    text = "▁" + TRAIN.replace(" ", "▁")
    counts = collections.Counter(text)
    for c in sorted(counts):
        if counts[c] >= 3 and c not in "😀🔥":  # rare characters go through byte fallback
            vocab.setdefault(c, len(vocab))
    words = collections.Counter()
    for w in text.replace("▁", " ▁").split(" "):
        if w:
            words[tuple(c if c in vocab else "<unk>" for c in w)] += 1
    merges = learn_merges(words, 300)
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    decoder = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    j = {"version": "1.0", "truncation": None, "padding": None,
         "added_tokens": [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")],
         "normalizer": {"type": "Sequence", "normalizers": [
             {"type": "Prepend", "prepend": "▁"},
             {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
         "pre_tokenizer": None,
         "post_processor": template("<s>", 1),
         "decoder": decoder,
         "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                   "continuing_subword_prefix": None, "end_of_word_suffix": None,
                   "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                   "vocab": vocab, "merges": [" ".join(m) for m in merges]}}
    if mistral:
        j["normalizer"] = None
        j["pre_tokenizer"] = {"type": "Metaspace", "replacement": "▁",
                              "prepend_scheme": "first", "split": False}
    return j


def sentencepiece_model(directory):
    import io
    import sentencepiece as spm
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(TRAIN.splitlines()), model_writer=model, vocab_size=400,
        model_type="bpe", byte_fallback=True, character_coverage=0.995,
        user_defined_symbols=["<start_of_turn>", "<end_of_turn>"], minloglevel=2)
    with open(os.path.join(directory, "tokenizer.model"), "wb") as f:
        f.write(model.getvalue())


def make_all(root):
    kinds = {
        "llama3": byte_level(ref.LLAMA3, False, False,
                             ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"], True),
        "qwen2": byte_level(ref.QWEN2, True, True,
                            ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], False),
        # Qwen 2.5's layout: Qwen 2's plus {"type": "NFC"}, merges as "a b" strings.
        "qwen25": byte_level(ref.QWEN2, False, False,
                             ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], False,
                             normalizer={"type": "NFC"}),
        "llama2": byte_fallback(False),
        "mistral": byte_fallback(True),
    }
    for name, j in kinds.items():
        os.makedirs(os.path.join(root, name), exist_ok=True)
        with open(os.path.join(root, name, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False)
    os.makedirs(os.path.join(root, "spm"), exist_ok=True)
    sentencepiece_model(os.path.join(root, "spm"))
    return root
