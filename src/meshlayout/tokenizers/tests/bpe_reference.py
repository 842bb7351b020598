"""bpe_reference.py - a short, independent Python implementation of Hugging Face's BPE
tokenizer.json pipeline (the subset meshlayout reads), written from the published algorithms,
used as the reference the C++ tokenizers are compared with. Text is bytes; invalid UTF-8
bytes become lone surrogates (surrogateescape), i.e. characters that are neither letters,
digits nor whitespace.

Example:
    tok = Reference(json.load(open("tokenizer.json")))
    ids = tok.encode(b"Hello world", add_special=True)
    text = tok.decode(ids)    # bytes
"""
import unicodedata

WHITESPACE = set("\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | {
    chr(c) for c in range(0x2000, 0x200B)}

LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def is_letter(c):
    return unicodedata.category(c).startswith("L")


def is_number(c):
    return unicodedata.category(c).startswith("N")


def is_space(c):
    return c in WHITESPACE


def is_other(c):
    return not (is_letter(c) or is_number(c) or is_space(c))


def fold(c):
    return "s" if c == "\u017f" else (c.lower() if c.isascii() else c)


def llama3_match(s, i, max_digits):
    """End of the Llama 3 / Qwen 2 pattern's match at i, or None."""
    n = len(s)
    if s[i] == "'":  # (?i:'s|'t|'re|'ve|'m|'ll|'d)
        for suffix in ("s", "t", "re", "ve", "m", "ll", "d"):
            part = s[i + 1:i + 1 + len(suffix)]
            if len(part) == len(suffix) and "".join(map(fold, part)) == suffix:
                return i + 1 + len(suffix)
    j = i  # [^\r\n\p{L}\p{N}]?\p{L}+
    if not is_letter(s[j]) and not is_number(s[j]) and s[j] not in "\r\n":
        j += 1
    if j < n and is_letter(s[j]):
        while j < n and is_letter(s[j]):
            j += 1
        return j
    if is_number(s[i]):  # \p{N}{1,max}
        j = i
        while j < n and j - i < max_digits and is_number(s[j]):
            j += 1
        return j
    j = i + 1 if s[i] == " " else i  # ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    if j < n and is_other(s[j]):
        while j < n and is_other(s[j]):
            j += 1
        while j < n and s[j] in "\r\n":
            j += 1
        return j
    run = i  # the whitespace run from i
    while run < n and is_space(s[run]):
        run += 1
    if run == i:
        return None
    newlines = [k for k in range(i, run) if s[k] in "\r\n"]
    if newlines:  # \s*[\r\n]+
        return newlines[-1] + 1
    if run == n or run - i >= 2:  # \s+(?!\S)
        return run if run == n else run - 1
    return run  # \s+


def find_matches(pattern, s):
    if pattern == LLAMA3:
        max_digits = 3
    elif pattern == QWEN2:
        max_digits = 1
    else:
        raise ValueError("the reference knows only the Llama 3 and Qwen 2 patterns")
    out, i = [], 0
    while i < len(s):
        end = llama3_match(s, i, max_digits)
        if end is None:
            i += 1
        else:
            out.append((i, end))
            i = end
    return out


def split_isolated(pattern, s):
    pieces, prev = [], 0
    for start, end in find_matches(pattern, s):
        if prev != start:
            pieces.append(s[prev:start])
        pieces.append(s[start:end])
        prev = end
    if prev != len(s):
        pieces.append(s[prev:])
    return pieces


def bytes_to_unicode():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_TO_CHAR = bytes_to_unicode()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def to_bytes(s):
    return s.encode("utf-8", "surrogateescape")


class Reference:
    def __init__(self, j):
        m = j["model"]
        assert m["type"] == "BPE"
        self.vocab = m["vocab"]
        self.byte_fallback = m.get("byte_fallback", False)
        self.ignore_merges = m.get("ignore_merges", False)
        self.unk = m.get("unk_token")
        self.fuse_unk = m.get("fuse_unk", False)
        self.ranks = {}
        for rank, merge in enumerate(m["merges"]):
            a, b = merge.split(" ") if isinstance(merge, str) else merge
            self.ranks.setdefault((a, b), rank)
        self.added = j.get("added_tokens") or []
        self.id_to_token = {i: t for t, i in self.vocab.items()}
        for a in self.added:
            self.id_to_token[a["id"]] = a["content"]
        self.special_ids = {a["id"] for a in self.added if a["special"]}
        self.normalizer = j.get("normalizer")
        self.pre = j.get("pre_tokenizer")
        self.post = j.get("post_processor")
        self.decoder = j.get("decoder")
        self.byte_level = "ByteLevel" in str(self.pre)

    # ---- encode ----
    def split_added(self, s, tokens):
        out, prev, i = [], 0, 0
        while i < len(s):
            best = None
            for a in tokens:
                if s.startswith(a["content"], i) and (best is None or
                                                      len(a["content"]) > len(best["content"])):
                    best = a
            if best is None:
                i += 1
                continue
            start, end = i, i + len(best["content"])
            if best.get("lstrip"):
                while start > prev and is_space(s[start - 1]):
                    start -= 1
            if best.get("rstrip"):
                while end < len(s) and is_space(s[end]):
                    end += 1
            if start > prev:
                out.append((s[prev:start], None))
            out.append((best["content"], best["id"]))
            prev = i = end
        if prev < len(s):
            out.append((s[prev:], None))
        return out

    def normalize(self, s, n):
        if n is None:
            return s
        if n["type"] == "Sequence":
            for step in n["normalizers"]:
                s = self.normalize(s, step)
            return s
        if n["type"] == "Prepend":
            return n["prepend"] + s if s else s
        if n["type"] == "Replace":
            return s.replace(n["pattern"]["String"], n["content"])
        if n["type"] in ("NFC", "NFD", "NFKC", "NFKD"):
            # Invalid bytes are lone surrogates here: they neither decompose nor compose.
            return unicodedata.normalize(n["type"], s)
        raise ValueError(n["type"])

    def pre_tokenize(self, pieces, p):
        if p is None:
            return pieces
        t = p["type"]
        if t == "Sequence":
            for step in p["pretokenizers"]:
                pieces = self.pre_tokenize(pieces, step)
            return pieces
        if t == "Split":
            assert p["behavior"] == "Isolated" and not p["invert"]
            return [(q, first and k == 0) for s, first in pieces
                    for k, q in enumerate(split_isolated(p["pattern"]["Regex"], s))]
        if t == "ByteLevel":
            assert not p["add_prefix_space"] and not p["use_regex"]
            return [("".join(BYTE_TO_CHAR[b] for b in to_bytes(s)), first) for s, first in pieces]
        if t == "Metaspace":
            assert not p["split"]
            out = []
            for s, first in pieces:
                s = s.replace(" ", p["replacement"])
                scheme = p["prepend_scheme"]
                if (scheme == "always" or (scheme == "first" and first)) and \
                        not s.startswith(p["replacement"]):
                    s = p["replacement"] + s
                out.append((s, first))
            return out
        raise ValueError(t)

    def bpe(self, word):
        if self.ignore_merges and word in self.vocab:
            return [self.vocab[word]]
        symbols, last_unk = [], False
        for c in word:
            if c in self.vocab:
                symbols.append(c)
                last_unk = False
                continue
            pieces = ["<0x%02X>" % b for b in c.encode("utf-8")]
            if self.byte_fallback and all(q in self.vocab for q in pieces):
                symbols += pieces
                last_unk = False
                continue
            if self.unk is None:
                raise ValueError("no token for %r" % c)
            if not (self.fuse_unk and last_unk):
                symbols.append(self.unk)
            last_unk = True
        while True:
            best = None
            for k in range(len(symbols) - 1):
                rank = self.ranks.get((symbols[k], symbols[k + 1]))
                if rank is not None and (best is None or rank < best[0]):
                    best = (rank, k)
            if best is None:
                break
            k = best[1]
            symbols[k:k + 2] = [symbols[k] + symbols[k + 1]]
        return [self.vocab[s] for s in symbols]

    def encode(self, data, add_special=True):
        text = data.decode("utf-8", "surrogateescape")
        if not self.byte_level:
            data.decode("utf-8")  # UnicodeDecodeError: refused, as meshlayout refuses it
        raw = [a for a in self.added if not a.get("normalized")]
        normed = [a for a in self.added if a.get("normalized")]
        ids, at_start = [], True
        for piece, pid in self.split_added(text, raw):
            if pid is not None:
                ids.append(pid)
                at_start = False
                continue
            for part, part_id in self.split_added(self.normalize(piece, self.normalizer), normed):
                if part_id is not None:
                    ids.append(part_id)
                else:
                    for word, _ in self.pre_tokenize([(part, at_start)], self.pre):
                        ids += self.bpe(word)
                at_start = False
        if add_special:
            ids = self.post_process(ids, self.post)
        return ids

    def post_process(self, ids, p):
        if p is None or p["type"] == "ByteLevel":
            return ids
        if p["type"] == "Sequence":
            for step in p["processors"]:
                ids = self.post_process(ids, step)
            return ids
        out = []
        for item in p["single"]:
            if "Sequence" in item:
                out += ids
            else:
                out += p["special_tokens"][item["SpecialToken"]["id"]]["ids"]
        return out

    # ---- decode ----
    def decode(self, ids, skip_special=False):
        tokens = [self.id_to_token[i] for i in ids if not (skip_special and i in self.special_ids)]
        if self.decoder is None:
            return " ".join(tokens).encode()
        return b"".join(self.run_decoder(tokens, self.decoder))

    def run_decoder(self, tokens, d):
        """tokens: list of str (or bytes after ByteLevel); returns a list of bytes."""
        t = d["type"]
        if t == "Sequence":
            for step in d["decoders"]:
                tokens = self.run_decoder(tokens, step)
            return [x if isinstance(x, bytes) else x.encode() for x in tokens]
        if t == "ByteLevel":
            out = b""
            for tok in tokens:
                if all(c in CHAR_TO_BYTE for c in tok):
                    out += bytes(CHAR_TO_BYTE[c] for c in tok)
                else:
                    out += tok.encode()
            return [out]
        if t == "Replace":
            return [x.replace(d["pattern"]["String"], d["content"]) for x in tokens]
        if t == "ByteFallback":
            out, pending = [], b""
            for tok in tokens + [None]:
                if tok is not None and len(tok) == 6 and tok.startswith("<0x") and tok[-1] == ">":
                    pending += bytes([int(tok[3:5], 16)])
                    continue
                if pending:
                    try:
                        out.append(pending.decode("utf-8"))
                    except UnicodeDecodeError:
                        out += ["\ufffd"] * len(pending)
                    pending = b""
                if tok is not None:
                    out.append(tok)
            return out
        if t == "Fuse":
            return ["".join(tokens)]
        if t == "Strip":
            out = []
            for x in tokens:
                for _ in range(d["start"]):
                    if x.startswith(d["content"]):
                        x = x[len(d["content"]):]
                for _ in range(d["stop"]):
                    if x.endswith(d["content"]):
                        x = x[:-len(d["content"])]
                out.append(x)
            return out
        raise ValueError(t)
