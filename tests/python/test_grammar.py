"""GBNF grammars (`ferry run --grammar-file`, the `grammar` field of `ferry serve`) against llama.cpp.

Every grammar llama.cpp ships (vendor/llama.cpp/grammars/*.gbnf of the llama-cpp-python source package, read
at test time, never copied here) parses and constrains a generation; and on the bundled model, greedy, the
constrained tokens equal llama-cpp-python's (`Llama.generate(tokens, temp=0, grammar=LlamaGrammar...)`) for the
same prompt tokens and grammar: both keep the best token that fits the grammar at every step. As in
test_differential.py (rule 3), the two may part only at a near tie: where they part, llama.cpp's logit of
ferry's token is within TIE spreads of its own pick's (spread = max(1, std of the row)).
"""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest

from chat_template_ref import find_sdist

REPO = Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "smollm2-135m-instruct-q4_1.gguf"
GRAMMARS_DIR = "vendor/llama.cpp/grammars"
N_GEN = 32
TIE = 0.2  # test_differential.py's allowance for the real models

# (grammar file or inline grammar, prompt): prompts that give each grammar something to continue.
CASES = [
    ("arithmetic.gbnf", "Compute: 12 times 7 plus 3 ="),
    ("json.gbnf", "A JSON object describing a cat:"),
    ("json_arr.gbnf", "A JSON list of three fruits:"),
    ("list.gbnf", "Shopping list:"),
    ("chess.gbnf", "The first moves of a famous chess game:"),
    ('root ::= ("yes" | "no") "."', "Is the sky blue? Answer:"),
    ('root ::= [A-Z] [a-z]+ (" " [a-z]+){2,5} "."', "Write one short sentence:"),
]


@pytest.fixture(scope="module")
def model():
    if not MODEL.is_file():
        pytest.skip(f"bundled model missing: {MODEL}")
    return MODEL


@pytest.fixture(scope="module")
def grammars() -> dict[str, str]:
    sdist = find_sdist()
    if sdist is None:
        pytest.skip("the llama-cpp-python source package (its grammars) is not available")
    out: dict[str, str] = {}
    if sdist.is_dir():
        for f in sorted((sdist / GRAMMARS_DIR).glob("*.gbnf")):
            out[f.name] = f.read_text(encoding="utf-8")
    else:
        with tarfile.open(sdist) as tar:
            for m in tar.getmembers():
                parent, _, name = m.name.rpartition("/")
                if m.isfile() and parent.endswith(GRAMMARS_DIR) and name.endswith(".gbnf"):
                    out[name] = tar.extractfile(m).read().decode("utf-8")
    assert len(out) >= 5, f"expected llama.cpp's grammars in {sdist}"
    return out


def grammar_text(grammars: dict[str, str], spec: str) -> str:
    return grammars[spec] if spec.endswith(".gbnf") else spec


def ferry_constrained(ferry_bin, model, grammar: str, prompt: str, tmp_path: Path) -> dict:
    gfile = tmp_path / "g.gbnf"
    gfile.write_text(grammar, encoding="utf-8")
    res = subprocess.run([str(ferry_bin), "run", "-m", str(model), "-p", prompt, "-n", str(N_GEN), "--temp", "0",
                          "-t", "2", "-c", "512", "--grammar-file", str(gfile), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_every_llama_cpp_grammar_parses_and_constrains(ferry_bin, model, grammars, tmp_path):
    for name, text in grammars.items():
        out = ferry_constrained(ferry_bin, model, text, "Write something:", tmp_path)
        assert out["n_generated"] >= 1, name


@pytest.mark.parametrize("spec,prompt", CASES, ids=[c[0][:12] for c in CASES])
def test_greedy_text_matches_llama_cpp(ferry_bin, model, grammars, llama_cpp, spec, prompt, tmp_path):
    grammar = grammar_text(grammars, spec)
    ours = ferry_constrained(ferry_bin, model, grammar, prompt, tmp_path)
    prompt_tokens, tokens = list(ours["prompt_tokens"]), list(ours["tokens"])
    llm = llama_cpp.Llama(model_path=str(model), n_ctx=512, seed=0, n_threads=2, n_threads_batch=2,
                          n_gpu_layers=0, logits_all=True, verbose=False)
    try:
        ref: list[int] = []
        for tok in llm.generate(prompt_tokens, temp=0.0, reset=True,
                                grammar=llama_cpp.LlamaGrammar.from_string(grammar, verbose=False)):
            if llama_cpp.llama_vocab_is_eog(llm._model.vocab, tok) or len(ref) == N_GEN:
                break
            ref.append(tok)
        if tokens == ref:
            return
        j = next((i for i, (a, b) in enumerate(zip(tokens, ref)) if a != b), min(len(tokens), len(ref)))
        assert j < min(len(tokens), len(ref)), (spec, "one run ends where the other goes on", tokens, ref)
        llm.reset()
        llm.eval(prompt_tokens + tokens[:j])
        row = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        gap = float(row[ref[j]] - row[tokens[j]]) / max(1.0, float(np.std(row)))
        assert gap <= TIE, (spec, f"token {j}: ferry {tokens[j]}, llama.cpp {ref[j]}, {gap:.3f} spreads apart",
                            ours["text"])
    finally:
        if hasattr(llm, "close"):
            llm.close()


def test_bad_grammar_is_one_error_line(ferry_bin, model, tmp_path):
    gfile = tmp_path / "bad.gbnf"
    gfile.write_text('root ::= item\nitem ::= item "x"\n', encoding="utf-8")
    res = subprocess.run([str(ferry_bin), "run", "-m", str(model), "-p", "a", "-n", "4", "--grammar-file", str(gfile)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode != 0
    lines = [l for l in res.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "left recursive" in lines[0], res.stderr
