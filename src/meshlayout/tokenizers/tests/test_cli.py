"""test_cli.py - `meshlayout tokenize` end to end on a byte-level BPE built by
make_tokenizers.py, against bpe_reference.py: encode, --no-special, --decode (JSON list and
comma/space separated ids), the errors for bad ids and a directory without a tokenizer, and
Qwen 2.5's NFC normalizer.
Run by ctest (tokenizers.cli) with MESHLAYOUT_BIN naming the program.

Example:
    MESHLAYOUT_BIN=build/bin/meshlayout python3 -m pytest -q tests/test_cli.py
"""
import json
import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe_reference as ref  # noqa: E402
import make_tokenizers  # noqa: E402


@pytest.fixture(scope="module")
def toks(tmp_path_factory):
    return make_tokenizers.make_all(str(tmp_path_factory.mktemp("tokenizers")))


def meshlayout(*args, stdin):
    return subprocess.run([os.environ["MESHLAYOUT_BIN"], *args], input=stdin,
                          capture_output=True, check=False)


def test_cli_encode_decode(toks):
    model = os.path.join(toks, "llama3")
    with open(os.path.join(model, "tokenizer.json"), encoding="utf-8") as f:
        tok = ref.Reference(json.load(f))
    text = "Héllo  wörld 🦙\n".encode()
    r = meshlayout("tokenize", "--model", model, stdin=text)
    assert r.returncode == 0, r.stderr
    ids = json.loads(r.stdout)["ids"]
    assert ids == tok.encode(text, True)
    r = meshlayout("tokenize", "--model", model, "--no-special", stdin=text)
    assert json.loads(r.stdout)["ids"] == tok.encode(text, False)
    r = meshlayout("tokenize", "--model", model, "--decode", "--no-special",
                   stdin=json.dumps(ids).encode())
    assert r.returncode == 0, r.stderr
    assert r.stdout == text
    r = meshlayout("tokenize", "--model", model, "--decode", stdin=b"1, 2 3")
    assert r.stdout == tok.decode([1, 2, 3])
    r = meshlayout("tokenize", "--model", model, "--decode", stdin=b"1, x")
    assert r.returncode == 1 and b"'x'" in r.stderr
    r = meshlayout("tokenize", "--model", os.path.join(toks, "nothing"), stdin=b"")
    assert r.returncode == 1 and b"tokenizer.json" in r.stderr


def test_cli_nfc_tokenizer(toks):
    """Qwen 2.5's layout: the text is NFC-normalised before it is tokenised."""
    model = os.path.join(toks, "qwen25")
    with open(os.path.join(model, "tokenizer.json"), encoding="utf-8") as f:
        tok = ref.Reference(json.load(f))
    text = "cafe\u0301 \u212b<|im_end|>".encode()
    r = meshlayout("tokenize", "--model", model, stdin=text)
    assert r.returncode == 0, r.stderr
    ids = json.loads(r.stdout)["ids"]
    assert ids == tok.encode(text, True)
    assert ids == tok.encode("caf\u00e9 \u00c5<|im_end|>".encode(), True)
    r = meshlayout("tokenize", "--model", model, "--decode", stdin=json.dumps(ids).encode())
    assert r.stdout == "caf\u00e9 \u00c5<|im_end|>".encode()
