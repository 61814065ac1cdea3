#!/usr/bin/env python3
"""Writes tests/data/bench_words.txt (500 pronounceable pseudo-words, seeded, so the list is
the same on every machine) and prints the `words500` row of tests/data/bench_cases.tsv: the
alternation of all 500 as a regex, `((w1|...|w500) )+` (2,998 bytes, under the 4,096-byte
pattern limit), with a text of 12 of them.

Pseudo-words rather than English ones so that no vocabulary has most of them as single
tokens: each spans 1-4 tokens of SmolLM2 and Gemma, like rare names or codes would.

usage: scripts/bench_constraint_words.py   (from the repository root)
"""
import random
import re

rng = random.Random(500)
consonants, vowels = "bcdfghjklmnprstvz", "aeiou"
words, seen = [], set()
while len(words) < 500:
    word = "".join(rng.choice(consonants) + rng.choice(vowels) for _ in range(rng.choice([2, 2, 3])))
    if rng.random() < 0.3:
        word += rng.choice("nrst")
    if word not in seen:
        seen.add(word)
        words.append(word)
with open("tests/data/bench_words.txt", "w", encoding="utf-8") as f:
    f.write("\n".join(words) + "\n")
regex = "((" + "|".join(words) + ") )+"
text = " ".join(rng.choice(words) for _ in range(12)) + " "
assert len(regex.encode()) <= 4096 and re.fullmatch(regex, text)
print(f"words500\t{regex}\t{text}")
