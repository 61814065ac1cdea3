//! `response_format: {"type": "json_object"}`: one JSON value (RFC 8259) of any shape and any
//! nesting depth, by a dedicated pushdown acceptor.
//!
//! The acceptor is a byte-level lexer state (~200 states: the expected item, the string,
//! escape, UTF-8, number and literal positions, and the kind of the innermost container) plus a
//! stack of the enclosing containers' kinds, one byte per level, so depth is limited only by
//! the output's length. Accepted:
//! - objects, arrays, strings, numbers (`-? (0 | [1-9][0-9]*) (\.[0-9]+)? ([eE][+-]?[0-9]+)?`),
//!   `true`, `false`, `null`, at the top level too;
//! - strings of valid UTF-8 without control characters, with the escapes `\" \\ \/ \b \f \n
//!   \r \t \uXXXX`; a `\uXXXX` high surrogate must be followed by a `\uXXXX` low surrogate, and
//!   a lone low surrogate is refused, so the value decodes to valid Unicode;
//! - whitespace (space, tab, newline, carriage return) between tokens and around the value, at
//!   most [`MAX_JSON_WHITESPACE`] bytes in a row, so a model cannot loop on newlines.
//!
//! Token masks: for each lexer state, one walk of the vocabulary trie (starting with an
//! unknown stack) finds the tokens allowed whatever the stack holds (they never close a
//! container opened before them, or only close it as the token's last byte) and the trie nodes
//! where a token closes such a container and goes on; a mask is then a copy of the first set
//! plus short walks below those nodes with the real stack (`"}` then `,` or `]`). The
//! whitespace bound only cuts tokens whose leading whitespace is too long, so it is applied
//! to the copy (by a walk down the all-whitespace trie paths) instead of multiplying the
//! states.

use crate::limits::{MASK_CACHE_BYTES, MAX_JSON_WHITESPACE};
use crate::mask::set_bit;
use crate::vocab::Vocabulary;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

/// The innermost container.
const TOP: u8 = 0;
const OBJ: u8 = 1;
const ARR: u8 = 2;

// Modes (what the lexer expects), combined with a container kind into a state:
// `state = mode * 3 + ctx`.
const M_VALUE: u8 = 0; // a value (after `:` or `,` in an array, or at the start)
const M_ARR_FIRST: u8 = 1; // after `[`: a value or `]`
const M_OBJ_FIRST: u8 = 2; // after `{`: a key or `}`
const M_KEY: u8 = 3; // after `,` in an object: a key
const M_COLON: u8 = 4; // after a key: `:`
const M_AFTER: u8 = 5; // after a value: `,` or the closer (or the end, at the top)
const M_NUM: u8 = 6; // + 8 number positions
const N_MINUS: u8 = 0;
const N_ZERO: u8 = 1;
const N_INT: u8 = 2;
const N_DOT: u8 = 3;
const N_FRAC: u8 = 4;
const N_E: u8 = 5;
const N_ESIGN: u8 = 6;
const N_EXP: u8 = 7;
const M_LIT: u8 = 14; // + 10 literal positions: t tr tru f fa fal fals n nu nul
const M_STR: u8 = 24; // + 22 positions in a value string, then + 22 in a key string
const STR_SUBS: u8 = 22;
const MODES: u8 = M_STR + 2 * STR_SUBS;
/// Number of lexer states.
pub(crate) const STATES: usize = MODES as usize * 3;

// String positions.
const S_NORMAL: u8 = 0;
const S_ESC: u8 = 1;
const S_U0: u8 = 2; // after `\u`
const S_U1: u8 = 3; // one hex digit read (not a surrogate)
const S_U2: u8 = 4;
const S_U3: u8 = 5;
const S_UD1: u8 = 6; // `\uD`: maybe a surrogate
const S_H2: u8 = 7; // `\uD8`..`\uDB`: a high surrogate
const S_H3: u8 = 8;
const S_HB: u8 = 9; // high surrogate read: `\` must follow
const S_HU: u8 = 10; // `u` must follow
const S_L0: u8 = 11; // `D` must follow
const S_L1: u8 = 12; // `C`-`F` must follow
const S_L2: u8 = 13;
const S_L3: u8 = 14;
const S_C1: u8 = 15; // UTF-8: one continuation byte to go
const S_C2: u8 = 16;
const S_C3: u8 = 17;
const S_E0: u8 = 18; // after E0: A0-BF
const S_ED: u8 = 19; // after ED: 80-9F (no surrogates)
const S_F0: u8 = 20; // after F0: 90-BF
const S_F4: u8 = 21; // after F4: 80-8F

const LITERALS: [&[u8]; 3] = [b"true", b"false", b"null"];
/// First literal position of each literal in the `M_LIT` block.
const LIT_BASE: [u8; 3] = [0, 3, 7];

const fn state(mode: u8, ctx: u8) -> u8 {
    mode * 3 + ctx
}

/// The state after a value completes in container `ctx`.
const fn after(ctx: u8) -> u8 {
    state(M_AFTER, ctx)
}

/// What one byte does in one state: `kind` (0 dead, next, push, pop), the next state (for
/// push, the state inside the new container; for pop, unused: it is `after(popped)`), and
/// whether the byte is inter-token whitespace (counted against the bound).
#[derive(Debug, Clone, Copy)]
struct Move(u16);

const K_NEXT: u16 = 1;
const K_PUSH: u16 = 2;
const K_POP: u16 = 3;
const WS_FLAG: u16 = 1 << 10;

impl Move {
    const DEAD: Move = Move(0);
    const fn next(s: u8) -> Move {
        Move(K_NEXT << 8 | s as u16)
    }
    const fn kind(self) -> u16 {
        (self.0 >> 8) & 3
    }
    const fn to(self) -> u8 {
        self.0 as u8
    }
    const fn ws(self) -> bool {
        self.0 & WS_FLAG != 0
    }
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

fn value_start(ctx: u8, b: u8) -> Move {
    match b {
        b'{' => Move(K_PUSH << 8 | u16::from(state(M_OBJ_FIRST, OBJ))),
        b'[' => Move(K_PUSH << 8 | u16::from(state(M_ARR_FIRST, ARR))),
        b'"' => Move::next(state(M_STR + S_NORMAL, ctx)),
        b'-' => Move::next(state(M_NUM + N_MINUS, ctx)),
        b'0' => Move::next(state(M_NUM + N_ZERO, ctx)),
        b'1'..=b'9' => Move::next(state(M_NUM + N_INT, ctx)),
        b't' => Move::next(state(M_LIT + LIT_BASE[0], ctx)),
        b'f' => Move::next(state(M_LIT + LIT_BASE[1], ctx)),
        b'n' => Move::next(state(M_LIT + LIT_BASE[2], ctx)),
        _ => Move::DEAD,
    }
}

/// The lexer's transition function (tabulated once by [`table`]).
fn compute_move(st: u8, b: u8) -> Move {
    let (mode, ctx) = (st / 3, st % 3);
    let closer = |b: u8| match (b, ctx) {
        (b'}', OBJ) | (b']', ARR) => Move(K_POP << 8),
        _ => Move::DEAD,
    };
    if mode <= M_AFTER && is_ws(b) {
        return Move(K_NEXT << 8 | WS_FLAG | u16::from(st));
    }
    match mode {
        M_VALUE => value_start(ctx, b),
        M_ARR_FIRST => match b {
            b']' => closer(b),
            _ => value_start(ctx, b),
        },
        M_OBJ_FIRST | M_KEY => match b {
            b'}' if mode == M_OBJ_FIRST => closer(b),
            b'"' => Move::next(state(M_STR + STR_SUBS + S_NORMAL, ctx)),
            _ => Move::DEAD,
        },
        M_COLON => match b {
            b':' => Move::next(state(M_VALUE, ctx)),
            _ => Move::DEAD,
        },
        M_AFTER => match (b, ctx) {
            (b',', OBJ) => Move::next(state(M_KEY, ctx)),
            (b',', ARR) => Move::next(state(M_VALUE, ctx)),
            _ => closer(b),
        },
        m if (M_NUM..M_LIT).contains(&m) => {
            let n = m - M_NUM;
            let to = |p: u8| Move::next(state(M_NUM + p, ctx));
            match (n, b) {
                (N_MINUS, b'0') => to(N_ZERO),
                (N_MINUS, b'1'..=b'9') => to(N_INT),
                (N_INT, b'0'..=b'9') => to(N_INT),
                (N_ZERO | N_INT, b'.') => to(N_DOT),
                (N_DOT | N_FRAC, b'0'..=b'9') => to(N_FRAC),
                (N_ZERO | N_INT | N_FRAC, b'e' | b'E') => to(N_E),
                (N_E, b'+' | b'-') => to(N_ESIGN),
                (N_E | N_ESIGN | N_EXP, b'0'..=b'9') => to(N_EXP),
                // A complete number ends at any other byte, which then counts after it.
                (N_ZERO | N_INT | N_FRAC | N_EXP, _) => compute_move(after(ctx), b),
                _ => Move::DEAD,
            }
        }
        m if (M_LIT..M_STR).contains(&m) => {
            let p = m - M_LIT;
            let lit = LIT_BASE
                .iter()
                .rposition(|&base| base <= p)
                .expect("a literal");
            let pos = (p - LIT_BASE[lit]) as usize + 1; // bytes matched so far
            let word = LITERALS[lit];
            if b != word[pos] {
                Move::DEAD
            } else if pos + 1 == word.len() {
                Move::next(after(ctx))
            } else {
                Move::next(state(m + 1, ctx))
            }
        }
        m => {
            let key = m >= M_STR + STR_SUBS;
            let base = if key { M_STR + STR_SUBS } else { M_STR };
            let to = |s: u8| Move::next(state(base + s, ctx));
            let hex = b.is_ascii_hexdigit();
            match (m - base, b) {
                (S_NORMAL, b'"') if key => Move::next(state(M_COLON, ctx)),
                (S_NORMAL, b'"') => Move::next(after(ctx)),
                (S_NORMAL, b'\\') => to(S_ESC),
                (S_NORMAL, 0x20..=0x7F) => to(S_NORMAL),
                (S_NORMAL, 0xC2..=0xDF) => to(S_C1),
                (S_NORMAL, 0xE0) => to(S_E0),
                (S_NORMAL, 0xE1..=0xEC | 0xEE..=0xEF) => to(S_C2),
                (S_NORMAL, 0xED) => to(S_ED),
                (S_NORMAL, 0xF0) => to(S_F0),
                (S_NORMAL, 0xF1..=0xF3) => to(S_C3),
                (S_NORMAL, 0xF4) => to(S_F4),
                (S_ESC, b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => to(S_NORMAL),
                (S_ESC, b'u') => to(S_U0),
                (S_U0, b'd' | b'D') => to(S_UD1),
                (S_U0, _) if hex => to(S_U1),
                (S_UD1, b'0'..=b'7') => to(S_U2),
                (S_UD1, b'8'..=b'9' | b'a' | b'b' | b'A' | b'B') => to(S_H2),
                (S_U1, _) if hex => to(S_U2),
                (S_U2, _) if hex => to(S_U3),
                (S_U3, _) if hex => to(S_NORMAL),
                (S_H2, _) if hex => to(S_H3),
                (S_H3, _) if hex => to(S_HB),
                (S_HB, b'\\') => to(S_HU),
                (S_HU, b'u') => to(S_L0),
                (S_L0, b'd' | b'D') => to(S_L1),
                (S_L1, b'c'..=b'f' | b'C'..=b'F') => to(S_L2),
                (S_L2, _) if hex => to(S_L3),
                (S_L3, _) if hex => to(S_NORMAL),
                (S_C1, 0x80..=0xBF) => to(S_NORMAL),
                (S_C2, 0x80..=0xBF) => to(S_C1),
                (S_C3, 0x80..=0xBF) => to(S_C2),
                (S_E0, 0xA0..=0xBF) => to(S_C1),
                (S_ED, 0x80..=0x9F) => to(S_C1),
                (S_F0, 0x90..=0xBF) => to(S_C2),
                (S_F4, 0x80..=0x8F) => to(S_C2),
                _ => Move::DEAD,
            }
        }
    }
}

/// `table()[state * 256 + byte]`, built once per process (~100 KiB).
fn table() -> &'static [Move] {
    static TABLE: OnceLock<Vec<Move>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = Vec::with_capacity(STATES * 256);
        for st in 0..STATES as u8 {
            for b in 0..=255u8 {
                t.push(compute_move(st, b));
            }
        }
        t
    })
}

/// Whether the value is complete in `st` (at the top level, after a value or inside a number
/// that may end here).
fn accepting(st: u8) -> bool {
    st % 3 == TOP
        && match st / 3 {
            M_AFTER => true,
            m if (M_NUM..M_LIT).contains(&m) => {
                matches!(m - M_NUM, N_ZERO | N_INT | N_FRAC | N_EXP)
            }
            _ => false,
        }
}

/// Per lexer state, a shortest byte string that completes what is being written and then
/// closes the innermost container (its `}` or `]` last), or at the top level ends the value:
/// the close of a `json_object` output about to reach `max_tokens`. Built once per process
/// by relaxing the ~200 states over their byte moves until nothing shortens (a few rounds).
fn close_table() -> &'static [Vec<u8>] {
    static CLOSE: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    CLOSE.get_or_init(|| {
        let table = table();
        let mut close: Vec<Option<Vec<u8>>> = (0..STATES as u8)
            .map(|st| (st % 3 == TOP && accepting(st)).then(Vec::new))
            .collect();
        loop {
            let mut changed = false;
            for st in 0..STATES {
                // Readable bytes first, so ties go to them.
                for b in (b'0'..=b'9').chain(b' '..=b'~').chain(0..=255u8) {
                    let m = table[st * 256 + usize::from(b)];
                    let candidate = match m.kind() {
                        K_POP => Some(vec![b]),
                        K_NEXT if !m.ws() => close[usize::from(m.to())].as_ref().map(|rest| {
                            let mut v = vec![b];
                            v.extend_from_slice(rest);
                            v
                        }),
                        _ => None,
                    };
                    if let Some(c) = candidate {
                        if close[st].as_ref().is_none_or(|old| c.len() < old.len()) {
                            close[st] = Some(c);
                            changed = true;
                        }
                    }
                }
            }
            if !changed {
                break;
            }
        }
        close.into_iter().map(Option::unwrap_or_default).collect()
    })
}

/// A lexer position over a stack: the state, the whitespace run, how much of the real stack
/// is still there, and the top of the pushed part (`NO_LOCAL` when nothing was pushed).
#[derive(Debug, Clone, Copy)]
struct Cursor {
    st: u8,
    ws: u8,
    real: u32,
    local: u32,
}

const NO_LOCAL: u32 = u32::MAX;

/// What a step did.
enum Stepped {
    Alive(Cursor),
    Dead,
    /// Closed a container below the cursor's start while walking with an unknown stack.
    Exit,
}

/// Pushed containers of a walk: a persistent list in an arena, truncated as the walk
/// backtracks.
type Local = Vec<(u8, u32)>;

#[inline]
fn step(c: Cursor, b: u8, real: &[u8], local: &mut Local) -> Stepped {
    let m = table()[usize::from(c.st) * 256 + usize::from(b)];
    let ws = if m.ws() {
        if usize::from(c.ws) >= MAX_JSON_WHITESPACE {
            return Stepped::Dead;
        }
        c.ws + 1
    } else {
        0
    };
    match m.kind() {
        K_NEXT => Stepped::Alive(Cursor {
            st: m.to(),
            ws,
            ..c
        }),
        K_PUSH => {
            local.push((c.st % 3, c.local));
            Stepped::Alive(Cursor {
                st: m.to(),
                ws,
                local: (local.len() - 1) as u32,
                ..c
            })
        }
        K_POP => {
            if c.local != NO_LOCAL {
                let (ctx, prev) = local[c.local as usize];
                Stepped::Alive(Cursor {
                    st: after(ctx),
                    ws,
                    local: prev,
                    ..c
                })
            } else if c.real > 0 {
                Stepped::Alive(Cursor {
                    st: after(real[c.real as usize - 1]),
                    ws,
                    real: c.real - 1,
                    ..c
                })
            } else {
                Stepped::Exit
            }
        }
        _ => Stepped::Dead,
    }
}

/// One sequence's position: the lexer state, the whitespace run, the container stack, and
/// an undo log per token.
#[derive(Debug, Clone)]
pub(crate) struct Parse {
    st: u8,
    ws: u8,
    stack: Vec<u8>,
    /// Per token: state and whitespace before it, the stack length before it, the lowest
    /// stack length it reached, and where its popped entries start in `popped`.
    history: Vec<(u8, u8, u32, u32, u32)>,
    popped: Vec<u8>,
}

impl Default for Parse {
    fn default() -> Self {
        Parse {
            st: state(M_VALUE, TOP),
            ws: 0,
            stack: Vec::new(),
            history: Vec::new(),
            popped: Vec::new(),
        }
    }
}

impl Parse {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Nesting depth of the containers open now.
    #[cfg(test)]
    pub(crate) fn depth(&self) -> usize {
        self.stack.len()
    }

    /// Whether the output so far is one complete JSON value.
    pub(crate) fn is_accepting(&self) -> bool {
        accepting(self.st)
    }

    /// Whether `bytes` keep the value well-formed.
    pub(crate) fn accepts(&self, bytes: &[u8]) -> bool {
        let mut local = Local::new();
        let mut c = Cursor {
            st: self.st,
            ws: self.ws,
            real: self.stack.len() as u32,
            local: NO_LOCAL,
        };
        for &b in bytes {
            match step(c, b, &self.stack, &mut local) {
                Stepped::Alive(n) => c = n,
                _ => return false,
            }
        }
        true
    }

    /// Advances by `bytes`; false, and no change, when they break the value.
    pub(crate) fn advance(&mut self, bytes: &[u8]) -> bool {
        if !self.accepts(bytes) {
            return false;
        }
        let table = table();
        let len0 = self.stack.len() as u32;
        let mut low = len0;
        let log = self.popped.len() as u32;
        self.history.push((self.st, self.ws, len0, 0, log));
        for &b in bytes {
            let m = table[usize::from(self.st) * 256 + usize::from(b)];
            self.ws = if m.ws() { self.ws + 1 } else { 0 };
            match m.kind() {
                K_NEXT => self.st = m.to(),
                K_PUSH => {
                    self.stack.push(self.st % 3);
                    self.st = m.to();
                }
                _ => {
                    let ctx = self.stack.pop().expect("checked by accepts");
                    if (self.stack.len() as u32) < low {
                        low = self.stack.len() as u32;
                        self.popped.push(ctx);
                    }
                    self.st = after(ctx);
                }
            }
        }
        self.history.last_mut().expect("pushed").3 = low;
        true
    }

    /// Undoes the last `k` advances (`k <= steps()`).
    pub(crate) fn rollback(&mut self, k: usize) {
        for _ in 0..k {
            let (st, ws, _, low, log) = self.history.pop().expect("k <= steps()");
            self.stack.truncate(low as usize);
            let entries: Vec<u8> = self.popped.drain(log as usize..).rev().collect();
            self.stack.extend(entries);
            self.st = st;
            self.ws = ws;
        }
    }

    /// The length of a shortest completion ([`Parse::closing_bytes`]), without writing it.
    pub(crate) fn closing_len(&self) -> u64 {
        let close = close_table();
        let inner = close[usize::from(self.st)].len();
        let outer: usize = self
            .stack
            .iter()
            .map(|&e| close[usize::from(after(e))].len())
            .sum();
        (inner + outer) as u64
    }

    /// A shortest string that makes the output one complete value: what the current item
    /// needs, then each open container's closer.
    pub(crate) fn closing_bytes(&self) -> Vec<u8> {
        let close = close_table();
        let mut out = close[usize::from(self.st)].clone();
        for &e in self.stack.iter().rev() {
            out.extend_from_slice(&close[usize::from(after(e))]);
        }
        out
    }

    /// The bytes that must come next while the value is incomplete and only one byte fits
    /// (`true` after `t`, `:` is not forced because whitespace may come first).
    pub(crate) fn forced_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut c = Cursor {
            st: self.st,
            ws: self.ws,
            real: self.stack.len() as u32,
            local: NO_LOCAL,
        };
        let mut local = Local::new();
        while out.len() < 8 && !accepting(c.st) {
            let mut only = None;
            for b in 0..=255u8 {
                if let Stepped::Alive(n) = step(c, b, &self.stack, &mut local) {
                    if only.is_some() {
                        return out;
                    }
                    only = Some((b, n));
                }
            }
            let Some((b, n)) = only else { return out };
            out.push(b);
            c = n;
        }
        out
    }
}

/// Per lexer state over one vocabulary: tokens allowed whatever the stack, and the trie nodes
/// after which a token has closed a container opened before it.
#[derive(Debug)]
struct StateMasks {
    free: Box<[u32]>,
    exits: Box<[u32]>,
}

/// The json_object acceptor bound to a vocabulary, with its per-state mask cache.
#[derive(Debug)]
pub(crate) struct Index {
    vocab: Arc<Vocabulary>,
    words: usize,
    states: Vec<OnceLock<Arc<StateMasks>>>,
    content: Content,
    cached_bytes: AtomicUsize,
}

/// What every string state at its start position shares: the tokens that stay inside a string
/// (or end with its closing quote), and the trie nodes of closing quotes that have children.
/// Walked once when the constraint is made (the one walk over nearly the whole vocabulary
/// that json_object needs), so a key string and a value string in an array each cost a few
/// short walks after `"` instead of another full walk.
#[derive(Debug)]
struct Content {
    free: Box<[u32]>,
    quotes: Box<[u32]>,
}

/// The string content walk: a plain table walk over the string positions (the container
/// kind plays no part inside a string).
fn content_walk(vocab: &Vocabulary, words: usize) -> Content {
    let trie = vocab.trie();
    let table = table();
    let mut free = vec![0u32; words];
    let mut quotes = Vec::new();
    let in_string = |st: u8| (M_STR..M_STR + STR_SUBS).contains(&(st / 3));
    let mut cur = vec![state(M_STR + S_NORMAL, TOP); trie.max_depth() + 1];
    let mut i = 0;
    while i < trie.node_len() {
        let (byte, d, next) = trie.node(i);
        let m = table[usize::from(cur[d - 1]) * 256 + usize::from(byte)];
        if m.kind() != K_NEXT {
            i = next;
            continue;
        }
        for &t in trie.tokens(i) {
            set_bit(&mut free, t);
        }
        if in_string(m.to()) {
            cur[d] = m.to();
            i += 1;
        } else {
            if i + 1 < next {
                quotes.push(i as u32);
            }
            i = next;
        }
    }
    Content {
        free: free.into_boxed_slice(),
        quotes: quotes.into_boxed_slice(),
    }
}

impl Index {
    pub(crate) fn new(vocab: Arc<Vocabulary>) -> Self {
        let words = crate::mask::words_for(vocab.len());
        let content = content_walk(&vocab, words);
        Index {
            words,
            vocab,
            states: (0..STATES).map(|_| OnceLock::new()).collect(),
            content,
            cached_bytes: AtomicUsize::new(0),
        }
    }

    /// Number of lexer states.
    pub(crate) fn state_count(&self) -> usize {
        STATES
    }

    /// Number of lexer states whose masks are cached.
    pub(crate) fn cached(&self) -> usize {
        self.states.iter().filter(|s| s.get().is_some()).count()
    }

    fn state_masks(&self, st: u8) -> Arc<StateMasks> {
        let cell = &self.states[usize::from(st)];
        if let Some(m) = cell.get() {
            return m.clone();
        }
        let m = Arc::new(self.compute_state(st));
        let bytes = m.free.len() * 4 + m.exits.len() * 4 + 64;
        if self.cached_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes <= MASK_CACHE_BYTES {
            let _ = cell.set(m.clone());
        } else {
            self.cached_bytes.fetch_sub(bytes, Ordering::Relaxed);
        }
        m
    }

    /// One trie walk from state `st` with no whitespace before and an unknown stack; a
    /// string state at its start position reuses the content walk and only walks on after
    /// each closing quote.
    fn compute_state(&self, st: u8) -> StateMasks {
        let mode = st / 3;
        let mut exits = Vec::new();
        let start = |st| Cursor {
            st,
            ws: 0,
            real: 0,
            local: NO_LOCAL,
        };
        if mode == M_STR + S_NORMAL || mode == M_STR + STR_SUBS + S_NORMAL {
            let mut free = self.content.free.to_vec();
            let after = table()[usize::from(st) * 256 + usize::from(b'"')].to();
            for &q in self.content.quotes.iter() {
                self.walk(Some(q as usize), start(after), &mut free, &mut exits);
            }
            return StateMasks {
                free: free.into_boxed_slice(),
                exits: exits.into_boxed_slice(),
            };
        }
        let mut free = vec![0u32; self.words];
        self.walk(None, start(st), &mut free, &mut exits);
        StateMasks {
            free: free.into_boxed_slice(),
            exits: exits.into_boxed_slice(),
        }
    }

    /// The walk below `root` (the whole trie when `None`) from `start` over an unknown stack:
    /// marks in `free` the tokens that need nothing from the stack, and records in `exits`
    /// the nodes where a token closes a container opened before it and goes on.
    fn walk(&self, root: Option<usize>, start: Cursor, free: &mut [u32], exits: &mut Vec<u32>) {
        let trie = self.vocab.trie();
        let mut local = Local::new();
        let mut cur = vec![(start, 0usize); trie.max_depth() + 1];
        let (mut i, end) = match root {
            Some(n) => {
                let (_, d, next) = trie.node(n);
                cur[d] = (start, 0);
                (n + 1, next)
            }
            None => (0, trie.node_len()),
        };
        while i < end {
            let (byte, d, next) = trie.node(i);
            let (c, mark) = cur[d - 1];
            local.truncate(mark);
            match step(c, byte, &[], &mut local) {
                Stepped::Alive(n) => {
                    for &t in trie.tokens(i) {
                        set_bit(free, t);
                    }
                    cur[d] = (n, local.len());
                    i += 1;
                }
                Stepped::Dead => i = next,
                Stepped::Exit => {
                    // The closer itself is fine (it matched the innermost container); what
                    // follows depends on the container below, known only at run time.
                    for &t in trie.tokens(i) {
                        set_bit(free, t);
                    }
                    if i + 1 < next
                        && trie.any_child(i, |b| is_ws(b) || matches!(b, b',' | b'}' | b']'))
                    {
                        exits.push(i as u32);
                    }
                    i = next;
                }
            }
        }
    }

    /// Fills `out` with the tokens allowed after `parse`.
    pub(crate) fn fill(&self, parse: &Parse, out: &mut [u32]) {
        let m = self.state_masks(parse.st);
        out.copy_from_slice(&m.free);
        if !m.exits.is_empty() {
            let trie = self.vocab.trie();
            let stack = &parse.stack;
            let mut local = Local::new();
            let mut cur = vec![
                (
                    Cursor {
                        st: 0,
                        ws: 0,
                        real: 0,
                        local: NO_LOCAL
                    },
                    0usize
                );
                trie.max_depth() + 1
            ];
            for &n in m.exits.iter() {
                let (_, d0, end) = trie.node(n as usize);
                // The closer at `n` closed the innermost container of `parse`.
                let real = stack.len() as u32 - 1;
                local.clear();
                cur[d0] = (
                    Cursor {
                        st: after(stack[real as usize]),
                        ws: 0,
                        real,
                        local: NO_LOCAL,
                    },
                    0,
                );
                let mut i = n as usize + 1;
                while i < end {
                    let (byte, d, next) = trie.node(i);
                    let (c, mark) = cur[d - 1];
                    local.truncate(mark);
                    match step(c, byte, stack, &mut local) {
                        Stepped::Alive(c) => {
                            for &t in trie.tokens(i) {
                                set_bit(out, t);
                            }
                            cur[d] = (c, local.len());
                            i += 1;
                        }
                        _ => i = next,
                    }
                }
            }
        }
        // The whitespace bound: cut tokens whose leading run does not fit after `parse.ws`.
        // They are the subtrees below the all-whitespace trie paths one byte longer than the
        // room left, usually none (a run of 60 spaces is not a token).
        if parse.ws > 0 {
            let room = MAX_JSON_WHITESPACE - usize::from(parse.ws);
            let trie = self.vocab.trie();
            let mut i = 0;
            while i < trie.node_len() {
                let (b, d, next) = trie.node(i);
                if !is_ws(b) {
                    i = next;
                } else if d > room {
                    for j in i..next {
                        for &t in trie.tokens(j) {
                            out[t as usize / 32] &= !(1 << (t % 32));
                        }
                    }
                    i = next;
                } else {
                    i += 1;
                }
            }
        }
        if accepting(parse.st) {
            for &t in self.vocab.eos() {
                set_bit(out, t);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accepts(text: &str) -> bool {
        let mut p = Parse::new();
        p.advance(text.as_bytes()) && p.is_accepting()
    }

    #[test]
    fn values_of_every_kind() {
        for ok in [
            "{}",
            "[]",
            "0",
            "-0.5e+10",
            "\"a\\u00e9\\ud83d\\ude00\"",
            "true",
            " null ",
            "{\"a\": [1, {\"b\": false}], \"c\": \"é\"}",
        ] {
            assert!(accepts(ok), "{ok}");
        }
        for bad in [
            "",
            "{",
            "01",
            "1.",
            "[1,]",
            "{\"a\"}",
            "\"\\ud83d\"",
            "\"\\ude00\"",
            "tru",
            "\"\u{1}\"",
            "{'a': 1}",
            "[] []",
        ] {
            assert!(!accepts(bad), "{bad:?}");
        }
    }

    #[test]
    fn whitespace_runs_are_bounded() {
        let ok = format!("[{}1]", " ".repeat(MAX_JSON_WHITESPACE));
        assert!(accepts(&ok));
        let bad = format!("[{}1]", " ".repeat(MAX_JSON_WHITESPACE + 1));
        assert!(!accepts(&bad));
    }

    #[test]
    fn rollback_restores_the_stack() {
        let mut p = Parse::new();
        for piece in ["[[", "{\"a\":", "1}]", "]"] {
            assert!(p.advance(piece.as_bytes()), "{piece}");
        }
        assert!(p.is_accepting());
        p.rollback(2);
        assert_eq!(p.depth(), 3);
        assert!(p.advance(b"2}],3]"));
        assert!(p.is_accepting());
        p.rollback(3);
        assert_eq!(p.depth(), 0);
        assert!(!p.is_accepting());
    }
}
