//! The model's own tokenizer, read from GGUF metadata: text to token ids and back.
//!
//! Two families, as llama.cpp implements them (token ids must equal llama.cpp's):
//! - byte-level BPE (`tokenizer.ggml.model = "gpt2"`): the text is split into words by the
//!   pre-tokenizer named in `tokenizer.ggml.pre` ([`Pre`]), each word's bytes are written in
//!   the GPT-2 byte alphabet, and the merges in `tokenizer.ggml.merges` are applied lowest
//!   rank first;
//! - SentencePiece (`"llama"`): spaces become `▁`, a space is prefixed when
//!   `tokenizer.ggml.add_space_prefix` says so, adjacent pieces are merged highest score first,
//!   and a piece that is not a token falls back to `<0xNN>` byte tokens.
//!
//! Special tokens (control, user-defined and unknown ones, e.g. `<|im_start|>`) written in the
//! text become their single ids when `parse_special` is set (control tokens) or always
//! (user-defined ones), found longest token first as llama.cpp's partition does.
//! `tokenizer.ggml.add_bos_token` / `add_eos_token` apply when `add_special` is set.
//!
//! Encoding costs O(n log n) in the length of each word (a heap of candidate merges), so a
//! long run without spaces cannot make it quadratic.

mod pretokenize;
mod unicode;

pub use pretokenize::Pre;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use crate::error::{Error, Result};
use crate::gguf::{Gguf, Value};
use crate::limits::MAX_VOCAB_TOKENS;
use crate::vocab::TokenId;

/// llama.cpp's token types (`tokenizer.ggml.token_type`).
mod token_type {
    pub const NORMAL: i32 = 1;
    pub const UNKNOWN: i32 = 2;
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
    pub const UNUSED: i32 = 5;
    pub const BYTE: i32 = 6;
}

#[derive(Debug, Clone)]
enum Model {
    Bpe {
        pre: Pre,
        /// `"left right"` (token texts in the byte alphabet) -> merge rank.
        merges: HashMap<Vec<u8>, u32>,
        /// Byte -> its character in the GPT-2 byte alphabet, UTF-8 encoded.
        byte_chars: Vec<String>,
        /// A word that is itself a token is that token, merges or not (llama.cpp's
        /// `ignore_merges`, set for Llama 3's tokenizer and its kin).
        ignore_merges: bool,
    },
    Spm {
        scores: Vec<f32>,
        add_space_prefix: bool,
    },
}

/// What [`Tokenizer::encode_bpe`] reads of a [`Model::Bpe`].
#[derive(Clone, Copy)]
struct Bpe<'a> {
    pre: Pre,
    merges: &'a HashMap<Vec<u8>, u32>,
    byte_chars: &'a [String],
    ignore_merges: bool,
}

/// A tokenizer; see the module docs.
#[derive(Debug, Clone)]
pub struct Tokenizer {
    model: Model,
    /// Token texts as written in the file.
    texts: Vec<Vec<u8>>,
    types: Vec<i32>,
    ids: HashMap<Vec<u8>, TokenId>,
    /// Control, user-defined and unknown tokens, longest text first.
    specials: Vec<TokenId>,
    /// The bytes each token decodes to (GPT-2 alphabet undone, `▁` as a space, `<0xNN>` as
    /// its byte); special tokens decode to their text.
    pieces: Vec<Vec<u8>>,
    bos: Option<TokenId>,
    eos: Option<TokenId>,
    add_bos: bool,
    add_eos: bool,
    unk: Option<TokenId>,
    cats: unicode::Categories,
}

fn tok_error(message: String) -> Error {
    Error::invalid_input(format!("GGUF tokenizer: {message}")).with_param("model")
}

fn get_bool(gguf: &Gguf<'_>, key: &str) -> Result<Option<bool>> {
    match gguf.get(key) {
        None => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(v) => Err(tok_error(format!("{key} must be a bool, got {v:?}"))),
    }
}

impl Tokenizer {
    /// Reads the tokenizer from a GGUF header (see the module docs for what is supported).
    pub fn from_gguf(gguf: &Gguf<'_>) -> Result<Self> {
        let model_name = gguf
            .get("tokenizer.ggml.model")
            .and_then(Value::as_str)
            .ok_or_else(|| tok_error("tokenizer.ggml.model is missing or not a string".into()))?;
        let tokens = gguf
            .get("tokenizer.ggml.tokens")
            .and_then(Value::as_array)
            .ok_or_else(|| tok_error("tokenizer.ggml.tokens is missing or not an array".into()))?;
        let n = tokens.len();
        if n == 0 {
            return Err(tok_error("tokenizer.ggml.tokens has no tokens".into()));
        }
        if n > MAX_VOCAB_TOKENS {
            return Err(Error::limit_exceeded(format!(
                "GGUF tokenizer: tokenizer.ggml.tokens has {n} tokens, over the limit of \
                 {MAX_VOCAB_TOKENS} (MAX_VOCAB_TOKENS)"
            ))
            .with_param("model"));
        }
        let mut texts = Vec::with_capacity(n);
        for (i, t) in tokens.iter().enumerate() {
            texts.push(
                t.as_bytes()
                    .ok_or_else(|| tok_error(format!("token {i} is not a string")))?
                    .to_vec(),
            );
        }
        let types: Vec<i32> = match gguf
            .get("tokenizer.ggml.token_type")
            .and_then(Value::as_array)
        {
            None => vec![token_type::NORMAL; n],
            Some(a) if a.len() == n => a
                .iter()
                .map(|v| v.as_i64().and_then(|t| i32::try_from(t).ok()))
                .collect::<Option<_>>()
                .ok_or_else(|| tok_error("tokenizer.ggml.token_type holds a non-integer".into()))?,
            Some(a) => return Err(tok_error(format!("{} token types for {n} tokens", a.len()))),
        };
        let id_key = |key: &str| -> Result<Option<TokenId>> {
            match gguf.get(key) {
                None => Ok(None),
                Some(v) => match v.as_u64() {
                    Some(id) if id < n as u64 => Ok(Some(id as TokenId)),
                    // llama.cpp writes -1 (as u32::MAX) for "none".
                    Some(id) if id == u64::from(u32::MAX) => Ok(None),
                    _ => Err(tok_error(format!(
                        "{key} {v:?} is not a token id below {n}"
                    ))),
                },
            }
        };
        let bos = id_key("tokenizer.ggml.bos_token_id")?;
        let eos = id_key("tokenizer.ggml.eos_token_id")?;
        let unk = id_key("tokenizer.ggml.unknown_token_id")?;

        let mut ids = HashMap::with_capacity(n);
        for (i, t) in texts.iter().enumerate() {
            // On a duplicate text the first id wins, as in llama.cpp's token_to_id.
            ids.entry(t.clone()).or_insert(i as TokenId);
        }

        let (model, add_bos_default) = match model_name {
            "gpt2" => {
                let pre_name = gguf
                    .get("tokenizer.ggml.pre")
                    .and_then(Value::as_str)
                    .unwrap_or("gpt2");
                let pre = Pre::from_name(pre_name)?;
                // The names llama.cpp gives `ignore_merges` and a BOS by default.
                let llama3 = matches!(
                    pre_name,
                    "llama3"
                        | "llama-v3"
                        | "llama-bpe"
                        | "falcon3"
                        | "falcon-h1"
                        | "pixtral"
                        | "midm-2.0"
                        | "lfm2"
                );
                let list = gguf
                    .get("tokenizer.ggml.merges")
                    .and_then(Value::as_array)
                    .ok_or_else(|| {
                        tok_error("a gpt2 tokenizer needs tokenizer.ggml.merges".into())
                    })?;
                let mut merges = HashMap::with_capacity(list.len());
                for (rank, m) in list.iter().enumerate() {
                    let m = m
                        .as_bytes()
                        .ok_or_else(|| tok_error(format!("merge {rank} is not a string")))?;
                    if !m.contains(&b' ') {
                        return Err(tok_error(format!(
                            "merge {rank} `{}` has no space",
                            String::from_utf8_lossy(m)
                        )));
                    }
                    merges.entry(m.to_vec()).or_insert(rank as u32);
                }
                let byte_chars = (0..=255u8)
                    .map(|b| crate::vocab::gpt2::encode(&[b]))
                    .collect();
                (
                    Model::Bpe {
                        pre,
                        merges,
                        byte_chars,
                        ignore_merges: llama3,
                    },
                    llama3,
                )
            }
            "llama" => {
                let scores = match gguf.get("tokenizer.ggml.scores").and_then(Value::as_array) {
                    None => vec![0.0; n],
                    Some(a) if a.len() == n => a
                        .iter()
                        .map(|v| match v {
                            Value::F32(f) => Some(f),
                            _ => None,
                        })
                        .collect::<Option<_>>()
                        .ok_or_else(|| tok_error("tokenizer.ggml.scores holds a non-f32".into()))?,
                    Some(a) => return Err(tok_error(format!("{} scores for {n} tokens", a.len()))),
                };
                let add_space_prefix =
                    get_bool(gguf, "tokenizer.ggml.add_space_prefix")?.unwrap_or(true);
                (
                    Model::Spm {
                        scores,
                        add_space_prefix,
                    },
                    true,
                )
            }
            other => {
                return Err(tok_error(format!(
                    "tokenizer.ggml.model `{other}` is not supported (gpt2 and llama are)"
                )))
            }
        };
        let add_bos = get_bool(gguf, "tokenizer.ggml.add_bos_token")?.unwrap_or(add_bos_default)
            && bos.is_some();
        let add_eos =
            get_bool(gguf, "tokenizer.ggml.add_eos_token")?.unwrap_or(false) && eos.is_some();

        let mut specials: Vec<TokenId> = (0..n as TokenId)
            .filter(|&i| {
                let t = types[i as usize];
                matches!(
                    t,
                    token_type::CONTROL | token_type::USER_DEFINED | token_type::UNKNOWN
                ) && !texts[i as usize].is_empty()
            })
            .collect();
        specials.sort_by_key(|&i| Reverse(texts[i as usize].len()));

        let gpt2_table = crate::vocab::gpt2::table();
        let pieces = texts
            .iter()
            .zip(&types)
            .map(|(text, &ty)| match (&model, ty) {
                (
                    _,
                    token_type::CONTROL
                    | token_type::UNKNOWN
                    | token_type::UNUSED
                    | token_type::USER_DEFINED,
                ) => text.clone(),
                (Model::Bpe { .. }, _) => std::str::from_utf8(text)
                    .ok()
                    .and_then(|t| crate::vocab::gpt2::decode(t, &gpt2_table))
                    .unwrap_or_else(|| text.clone()),
                (Model::Spm { .. }, token_type::BYTE) => {
                    parse_byte_token(text).map_or_else(|| text.clone(), |b| vec![b])
                }
                (Model::Spm { .. }, _) => String::from_utf8_lossy(text)
                    .replace('\u{2581}', " ")
                    .into_bytes(),
            })
            .collect();

        Ok(Tokenizer {
            model,
            texts,
            types,
            ids,
            specials,
            pieces,
            bos,
            eos,
            add_bos,
            add_eos,
            unk,
            cats: unicode::Categories::new(),
        })
    }

    /// Parses a GGUF file's header and reads its tokenizer.
    pub fn from_gguf_bytes(file: &[u8]) -> Result<Self> {
        Self::from_gguf(&Gguf::parse_metadata(file)?)
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.texts.len()
    }

    /// Always false: a tokenizer has at least one token.
    pub fn is_empty(&self) -> bool {
        self.texts.is_empty()
    }

    /// The beginning-of-sequence token, if the model has one.
    pub fn bos(&self) -> Option<TokenId> {
        self.bos
    }

    /// Whether this is a SentencePiece tokenizer that does not add a space before the text
    /// (Gemma): its replies still start with a word-initial token's space, which
    /// [`Tokenizer::decode`] keeps (as llama.cpp does) and the OpenAI surface drops (spec).
    pub fn is_sentencepiece_without_space_prefix(&self) -> bool {
        matches!(
            self.model,
            Model::Spm {
                add_space_prefix: false,
                ..
            }
        )
    }

    /// The end-of-sequence token, if the model has one.
    pub fn eos(&self) -> Option<TokenId> {
        self.eos
    }

    /// The id of the token whose text (as written in the file) is `text`.
    pub fn token_id(&self, text: &str) -> Option<TokenId> {
        self.ids.get(text.as_bytes()).copied()
    }

    /// The bytes token `id` stands for (a special token's text; empty outside the vocabulary).
    pub fn piece(&self, id: TokenId) -> &[u8] {
        self.pieces.get(id as usize).map_or(&[], Vec::as_slice)
    }

    /// Whether `id` is a control, unknown or unused token (never output text).
    pub fn is_control(&self, id: TokenId) -> bool {
        matches!(
            self.types.get(id as usize),
            Some(&(token_type::CONTROL | token_type::UNKNOWN | token_type::UNUSED))
        )
    }

    /// Encodes `text` as llama.cpp's `llama_tokenize(text, add_special, parse_special)` does.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<TokenId> {
        let mut out = Vec::new();
        if add_special && self.add_bos {
            out.extend(self.bos);
        }
        let mut prev_special = true;
        for frag in self.partition(text, parse_special) {
            match frag {
                Fragment::Token(id) => {
                    out.push(id);
                    prev_special = true;
                }
                Fragment::Text(t) => {
                    match &self.model {
                        Model::Bpe {
                            pre,
                            merges,
                            byte_chars,
                            ignore_merges,
                        } => {
                            let bpe = Bpe {
                                pre: *pre,
                                merges,
                                byte_chars,
                                ignore_merges: *ignore_merges,
                            };
                            self.encode_bpe(t, bpe, &mut out)
                        }
                        Model::Spm {
                            scores,
                            add_space_prefix,
                        } => {
                            let mut s = String::with_capacity(t.len() + 3);
                            if *add_space_prefix && prev_special {
                                s.push('\u{2581}');
                            }
                            s.push_str(&t.replace(' ', "\u{2581}"));
                            self.encode_spm(&s, scores, &mut out);
                        }
                    }
                    prev_special = false;
                }
            }
        }
        if add_special && self.add_eos {
            out.extend(self.eos);
        }
        out
    }

    /// A prompt as llama.cpp's server tokenizes it for `/completion`: special tokens parsed,
    /// BOS/EOS added as the model asks.
    pub fn encode_prompt(&self, text: &str) -> Vec<TokenId> {
        self.encode(text, true, true)
    }

    /// The bytes of `ids` concatenated; control tokens are written as their text when
    /// `special` is set and skipped otherwise. For a SentencePiece model with
    /// `add_space_prefix`, the leading space of the first text token is dropped (the space
    /// the encoder added), as llama.cpp's detokenizer does.
    pub fn decode(&self, ids: &[TokenId], special: bool) -> Vec<u8> {
        let mut out = Vec::new();
        let mut at_start = true;
        for &id in ids {
            self.decode_next(id, special, &mut at_start, &mut out);
        }
        out
    }

    /// Appends the bytes of `id` to `out` exactly as [`Tokenizer::decode`] would at this point
    /// of a sequence, for decoding one token at a time: `at_start` starts `true` and turns
    /// `false` at the first text token (whose SentencePiece leading space is dropped).
    pub fn decode_next(&self, id: TokenId, special: bool, at_start: &mut bool, out: &mut Vec<u8>) {
        let control = self.is_control(id);
        if !special && control {
            return;
        }
        let mut piece = self.piece(id);
        if *at_start && !control {
            if matches!(
                self.model,
                Model::Spm {
                    add_space_prefix: true,
                    ..
                }
            ) {
                piece = piece.strip_prefix(b" ").unwrap_or(piece);
            }
            *at_start = false;
        }
        out.extend_from_slice(piece);
    }

    /// Splits `text` at special tokens, longest first (llama.cpp's `tokenizer_st_partition`).
    fn partition<'t>(&self, text: &'t str, parse_special: bool) -> Vec<Fragment<'t>> {
        let mut frags = vec![Fragment::Text(text)];
        for &id in &self.specials {
            let ty = self.types[id as usize];
            if !parse_special && matches!(ty, token_type::CONTROL | token_type::UNKNOWN) {
                continue;
            }
            let Ok(needle) = std::str::from_utf8(&self.texts[id as usize]) else {
                continue;
            };
            if !frags
                .iter()
                .any(|f| matches!(f, Fragment::Text(t) if t.contains(needle)))
            {
                continue;
            }
            let mut next = Vec::with_capacity(frags.len() + 2);
            for f in frags {
                match f {
                    Fragment::Text(mut t) => {
                        while let Some(at) = t.find(needle) {
                            if at > 0 {
                                next.push(Fragment::Text(&t[..at]));
                            }
                            next.push(Fragment::Token(id));
                            t = &t[at + needle.len()..];
                        }
                        if !t.is_empty() {
                            next.push(Fragment::Text(t));
                        }
                    }
                    tok => next.push(tok),
                }
            }
            frags = next;
        }
        frags
    }

    fn encode_bpe(&self, text: &str, bpe: Bpe<'_>, out: &mut Vec<TokenId>) {
        let Bpe {
            pre,
            merges,
            byte_chars,
            ignore_merges,
        } = bpe;
        let mut words = Vec::new();
        pre.split(text, &self.cats, &mut words);
        let mut word = String::new();
        let mut starts = Vec::new();
        let mut key = Vec::new();
        for (lo, hi) in words {
            // The word in the byte alphabet; each byte is one initial symbol.
            word.clear();
            starts.clear();
            for &b in &text.as_bytes()[lo..hi] {
                starts.push(word.len());
                word.push_str(&byte_chars[b as usize]);
            }
            starts.push(word.len());
            let w = word.as_bytes();
            if ignore_merges {
                if let Some(&id) = self.ids.get(w) {
                    out.push(id);
                    continue;
                }
            }
            let mut syms: Vec<Sym> = (0..starts.len() - 1)
                .map(|i| Sym {
                    start: starts[i],
                    len: starts[i + 1] - starts[i],
                    prev: i.wrapping_sub(1),
                    next: i + 1,
                })
                .collect();
            let last = syms.len() - 1;
            syms[last].next = usize::MAX;
            let rank = |a: &Sym, b: &Sym, key: &mut Vec<u8>| {
                key.clear();
                key.extend_from_slice(&w[a.start..a.start + a.len]);
                key.push(b' ');
                key.extend_from_slice(&w[b.start..b.start + b.len]);
                merges.get(key.as_slice()).copied()
            };
            // (rank, left index, combined length): the lowest rank, then the leftmost, first.
            let mut heap: BinaryHeap<Reverse<(u32, usize, usize)>> = BinaryHeap::new();
            for i in 0..syms.len().saturating_sub(1) {
                if let Some(r) = rank(&syms[i], &syms[i + 1], &mut key) {
                    heap.push(Reverse((r, i, syms[i].len + syms[i + 1].len)));
                }
            }
            while let Some(Reverse((_, left, size))) = heap.pop() {
                let right = syms[left].next;
                if syms[left].len == 0
                    || right == usize::MAX
                    || syms[right].len == 0
                    || syms[left].len + syms[right].len != size
                {
                    continue; // outdated: one side was merged since
                }
                syms[left].len += syms[right].len;
                syms[right].len = 0;
                syms[left].next = syms[right].next;
                if syms[right].next != usize::MAX {
                    let n = syms[right].next;
                    syms[n].prev = left;
                }
                let p = syms[left].prev;
                if p != usize::MAX {
                    if let Some(r) = rank(&syms[p], &syms[left], &mut key) {
                        heap.push(Reverse((r, p, syms[p].len + syms[left].len)));
                    }
                }
                let n = syms[left].next;
                if n != usize::MAX {
                    if let Some(r) = rank(&syms[left], &syms[n], &mut key) {
                        heap.push(Reverse((r, left, syms[left].len + syms[n].len)));
                    }
                }
            }
            let mut i = 0;
            while i != usize::MAX {
                let s = &syms[i];
                let piece = &w[s.start..s.start + s.len];
                match self.ids.get(piece) {
                    Some(&id) => out.push(id),
                    None => {
                        // Not a token: each character of the piece on its own, if it is one.
                        let piece = std::str::from_utf8(piece).expect("built from whole chars");
                        for (j, c) in piece.char_indices() {
                            if let Some(&id) = self.ids.get(&piece.as_bytes()[j..j + c.len_utf8()])
                            {
                                out.push(id);
                            }
                        }
                    }
                }
                i = s.next;
            }
        }
    }

    fn encode_spm(&self, text: &str, scores: &[f32], out: &mut Vec<TokenId>) {
        if text.is_empty() {
            return;
        }
        let w = text.as_bytes();
        let mut syms: Vec<Sym> = text
            .char_indices()
            .enumerate()
            .map(|(i, (b, c))| Sym {
                start: b,
                len: c.len_utf8(),
                prev: i.wrapping_sub(1),
                next: i + 1,
            })
            .collect();
        let last = syms.len() - 1;
        syms[last].next = usize::MAX;
        // (score, Reverse(left), size): the highest score, then the leftmost, first.
        let mut heap: BinaryHeap<(OrdF32, Reverse<usize>, usize)> = BinaryHeap::new();
        let try_add = |l: usize, r: usize, syms: &[Sym], heap: &mut BinaryHeap<_>| {
            if l == usize::MAX || r == usize::MAX {
                return;
            }
            let (start, size) = (syms[l].start, syms[l].len + syms[r].len);
            if let Some(&id) = self.ids.get(&w[start..start + size]) {
                heap.push((OrdF32(scores[id as usize]), Reverse(l), size));
            }
        };
        for i in 1..syms.len() {
            try_add(i - 1, i, &syms, &mut heap);
        }
        while let Some((_, Reverse(left), size)) = heap.pop() {
            let right = syms[left].next;
            if syms[left].len == 0
                || right == usize::MAX
                || syms[right].len == 0
                || syms[left].len + syms[right].len != size
            {
                continue;
            }
            syms[left].len += syms[right].len;
            syms[right].len = 0;
            syms[left].next = syms[right].next;
            if syms[right].next != usize::MAX {
                let n = syms[right].next;
                syms[n].prev = left;
            }
            try_add(syms[left].prev, left, &syms, &mut heap);
            try_add(left, syms[left].next, &syms, &mut heap);
        }
        // Every merged symbol is a token (a pair is queued only when it is one), so only a
        // single character can be missing from the vocabulary: it falls back to byte tokens
        // (llama.cpp's `resegment` reaches nothing else).
        let mut i = 0;
        while i != usize::MAX {
            let s = syms[i];
            match self.ids.get(&w[s.start..s.start + s.len]) {
                Some(&id) => out.push(id),
                None => {
                    for &b in &w[s.start..s.start + s.len] {
                        let name = format!("<0x{b:02X}>");
                        match self
                            .ids
                            .get(name.as_bytes())
                            .or_else(|| self.ids.get(&[b][..]))
                        {
                            Some(&id) => out.push(id),
                            None => out.extend(self.unk),
                        }
                    }
                }
            }
            i = s.next;
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Sym {
    start: usize,
    len: usize,
    prev: usize,
    next: usize,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct OrdF32(f32);

impl Eq for OrdF32 {}

impl PartialOrd for OrdF32 {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for OrdF32 {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

#[derive(Debug, Clone, Copy)]
enum Fragment<'t> {
    Text(&'t str),
    Token(TokenId),
}

fn parse_byte_token(text: &[u8]) -> Option<u8> {
    match text {
        [b'<', b'0', b'x', hi, lo, b'>'] => {
            let hex = |c: u8| (c as char).to_digit(16);
            Some((hex(*hi)? * 16 + hex(*lo)?) as u8)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
