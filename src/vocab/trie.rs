//! A byte trie over the text tokens, flattened in preorder.
//!
//! Mask computation walks it against an automaton: a node whose byte kills the automaton
//! skips its whole subtree in one jump, so a restrictive state (`[0-9]`) touches a few
//! hundred of the ~200k nodes of a 49k-token vocabulary and a permissive one (`.*`) touches
//! each node once.

use super::{TokenId, TokenKind};
use crate::error::{Error, Result};
use crate::limits::{RUN_SEARCH_WORK, RUN_TOKENS_CACHE_BYTES};
use crate::mask::set_bit;
// FxHash: the run search looks states up by id several times per state (SipHash was ~15 %
// of binding a 1.5k-state grammar).
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// One trie node (the root is implicit). 12 bytes, so the 49k-token walk streams ~2.4 MB.
#[derive(Debug, Clone, Copy)]
struct Node {
    /// Index of the first node after this node's subtree.
    next: u32,
    /// Tokens ending here are `tokens[tok_start..nodes[i + 1].tok_start]`.
    tok_start: u32,
    /// Depth, the root's children being 1 (the token length at this node).
    depth: u16,
    byte: u8,
}

/// The trie; see the module docs.
#[derive(Debug, Clone)]
pub(crate) struct Trie {
    /// Preorder nodes plus one sentinel whose `tok_start` closes the last node's token list.
    nodes: Vec<Node>,
    tokens: Vec<TokenId>,
    max_depth: usize,
    /// Per node, the [`Trie::byte_group`]s of the characters in its subtree below it, plus
    /// [`Trie::GROUP_BAD`] when the node's path ends inside a character or some path below is
    /// not UTF-8: a grammar state that loops on all those groups takes the whole subtree, so a
    /// walk marks its tokens without visiting it (8 bytes a node, ~1.2 MB at 49k tokens).
    below: Vec<u64>,
    /// Per node, how many characters the longest token below it has past the node (255 at
    /// most): a subtree is taken whole when a state's [`Run`] is at least this long (200 KB
    /// at 49k).
    height: Vec<u8>,
    /// The most characters a token has (255 at most).
    max_chars: u8,
    /// [`Trie::run_tokens`] by run, kept for every later walk over this vocabulary.
    run_tokens: RunTokensCache,
}

/// The token sets [`Trie::run_tokens`] computed, within [`RUN_TOKENS_CACHE_BYTES`].
#[derive(Debug, Default)]
struct RunTokensCache {
    sets: Mutex<HashMap<Run, Arc<[u32]>>>,
    bytes: AtomicUsize,
}

impl Clone for RunTokensCache {
    /// A copy starts empty: the sets are a cache.
    fn clone(&self) -> Self {
        RunTokensCache::default()
    }
}

/// What an automaton state absorbs without a check: any string of at most `len` characters,
/// each from the character `groups` (see [`Trie::byte_group`]), keeps it alive, a string
/// ending inside a character included. `len` [`Run::UNBOUNDED`] is a loop (`[^"]*`), a
/// smaller one a counted stretch (`[^"]{0,40}` with 30 characters to go).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Run {
    pub(crate) groups: u64,
    pub(crate) len: u8,
}

impl Run {
    /// Absorbs nothing.
    pub(crate) const NONE: Run = Run { groups: 0, len: 0 };
    /// A loop: any number of characters.
    pub(crate) const UNBOUNDED: u8 = u8::MAX;

    /// Whether every token of a subtree whose [`Trie::below`] is `below` and whose
    /// [`Trie::height`] is `height` keeps the state alive.
    #[inline(always)]
    pub(crate) fn covers(self, below: u64, height: u8) -> bool {
        below & self.groups == below && height <= self.len
    }

    /// Characters seen from a walk's start along a path whose every character is from this
    /// run's groups, after byte `b`, given `chars` before it; [`Run::OFF_PATH`] once a
    /// character is not (or there are more than `len`, for a counted run). UTF-8
    /// continuation bytes count nothing: a subtree is only taken where [`Trie::below`] says
    /// the whole path is UTF-8.
    #[inline(always)]
    pub(crate) fn path_chars(self, chars: u16, b: u8) -> u16 {
        if chars == Self::OFF_PATH || (0x80..=0xbf).contains(&b) {
            return chars;
        }
        let n = chars + 1;
        if Trie::byte_group(b) & self.groups == 0
            || (self.len != Self::UNBOUNDED && n > u16::from(self.len))
        {
            Self::OFF_PATH
        } else {
            n
        }
    }

    /// Whether every token of a subtree at a node reached with `chars` characters on this
    /// run's path (see [`Run::path_chars`]) keeps a state with this run alive.
    #[inline(always)]
    pub(crate) fn covers_from(self, chars: u16, below: u64, height: u8) -> bool {
        chars != Self::OFF_PATH
            && below & self.groups == below
            && (self.len == Self::UNBOUNDED || chars + u16::from(height) <= u16::from(self.len))
    }

    /// [`Run::path_chars`] of a path that left the run's groups.
    pub(crate) const OFF_PATH: u16 = u16::MAX;

    /// The run of a state that takes one character of `groups` to where this run is: one
    /// character longer, or 1 when `groups` has a group this run does not.
    pub(crate) fn after_one(self, groups: u64) -> Run {
        if self.groups & groups == groups {
            Run {
                groups,
                len: if self.len == Self::UNBOUNDED {
                    Self::UNBOUNDED
                } else {
                    (self.len + 1).min(Self::UNBOUNDED - 1)
                },
            }
        } else {
            Run { groups, len: 1 }
        }
    }
}

/// Where the characters of one automaton state lead, by [`Trie::byte_group`].
#[derive(Debug)]
pub(crate) struct GroupSuccessors {
    /// The groups whose every character (its whole UTF-8 sequence) keeps the state alive.
    live: u64,
    /// (group index, state) for each state a character of a `live` group leads to.
    pairs: Vec<(u8, u32)>,
    /// [`GroupSuccessors::single_of`] the pairs, kept: a run search reads it at each chain
    /// step of each round.
    single: (u64, u32),
}

impl GroupSuccessors {
    fn new(live: u64, pairs: Vec<(u8, u32)>) -> Self {
        let single = Self::single_of(&pairs);
        GroupSuccessors {
            live,
            pairs,
            single,
        }
    }

    /// The live groups whose characters all lead to one same state, and that state.
    fn single(&self) -> (u64, u32) {
        self.single
    }

    /// Of the states some whole group leads to, the one most groups do (the lowest on a
    /// tie), with those groups; `(0, _)` when there is none.
    fn single_of(pairs: &[(u8, u32)]) -> (u64, u32) {
        // Per group: its one successor, CONFLICT when its characters disagree.
        const UNSET: u32 = u32::MAX;
        const CONFLICT: u32 = u32::MAX - 1;
        let mut succ = [UNSET; 64];
        let mut whole = 0u64;
        for &(g, n) in pairs {
            let g = usize::from(g);
            succ[g] = if succ[g] == UNSET || succ[g] == n {
                n
            } else {
                CONFLICT
            };
            whole |= 1 << g;
        }
        // Per state, the groups whose every character leads there: at most one state a
        // group, and mostly a few in all (a key's next letter, the string's body, the close),
        // so each is found by a scan, on the stack. Sorting (state, group) pairs instead,
        // over two 64-entry tables, was ~4 % of a small grammar-backed compile.
        let mut by_state = [(0u32, 0u64); 64];
        let mut len = 0;
        while whole != 0 {
            let g = whole.trailing_zeros();
            whole &= whole - 1;
            let n = succ[g as usize];
            if n == CONFLICT {
                continue;
            }
            match by_state[..len].iter_mut().find(|e| e.0 == n) {
                Some(e) => e.1 |= 1 << g,
                None => {
                    by_state[len] = (n, 1 << g);
                    len += 1;
                }
            }
        }
        let mut best = (0u64, u32::MAX);
        for &(n, groups) in &by_state[..len] {
            let better = groups.count_ones() > best.0.count_ones()
                || (groups.count_ones() == best.0.count_ones() && n < best.1);
            if better {
                best = (groups, n);
            }
        }
        best
    }
}

/// Where `n` continuation bytes lead from a state (`None`: one dies, or more than
/// [`Trie::successors`]' bound), per (state, n): the leads of one length share their
/// continuations, and walking them again per lead and per class was ~60 % of binding a
/// schema grammar to SmolLM2's vocabulary (o82710: ~9 ms). The same for every state of one
/// automaton.
type Continuations = HashMap<(u32, usize), Option<Vec<u32>>>;

/// The successors [`Trie::run`] computed, by state, for later calls on the same automaton,
/// and what its loop searches may still do.
#[derive(Debug)]
pub(crate) struct RunMemo {
    successors: HashMap<u32, std::rc::Rc<GroupSuccessors>>,
    /// [`Trie::successors`]' continuation walks, kept across states.
    continuations: Continuations,
    /// States a loop search passed [`Trie::LOOP_STATES`] from: no search starts there.
    crowded: HashSet<u32>,
    /// Successor pairs the loop searches may still examine ([`RUN_SEARCH_WORK`] to start
    /// with); once spent, no search starts and each state keeps its chain run.
    search_left: u64,
    /// [`Representatives`] of the automaton's classes, once computed.
    representatives: Option<Representatives>,
}

/// The bytes [`Trie::successors`] reads: one per (character group, byte class), the
/// lowest, and for a lead byte per (group, class, continuation range) too. Bytes that agree
/// on those lead to the same states, so reading one of them gives the same successors (a
/// schema grammar's ~40-70 classes make ~50-80 ASCII pairs of the 128 bytes and ~20 of the
/// 51 leads; reading every byte was ~1 us a state, most of binding a large grammar to a
/// vocabulary).
#[derive(Debug)]
pub(crate) struct Representatives {
    ascii: Vec<(u64, u8)>,
    leads: Vec<(u64, u8)>,
}

impl Representatives {
    fn new(class: &impl Fn(u8) -> u8) -> Self {
        // Per class, the groups already represented.
        let mut taken = [0u64; 256];
        let mut ascii = Vec::new();
        for b in 0..=0x7fu8 {
            let group = Trie::byte_group(b);
            let seen = &mut taken[usize::from(class(b))];
            if *seen & group == 0 {
                *seen |= group;
                ascii.push((group, b));
            }
        }
        let mut leads: Vec<(u64, u8)> = Vec::new();
        for lead in 0xc2..=0xf4u8 {
            let group = Trie::byte_group(lead);
            let second = Trie::utf8_second(lead);
            if !leads.iter().any(|&(g, l)| {
                g == group && class(l) == class(lead) && Trie::utf8_second(l) == second
            }) {
                leads.push((group, lead));
            }
        }
        Representatives { ascii, leads }
    }
}

impl RunMemo {
    /// A memo with room for `states` states' successors before its map grows.
    pub(crate) fn with_capacity(states: usize) -> Self {
        let mut memo = RunMemo::default();
        memo.successors.reserve(states);
        memo
    }
}

impl Default for RunMemo {
    fn default() -> Self {
        RunMemo {
            successors: HashMap::default(),
            continuations: Continuations::default(),
            crowded: HashSet::default(),
            search_left: RUN_SEARCH_WORK,
            representatives: None,
        }
    }
}

impl Trie {
    pub(crate) fn build(bytes: &[u8], offsets: &[usize], kinds: &[TokenKind]) -> Result<Self> {
        let tok = |id: u32| &bytes[offsets[id as usize]..offsets[id as usize + 1]];
        let mut ids: Vec<u32> = (0..kinds.len() as u32)
            .filter(|&i| kinds[i as usize] == TokenKind::Text)
            .collect();
        if let Some(&long) = ids.iter().find(|&&i| tok(i).len() > usize::from(u16::MAX)) {
            return Err(Error::limit_exceeded(format!(
                "token {long} is {} bytes long, over the {}-byte limit for a token",
                tok(long).len(),
                u16::MAX
            )));
        }
        ids.sort_unstable_by(|&a, &b| tok(a).cmp(tok(b)).then(a.cmp(&b)));

        let mut nodes: Vec<Node> = Vec::new();
        let mut tokens = Vec::with_capacity(ids.len());
        let mut path: Vec<usize> = Vec::new();
        let mut prev: &[u8] = &[];
        let mut max_depth = 0;
        for id in ids {
            let t = tok(id);
            let lcp = prev.iter().zip(t).take_while(|(a, b)| a == b).count();
            while path.len() > lcp {
                let n = path.pop().expect("path is longer than lcp");
                nodes[n].next = nodes.len() as u32;
            }
            for (d, &byte) in t.iter().enumerate().skip(lcp) {
                path.push(nodes.len());
                nodes.push(Node {
                    next: 0,
                    tok_start: tokens.len() as u32,
                    depth: d as u16 + 1,
                    byte,
                });
            }
            // Sorted order puts every token at the most recently created node (a duplicate
            // ends where its twin did), so each node's tokens are contiguous.
            tokens.push(id);
            max_depth = max_depth.max(t.len());
            prev = t;
        }
        for n in path {
            nodes[n].next = nodes.len() as u32;
        }
        nodes.push(Node {
            next: 0,
            tok_start: tokens.len() as u32,
            depth: 0,
            byte: 0,
        });
        let below = Self::summarize(&nodes, max_depth);
        let height = Self::heights(&nodes, max_depth);
        // A root child starts one character; `height` counts the rest.
        let mut max_chars = 0u8;
        let mut i = 0;
        while i + 1 < nodes.len() {
            max_chars = max_chars.max(height[i].saturating_add(1));
            i = nodes[i].next as usize;
        }
        Ok(Trie {
            nodes,
            tokens,
            max_depth,
            below,
            height,
            max_chars,
            run_tokens: RunTokensCache::default(),
        })
    }

    /// Set in [`Trie::below`] when a subtree cannot be judged by character groups.
    pub(crate) const GROUP_BAD: u64 = 1 << 63;

    /// The group bit of a character starting with byte `b`: `\t`, `\n`, `\r`, the other
    /// controls, digits, upper and lower case letters, each other ASCII byte alone; U+0080–
    /// U+00BF (lead 0xC2: C1 controls, NEL, no-break space) and the other 2-byte characters;
    /// each 3-byte lead alone (a class such as `[^\u2028\u2029]` then still loops on 15 of the
    /// 16: without that split, Gemma's 262k walk under a Markdown-list grammar took 6 ms); the
    /// 4-byte characters. 0 for a byte that cannot start a character.
    #[inline]
    pub(crate) fn byte_group(b: u8) -> u64 {
        let g = match b {
            b'\t' => 0,
            b'\n' => 1,
            b'\r' => 2,
            0..=0x1f => 3,
            b'0'..=b'9' => 4,
            b'A'..=b'Z' => 5,
            b'a'..=b'z' => 6,
            0x20..=0x2f => 7 + u32::from(b - 0x20),
            0x3a..=0x40 => 23 + u32::from(b - 0x3a),
            0x5b..=0x60 => 30 + u32::from(b - 0x5b),
            0x7b..=0x7f => 36 + u32::from(b - 0x7b),
            0xc2 => 41,
            0xc3..=0xdf => 42,
            0xe0..=0xef => 43 + u32::from(b - 0xe0),
            0xf0..=0xf4 => 59,
            _ => return 0,
        };
        1 << g
    }

    /// The bytes allowed after a UTF-8 lead byte `b` as its second byte, and how many bytes
    /// follow it (None: `b` cannot start a multi-byte character).
    pub(crate) fn utf8_second(b: u8) -> Option<((u8, u8), usize)> {
        Some(match b {
            0xc2..=0xdf => ((0x80, 0xbf), 1),
            0xe0 => ((0xa0, 0xbf), 2),
            0xed => ((0x80, 0x9f), 2),
            0xe1..=0xef => ((0x80, 0xbf), 2),
            0xf0 => ((0x90, 0xbf), 3),
            0xf4 => ((0x80, 0x8f), 3),
            0xf1..=0xf3 => ((0x80, 0xbf), 3),
            _ => return None,
        })
    }

    /// [`Trie::below`] of every node: a forward pass tracks each path's UTF-8 decoder state
    /// (bytes still owed, range of the next one), a backward pass ORs children into parents.
    fn summarize(nodes: &[Node], max_depth: usize) -> Vec<u64> {
        let n = nodes.len() - 1;
        // Per node: its own character's group or GROUP_BAD; whether it ends at a boundary.
        let mut own = vec![0u64; n];
        let mut boundary = vec![false; n];
        // Decoder state per depth: (bytes owed, lo, hi); owed = u8::MAX once invalid.
        let mut dec = vec![(0u8, 0u8, 0u8); max_depth + 2];
        for i in 0..n {
            let (b, d) = (nodes[i].byte, usize::from(nodes[i].depth));
            let (owed, lo, hi) = dec[d - 1];
            let next = if owed == u8::MAX {
                (u8::MAX, 0, 0)
            } else if owed > 0 {
                if (lo..=hi).contains(&b) {
                    (owed - 1, 0x80, 0xbf)
                } else {
                    (u8::MAX, 0, 0)
                }
            } else if b < 0x80 {
                own[i] = Self::byte_group(b);
                (0, 0, 0)
            } else if let Some(((lo, hi), k)) = Self::utf8_second(b) {
                own[i] = Self::byte_group(b);
                (k as u8, lo, hi)
            } else {
                (u8::MAX, 0, 0)
            };
            if next.0 == u8::MAX {
                own[i] = Self::GROUP_BAD;
            }
            boundary[i] = next.0 == 0;
            dec[d] = next;
        }
        let mut below = vec![0u64; n];
        // Reverse preorder: a node's descendants come just before it, and a node is at most
        // one level shallower than the one before it, so per-depth accumulators suffice.
        let mut acc = vec![0u64; max_depth + 2];
        for i in (0..n).rev() {
            let d = usize::from(nodes[i].depth);
            let sub = std::mem::take(&mut acc[d + 1]);
            below[i] = sub | if boundary[i] { 0 } else { Self::GROUP_BAD };
            acc[d] |= own[i] | sub;
        }
        below
    }

    /// [`Trie::height`] of every node: each node's character depth (its bytes that are
    /// not UTF-8 continuation bytes) forwards, then the deepest below each node backwards
    /// with the same per-depth accumulators as `summarize`.
    fn heights(nodes: &[Node], max_depth: usize) -> Vec<u8> {
        let n = nodes.len() - 1;
        let mut chars = vec![0usize; n];
        let mut at_depth = vec![0usize; max_depth + 1];
        for i in 0..n {
            let d = usize::from(nodes[i].depth);
            let starts = usize::from(!(0x80..=0xbf).contains(&nodes[i].byte));
            chars[i] = at_depth[d - 1] + starts;
            at_depth[d] = chars[i];
        }
        let mut height = vec![0u8; n];
        let mut acc = vec![0usize; max_depth + 2];
        for i in (0..n).rev() {
            let d = usize::from(nodes[i].depth);
            let deepest = std::mem::take(&mut acc[d + 1]).max(chars[i]);
            height[i] = (deepest - chars[i]).min(usize::from(u8::MAX)) as u8;
            acc[d] = acc[d].max(deepest);
        }
        height
    }

    /// How many characters the longest token below node `i` has past it (255 at most; a
    /// character split by the token's end counts).
    #[inline(always)]
    pub(crate) fn height(&self, i: usize) -> u8 {
        self.height[i]
    }

    /// [`Trie::below`] of node `i`.
    #[inline(always)]
    pub(crate) fn below(&self, i: usize) -> u64 {
        self.below[i]
    }

    /// The tokens of the nodes strictly below node `i`.
    #[inline]
    pub(crate) fn subtree_tokens(&self, i: usize) -> &[TokenId] {
        let end = self.nodes[i].next as usize;
        &self.tokens[self.nodes[i + 1].tok_start as usize..self.nodes[end].tok_start as usize]
    }

    /// Number of nodes (without the root).
    #[cfg(test)]
    pub(crate) fn node_count(&self) -> usize {
        self.nodes.len() - 1
    }

    /// Number of nodes (without the root), for engines that walk the trie themselves.
    pub(crate) fn node_len(&self) -> usize {
        self.nodes.len() - 1
    }

    /// Node `i` (`i < node_len()`, preorder): its byte, its depth (1 for the root's children)
    /// and the index of the first node after its subtree.
    #[inline(always)]
    pub(crate) fn node(&self, i: usize) -> (u8, usize, usize) {
        let n = self.nodes[i];
        (n.byte, usize::from(n.depth), n.next as usize)
    }

    /// The tokens whose bytes end at node `i`.
    #[inline(always)]
    pub(crate) fn tokens(&self, i: usize) -> &[TokenId] {
        &self.tokens[self.nodes[i].tok_start as usize..self.nodes[i + 1].tok_start as usize]
    }

    /// The longest token's length (the deepest node).
    pub(crate) fn max_depth(&self) -> usize {
        self.max_depth
    }

    /// Whether some child of node `i` has a byte for which `pred` holds.
    pub(crate) fn any_child(&self, i: usize, pred: impl Fn(u8) -> bool) -> bool {
        let end = self.nodes[i].next as usize;
        let mut j = i + 1;
        while j < end {
            if pred(self.nodes[j].byte) {
                return true;
            }
            j = self.nodes[j].next as usize;
        }
        false
    }

    /// Walks every token path from automaton state `start`, following `next(state, byte)`
    /// and pruning at `dead`; calls `allow` for each token whose whole path stays alive,
    /// but may leave out the tokens of [`Trie::run_tokens`]`(from)`, `from` being `start`'s
    /// run (or [`Run::NONE`]): the caller adds that set, a copy of a few kilobytes where a
    /// string-interior state's ~48.8k tokens took ~50 µs to mark one by one.
    ///
    /// `runs(state)` is the state's [`Run`] (or [`Run::NONE`] to never skip): a subtree of
    /// more than [`Trie::SKIP_MIN_NODES`] nodes that the run of the state reached covers is
    /// taken whole without being visited, so a string-interior state of a 49k-token
    /// vocabulary marks its ~45k tokens by visiting a few thousand of the ~200k nodes.
    #[inline]
    pub(crate) fn walk(
        &self,
        start: u32,
        dead: u32,
        next: impl Fn(u32, u8) -> u32,
        from: Run,
        mut runs: impl FnMut(u32) -> Run,
        mut allow: impl FnMut(TokenId),
    ) {
        let from = self.normalized(from);
        let mut states = vec![start; self.max_depth + 1];
        // Characters on `from`'s path, per depth (Run::OFF_PATH once it left).
        let mut chars = vec![if from.groups == 0 { Run::OFF_PATH } else { 0 }; self.max_depth + 1];
        let nodes = &self.nodes;
        let end = nodes.len() - 1;
        let mut i = 0;
        while i < end {
            let node = nodes[i];
            let depth = usize::from(node.depth);
            let c = from.path_chars(chars[depth - 1], node.byte);
            if from.covers_from(c, self.below[i], self.height[i]) {
                i = node.next as usize;
                continue;
            }
            let s = next(states[depth - 1], node.byte);
            if s == dead {
                i = node.next as usize;
                continue;
            }
            states[depth] = s;
            chars[depth] = c;
            for &t in &self.tokens[node.tok_start as usize..nodes[i + 1].tok_start as usize] {
                allow(t);
            }
            if node.next as usize - i > Self::SKIP_MIN_NODES
                && runs(s).covers(self.below[i], self.height[i])
            {
                for &t in self.subtree_tokens(i) {
                    allow(t);
                }
                i = node.next as usize;
                continue;
            }
            i += 1;
        }
    }

    /// `run` with a count no token can reach made a loop, so that runs differing only there
    /// share one [`Trie::run_tokens`] set.
    pub(crate) fn normalized(&self, run: Run) -> Run {
        if run.len >= self.max_chars && self.max_chars < Run::UNBOUNDED {
            Run {
                groups: run.groups,
                len: Run::UNBOUNDED,
            }
        } else {
            run
        }
    }

    /// The tokens `run` takes from the start of a [`Trie::walk`]: those in the subtrees the
    /// walk leaves out for it (every character from the run's groups, at most `len` of them,
    /// the whole path UTF-8), as mask words (`words` of them, bit `t % 32` of word `t / 32`).
    /// Computed once per run and vocabulary, within [`RUN_TOKENS_CACHE_BYTES`].
    pub(crate) fn run_tokens(&self, run: Run, words: usize) -> Arc<[u32]> {
        let run = self.normalized(run);
        let cache = &self.run_tokens;
        if let Some(set) = cache
            .sets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&run)
        {
            return set.clone();
        }
        let mut set = vec![0u32; words];
        if run.groups != 0 {
            let mut chars = vec![0u16; self.max_depth + 1];
            let end = self.nodes.len() - 1;
            let mut i = 0;
            while i < end {
                let node = self.nodes[i];
                let depth = usize::from(node.depth);
                let c = run.path_chars(chars[depth - 1], node.byte);
                if c == Run::OFF_PATH {
                    i = node.next as usize;
                } else if run.covers_from(c, self.below[i], self.height[i]) {
                    self.tokens(i)
                        .iter()
                        .chain(self.subtree_tokens(i))
                        .for_each(|&t| set_bit(&mut set, t));
                    i = node.next as usize;
                } else {
                    chars[depth] = c;
                    i += 1;
                }
            }
        }
        let set: Arc<[u32]> = set.into();
        let bytes = words * 4;
        if cache.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes <= RUN_TOKENS_CACHE_BYTES {
            let mut sets = cache.sets.lock().unwrap_or_else(|e| e.into_inner());
            let kept = sets.entry(run).or_insert_with(|| set.clone()).clone();
            if !Arc::ptr_eq(&kept, &set) {
                // Another caller stored it first.
                cache.bytes.fetch_sub(bytes, Ordering::Relaxed);
            }
            kept
        } else {
            cache.bytes.fetch_sub(bytes, Ordering::Relaxed);
            set
        }
    }

    /// Subtrees of more nodes than this are worth a [`Run`] test in [`Trie::walk`]; below
    /// it, visiting is as cheap as testing.
    const SKIP_MIN_NODES: usize = 8;

    /// The [`Run`] of automaton state `t`. `next` must keep `dead` dead; `class(b)` groups
    /// bytes that `next` treats alike (each byte its own class is correct, only slower);
    /// `may_live(s)` holds every group none of whose characters `next` kills at `s` (more is
    /// correct, only slower: `u64::MAX` reads every group), see [`Trie::groups_within`].
    /// `known(s)` returns runs computed before (`t`'s own, when known, comes straight back)
    /// and `store` records the ones computed here (a state may be stored again: keeping
    /// the first is right); `through(s)` the runs a state takes through the calls it makes,
    /// which its own characters do not show (see [`Trie::loop_groups`]); `memo` keeps the
    /// states' successors for the next call on the same automaton.
    ///
    /// Two shapes are looked for, and the one taking more of the common groups is kept:
    /// a counted stretch is a chain of states, each one's run one longer than its
    /// successor's, so a chain of 40 costs one successor computation per state, once; and a
    /// loop through several states (an unanchored `[0-9a-f]{40}` inside a string, whose
    /// states count the hex digits seen but all take any string character) is a set of
    /// groups that no state reachable over them dies on.
    // The automaton (`next`, `class`, `dead`), the runs table (`known`, `through`, `store`)
    // and the memo are separate borrows of the caller's own structures.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn run(
        t: u32,
        dead: u32,
        next: impl Fn(u32, u8) -> u32,
        class: impl Fn(u8) -> u8,
        may_live: impl Fn(u32) -> u64,
        known: impl Fn(u32) -> Option<Run>,
        through: impl Fn(u32) -> Option<Run>,
        mut store: impl FnMut(u32, Run),
        memo: &mut RunMemo,
    ) -> Run {
        if let Some(r) = known(t) {
            return r;
        }
        if memo.representatives.is_none() {
            memo.representatives = Some(Representatives::new(&class));
        }
        let reps = memo.representatives.as_ref().expect("just computed");
        let mut succs = |s: u32| -> std::rc::Rc<GroupSuccessors> {
            memo.successors
                .entry(s)
                .or_insert_with(|| {
                    std::rc::Rc::new(Self::successors(
                        s,
                        dead,
                        &next,
                        &class,
                        may_live(s),
                        reps,
                        &mut memo.continuations,
                    ))
                })
                .clone()
        };
        // Follow the chain of single successors to a state whose run is known, a loop, a
        // state without one, or 255 states; then fill the runs in backwards (every chain
        // state but `t`, whose run may still be the loop's).
        let mut chain: Vec<(u32, u64)> = Vec::new();
        let mut s = t;
        let mut tail = loop {
            if s != t {
                if let Some(r) = known(s) {
                    break r;
                }
            }
            let (groups, succ) = succs(s).single();
            if groups == 0 {
                break Run::NONE;
            }
            if succ == s {
                break Run {
                    groups,
                    len: Run::UNBOUNDED,
                };
            }
            chain.push((s, groups));
            // A cycle of several states, or a chain too long to count: the successor is
            // taken to absorb nothing, which only shortens the runs.
            if chain.len() == usize::from(u8::MAX) || chain.iter().any(|&(c, _)| c == succ) {
                break Run::NONE;
            }
            s = succ;
        };
        // `chain[0]` is `t` (an empty chain: `t` loops on its groups or has none).
        while chain.len() > 1 {
            let (c, groups) = chain.pop().expect("more than one state");
            tail = tail.after_one(groups);
            // A chain state whose characters take a common group this run lacks is left to
            // its own turn, where a loop search may find the group (the first position of a
            // key that must differ from a listed one: its letters lead two ways).
            if !Self::loop_may_beat(succs(c).live, tail) {
                store(c, tail);
            }
        }
        let own = chain
            .pop()
            .map_or(tail, |(_, groups)| tail.after_one(groups));
        let r = Self::better_by_loop(
            t,
            own,
            &through,
            &mut succs,
            &mut store,
            &mut memo.crowded,
            &mut memo.search_left,
        );
        store(t, r);
        r
    }

    /// The groups most tokens are made of: a run without them takes few subtrees.
    const COMMON_GROUPS: u64 = (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7);

    /// How many of the [`Trie::COMMON_GROUPS`] `groups` holds.
    fn common(groups: u64) -> u32 {
        (groups & Self::COMMON_GROUPS).count_ones()
    }

    /// Whether a loop search from a state taking `live` may find a run better than `run`:
    /// only a common group the state takes but `run` does not can make it better.
    fn loop_may_beat(live: u64, run: Run) -> bool {
        live & Self::COMMON_GROUPS & !run.groups != 0
    }
    /// A loop run looks at this many states at most (an unanchored `[a-z]{162}` inside a
    /// string is ~330 DFA states: each count, before and after a match).
    const LOOP_STATES: usize = 1024;

    /// `chained`, or `t`'s loop run (see [`Trie::run`]) when that takes more of the
    /// [`Trie::COMMON_GROUPS`], or as many and every group `chained` takes.
    fn better_by_loop(
        t: u32,
        chained: Run,
        through: &impl Fn(u32) -> Option<Run>,
        succs: &mut impl FnMut(u32) -> std::rc::Rc<GroupSuccessors>,
        store: &mut impl FnMut(u32, Run),
        crowded: &mut HashSet<u32>,
        search_left: &mut u64,
    ) -> Run {
        if crowded.contains(&t) || *search_left == 0 {
            return chained;
        }
        let live = succs(t).live;
        if !Self::loop_may_beat(live, chained) {
            return chained;
        }
        let (groups, reached) = match Self::loop_groups(t, live, through, succs, search_left) {
            Ok(found) => found,
            Err(crowd) => {
                // A search from one of these would likely meet as many states again.
                crowded.extend(crowd);
                return chained;
            }
        };
        let common = Self::common;
        let wins = common(groups) > common(chained.groups)
            || (common(groups) == common(chained.groups)
                && groups & chained.groups == chained.groups);
        if !wins {
            return chained;
        }
        let r = Run {
            groups,
            len: Run::UNBOUNDED,
        };
        // The states reached stay within `reached` too: the same run is theirs.
        for u in reached {
            if u != t {
                store(u, r);
            }
        }
        r
    }

    /// Groups `G` (within `live`, the groups `t` takes) such that every state reachable
    /// from `t` over characters of `G` takes all of `G`: start from `live`, and whenever
    /// the search meets a state that dies on some group of `G`, drop the group of the
    /// character that led there and search again. `G` and the states reached, or the
    /// states reached when they pass [`Trie::LOOP_STATES`] (none when no group is left or
    /// `search_left`, charged one unit per successor pair examined, runs out: each restart
    /// searches again, so a search is up to 64 times [`Trie::LOOP_STATES`] states).
    ///
    /// A state with a loop run `through` the calls it makes takes that run's groups: its
    /// characters are its callee's, so its own are none. It is not entered (every string
    /// over those groups keeps it alive), and where it lacks some of `G`, `G` keeps only what
    /// it takes when that keeps more of the common groups than dropping the entering group.
    /// A key that must differ from the listed ones (`"a" ([^"b\] ...) rest`) hands its
    /// characters to the string rule after each position: searched on own characters, every
    /// position before that lost the letters, and its first mask walked the whole
    /// vocabulary (~1.5 ms at 49k tokens for each position of each listed key of an object
    /// with extra keys, ~20 us with the letters).
    fn loop_groups(
        t: u32,
        live: u64,
        through: &impl Fn(u32) -> Option<Run>,
        succs: &mut impl FnMut(u32) -> std::rc::Rc<GroupSuccessors>,
        search_left: &mut u64,
    ) -> Result<(u64, Vec<u32>), Vec<u32>> {
        let mut groups = live;
        'search: while groups != 0 {
            let mut seen = HashSet::default();
            seen.insert(t);
            let mut queue = vec![t];
            let mut k = 0;
            while k < queue.len() {
                let u = queue[k];
                k += 1;
                let from = succs(u);
                let cost = from.pairs.len() as u64 + 1;
                if *search_left < cost {
                    *search_left = 0;
                    return Err(Vec::new());
                }
                *search_left -= cost;
                for &(g, v) in &from.pairs {
                    let bit = 1u64 << g;
                    if groups & bit == 0 || seen.contains(&v) {
                        continue;
                    }
                    if let Some(r) = through(v).filter(|r| r.len == Run::UNBOUNDED && v != t) {
                        if r.groups & groups == groups {
                            continue;
                        }
                        groups = if Self::common(groups & r.groups) > Self::common(groups & !bit) {
                            groups & r.groups
                        } else {
                            groups & !bit
                        };
                        continue 'search;
                    }
                    if succs(v).live & groups != groups {
                        // `v` dies on a group of `groups`: stop entering it.
                        groups &= !bit;
                        continue 'search;
                    }
                    seen.insert(v);
                    queue.push(v);
                    if queue.len() > Self::LOOP_STATES {
                        return Err(queue);
                    }
                }
            }
            return Ok((groups, queue));
        }
        Err(Vec::new())
    }

    /// The groups whose every character (its whole UTF-8 sequence) takes automaton state
    /// `t` to a state where `done` holds (see [`Trie::run`] for `next`, `dead`, `class`,
    /// and `may_live`, here `t`'s).
    pub(crate) fn groups_to(
        t: u32,
        dead: u32,
        next: impl Fn(u32, u8) -> u32,
        class: impl Fn(u8) -> u8,
        may_live: u64,
        done: impl Fn(u32) -> bool,
    ) -> u64 {
        let reps = Representatives::new(&class);
        let succ = Self::successors(
            t,
            dead,
            &next,
            &class,
            may_live,
            &reps,
            &mut Continuations::default(),
        );
        let not_done = succ
            .pairs
            .iter()
            .filter(|&&(_, n)| !done(n))
            .fold(0u64, |a, &(g, _)| a | 1 << g);
        succ.live & !not_done
    }

    /// The groups all of whose first bytes are in `bytes`: at a state that takes no byte
    /// outside `bytes`, the groups that may keep it alive ([`Trie::run`]'s `may_live`).
    pub(crate) fn groups_within(bytes: &crate::grammar::BitSet256) -> u64 {
        static GROUP_BYTES: std::sync::OnceLock<[(u64, [u64; 4]); 61]> = std::sync::OnceLock::new();
        let group_bytes = GROUP_BYTES.get_or_init(|| {
            let mut out = [(0u64, [0u64; 4]); 61];
            for b in 0..=255u8 {
                let g = Self::byte_group(b);
                if g != 0 {
                    let e = &mut out[g.trailing_zeros() as usize];
                    e.0 = g;
                    e.1[usize::from(b >> 6)] |= 1 << (b & 63);
                }
            }
            out
        });
        group_bytes
            .iter()
            .filter(|(_, set)| (0..4).all(|w| bytes.0[w] & set[w] == set[w]))
            .fold(0, |a, &(g, _)| a | g)
    }

    /// Per character group, where the characters of `t` lead; see [`GroupSuccessors`].
    /// `reps`: [`Representatives`] of `class`. Only the groups in `may_live` are read (the
    /// others are taken as dying): a key's letters, a literal's bytes take one or two groups
    /// at most, and reading every representative at each of a schema grammar's states was
    /// ~17 % of a small grammar-backed compile.
    fn successors(
        t: u32,
        dead: u32,
        next: &impl Fn(u32, u8) -> u32,
        class: &impl Fn(u8) -> u8,
        may_live: u64,
        reps: &Representatives,
        memo: &mut Continuations,
    ) -> GroupSuccessors {
        if may_live == 0 {
            return GroupSuccessors::new(0, Vec::new());
        }
        let (mut seen, mut died) = (0u64, 0u64);
        let mut pairs: Vec<(u8, u32)> = Vec::new();
        // Per group, the first state paired with it: the bytes of a group mostly lead to one
        // state, and scanning the pairs for each of the 128 ASCII bytes was ~40 % of this.
        let mut first = [dead; 64];
        let mut add = |bit: u64, n: u32, pairs: &mut Vec<(u8, u32)>| {
            seen |= bit;
            if n == dead {
                died |= bit;
            } else {
                let g = bit.trailing_zeros() as u8;
                let known = &mut first[usize::from(g)];
                if *known == dead {
                    *known = n;
                    pairs.push((g, n));
                } else if *known != n && !pairs.contains(&(g, n)) {
                    pairs.push((g, n));
                }
            }
        };
        for &(group, b) in &reps.ascii {
            if group & may_live != 0 {
                add(group, next(t, b), &mut pairs);
            }
        }
        // Every state the byte sequences of `ranges` (one byte per class) lead to from
        // `s`, into `out`; false when one dies or there are more than ENDS (the group is
        // then taken as not live, which only shortens runs).
        const ENDS: usize = 16;
        const CONTINUATION: (u8, u8) = (0x80, 0xbf);
        fn ends(
            s: u32,
            dead: u32,
            ranges: &[(u8, u8)],
            next: &impl Fn(u32, u8) -> u32,
            class: &impl Fn(u8) -> u8,
            out: &mut Vec<u32>,
            memo: &mut Continuations,
        ) -> bool {
            if s == dead {
                return false;
            }
            if ranges.is_empty() {
                if !out.contains(&s) {
                    out.push(s);
                }
                return out.len() <= ENDS;
            }
            if ranges.iter().all(|&r| r == CONTINUATION) {
                let key = (s, ranges.len());
                if !memo.contains_key(&key) {
                    let mut own = Vec::new();
                    let ok = walk(s, dead, ranges, next, class, &mut own, memo);
                    memo.insert(key, ok.then_some(own));
                }
                let Some(reached) = &memo[&key] else {
                    return false;
                };
                for &n in reached {
                    if !out.contains(&n) {
                        out.push(n);
                    }
                }
                return out.len() <= ENDS;
            }
            walk(s, dead, ranges, next, class, out, memo)
        }
        /// [`ends`] over the first range's bytes (`ranges` is not empty), one per class.
        fn walk(
            s: u32,
            dead: u32,
            ranges: &[(u8, u8)],
            next: &impl Fn(u32, u8) -> u32,
            class: &impl Fn(u8) -> u8,
            out: &mut Vec<u32>,
            memo: &mut Continuations,
        ) -> bool {
            let ((lo, hi), more) = (ranges[0], &ranges[1..]);
            let mut classes = [0u64; 4];
            (lo..=hi).all(|b| {
                let c = usize::from(class(b));
                let bit = 1u64 << (c % 64);
                let seen = classes[c / 64] & bit != 0;
                classes[c / 64] |= bit;
                seen || ends(next(s, b), dead, more, next, class, out, memo)
            })
        }
        let mut out = Vec::new();
        // Leads of one length mostly reach one state: its ends are found once (the last).
        let mut last: Option<(u32, (u8, u8), usize, bool)> = None;
        for &(group, lead) in &reps.leads {
            if group & may_live == 0 {
                continue;
            }
            let Some((second, k)) = Self::utf8_second(lead) else {
                continue;
            };
            let mut ranges = [(0x80, 0xbf); 3];
            ranges[0] = second;
            let after = next(t, lead);
            let ok = match last {
                Some((s, r, n, ok)) if (s, r, n) == (after, second, k) => ok,
                _ => {
                    out.clear();
                    let ok = ends(after, dead, &ranges[..k], next, class, &mut out, memo);
                    last = Some((after, second, k, ok));
                    ok
                }
            };
            if ok {
                for &n in &out {
                    add(group, n, &mut pairs);
                }
            } else {
                add(group, dead, &mut pairs);
            }
        }
        let live = seen & !died;
        pairs.retain(|&(g, _)| live & (1 << g) != 0);
        GroupSuccessors::new(live, pairs)
    }

    /// The token with the longest bytes that are a prefix of `text` (lowest id among equals).
    pub(crate) fn longest_prefix(&self, text: &[u8]) -> Option<(TokenId, usize)> {
        let mut best = None;
        self.prefixes(text, |id, len| best = Some((id, len)));
        best
    }

    /// Calls `f(token, length)` for each length at which a prefix of `text` is a token
    /// (the lowest id among equals), shortest first.
    pub(crate) fn prefixes(&self, text: &[u8], mut f: impl FnMut(TokenId, usize)) {
        let nodes = &self.nodes;
        let (mut first_child, mut end) = (0, nodes.len() - 1);
        for (depth, &byte) in text.iter().enumerate() {
            let mut j = first_child;
            while j < end && nodes[j].byte != byte {
                j = nodes[j].next as usize;
            }
            if j >= end {
                break;
            }
            let (start, stop) = (nodes[j].tok_start as usize, nodes[j + 1].tok_start as usize);
            if start < stop {
                f(self.tokens[start], depth + 1);
            }
            first_child = j + 1;
            end = nodes[j].next as usize;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trie(tokens: &[&[u8]]) -> Trie {
        let mut bytes = Vec::new();
        let mut offsets = vec![0];
        for t in tokens {
            bytes.extend_from_slice(t);
            offsets.push(bytes.len());
        }
        Trie::build(&bytes, &offsets, &vec![TokenKind::Text; tokens.len()]).unwrap()
    }

    /// `single_of` against its definition, tried group by group: the state most whole groups
    /// lead to (every pair of the group goes there), lowest on a tie.
    #[test]
    fn single_successor_is_the_one_most_whole_groups_lead_to() {
        let mut rng = crate::test_rng::XorShift::new(0x2545_F491_4F6C_DD1Du64);
        let mut rand = move |n: u64| rng.below(n);
        for _ in 0..2000 {
            let groups = 1 + rand(64);
            // A few states, as most rows lead to, or many.
            let most = if rand(2) == 0 { 6 } else { 20 };
            let states = 1 + rand(most) as u32;
            let pairs: Vec<(u8, u32)> = (0..rand(90))
                .map(|_| (rand(groups) as u8, rand(u64::from(states)) as u32))
                .collect();
            let whole = |n: u32| {
                (0..64u8)
                    .filter(|&g| {
                        let to: Vec<u32> = pairs.iter().filter(|p| p.0 == g).map(|p| p.1).collect();
                        !to.is_empty() && to.iter().all(|&m| m == n)
                    })
                    .fold(0u64, |a, g| a | 1 << g)
            };
            let mut want = (0u64, u32::MAX);
            for n in 0..states {
                let g = whole(n);
                if g.count_ones() > want.0.count_ones() {
                    want = (g, n);
                }
            }
            assert_eq!(GroupSuccessors::single_of(&pairs), want, "{pairs:?}");
        }
    }

    /// Reading one byte per [`Representatives`] entry gives the successors that reading
    /// every byte gives, on random automata over random byte classes (classes that split
    /// groups, continuation bytes that die or diverge); so does reading only the groups
    /// [`Trie::groups_within`] the state's live first bytes.
    #[test]
    fn representative_bytes_give_the_successors_of_every_byte() {
        let mut rng = crate::test_rng::XorShift::new(0x9E37_79B9_7F4A_7C15u64);
        let mut rand = move |n: u64| rng.below(n);
        let every = Representatives {
            ascii: (0..=0x7fu8).map(|b| (Trie::byte_group(b), b)).collect(),
            leads: (0xc2..=0xf4u8).map(|b| (Trie::byte_group(b), b)).collect(),
        };
        for _ in 0..300 {
            let n_classes = 1 + rand(40) as u8;
            // Classes as runs of bytes, as an automaton's are.
            let mut classes = [0u8; 256];
            let mut c = 0u8;
            for b in classes.iter_mut() {
                if rand(6) == 0 {
                    c = (c + 1) % n_classes;
                }
                *b = c;
            }
            let states = 2 + rand(8) as u32;
            // State 0 is dead, and rare: a character's every byte must stay alive for its
            // group to count.
            // Most bytes keep the state, so that the states a character reaches depend on
            // which of its bytes it takes.
            let table: Vec<u32> = (0..states * u32::from(n_classes))
                .map(|i| match rand(50) {
                    0 => 0,
                    1..=35 => i / u32::from(n_classes),
                    _ => 1 + rand(u64::from(states - 1)) as u32,
                })
                .collect();
            let class = |b: u8| classes[usize::from(b)];
            let next =
                |s: u32, b: u8| table[(s * u32::from(n_classes) + u32::from(class(b))) as usize];
            let reps = Representatives::new(&class);
            for t in 1..states {
                let succ = |may_live: u64, reps: &Representatives| {
                    let s = Trie::successors(
                        t,
                        0,
                        &next,
                        &class,
                        may_live,
                        reps,
                        &mut Continuations::default(),
                    );
                    (s.live, s.pairs)
                };
                let want = succ(u64::MAX, &every);
                assert_eq!(succ(u64::MAX, &reps), want);
                // Only the groups whose first bytes all live at `t` read: the same.
                let mut first = crate::grammar::BitSet256::default();
                for b in 0..=255u8 {
                    if next(t, b) != 0 {
                        first.insert(b);
                    }
                }
                assert_eq!(succ(Trie::groups_within(&first), &reps), want);
            }
        }
    }

    #[test]
    fn walk_without_pruning_reports_every_token_once() {
        let t = trie(&[b"b", b"ab", b"a", b"abc", b"ab", b"ba"]);
        assert_eq!(t.node_count(), 5); // a, ab, abc, b, ba
        let mut seen = Vec::new();
        t.walk(1, 0, |s, _| s, Run::NONE, |_| Run::NONE, |id| seen.push(id));
        seen.sort();
        assert_eq!(seen, vec![0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn walk_prunes_dead_subtrees() {
        let t = trie(&[b"b", b"ab", b"a", b"abc", b"ac"]);
        // An automaton for "ab*": state 1 --a--> 2 --b--> 2, anything else dead (0).
        let next = |s: u32, b: u8| match (s, b) {
            (1, b'a') => 2,
            (2, b'b') => 2,
            _ => 0,
        };
        let mut seen = Vec::new();
        t.walk(1, 0, next, Run::NONE, |_| Run::NONE, |id| seen.push(id));
        seen.sort();
        assert_eq!(seen, vec![1, 2]);
    }

    #[test]
    fn below_summarizes_character_groups_and_utf8_validity() {
        let e = "é".as_bytes();
        let t = trie(&[
            b"a",
            b"ab",
            b"a\"",
            &[b'a', e[0]],
            b"b",
            b"bz9",
            &[b'c', 0xff],
            e,
        ]);
        // Preorder: a, a", ab, a\xc3, b, bz, bz9, c, c\xff, \xc3, \xc3\xa9.
        let g = Trie::byte_group;
        assert_eq!(t.below(0), g(b'"') | g(b'b') | g(0xc3));
        assert_eq!(t.below(4), g(b'z') | g(b'9'));
        assert_eq!(t.below(7), Trie::GROUP_BAD);
        // Inside a character: not a boundary.
        assert_eq!(t.below(9), Trie::GROUP_BAD);
        assert_eq!(t.subtree_tokens(4), &[5]);
        assert_eq!(t.subtree_tokens(0).len(), 3);
        // Multi-byte groups: U+0080–U+00BF alone, the other 2-byte leads together, each
        // 3-byte lead alone, the 4-byte leads together; all distinct from BAD.
        assert_ne!(g(0xc2), g(0xc3));
        assert_eq!(g(0xc3), g(0xdf));
        assert_ne!(g(0xe2), g(0xe3));
        assert_eq!(g(0xf0), g(0xf4));
        let all = (0..=0xf4u8).fold(0u64, |a, b| a | g(b));
        assert_eq!(all.count_ones(), 60);
        assert_eq!(all & Trie::GROUP_BAD, 0);
    }

    /// Every text of 1 to 4 pieces over loop characters (ASCII and 2-, 3- and 4-byte), and of
    /// 1 or 2 pieces also over loop enders and a split character: subtrees of every shape,
    /// pure ones from the second character on (~2.9k tokens).
    fn deep_trie() -> Trie {
        let plain: [&[u8]; 7] = [
            b"a",
            b"b",
            b" ",
            b"0",
            "\u{e9}".as_bytes(),
            "\u{20ac}".as_bytes(),
            "\u{1f600}".as_bytes(),
        ];
        let enders: [&[u8]; 3] = [b"\"", b"\\", &[0xe2, 0x82]];
        let mixed: Vec<&[u8]> = plain.iter().chain(&enders).copied().collect();
        let mut all = Vec::new();
        for (pieces, most) in [(&plain[..], 4), (&mixed[..], 2)] {
            let mut tokens: Vec<Vec<u8>> = vec![Vec::new()];
            for _ in 0..most {
                tokens = tokens
                    .iter()
                    .flat_map(|t| pieces.iter().map(move |p| [t.as_slice(), p].concat()))
                    .collect();
                all.extend(tokens.iter().cloned());
            }
        }
        all.push(b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa".to_vec());
        let refs: Vec<&[u8]> = all.iter().map(Vec::as_slice).collect();
        trie(&refs)
    }

    #[test]
    fn walks_that_take_subtrees_by_runs_allow_exactly_what_full_walks_do() {
        use crate::regex::{Dfa, DEAD};
        use std::cell::{Cell, RefCell};
        let t = deep_trie();
        let words = t.tokens.len().div_ceil(32);
        let (mut skipped, mut taken_by_set) = (0, 0);
        for pattern in [
            r#""[^"\\]*""#,
            r#""([^"\\]|\\.){0,6}"x"#,
            r#""[^"\\]{2,9}"(,"[a-z ]{0,3}")?"#,
            r#""[^"\\]{0,3}""#,
            r#"[^"]{1,4}"\\"#,
            "[ab ]{0,7}0",
            "(ab){0,5}[^a]{1,4}",
            ".{0,3}a",
            "[a\u{e9}\u{20ac} ]{1,12}",
            // Unanchored patterns inside a string: loops through several states.
            r#""([^"\\]|\\.)*(0a|b0){2}([^"\\]|\\.)*""#,
            r#""[^"\\]*a[0b]{3}[^"\\]*"(,"x")?"#,
            "(a|b0|\u{e9} )*(ab){0,2}\"",
        ] {
            let dfa = Dfa::new(pattern).unwrap();
            let memo = RefCell::new(HashMap::default());
            let succ_memo = RefCell::new(RunMemo::default());
            let nexts = Cell::new(0usize);
            let next = |s: u32, b: u8| {
                nexts.set(nexts.get() + 1);
                dfa.next(s, b)
            };
            let runs = |s: u32| {
                Trie::run(
                    s,
                    DEAD,
                    |s, b| dfa.next(s, b),
                    |b| dfa.byte_class(b),
                    |_| u64::MAX,
                    |x| memo.borrow().get(&x).copied(),
                    |_| None,
                    |x, r| {
                        memo.borrow_mut().entry(x).or_insert(r);
                    },
                    &mut succ_memo.borrow_mut(),
                )
            };
            // Every live state, breadth first over bytes.
            let mut states = vec![dfa.start()];
            let mut k = 0;
            while k < states.len() {
                for b in 0..=255u8 {
                    let n = dfa.next(states[k], b);
                    if n != DEAD && !states.contains(&n) {
                        states.push(n);
                    }
                }
                k += 1;
            }
            for &s in &states {
                let (mut full, mut fast) = (Vec::new(), Vec::new());
                nexts.set(0);
                t.walk(s, DEAD, next, Run::NONE, |_| Run::NONE, |id| full.push(id));
                let visited = nexts.get();
                nexts.set(0);
                t.walk(s, DEAD, next, Run::NONE, runs, |id| fast.push(id));
                if nexts.get() < visited {
                    skipped += 1;
                }
                full.sort_unstable();
                fast.sort_unstable();
                assert_eq!(full, fast, "{pattern:?} at state {s}");
                // From the state's own run: the walk plus the run's shared set.
                let from = runs(s);
                let set = t.run_tokens(from, words);
                let mut joined: Vec<u32> = (0..words as u32 * 32)
                    .filter(|&id| set[id as usize / 32] & (1 << (id % 32)) != 0)
                    .collect();
                nexts.set(0);
                t.walk(s, DEAD, next, from, runs, |id| joined.push(id));
                if from.groups != 0 && nexts.get() < visited {
                    taken_by_set += 1;
                }
                joined.sort_unstable();
                joined.dedup();
                assert_eq!(
                    full, joined,
                    "{pattern:?} at state {s} from its run {from:?}"
                );
            }
        }
        assert!(skipped > 10, "subtrees were taken whole in {skipped} walks");
        assert!(
            taken_by_set > 10,
            "a run's set took subtrees in {taken_by_set} walks"
        );
    }

    /// The run of `s` in `dfa`, computed from nothing.
    fn fresh_run(dfa: &crate::regex::Dfa, s: u32) -> Run {
        Trie::run(
            s,
            crate::regex::DEAD,
            |s, b| dfa.next(s, b),
            |b| dfa.byte_class(b),
            |_| u64::MAX,
            |_| None,
            |_| None,
            |_, _| {},
            &mut RunMemo::default(),
        )
    }

    #[test]
    fn runs_count_the_characters_left_in_a_counted_stretch() {
        use crate::regex::Dfa;
        // Four character groups against one: the stretch's successor is the one to follow.
        let dfa = Dfa::new("[a-zA-Z0-9 \u{e9}]{0,5}!").unwrap();
        let run = |s: u32| fresh_run(&dfa, s);
        let lower = Trie::byte_group(b'a');
        let mut s = dfa.start();
        for left in (1..=5u8).rev() {
            let r = run(s);
            assert_eq!(r.len, left);
            assert_eq!(r.groups & lower, lower);
            assert_eq!(r.groups & Trie::byte_group(b'!'), 0);
            s = dfa.walk(s, "\u{e9}".as_bytes());
        }
        let end = Run {
            groups: Trie::byte_group(b'!'),
            len: 1,
        };
        assert_eq!(run(s), end);
        let looping = Dfa::new("[^!]*!").unwrap();
        assert_eq!(fresh_run(&looping, looping.start()).len, Run::UNBOUNDED);
    }

    #[test]
    fn loop_runs_take_every_character_an_unanchored_pattern_allows() {
        use crate::regex::Dfa;
        // Inside the string the states count the hex digits seen, so no character group
        // has one successor; every string character but the backslash (its escape state
        // takes few) keeps every state alive, and the quote only after the match.
        let dfa = Dfa::new(r#""[^"\\]*[0-9a-f]{4}[^"\\]*"(,|\})"#).unwrap();
        let g = Trie::byte_group;
        let inside = g(b'a') | g(b'A') | g(b'0') | g(b' ') | g(0xc3) | g(0xe2);
        for text in ["\"", "\"x", "\"ab", "\"abc1", "\"abc12", "\"abc12z"] {
            let r = fresh_run(&dfa, dfa.walk(dfa.start(), text.as_bytes()));
            assert_eq!(r.len, Run::UNBOUNDED, "{text}");
            assert_eq!(r.groups & inside, inside, "{text}");
            assert_eq!(r.groups & (g(b'"') | g(b'\\')), 0, "{text}");
        }
    }
}
