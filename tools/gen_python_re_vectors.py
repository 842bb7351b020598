#!/usr/bin/env python3
"""Generates testdata/python_re_vectors.tsv: what Python's `re` says about LayoutMap keys.

Every pattern below is crossed with every path, in the three LayoutMap match modes:
  search     re.search(pattern, path)     (Keras 3.0-3.13, LayoutMap default)
  fullmatch  re.fullmatch(pattern, path)  (Keras >= 3.14)
  first      re.match(pattern, path)      (Keras 2)
and the file records whether the result is not None. The C++ test
src/meshlayout/layout_map/python_compat_test.cc runs every vector through a one-rule
LayoutMap (python_regex_to_re2 + RE2) and expects the same answer.

Only patterns in the subset meshlayout accepts are written: Python compiles them, and they
use no back-reference, look-around, atomic group, possessive quantifier, conditional, or
the verbose/locale/ASCII/unicode inline flags. Paths never contain a newline, so `$`
matching before a trailing newline never comes up. Vectors whose answer hangs on Python's
Unicode \\b and \\B, which RE2 cannot reproduce, are left out (see EXCLUSIONS below).

Output is deterministic: fixed lists plus random ones drawn from random.Random(SEED).
Standard library only. Run from anywhere:
    python3 tools/gen_python_re_vectors.py [output.tsv]
"""

import os
import random
import re
import sys
import warnings

try:  # CPython 3.11+
    import re._parser as sre_parse
except ImportError:  # pragma: no cover - older CPython
    import sre_parse  # type: ignore

SEED = 20240517
MODES = ("search", "fullmatch", "first")
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.normpath(os.path.join(HERE, os.pardir, "testdata", "python_re_vectors.tsv"))

# ---------------------------------------------------------------------------------------------
# Patterns: what users write as Keras LayoutMap keys, grouped by feature.
# ---------------------------------------------------------------------------------------------
PATTERNS = [
    # Literals (a '.' in a Keras 2 key is a regex dot, as users rarely escape it).
    "d1.kernel", "d1.bias", "dense/kernel", "dense_1/kernel", "kernel", "bias", "dense",
    "Dense", "my_model/dense_1/kernel", "mha._query_dense.kernel", "blocks.0.kernel",
    "token_embedding/embeddings", "dénse/kernel", "名前", "",
    # Dot and star.
    ".", ".*", ".+", ".*?", ".+?", ".?", "d.", "d..kernel", ".*kernel", ".*kernel.*",
    "kernel.*", ".*/kernel", "^.*$", "d1.*", ".*\\.kernel", "d.nse",
    # Character classes and class escapes.
    "[0-9]", "[0-9]+", "dense_[0-9]+", "[^/]+", "^[^/]+/kernel$", "[a-z_]+", "^[a-z_]+$",
    "[a-z_]+/kernel", "[A-Z]", "conv[23]d", "[^a-z]", "\\d", "\\d+/", "dense_\\d+", "\\w+",
    "^\\w+$", "\\w+/\\w+", "^\\w+/kernel$", "\\s", "\\S+", "^\\S+$", "\\D", "^\\D+$", "\\W",
    "[\\w.]+", "^[\\w\\-\\.]+$", "[a-z\\_]+$", "[\\d_]+", "[^\\d]+$", "[\\s\\S]", "[]a]",
    "[^]/]+", "[-a]", "[a-]", "[.]", "[\\\\/]", "[é]", "[^\\x00-\\x7f]", "[[:digit:]]+",
    "[[]", "[\\[\\]]",
    # Alternation.
    "(query|key|value)", "query|key|value", "(query|key|value)/kernel$", "dense|conv",
    "(dense|conv2d)_\\d+/(kernel|bias)", "bias|", "|kernel", "(|d)ense", "^(d1|d2)\\.",
    # Groups: capturing, non-capturing, named, nested, empty.
    "(dense)", "(?:dense)", "(?:query|key)/kernel", "(?P<layer>dense_\\d+)/kernel",
    "(?P<n>\\w+)/(?P<leaf>kernel|bias)$", "((a)|b)+", "(d(e(n)))se", "()kernel", "(?:)",
    "^(?:[a-z_]+/)*kernel$",
    # Quantifiers, including Python's {,n} and braces that are literal text.
    "de?nse", "dense_?1", "l*ayer", "e+", "_\\d{2}", "_\\d{1,3}/", "\\d{2,}", "\\d{,3}",
    "^\\d{,3}$", "_\\d{,1}/", "_\\d{,2}?/", "s{2}", "(?:_\\d){1,2}/", "\\d{2}?", "\\d{1,3}?/",
    ".{3}", "^.{0,10}$", "^.{14}$", ".{5,}kernel", "a{0}", "x{,}", "e{,}n", "a{x}", "dense{",
    "e{1", "{", "d{1}e{1,}n{0,1}",
    # Anchors.
    "^model/", "^my_model/", "kernel$", "^kernel$", "\\Akernel", "kernel\\Z",
    "\\Adense.*kernel\\Z", "^$", "^", "$", "\\A\\Z", "\\bkernel\\b", "\\bdense", "dense\\b",
    "\\Bense", "_\\d+\\b", "/\\B", "\\b\\d", "\\Bk", "\\b", "\\B", "\\Bnse/",
    # Escapes.
    "\\.", "d1\\.kernel", "\\/", "dense\\/kernel", "\\-", "dense\\-1", "\\_", "dense\\_1",
    "\\x2f", "\\u00e9", "d\\u00e9nse", "\\U000000e9", "\\:", "\\ ", "dense\\ 1", "\\#",
    "\\&", "\\~", "\\\\", "\\t",
    # Inline flags: global (at the start) and scoped.
    "(?i)dense", "(?i)DENSE/KERNEL", "(?i)^D1\\.KERNEL$", "(?i)[A-Z]+_\\d", "(?i)dénse",
    "(?i)DÉNSE", "(?i)\\w+/KERNEL", "(?i)[^a-z]", "(?s).*", "(?s)dense.kernel",
    "(?is)DENSE.KERNEL", "(?m)^dense", "(?m)kernel$", "(?i:DENSE)/kernel",
    "dense/(?i:KERNEL)", "(?i)dense(?-i:/KERNEL)", "(?i)dense(?-i:/kernel)", "(?-i:dense)",
    "(?i:d)ense_\\d", "(?s:.)ense",
    # Comments.
    "(?#match kernels)kernel", "dense(?#_1)_1", "(?#)", "(?#c)(?i)DENSE", "ker(?#x)nel$",
    # Realistic Keras / KerasHub rules.
    ".*dense.*kernel", "dense.*kernel", "dense.*bias", ".*dense.*bias",
    "decoder_block_\\d+/attention/(query|key|value)/kernel", ".*ffw_gating.*kernel",
    ".*ffw_linear.*kernel", "conv2d.*bias", "conv2d.*kernel", "conv3d.*kernel",
    "(.*/)?layers_(1[0-9]|[2-9])/.*", ".*attention.*(query|key|value).*kernel",
    ".*attention_output.*kernel", ".*/kernel$", "embeddings", ".*embeddings$",
    ".*(query|key|value)_dense.*kernel", "mha\\._(query|key|value)_dense\\.kernel",
    "blocks\\.\\d+\\.kernel", "d1\\..*", "^sequential/d1/", ".*_\\d+/kernel", "dense_[13]/.*",
    ".*(gamma|beta)$", "decoder_block_(0|1)/.*", ".*token_embedding/embeddings",
    ".*/output$", "^[^/]+/dense_\\d+/(kernel|bias)$", "(?:.*/)?d1[./](kernel|bias)",
]

# re.escape() of a path is a common way to write an exact-match rule.
ESCAPED_LITERALS = [
    "d1.kernel", "my_model/dense_1/kernel", "my model/dense-1/kernel",
    "mha._query_dense.kernel", "dénse/kernel", "dense+1/kernel",
]

# ---------------------------------------------------------------------------------------------
# Paths: Keras 2 object paths, Keras 3 scope paths, and edge cases.
# ---------------------------------------------------------------------------------------------
PATHS = [
    # Keras 2 object paths.
    "d1.kernel", "d1.bias", "dense_1.kernel", "blocks.0.kernel", "blocks.12.bias",
    "mha._query_dense.kernel", "mha._key_dense.bias", "mha._output_dense.kernel",
    "embedding.embeddings", "conv2d.kernel",
    # Keras 3 scope paths.
    "my_model/dense_1/kernel", "sequential/d1/bias", "d1/kernel", "dense/kernel", "dense_1/kernel",
    "decoder_block_12/attention/query/kernel", "decoder_block_0/attention/key/kernel",
    "decoder_block_3/attention/value/bias", "decoder_block_7/attention/attention_output/kernel",
    "decoder_block_1/ffw_gating/kernel", "decoder_block_1/ffw_gating_2/kernel",
    "decoder_block_1/ffw_linear/kernel", "decoder_block_1/pre_attention_norm/scale",
    "token_embedding/embeddings", "gemma_backbone/token_embedding/embeddings",
    "my_model/conv2d_123/kernel", "my_model/conv2d_123/bias", "my_model/conv3d_1/kernel",
    "model/layers_12/mlp/kernel", "model/layers_2/mlp/bias", "model/layers_1/mlp/kernel",
    "model/layers_20/attn/kernel", "layers_15/kernel", "transformer/layer_norm/gamma",
    "batch_normalization/moving_mean", "my_model/dense_1/output",
    # Edge cases: empty, tiny, metacharacters, spaces, case, a backslash, unicode.
    "", "/", ".", "_", "a", "kernel", "bias", "my model/dense 1/kernel", "dense-1/kernel",
    "dense+1/kernel", "dense_(1)/kernel", "a{x}/dense{", "DENSE/KERNEL", "Dense_1/Kernel",
    "w\\x/kernel", "[a]/kernel", "dénse/kernel", "DÉNSE/KERNEL", "名前/kernel",
    "dense_\u0661/kernel",  # ARABIC-INDIC DIGIT ONE: Python's \d is any Unicode decimal digit
    "dense\u00a0kernel",     # NO-BREAK SPACE: Python's \s is any Unicode white space
]

# ---------------------------------------------------------------------------------------------
# EXCLUSIONS: vectors Python and RE2 inherently disagree on, however the pattern is translated.
#
# RE2's \b and \B are ASCII-only: a word character is [0-9A-Za-z_]. Python's are Unicode
# (for a str pattern, \w is any letter or digit, so "é", "名" and "١" are word characters).
# RE2 has no Unicode word-boundary option and no look-around to build one, so no translation
# can give RE2 Python's boundaries. The same model also covers a CPython quirk: before 3.14
# (python/cpython gh-124130) \B never matches the empty string, while RE2 (like Python >= 3.14,
# Perl and PCRE) finds \B at position 0 of "".
#
# So a vector is left out when Python's answer changes once its \b and \B are replaced by
# RE2's ASCII boundary (written with Python look-around below). Every such vector's pattern
# uses \b or \B; they are listed as comments at the top of the generated file.
# ---------------------------------------------------------------------------------------------
_ASCII_WORD = "[0-9A-Za-z_]"
_RE2_WORD_BOUNDARY = (f"(?:(?<!{_ASCII_WORD})(?={_ASCII_WORD})|"
                      f"(?<={_ASCII_WORD})(?!{_ASCII_WORD}))")
_RE2_NOT_WORD_BOUNDARY = (f"(?:(?<={_ASCII_WORD})(?={_ASCII_WORD})|"
                          f"(?<!{_ASCII_WORD})(?!{_ASCII_WORD}))")


def with_re2_word_boundaries(pattern):
    """`pattern` with each \\b and \\B outside a character class replaced by RE2's ASCII one."""
    out = []
    i = 0
    in_class = False
    class_start = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            d = pattern[i + 1]
            if not in_class and d == "b":
                out.append(_RE2_WORD_BOUNDARY)
            elif not in_class and d == "B":
                out.append(_RE2_NOT_WORD_BOUNDARY)
            else:
                out.append(pattern[i:i + 2])
            i += 2
            continue
        if in_class:
            if c == "]" and i != class_start:
                in_class = False
        elif c == "[":
            in_class = True
            class_start = i + 1
            if pattern[class_start:class_start + 1] == "^":
                class_start += 1
            out.append(pattern[i:class_start])
            i = class_start
            continue
        out.append(c)
        i += 1
    return "".join(out)


def long_path():
    """A very long Keras 3 path (about 230 characters)."""
    blocks = "/".join(f"block_{i}" for i in range(24))
    return f"my_model/{blocks}/dense_1/kernel"


def random_paths(rng, count):
    models = ["my_model", "sequential", "functional", "gemma_backbone", "model", "encoder"]
    layers = ["dense", "dense_1", "dense_17", "conv2d", "conv2d_4", "conv3d_1", "d1", "d2",
              "embedding", "layer_norm", "decoder_block_5", "layers_11", "attention"]
    subs = ["", "query", "key", "value", "ffw_gating", "attention_output", "mlp"]
    leaves = ["kernel", "bias", "embeddings", "gamma", "beta", "moving_variance", "scale"]
    out = []
    for _ in range(count):
        keras2 = rng.random() < 0.3
        parts = []
        if not keras2 and rng.random() < 0.7:
            parts.append(rng.choice(models))
        parts.append(rng.choice(layers))
        sub = rng.choice(subs)
        if sub:
            parts.append("_" + sub + "_dense" if keras2 else sub)
        parts.append(rng.choice(leaves))
        out.append(("." if keras2 else "/").join(parts))
    return out


def random_patterns(rng, count):
    """Small patterns built from the pieces users combine."""
    words = ["dense", "kernel", "bias", "conv2d", "query", "key", "value", "block", "d1",
             "embeddings", "layers", "attention", "my_model", "ffw"]
    atoms = [".", ".*", ".+", ".*?", "\\d+", "\\d", "\\w+", "[0-9]", "[^/]+", "[a-z_]+", "/",
             "\\.", "_", "\\d{1,3}", "\\d{,2}", "[./]", "\\s*", "\\D+", "\\b"]

    def piece(depth):
        r = rng.random()
        if r < 0.35:
            return rng.choice(words)
        if r < 0.75 or depth > 1:
            return rng.choice(atoms)
        if r < 0.85:
            alts = rng.sample(words, rng.randint(2, 3))
            return rng.choice(["(", "(?:"]) + "|".join(alts) + ")"
        inner = "".join(piece(depth + 1) for _ in range(rng.randint(1, 2)))
        return "(?:" + inner + ")" + rng.choice(["?", "*", "+", "{1,2}", ""])

    out = []
    for _ in range(count):
        p = "".join(piece(0) for _ in range(rng.randint(1, 4)))
        r = rng.random()
        if r < 0.15:
            p = "^" + p
        elif r < 0.3:
            p = p + "$"
        elif r < 0.45:
            p = "(?i)" + re.sub(r"(?<!\\)[a-z]+", lambda m: m.group().upper(), p)
        out.append(p)
    return out


_UNSUPPORTED_OPS = {
    name for name in ("GROUPREF", "GROUPREF_EXISTS", "GROUPREF_IGNORE", "GROUPREF_LOC_IGNORE",
                      "GROUPREF_UNI_IGNORE", "ASSERT", "ASSERT_NOT", "ATOMIC_GROUP",
                      "POSSESSIVE_REPEAT")
}
_INLINE_FLAGS = re.compile(r"\(\?([a-zA-Z]*)(?:-([a-zA-Z]*))?[:)]")


def unsupported_reason(pattern):
    """Why meshlayout refuses `pattern`, or None if it is in the supported subset."""
    for on, off in _INLINE_FLAGS.findall(pattern):
        bad = set(on + off) - set("ims")
        if bad:
            return f"inline flag {''.join(sorted(bad))}"

    def walk(items):
        for op, av in items:
            if str(op) in _UNSUPPORTED_OPS:
                return str(op)
            children = []
            if isinstance(av, sre_parse.SubPattern):
                children.append(av)
            elif isinstance(av, (list, tuple)):
                for x in av:
                    if isinstance(x, sre_parse.SubPattern):
                        children.append(x)
                    elif isinstance(x, (list, tuple)):
                        children.extend(y for y in x if isinstance(y, sre_parse.SubPattern))
            for c in children:
                why = walk(c)
                if why:
                    return why
        return None

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # FutureWarning for "[[" etc.
        return walk(sre_parse.parse(pattern))


def check_field(text, what):
    assert "\t" not in text and "\n" not in text and "\r" not in text, (what, text)
    assert all(ord(c) >= 0x20 for c in text), (what, text)


def main(argv):
    out_path = argv[1] if len(argv) > 1 else DEFAULT_OUT
    rng = random.Random(SEED)
    paths = PATHS + [long_path()] + random_paths(rng, 6)
    patterns = PATTERNS + [re.escape(p) for p in ESCAPED_LITERALS] + random_patterns(rng, 20)

    # Keep first occurrences only, in order.
    paths = list(dict.fromkeys(paths))
    patterns = list(dict.fromkeys(patterns))

    kept_patterns = []
    for p in patterns:
        check_field(p, "pattern")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # FutureWarning for "[[" etc.
                re.compile(p)
        except re.error:
            continue  # Python refuses it: nothing to compare.
        assert unsupported_reason(p) is None, (p, unsupported_reason(p))
        kept_patterns.append(p)
    for s in paths:
        check_field(s, "path")

    funcs = {"search": re.search, "fullmatch": re.fullmatch, "first": re.match}
    lines = []
    excluded = []
    counts = {m: 0 for m in MODES}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for mode in MODES:
            fn = funcs[mode]
            for p in kept_patterns:
                re2_model = with_re2_word_boundaries(p)
                for s in paths:
                    try:
                        hit = fn(p, s) is not None
                    except re.error:
                        continue  # never happens for a compiled pattern; drop the pair if so
                    if re2_model != p and (fn(re2_model, s) is not None) != hit:
                        excluded.append(f"#   {mode}\t{p}\t{s}\t{int(hit)}\n")
                        continue
                    lines.append(f"{mode}\t{p}\t{s}\t{int(hit)}\n")
                    counts[mode] += 1

    header = (
        "# python_re_vectors.tsv: GENERATED by tools/gen_python_re_vectors.py, do not edit.\n"
        "# Regenerate from the repository root: python3 tools/gen_python_re_vectors.py\n"
        f"# Answers from CPython {sys.version_info.major}.{sys.version_info.minor} `re`.\n"
        "# One vector per line: mode<TAB>pattern<TAB>path<TAB>expected\n"
        "#   mode: search (re.search) | fullmatch (re.fullmatch) | first (re.match)\n"
        "#   expected: 1 if the call returns a match, 0 if it returns None\n"
        "# Fields are raw UTF-8 with no escaping (a backslash is a backslash); the generator\n"
        "# asserts that no pattern or path contains a tab, newline or other control character.\n"
        "# Lines starting with '#' are comments.\n"
        f"# Left out ({len(excluded)}): vectors whose answer depends on Python's Unicode \\b/\\B,\n"
        "# which RE2 cannot reproduce (see the generator), with Python's answer:\n"
    )
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    with open(out_path, "w", encoding="utf-8", newline="\n") as f:
        f.write(header)
        f.writelines(excluded)
        f.writelines(lines)

    size = os.path.getsize(out_path)
    print(f"wrote {out_path}: {len(lines)} vectors ({len(kept_patterns)} patterns x "
          f"{len(paths)} paths), {size} bytes; per mode: " +
          ", ".join(f"{m}={counts[m]}" for m in MODES) +
          "; matches: " + str(sum(1 for l in lines if l.endswith("\t1\n"))) +
          f"; left out (Unicode \\b/\\B): {len(excluded)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
