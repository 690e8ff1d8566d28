"""Images in conversations: `ferry chat --mmproj` with its /image command, and `ferry serve --mmproj` with
image_url parts (data: URLs) in /v1/chat/completions, on the tiny Qwen2.5-VL pair on the CPU.

The reference is `ferry run --chat --image` on the same prompt (itself compared with llama.cpp's libmtmd in
test_vision.py): the same prompt length, the same greedy tokens, and (server) the chosen tokens' logprobs
within 1e-3 of those computed from `ferry run --logits-out`. A request with an image also runs beside a
text-only one (image rows and other requests' tokens in the same steps), and an image sent again in a later
turn is found in the prompt cache. Bad image input gets a 4xx JSON error and the server keeps serving.
"""

from __future__ import annotations

import base64
import json
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import ferry_ref
import vision_images
from serve_process import ServeProcess

N_GEN = 8
QUESTION = "Describe this."


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("vision_chat")


@pytest.fixture(scope="module")
def pair(ferry_bin, work):
    lm, mm = work / "vl.gguf", work / "vl-mmproj.gguf"
    res = ferry_ref.run_ferry(["synth", "--preset", "tiny-qwen2.5-vl", "--type", "F16", "-o", str(lm), "--mmproj-out",
                               str(mm), "--mmproj-type", "F16"])
    assert res.returncode == 0, res.stderr
    return lm, mm


@pytest.fixture(scope="module")
def image(work) -> Path:
    return vision_images.write_png(work / "a.png", vision_images.test_pattern(300, 200, seed=3))


def run_reference(ferry_bin, lm, mm, image, work, prompt: str) -> dict:
    logits = work / "ref.logits"
    res = subprocess.run([str(ferry_bin), "run", "-m", str(lm), "--mmproj", str(mm), "--image", str(image), "--chat",
                          "-p", prompt, "-n", str(N_GEN), "--temp", "0", "--ignore-eos", "--json", "-t", "2",
                          "--logits-out", str(logits)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    rows = np.fromfile(logits, dtype="<f4").reshape(-1, int(out["n_vocab"])).astype(np.float64)
    # The logprob of each generated token under the row before it.
    n_prompt = int(out["n_prompt"])
    lps = []
    for j, t in enumerate(out["tokens"]):
        row = rows[n_prompt - 1 + j]
        m = row.max()
        lps.append(float(row[t] - m - np.log(np.exp(row - m).sum())))
    out["logprobs"] = lps
    return out


def test_chat_image_command(ferry_bin, pair, image, work):
    lm, mm = pair
    ref = run_reference(ferry_bin, lm, mm, image, work, QUESTION)
    res = subprocess.run([str(ferry_bin), "chat", "-m", str(lm), "--mmproj", str(mm), "--temp", "0", "-n", str(N_GEN),
                          "-t", "2"], input=f"/image {image}\n{QUESTION}\n/image\n/image {work}/missing.png\n/exit\n",
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "/image PATH adds an image" in res.stderr
    assert "-> 77 tokens, encoded in" in res.stderr and "on cpu" in res.stderr, res.stderr
    assert "usage: /image PATH" in res.stderr
    assert "cannot open image" in res.stderr
    assert res.stdout.strip("\n") == ref["text"], (res.stdout, ref["text"])


def test_chat_image_needs_a_projector(ferry_bin, pair, image):
    lm, _ = pair
    res = subprocess.run([str(ferry_bin), "chat", "-m", str(lm), "--temp", "0", "-n", "2", "-t", "2"],
                         input=f"/image {image}\n/exit\n", capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "/image needs a vision-language model" in res.stderr


def data_url(path: Path) -> str:
    return "data:image/png;base64," + base64.b64encode(path.read_bytes()).decode()


def image_message(url: str, text: str = QUESTION) -> dict:
    return {"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": text}]}


@pytest.fixture(scope="module")
def server(ferry_bin, pair):
    if not (ferry_bin.parent / "ferry-serve").is_file():
        pytest.skip("ferry-serve not built (needs cpp-httplib)")
    lm, mm = pair
    s = ServeProcess(ferry_bin, lm, "--mmproj", str(mm), "-t", "2", "-c", "2048", "--parallel", "2")
    yield s
    s.stop()
    assert s.proc.returncode == 0, "".join(s.stderr_lines)


def ask(server, messages: list, **kw) -> dict:
    body = {"model": "vl", "messages": messages, "temperature": 0, "max_tokens": N_GEN, "ignore_eos": True,
            "logprobs": True, **kw}
    status, out = server.request("POST", "/v1/chat/completions", body, timeout=300)
    assert status == 200, out
    return out


def test_serve_image_url_matches_run(ferry_bin, pair, image, work, server):
    lm, mm = pair
    # The image part then the text part, joined with a newline: the run gets the same text.
    ref = run_reference(ferry_bin, lm, mm, image, work, "<__media__>\n" + QUESTION)
    url = data_url(image)
    before = server.metrics()

    def one(messages):
        return ask(server, messages)

    with ThreadPoolExecutor(2) as pool:  # beside a text-only request: image rows share steps with its tokens
        got_f = pool.submit(one, [image_message(url)])
        text_f = pool.submit(one, [{"role": "user", "content": "Hello there, how are you today?"}])
        got, _ = got_f.result(), text_f.result()
    assert got["usage"]["prompt_tokens"] == ref["n_prompt"]
    assert got["choices"][0]["message"]["content"] == ref["text"]
    lps = [c["logprob"] for c in got["choices"][0]["logprobs"]["content"]]
    assert len(lps) == N_GEN
    assert np.allclose(lps, ref["logprobs"], atol=1e-3), (lps, ref["logprobs"])

    # The same image again in a longer conversation: its rows come from the prompt cache.
    history = [image_message(url), {"role": "assistant", "content": got["choices"][0]["message"]["content"]},
               {"role": "user", "content": "And the colours?"}]
    ask(server, history)
    after = server.metrics()
    reused = [k for k in after if k.startswith("ferry_prompt_tokens_reused")]
    assert reused and after[reused[0]] - before.get(reused[0], 0) >= ref["n_prompt"] - 1, reused


@pytest.mark.parametrize("part, names", [
    ({"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}, ["not a data: URL", "unsupported"]),
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@@"}}, ["no valid base64"]),
    ({"type": "image_url", "image_url": {"url": "data:image/png,abc"}}, ["base64 data: URL"]),
    ({"type": "image_url"}, ["image_url is required"]),
    ({"type": "image_url", "image_url": {"url": "data:image/png;base64," + base64.b64encode(b"not a png").decode()}},
     ["not a JPEG or PNG"]),
])
def test_serve_bad_images_get_a_4xx(server, part, names):
    status, out = server.request("POST", "/v1/chat/completions",
                                 {"model": "vl", "messages": [{"role": "user", "content": [part]}], "max_tokens": 2})
    assert 400 <= status < 500, out
    message = out["error"]["message"] + " " + str(out["error"].get("code"))
    for n in names:
        assert n in message, out
    status, _ = server.request("GET", "/health")
    assert status == 200


def test_serve_without_a_projector_refuses_images(ferry_bin, pair, image):
    if not (ferry_bin.parent / "ferry-serve").is_file():
        pytest.skip("ferry-serve not built (needs cpp-httplib)")
    lm, _ = pair
    s = ServeProcess(ferry_bin, lm, "-t", "2", "-c", "512", "--parallel", "1")
    try:
        status, out = s.request("POST", "/v1/chat/completions",
                                {"model": "vl", "messages": [image_message(data_url(image))], "max_tokens": 2})
        assert status == 400 and "--mmproj" in out["error"]["message"], out
    finally:
        s.stop()
