#!/usr/bin/env python3
"""Writes tests/data/pretokenize/<name>.json: the oracle splits for src/tokenizer/pretokenize.rs.

Each file is a JSON list of {"text": .., "pieces": [..]}, where `pieces` is what the PyPI
`regex` module (which knows \\p{L}, \\p{N} and the `(?!\\S)` lookahead) finds for that
pre-tokenizer's regex, as in the models' tokenizer.json:

- gpt2:   's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+
- smollm: every \\p{N} on its own, then the gpt2 regex over each stretch between them
          (llama.cpp runs its regex list in turn over the pieces of the one before);
- llama3: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}
          | ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+   (`llama-bpe`);
- qwen2:  the llama3 regex with \\p{N} (one number character a piece) for \\p{N}{1,3}.

The corpus is the same for every file: hand-picked corner cases, then random strings drawn
with a fixed seed from an alphabet that mixes the classes the regexes tell apart. Every
character is one whose \\p{L}/\\p{N}/\\s class is the same in Unicode 16 (the crate's
regex-syntax tables) and in the `regex` module's newer tables, so the fixtures test the
scanners, not the table versions. The pieces always concatenate to the text (asserted).

usage: ~/.cache/poot/venv/bin/python scripts/pretokenize_fixture.py [OUT_DIR]
  (needs `pip install regex` in that venv; OUT_DIR defaults to tests/data/pretokenize)
"""
import json
import os
import random
import sys

import regex

GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3 = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"""
    r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
)
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
assert QWEN2 != LLAMA3

GPT2_RE = regex.compile(GPT2)
LLAMA3_RE = regex.compile(LLAMA3)
QWEN2_RE = regex.compile(QWEN2)
NUMBER_RE = regex.compile(r"(\p{N})")


def smollm(text):
    pieces = []
    for i, part in enumerate(NUMBER_RE.split(text)):
        # split() with a group alternates: stretch, number, stretch, number, ...
        pieces.extend([part] if i % 2 else GPT2_RE.findall(part))
    return [p for p in pieces if p]


SPLITS = {
    "gpt2": GPT2_RE.findall,
    "smollm": smollm,
    "llama3": LLAMA3_RE.findall,
    "qwen2": QWEN2_RE.findall,
}

CONTRACTIONS = ["s", "t", "re", "ve", "m", "ll", "d"]


def case_variants(s):
    out = [""]
    for ch in s:
        out = [o + c for o in out for c in (ch.lower(), ch.upper())]
    return out


def hand_picked():
    cases = []
    # Every contraction in every letter case, in a few contexts.
    for c in CONTRACTIONS:
        for v in case_variants(c):
            cases += [f"I'{v}", f"'{v}", f"x '{v} y", f"'{v}x", f"{v.upper()}'{v}'{v}"]
    cases += [
        # Apostrophes that start no contraction.
        "'", "''", "'''", "a'", "'a", "' s", "'x", "'l", "'r", "'v", "'lL!", "'rx", "'vx",
        "''s", "'''ll", "rock'n'roll", "O'Neil's", "'12", "' ", "'\n", "' '", "it'", "it' s",
        "don't", "DON'T", "Don'T", "we'Ll", "they'VE", "you'rE", "I'D", "she'S", "he'dn't",
        "l'été", "'é", "'中", "'Ｓ", "don’t", "it’s", "`s", "'s'", "'s's",
        # U+017F LONG S case-folds to `s`: `(?i:'s)` matches `'ſ` (llama.cpp's splitter does not).
        "'ſ", "it'ſ", "'ſt", "it'ſa", "'ſS", "'Ss",
        "'sa", "'ta", "'rev", "'mm", "'lla", "'da", "'e", "'re'", "x'\ny", "'\r\n",
        # Digit runs of 1 to 7, alone and in context.
        *["1234567"[:n] for n in range(1, 8)],
        *[" " + "9876543"[:n] for n in range(1, 8)],
        *["a" + "1234567"[:n] + "b" for n in range(1, 8)],
        *["x " + "1234567"[:n] + "." for n in range(1, 8)],
        "3.14159", "1,000,000", "2024-01-15", "v1.2.3", "0x1F", "1e-10", "-42", "+7",
        "٣٤٥٦٧", "१२३४५६", "１２３４５", "½¼¾", "x²³", "H₂O", "①②③④⑤", "ⅫⅣ", "12ab34",
        "abc123def4567", "$1234.56", "50%", "  123", "a  123", "\n123", "'123", "1 2 3",
        "12 345 6789", "1\n22\n333\n4444",
        # Scripts: CJK, kana, Hangul, Cyrillic, Greek, Arabic, Hebrew, Devanagari, Thai.
        "你好世界", "Hello 世界!", "中文，标点。", "日本語のテキスト、です。", "カタカナ ひらがな",
        "한국어 텍스트", "Привет, мир!", "Ёлка ЁЛКА", "ελληνικά Γράμματα", "مرحبا بالعالم",
        "العربية ١٢٣", "שלום עולם", "हिन्दी भाषा", "ภาษาไทย", "Hello мир 世界 عالم",
        "中a中1中!", " 中", "  中", "\t中", "中 ", "x中x", "ça va", "naïve café", "Straße",
        # Combining marks (not letters): decomposed accents, Devanagari vowel signs.
        "e\u0301", "cafe\u0301", " e\u0301t\u0301e\u0301", "\u0301", "a\u0301\u0302b",
        "\u0301abc", " \u0301x", "x\u0301 y", "n\u0303o", "क्ष", "कि",
        # Emoji and symbols.
        "😀", "a😀b", " 😀", "😀😀 x", "👍🏽 ok", "👨\u200d👩\u200d👧", "🇺🇸🇫🇷", "❤️", "x ❤️ y",
        "™©®", "→ ← ↑", "• item", "★★★", "€100", "£5", "¥", "∑∫√", "° C", "…", "—dash—",
        "“quoted”", "«guillemets»", "¿Qué?", "¡Hola!",
        # Line breaks: \r, \n, \r\n in runs and next to spaces and punctuation.
        "\n", "\r", "\r\n", "\n\n", "\r\n\r\n", "\n\r", "a\nb", "a\r\nb", "a\n\nb", "a\rb",
        "a\r\r\nb", "a \nb", "a\n b", "a \n b", "a  \n  b", "a\n\n\n", "\n\n\nb", "  \n", "\n  ",
        "x\n \n y", "!\n", "!\n\n", "! \n", "!\r\n", "!\r\n\r\nNext", ".\n\nNext", "a.\nb",
        "a\t\nb", "\t\n\t", "\n\t\tcode", "line1\nline2\r\nline3\rline4", "\n!", "\n1", " \n1",
        "1\n", "x\n\ny", " \r\n", "\r \n", "a\r \nb", "a \r\n \r\n b", "\n 'll", "\n's",
        # Tabs and runs of spaces before words, punctuation, numbers, line breaks and the end.
        "\tindent", "a\tb", "\t\tx", " \tx", "\t x", "x\t", "x \t", "\t", "\t\t", " \t \t",
        " ", "  ", "   ", "    ", "a b", "a  b", "a   b", "a    b", "a  .", "a   ...", "a  !b",
        "a  1", "a   12", "x   ", "x  ", " x", "  x", "   x", " x ", "  x  ", ".  .", "!  ?",
        "a \t b", "  'll", " 's", "  's", " 'x", "  'x",
        # Other white space: NBSP, ideographic, em space, line/paragraph separators, NEL, VT, FF.
        "a\u00a0b", "a\u00a0\u00a0b", "\u00a0x", "x\u00a0", "a\u3000b", "\u3000\u3000中",
        "a\u2003b", "\u2003 x", "a\u2028b", "a\u2029b", "a\x85b", "a\x0bb", "a\x0cb",
        "a\x0b\nb", "\x0c\x0c", " \u00a0 x", "\u00a0!", "\u00a0\n",
        # Control characters that are not white space, format characters, odd code points.
        "a\x1cb", "\x1c\x1d\x1e\x1f", " \x1c", "a\x00b", "\x7f", "a\u200bb", "\u200b",
        "\ufeffBOM", "a\u00adb", "\ue000", "x\ufffdy", "\u2060", "a\u200db",
        # Code.
        "fn main() { println!(\"hi\"); }",
        "def f(x):\n    return x ** 2\n",
        "if (a && b) {\n\tx += 1;\n}\n",
        "for i in range(10):\n    print(i)",
        "<div class=\"a\">Hi</div>",
        "$ ls -la ~/foo | grep '.rs'",
        "a->b; c::d; e=>f",
        "x = [1, 2, 3]; y = {'a': 1}",
        "#include <stdio.h>\nint main(void) { return 0; }",
        "// comment\n/* block */\n",
        "let s = \"it's\";",
        "    indented\n        more\n    back",
        "SELECT * FROM t WHERE id = 42;",
        "https://example.com/path?q=1&r=two#frag",
        "user@example.com",
        "snake_case_name camelCase PascalCase SCREAMING_CASE",
        "x+=1;y-=2;z*=3",
        "```rust\nlet x = 1;\n```",
        "a\\nb\\tc",
        # JSON.
        '{"name": "poot", "version": 3, "tags": ["a", "b"]}',
        '{"a":1,"b":[true,false,null],"c":{"d":-1.5e3}}',
        '{\n  "key": "value",\n  "list": [\n    1,\n    2\n  ]\n}\n',
        '[{"id":1234567,"ok":true}]',
        '{"text": "He said \\"don\'t\\"\\n"}',
        # Prose.
        "The quick brown fox jumps over the lazy dog.",
        "I'm sure it's fine, isn't it? We'll see; they've said so.",
        "Mr. O'Brien's 3 dogs—ages 2, 5 and 11—aren't here.",
        "Hello, world!  How are you?\n\nFine, thanks.",
        "  Leading and trailing spaces  ",
        "ALL CAPS SHOUTING'S FUN",
        "",
    ]
    return cases


# The random alphabet: (weight, characters).
ALPHABET = [
    (10, "abcdefghijklmnopqrstuvwxyz"),
    (4, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"),
    (6, "stremvldSTREMVLD"),  # the contraction letters, more often
    (6, "'"),
    (5, "0123456789"),
    (12, " "),
    (3, "\n"),
    (2, "\r"),
    (2, "\t"),
    (5, ".,!?;:-_()[]{}\"`/\\@#$%^&*+=<>|~"),
    (3, "你好世界中文日本語のテキスト"),
    (2, "한국어"),
    (3, "привет мир ЖЁ"),
    (2, "مرحبا"),
    (1, "ελλ"),
    (2, "éüñçßſ"),
    (2, "\u0301\u0308\u0303"),  # combining marks
    (1, "٣٤١२３½²₂Ⅻ①"),  # non-ASCII numbers
    (2, "😀👍🏽❤️🇺🇸"),
    (2, "\u00a0\u3000\u2003\x0b\x0c\x85\u2028"),  # other white space
    (1, "\x1c\u200b\ufeff\x00"),  # not white space, not letters
    (1, "…—“”«»€™•"),
]


def random_strings(n, seed=20240601):
    rng = random.Random(seed)
    weights = [w for w, _ in ALPHABET]
    out = []
    while len(out) < n:
        length = rng.randint(1, 20)
        s = "".join(
            rng.choice(rng.choices(ALPHABET, weights)[0][1]) for _ in range(length)
        )
        out.append(s)
    return out


def check_categories(texts):
    # Unicode 17 added letters and numbers the crate's tables (Unicode 16) do not know: keep
    # the corpus to code points assigned before that, where both agree.
    import unicodedata

    for t in texts:
        for ch in t:
            assert unicodedata.category(ch) != "Cn", (
                f"{ch!r} is unassigned in Python's unicodedata {unicodedata.unidata_version}"
            )


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "pretokenize"
    )
    texts = []
    seen = set()
    for t in hand_picked() + random_strings(500):
        if t not in seen:
            seen.add(t)
            texts.append(t)
    check_categories(texts)
    os.makedirs(out_dir, exist_ok=True)
    counts = {}
    for name, split in SPLITS.items():
        cases = []
        for t in texts:
            pieces = split(t)
            assert "".join(pieces) == t, (name, t, pieces)
            cases.append({"text": t, "pieces": pieces})
        path = os.path.join(out_dir, f"{name}.json")
        with open(path, "w", encoding="utf-8") as f:
            # One case a line: diffs stay readable, the file stays small.
            f.write("[\n")
            f.write(
                ",\n".join(
                    json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in cases
                )
            )
            f.write("\n]\n")
        counts[name] = {"cases": len(cases), "bytes": os.path.getsize(path)}
    print(json.dumps(counts))


if __name__ == "__main__":
    main()
