"""Strings for the tokenizer differential test (tests/python/test_tokenizer.py).

CORPUS: valid Python strings (sent as UTF-8): English, code, whitespace runs (tabs, many spaces,
newlines, CRLF), digits and long numbers, emoji (incl. ZWJ sequences and flags), CJK, Arabic, Hindi,
text that merely looks like broken UTF-8, special-token text of both real models, and mixes; plus a
deterministic random part drawn from the same pools and from codepoints where regex engines and Unicode
versions tend to disagree (U+0085, U+180E, U+2028, Unicode 15 letters/digits, private use, ...).
BYTE_CASES: raw byte strings that are NOT valid UTF-8 (llama.cpp replaces bad bytes by U+FFFD for BPE
and byte-falls-back for SentencePiece). Leads 0xF5-0xF7 are left out: llama.cpp throws on them.
"""

from __future__ import annotations

import random

HAND = [
    # English and punctuation
    "Hello world",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "I'm sure you'll see it's fine, isn't it? We've done what they'd said.",
    "I'M SURE YOU'LL SEE IT'S FINE; WE'VE DONE WHAT THEY'D SAID",
    "don't DON'T Don'T 's 't 're 've 'm 'll 'd",
    "'S 'T 'RE 'VE 'M 'LL 'D",
    "rock 'n' roll, 'quoted', \"double\", `back`",
    "e.g. i.e. etc... Mr. Smith's U.S.A. trip (2024)!",
    "What?! No way!!! ... ?!?! ---- ____ ==== ****",
    "a",
    " ",
    "  ",
    "   leading spaces",
    "trailing spaces   ",
    "a b  c   d    e     f",
    "Once upon a time, in a land far, far away, there lived a small tokenizer.",
    "can't won't shouldn't y'all o'clock rock'n'roll",
    "HELLO hello HeLLo hElLo",
    "CamelCaseIdentifierName snake_case_name kebab-case-name SCREAMING_CASE",
    "email: someone@example.com, url: https://example.org/path?q=1&r=2#frag",
    "#hashtag @mention $100 50% 3/4 a+b=c x^2 ~tilde |pipe| <angle> {brace} [bracket]",
    # code
    "def foo(x):\n    return x * 2\n",
    "int main(int argc, char** argv) {\n\tprintf(\"%d\\n\", argc);\n\treturn 0;\n}\n",
    "for (size_t i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "if x == 1:\n\tpass\nelif x != 2:\n\t\tprint('no')\n",
    "<div class=\"row\"><span>text</span></div>",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name;",
    "const f = (a, b) => { return a ?? b; }; // arrow",
    "#include <vector>\n#include \"x.h\"\n\nnamespace a::b {}\n",
    "x = [1, 2, 3]; y = {'k': (4, 5)}; z = x[1:-1]",
    "    indented by four\n        by eight\n\t\tby two tabs",
    "fn main() -> Result<(), Box<dyn Error>> { Ok(()) }",
    "$ ls -la | grep \"foo\" > out.txt 2>&1 && echo ok",
    "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\"}}",
    # whitespace runs (and the empty string)
    "",
    "\n",
    "\n\n",
    "\n\n\n\n\n",
    "\t",
    "\t\t\t",
    " \t \t ",
    "a\nb",
    "a\n\nb",
    "a \n b",
    "a\t\tb",
    "line one\r\nline two\r\n",
    "\r\n\r\n",
    "\r",
    "word      word",
    "word" + " " * 40 + "word",
    " " * 100,
    "\t" * 20 + "x",
    "\n" * 40 + "x",
    "x" + " \n" * 10,
    "  \n  \n  x",
    "end with newline\n",
    "spaces then newline   \n   spaces after",
    "\u00a0non-breaking\u00a0space\u00a0",
    "ideographic\u3000space\u3000here",
    "en\u2002em\u2003thin\u2009hair\u200a spaces",
    "line\u2028separator\u2029paragraph",
    "next\u0085line",
    "mongolian\u180evowel\u180eseparator",
    "zero\u200bwidth\u200cnon\u200djoiner",
    "vertical\x0btab\x0cform feed",
    # digits and numbers
    "0",
    "7",
    "42",
    "123",
    "1234",
    "12345",
    "1234567890",
    "3.14159265358979323846264338327950288419716939937510",
    "1,000,000 and 1.000.000 and 1 000 000",
    "-42 +17 0x1F 0b1010 1e-9 6.022e23",
    "The year 2024 had 366 days; 1999 had 365.",
    "phone: +1 (555) 123-4567",
    "99999999999999999999999999999999",
    " 12345 abc",
    "a1b2c3d4",
    "v1.2.3-rc4",
    "\u0661\u0662\u0663 \u0967\u0968\u0969 \uff11\uff12\uff13",
    "\u00bd \u2153 \u00b2 \u2460 \u216b",
    # emoji
    "\U0001F600",
    "I love it \U0001F60D\U0001F60D\U0001F60D",
    "\U0001F44D\U0001F3FD thumbs",
    "family \U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 ZWJ",
    "flags \U0001F1FA\U0001F1F8 \U0001F1EF\U0001F1F5 \U0001F1EB\U0001F1F7",
    "\u2764\ufe0f \u263a\ufe0f \u2600",
    "\U0001F680 rocket \U0001F30D earth \U0001F916 robot",
    "new emoji \U0001FAE8 \U0001FAF8 \U0001FA77",
    "\U0001F3F3\ufe0f\u200d\U0001F308",
    # CJK
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01",
    "\u6211\u7231\u81ea\u7136\u8bed\u8a00\u5904\u7406\u3002",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3001\u3072\u3089\u304c\u306a\u3068\u30ab\u30bf\u30ab\u30ca\u3002",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4.",
    "\u4e2d\u6587English\u6df7\u5408mixed\u6587\u672c",
    "\u6771\u4eac\u30bf\u30ef\u30fc 333m",
    "\U00020000\U0002A6D6 ext-B",
    # Arabic, Hebrew, Hindi, other scripts
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0627\u0644\u0644\u063a\u0629 \u0627\u0644\u0639\u0631\u0628\u064a\u0629 \u062c\u0645\u064a\u0644\u0629\u060c \u0623\u0644\u064a\u0633 \u0643\u0630\u0644\u0643\u061f",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0939\u093f\u0928\u094d\u0926\u0940 \u092d\u093e\u0937\u093e \u0915\u093e \u0909\u0926\u093e\u0939\u0930\u0923\u0964",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u041a\u0430\u043a \u0434\u0435\u043b\u0430?",
    "\u0393\u03b5\u03b9\u03b1 \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5",
    "\u10d2\u10d0\u10db\u10d0\u10e0\u10ef\u10dd\u10d1\u10d0",
    "\u1200\u1208\u121d",
    "Stra\u00dfe, na\u00efve caf\u00e9, r\u00e9sum\u00e9, \u00c5ngstr\u00f6m",
    "e\u0301 a\u0300 o\u0308 (combining)",
    "\u0301\u0302\u0303 lone combining marks",
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dalgo",
    "\u1e9b\u0323 \ufb01 \ufb02 ligatures \u2126 \u212b \u212a",
    "\u0130stanbul \u0131 I i",
    # Unicode 15 additions (llama.cpp knows them, older PCRE2 does not)
    "kawi \U00011F04\U00011F05\U00011F06 digits \U00011F50\U00011F51\U00011F52",
    "cjk-h \U00031350\U00031351 x",
    "\U0001E4D0\U0001E4D1\U0001E4F0\U0001E4F1",
    "\U0001D2C0\U0001D2C1 kaktovik",
    "\U00011B00\U00011B01 punct",
    # looks like broken UTF-8, but is valid text
    "\u00c3\u00a9t\u00c3\u00a9 (mojibake)",
    "\u00e2\u20ac\u2122 \u00e2\u20ac\u0153quoted\u00e2\u20ac\u009d",
    "\ufffd replacement \ufffd\ufffd",
    "\u00ef\u00bf\u00bd",
    "\\xC3\\x28 \\xFF \\u00e9 \\n \\t",
    "\u00c0\u00af overlong-looking",
    "\ufeffBOM at start",
    "private use \ue000\ue001\uf8ff \U000F0000",
    "nonchar \ufdd0 \uffff \U0010FFFF",
    "\u0000 nul and \u0001\u0002\u001f controls \u007f",
    "\u0089 c1 \u009f controls",
    "\u2028",
    "\u0085",
    # special-token text (both vocabularies)
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>",
    "<|im_start|>user\n",
    "<|endoftext|>",
    "text<|endoftext|>more text",
    "<|im_end|><|im_end|><|im_start|>",
    "<|im_start |> <| im_end|> <|im_start",
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
    "<start_of_turn>",
    "<end_of_turn>",
    "<bos>hello<eos>",
    "<pad><unk><mask>",
    "<unused0><unused1> <unused99>",
    "</s> <s> </s>",
    "<b>bold</b> <i>it</i> <code>x</code> <table><tr><td>1</td></tr></table>",
    "[multimodal] <start_of_image> <end_of_image>",
    "<repo_name>ferry<file_sep>main.cc<filename>x<gh_stars>10",
    "<reponame>r<issue_start>i<issue_comment>c<issue_closed><jupyter_start><jupyter_text><jupyter_code><jupyter_output><jupyter_script><empty_output>",
    "<|eot_id|> <|end|> <|fim_prefix|> <EOT>",
    "<<|im_start|>>",
    "<|im_start|<|im_end|>|>",
    "a<start_of_turn>b<end_of_turn>c",
    "\n<start_of_turn>\n\n<end_of_turn>\n\n\n",
    # mixed
    "Mixed: English, \u4e2d\u6587, \u0627\u0644\u0639\u0631\u0628\u064a\u0629, \u0939\u093f\u0928\u094d\u0926\u0940, emoji \U0001F600, code `x=1`, number 1234567.",
    "User: \u4f60\u597d\uff01Can you help me with `def f(): pass`? \U0001F914\n\nAssistant: Sure \u2014 here:\n\n```python\nprint('hi')\n```",
    "\u00a1Hola! \u00bfQu\u00e9 tal? \u00ab\u00bb \u201ccurly\u201d \u2018single\u2019 \u2026 \u2014 \u2013",
    "math: \u2200x\u2208\u211d, \u2203y: x\u00b2+y\u00b2\u22641; \u222b\u2080\u00b9 f(x)dx \u2248 0.5",
    "arrows \u2190\u2191\u2192\u2193 \u21d2 boxes \u2500\u2502\u250c\u2510 \u2588\u2591",
    "currency \u20ac100 \u00a350 \u00a5300 \u20b9 \u20bf",
    "tab\tseparated\tvalues\t1\t2\t3",
    "csv,with,\"quoted,comma\",1.5,,end",
    "a'b'c'd 'sss' ''''",
    "____init____ __name__ == '__main__'",
    "...---...   !!!???",
]


def _random_strings(n: int, seed: int = 1234) -> list[str]:
    rng = random.Random(seed)
    pools = [
        list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"),
        list("0123456789"),
        list(" \t\n\r  "),
        list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"),
        [chr(c) for c in range(0x4E00, 0x4E00 + 200)],
        [chr(c) for c in range(0x0621, 0x064A)],
        [chr(c) for c in range(0x0905, 0x0939)] + ["\u093e", "\u093f", "\u0940", "\u094d"],
        [chr(c) for c in range(0x0400, 0x0450)],
        ["\U0001F600", "\U0001F44D", "\U0001F3FD", "\u200d", "\ufe0f", "\U0001F680", "\u2764"],
        ["\u0085", "\u00a0", "\u180e", "\u2028", "\u2029", "\u3000", "\u200b", "\ufeff", "\u0301", "\u0300"],
        ["\U00011F04", "\U00011F50", "\U00031350", "\U0001E4F0", "\U00011B00", "\U0001D2C0", "\U0001FAE8"],
        ["'s", "'t", "'re", "'LL", "'D", "'ve"],
        ["<|im_start|>", "<|im_end|>", "<start_of_turn>", "<end_of_turn>", "</s>", "<b>", "\n\n", "  "],
        [chr(c) for c in range(0xAC00, 0xAC00 + 50)],
        [chr(c) for c in range(0x00C0, 0x0180)],
    ]
    out = []
    for _ in range(n):
        k = rng.randint(1, 40)
        parts = []
        for _ in range(k):
            pool = rng.choice(pools)
            run = rng.randint(1, 6)
            parts.append("".join(rng.choice(pool) for _ in range(run)))
        out.append("".join(parts))
    # Random codepoints from the whole BMP and beyond (no surrogates).
    for _ in range(n // 4):
        cps = []
        for _ in range(rng.randint(1, 12)):
            c = rng.randint(0x20, 0x10FFFF)
            if 0xD800 <= c <= 0xDFFF:
                c = 0x20
            cps.append(chr(c))
            if rng.random() < 0.3:
                cps.append(" ")
        out.append("".join(cps))
    return out


CORPUS: list[str] = HAND + _random_strings(160)

BYTE_CASES: list[bytes] = [
    b"\xc3\x28",              # bad continuation
    b"abc\xffdef",            # invalid byte
    b"\x80\x81\x82 lone continuations",
    b"trunc \xe2\x82",        # truncated 3-byte at the end
    b"\xe2\x82 mid",          # truncated 3-byte before a space
    b"\xf0\x9f\x98 four",     # truncated 4-byte
    b"\xc0\xaf overlong slash",
    b"\xed\xa0\x80 surrogate",
    b"\xf8\x88\x80\x80\x80 five-byte",
    b"ok \xfe\xfe ok",
    b"\xc3",
    b"mixed \xe4\xbd\xa0\xe5\xa5 \xbd ok",
]


def stress_items(n: int, seed: int) -> list[bytes]:
    """n random strings over the whole codepoint range (weighted to ASCII, whitespace of every kind and
    special-token text), plus n // 5 random byte strings (never 0xF4-0xF7 leads: llama.cpp throws on
    codepoints above U+10FFFF)."""
    rng = random.Random(seed)
    glue = ["'s", "'LL", " 123", "4567", "<|im_start|>", "<end_of_turn>", "</s>", "\n\n", "  ", "\t"]
    spaces = [9, 10, 11, 12, 13, 32, 32, 32, 0x85, 0xA0, 0x180E, 0x2028, 0x3000, 0x200B]
    out = []
    for _ in range(n):
        cps = []
        for _ in range(rng.randint(1, 30)):
            r = rng.random()
            if r < 0.3:
                c = rng.randint(0x20, 0x7E)
            elif r < 0.4:
                c = rng.choice(spaces)
            elif r < 0.6:
                c = rng.randint(0x80, 0x3000)
            elif r < 0.8:
                c = rng.randint(0x3000, 0x30000)
            else:
                c = rng.randint(0, 0x10FFFF)
            if 0xD800 <= c <= 0xDFFF:
                c = 0x41
            cps.append(chr(c))
            if rng.random() < 0.2:
                cps.append(rng.choice(glue))
        out.append("".join(cps).encode("utf-8"))
    allowed = [b for b in range(256) if not 0xF4 <= b <= 0xF7]
    for _ in range(n // 5):
        out.append(bytes(rng.choice(allowed) for _ in range(rng.randint(1, 20))))
    return out
