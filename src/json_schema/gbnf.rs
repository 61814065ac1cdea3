//! A schema's language as grammar rules ([`Ast`]), built from the IR ([`Node`]) for the grammar
//! engine, whose text ([`Ast::to_gbnf`]) is the export for llama.cpp and remote servers: one
//! set of rules for both, so the exported grammar is the one that runs here.
//!
//! Repeated subtrees become one rule each ([`GBNF_SHARED_MIN_BYTES`]), long counted
//! repetitions chains or nested blocks of rules ([`Gbnf::repeat`]), an automaton leaf a rule
//! per state where paths meet ([`Gbnf::automaton`]), and a free-form value one recursive rule.

use super::node::{normalize, Node, Ranges};
use crate::grammar::{expr_len, Ast, Expr, Rule};
use crate::regex::{CharTransitions, Dfa};
use crate::slice_ids::SliceIds;
use rustc_hash::FxHashMap as HashMap;
use std::hash::BuildHasher;

impl Node {
    /// The rules of a grammar whose `root` accepts exactly this language: long counted
    /// repetitions as chains ([`GBNF_UPTO_CHAIN`]) unless those take more than
    /// [`GBNF_MAX_CHAIN_RULES`] rules, then as nested blocks. Every count stays within
    /// llama.cpp's repetition limit, so these are the rules to export ([`Node::to_gbnf`]).
    pub(crate) fn gbnf_rules(&self) -> Ast {
        self.gbnf_with(true, false)
            .unwrap_or_else(|| self.gbnf_rules_blocked())
    }

    /// [`Node::gbnf_rules`] as GBNF text.
    pub(crate) fn to_gbnf(&self) -> String {
        self.gbnf_rules().to_gbnf()
    }

    /// [`Node::gbnf_rules`] with every long counted repetition as nested blocks: fewer,
    /// larger rules than the chains, for when those pass an automaton limit.
    pub(crate) fn gbnf_rules_blocked(&self) -> Ast {
        self.gbnf_with(false, false)
            .expect("without chains there is no chain bound")
    }

    /// [`Node::gbnf_rules`] with every repetition past
    /// [`COUNTER_FROM`](crate::grammar::COUNTER_FROM) written as one count, which our grammar
    /// engine keeps as a counter: the local engine's grammar (llama.cpp expands counts,
    /// refusing them past 2,000). The shorter counts are chains, or nested blocks past the
    /// chains' rule bound, as in [`Node::gbnf_rules`].
    pub(crate) fn gbnf_rules_counted(&self) -> Ast {
        self.gbnf_with(true, true)
            .or_else(|| self.gbnf_with(false, true))
            .expect("without chains there is no chain bound")
    }

    /// The grammar, or None when its chains take more than [`GBNF_MAX_CHAIN_RULES`] rules.
    fn gbnf_with(&self, chains: bool, counters: bool) -> Option<Ast> {
        let mut g = Gbnf {
            // `root`'s body comes last: it refers to the rules made while writing it.
            rules: vec![Rule {
                name: "root".into(),
                at: 0,
                body: empty(),
            }],
            names: HashMap::default(),
            subtrees: Subtrees::new(),
            shared: HashMap::default(),
            chains,
            chain_rules: 0,
            counters,
            automata: HashMap::default(),
            any_json: None,
        };
        let root_id = g.subtrees.of(self);
        if let Some(k) = composite(root_id) {
            g.subtrees.uses[k] += 1;
        }
        // Subtrees met while rendering (the free-form value's rules) are not the schema's.
        g.subtrees.counted = true;
        let root = g.expr(self);
        if g.chain_rules > GBNF_MAX_CHAIN_RULES {
            return None;
        }
        g.rules[0].body = root;
        Some(Ast {
            rules: g.rules,
            root: 0,
            prebuilt: g.any_json,
        })
    }
}

/// A subexpression that occurs more than once is written once, as a rule, when its text is
/// at least this long: "any key but the listed ones" repeats the string tail after every
/// branch of its trie (100+ copies for six names), and a free-form value repeats in every
/// property that takes one, so a grammar engine (or llama.cpp) would otherwise build each
/// copy's states again. Shorter texts stay inline, where they cost less than a rule call.
const GBNF_SHARED_MIN_BYTES: usize = 48;

/// A subexpression that occurs more than once is also a rule when its text, with every
/// counted repetition written out, is at least this long: `"\"" char{0,25} "\""` is 26
/// bytes of GBNF but 25 copies of a JSON string character (~15 DFA states each) wherever it
/// is inlined. Nine such strings in one object took the grammar past the automaton limit
/// with the character inlined, so it compiled with a call per character, and each string
/// position's first mask cost ~12 ms (Github_medium o43971); as one rule per length, the
/// character stays inlined and each position is walked once for every property of that
/// length.
const GBNF_SHARED_EXPANDED_BYTES: usize = 256;

/// The GBNF text length of `n` with its counted repetitions written out (an estimate, for
/// [`GBNF_SHARED_EXPANDED_BYTES`]); stops counting past `cap`.
fn expanded_len(n: &Node, cap: usize) -> usize {
    let sum = |items: &mut dyn Iterator<Item = &Node>| {
        let mut total = 0usize;
        for i in items {
            total = total.saturating_add(expanded_len(i, cap));
            if total >= cap {
                break;
            }
        }
        total
    };
    match n {
        Node::Empty | Node::Nothing => 2,
        // A rule per state, ~16 bytes of text each at least.
        Node::Automaton(d) => d.state_count().saturating_mul(16).min(cap),
        Node::AnyJson => 8,
        Node::Lit(s) => s.len() + 2,
        Node::Class(r) => 2 + 8 * r.len(),
        Node::Concat(items) | Node::Alt(items) => sum(&mut items.iter()),
        Node::Repeat(item, min, max) => {
            let copies = max.unwrap_or(*min).max(*min).max(1) as usize;
            expanded_len(item, cap).saturating_mul(copies).min(cap)
        }
        Node::Seq { items, sep, .. } => {
            sum(&mut items.iter().map(|(i, _)| i).chain(std::iter::once(&**sep)))
        }
        Node::List { item, sep, max, .. } => {
            let copies = max.unwrap_or(1).max(1) as usize;
            sum(&mut [&**item, &**sep].into_iter())
                .saturating_mul(copies)
                .min(cap)
        }
    }
}

/// States an automaton's grammar writes inside one another (each reached from one place
/// only) before one gets a rule of its own: each level is a group, an alternation and a
/// sequence, so 24 levels stay well within the grammar's nesting bounds.
const GBNF_AUTOMATON_NESTING: usize = 24;

/// A counted repetition with a larger upper bound is written as nested blocks of
/// [`GBNF_BLOCK`] repetitions ([`Gbnf::repeat`]), so no rule holds more than this many copies
/// of its item: `maxLength: 32767` becomes four levels of blocks instead of 32,767 copies of
/// a string character (past llama.cpp's limit of 2000, ours of
/// [`MAX_GRAMMAR_REPETITION`](crate::limits::MAX_GRAMMAR_REPETITION), and 1 MiB of
/// automaton).
const GBNF_BLOCKED_REPEAT: u32 = 64;

/// Items per block in a long counted repetition.
const GBNF_BLOCK: u32 = 16;

/// An optional part of a counted repetition of at most this many [`GBNF_BLOCK`]s (1,039
/// items) is a chain of one rule per block ([`Gbnf::repeat`]); a longer one is nested
/// blocks, whose rule count grows with the logarithm instead. The whole grammar's bound,
/// [`GBNF_MAX_CHAIN_RULES`], is tighter: past 16 blocks (271 items) every count in the
/// schema is nested blocks.
const GBNF_UPTO_CHAIN: u32 = 64;

/// A schema whose chains would take more rules than this is written with nested blocks
/// only: on JSONSchemaBench, 104 of the 118 grammars with more than 32 chain rules passed
/// the automaton limit and compiled a second time as blocks (compile p99 59 -> 90 ms),
/// against 18 of 157 with at most 16.
const GBNF_MAX_CHAIN_RULES: usize = 16;

/// A subtree's identity: two subtrees get the same id exactly when they are equal
/// ([`Subtrees`]), so the maps below compare a number instead of walking the trees (the
/// derived `Hash` and `Eq` walk every node below: 1,000 listed keys, each followed by extra
/// keys whose names must avoid the 1,000 listed ones, took 16 s in release to hash, and
/// deep comparisons on every lookup were a fifth of a large schema's 2 ms rendering).
type Subtree = u32;

/// Hash-consing of a tree's subtrees: each node's id is computed once from its children's
/// (by address: a subtree shared through an `Arc` is read once however often it occurs).
/// A leaf is numbered by its content (a DFA by its table); a composite node by its kind,
/// its fields and its children's ids, written as one `u32` slice ([`Subtrees::shape`]) and
/// interned. Shapes as map keys (a vector of ids per node, hashed again whenever the map
/// grew) were 10 % of a median schema grammar's compile; this way it takes 4-5 % less. A
/// composite's id is even, a leaf's odd.
#[derive(Default)]
struct Subtrees<'a> {
    by_address: HashMap<*const Node, Subtree>,
    leaves: HashMap<&'a Node, Subtree>,
    composites: SliceIds,
    /// The shapes of the nodes being read, innermost last.
    pending: Vec<u32>,
    /// Per composite (its id / 2), how often it is the child of a distinct subtree (or the
    /// root, counted by the caller): a repeated subtree's children are counted once, as
    /// hoisting them again would only split what is already one rule. Leaves count nothing.
    uses: Vec<u32>,
    /// Set once the schema's tree is counted: later subtrees get ids, not uses.
    counted: bool,
}

/// A composite subtree's number among the composites; None for a leaf.
fn composite(id: Subtree) -> Option<usize> {
    (id & 1 == 0).then_some(id as usize / 2)
}

impl<'a> Subtrees<'a> {
    /// Room for a median schema grammar's tree (~460 nodes of ~100 shapes) before the maps
    /// grow: grown from empty, they rehashed eight times.
    fn new() -> Self {
        let mut t = Subtrees::default();
        t.by_address.reserve(512);
        t.leaves.reserve(64);
        t.composites.reserve(128);
        t
    }

    fn of(&mut self, n: &'a Node) -> Subtree {
        if let Some(&id) = self.by_address.get(&(n as *const Node)) {
            return id;
        }
        let base = self.pending.len();
        let id = match self.shape(n) {
            None => {
                let next = 2 * self.leaves.len() as Subtree + 1;
                *self.leaves.entry(n).or_insert(next)
            }
            Some(children) => {
                let new = self.composites.len() as u32;
                let k = self.composites.intern(&self.pending[base..]);
                if k == new {
                    self.uses.push(0);
                    if !self.counted {
                        for i in base + children..self.pending.len() {
                            if let Some(c) = composite(self.pending[i]) {
                                self.uses[c] += 1;
                            }
                        }
                    }
                }
                self.pending.truncate(base);
                2 * k
            }
        };
        self.by_address.insert(n as *const Node, id);
        id
    }

    /// Pushes a composite `n`'s shape onto `pending`: its kind and fields, then its
    /// children's ids; returns where the children start, from the shape's start. None for a
    /// leaf, which has no shape (it is numbered by its content).
    fn shape(&mut self, n: &'a Node) -> Option<usize> {
        let base = self.pending.len();
        let bound = |m: &Option<u32>| [u32::from(m.is_some()), m.unwrap_or(0)];
        let children = match n {
            Node::Empty
            | Node::Nothing
            | Node::AnyJson
            | Node::Lit(_)
            | Node::Class(_)
            | Node::Automaton(_) => return None,
            Node::Concat(items) | Node::Alt(items) => {
                self.pending.push(u32::from(matches!(n, Node::Alt(_))));
                let from = self.pending.len() - base;
                for i in items {
                    let c = self.of(i);
                    self.pending.push(c);
                }
                from
            }
            Node::Repeat(item, min, max) => {
                self.pending.extend([2, *min]);
                self.pending.extend(bound(max));
                let from = self.pending.len() - base;
                let c = self.of(item);
                self.pending.push(c);
                from
            }
            Node::Seq {
                items,
                sep,
                nonempty,
            } => {
                self.pending.extend([3, u32::from(*nonempty)]);
                self.pending
                    .extend(items.iter().map(|&(_, required)| u32::from(required)));
                let from = self.pending.len() - base;
                for (i, _) in items {
                    let c = self.of(i);
                    self.pending.push(c);
                }
                let c = self.of(sep);
                self.pending.push(c);
                from
            }
            Node::List {
                item,
                sep,
                min,
                max,
            } => {
                self.pending.extend([4, *min]);
                self.pending.extend(bound(max));
                let from = self.pending.len() - base;
                for x in [item, sep] {
                    let c = self.of(x);
                    self.pending.push(c);
                }
                from
            }
        };
        Some(children)
    }

    /// How often subtree `id` is a child of distinct subtrees (0 for a leaf).
    fn uses(&self, id: Subtree) -> u32 {
        composite(id).map_or(0, |k| self.uses[k])
    }
}

/// Rule-building state: hoisted rules, deduplicated by content.
struct Gbnf<'a> {
    /// `root` (index 0) and every rule made so far; a rule's name ends with its index.
    rules: Vec<Rule>,
    /// Rules made by [`Gbnf::rule`], by the hash of their bodies.
    names: HashMap<u64, Vec<usize>>,
    subtrees: Subtrees<'a>,
    /// The rules of subtrees that occur more than once.
    shared: HashMap<Subtree, Expr>,
    /// Optional parts of long counted repetitions as chains ([`GBNF_UPTO_CHAIN`]).
    chains: bool,
    /// Rules the chains made.
    chain_rules: usize,
    /// Repetitions past [`COUNTER_FROM`](crate::grammar::COUNTER_FROM) as one count.
    counters: bool,
    /// Each automaton's start ([`Gbnf::automaton`]), so an automaton used twice (one `$defs`
    /// string in several properties) is written once.
    automata: HashMap<&'a Dfa, Expr>,
    /// The rule of [`Node::AnyJson`], once made.
    any_json: Option<usize>,
}

/// The empty string.
fn empty() -> Expr {
    Expr::Literal(Vec::new())
}

/// `items` in order: nested sequences spliced in, empty strings left out.
fn seq(items: impl IntoIterator<Item = Expr>) -> Expr {
    let mut out = Vec::new();
    for x in items {
        match x {
            Expr::Seq(inner) => out.extend(inner),
            Expr::Literal(b) if b.is_empty() => {}
            x => out.push(x),
        }
    }
    match out.len() {
        0 => empty(),
        1 => out.pop().expect("one item"),
        _ => Expr::Seq(out),
    }
}

/// Any one of `alts`: nested alternations spliced in.
fn alt(alts: impl IntoIterator<Item = Expr>) -> Expr {
    let mut out = Vec::new();
    for x in alts {
        match x {
            Expr::Alt(inner) => out.extend(inner),
            x => out.push(x),
        }
    }
    match out.len() {
        // No alternative: no string.
        0 => Expr::Class {
            ranges: vec![(0, 0x10FFFF)],
            negated: true,
        },
        1 => out.pop().expect("one alternative"),
        _ => Expr::Alt(out),
    }
}

fn repeated(e: Expr, min: u32, max: Option<u32>) -> Expr {
    Expr::Repeat {
        expr: Box::new(e),
        min,
        max,
    }
}

fn class(r: &Ranges) -> Expr {
    Expr::Class {
        ranges: r
            .iter()
            .map(|&(a, b)| (u32::from(a), u32::from(b)))
            .collect(),
        negated: false,
    }
}

impl<'a> Gbnf<'a> {
    /// A rule named after `hint` with this body (an existing one when the body repeats).
    fn rule(&mut self, hint: &str, body: Expr) -> Expr {
        let key = self.names.hasher().hash_one(&body);
        if let Some(same) = self.names.get(&key) {
            if let Some(&i) = same.iter().find(|&&i| self.rules[i].body == body) {
                return Expr::Ref(i);
            }
        }
        let i = self.rules.len();
        self.rules.push(Rule {
            name: format!("{hint}{i}"),
            at: 0,
            body,
        });
        self.names.entry(key).or_default().push(i);
        Expr::Ref(i)
    }

    /// Whether `e`'s text is at least `bytes` long.
    fn text_reaches(&self, e: &Expr, bytes: usize) -> bool {
        expr_len(e, &self.rules, bytes) >= bytes
    }

    /// `n`'s expression; a subtree that occurs more than once with a long text becomes a
    /// rule ([`GBNF_SHARED_MIN_BYTES`], [`GBNF_SHARED_EXPANDED_BYTES`]), written once.
    fn expr(&mut self, n: &'a Node) -> Expr {
        let key = self.subtrees.of(n);
        if let Some(e) = self.shared.get(&key) {
            return e.clone();
        }
        let e = self.render(n);
        if self.subtrees.uses(key) > 1
            && (self.text_reaches(&e, GBNF_SHARED_MIN_BYTES)
                || expanded_len(n, GBNF_SHARED_EXPANDED_BYTES) >= GBNF_SHARED_EXPANDED_BYTES)
        {
            let r = self.rule("shared", e);
            self.shared.insert(key, r.clone());
            return r;
        }
        e
    }

    /// An automaton as a right-linear grammar over characters: for each state at a
    /// character boundary, alternatives of a character class (the characters whose UTF-8
    /// bytes lead to one target, [`Dfa::char_transitions`]) and the target; `""` where the
    /// state accepts. A state's loop on itself is a `*` before its exits, a target that
    /// accepts and goes nowhere is left out, and a target reached from one place only is
    /// written there in parentheses ([`GBNF_AUTOMATON_NESTING`] deep at most), so rules are
    /// the start and the states where paths meet. Only a cycle through several states makes
    /// rules recursive (a stack frame per round of the cycle here; llama.cpp keeps no frame
    /// for a call at the end of an alternative). Returns the start's expression.
    ///
    /// Each rule is a call in our grammar engine, a few states of its own: an automaton of a
    /// few thousand states where paths meet (a pattern times a length counter) passes
    /// [`GRAMMAR_AUTOMATON_BYTES`](crate::limits::GRAMMAR_AUTOMATON_BYTES) there.
    fn automaton(&mut self, d: &'a Dfa) -> Expr {
        if let Some(e) = self.automata.get(d) {
            return e.clone();
        }
        let n = d.state_count();
        // The states at character boundaries, breadth first from the start (a state inside a
        // multi-byte character has no transitions by character).
        let mut trans = Vec::new();
        let mut seen = vec![false; n];
        seen[d.index(d.start())] = true;
        let mut queue = vec![d.start()];
        while let Some(s) = queue.pop() {
            let t = d.char_transitions(s);
            for (target, _) in &t {
                if !std::mem::replace(&mut seen[d.index(*target)], true) {
                    queue.push(*target);
                }
            }
            trans.push((s, t));
        }
        trans.sort_by_key(|(s, _)| *s);
        let mut row = vec![usize::MAX; n];
        for (k, (s, _)) in trans.iter().enumerate() {
            row[d.index(*s)] = k;
        }
        let mut is_final = vec![false; n];
        let mut refs = vec![0u32; n];
        for (s, t) in &trans {
            is_final[d.index(*s)] = d.is_accepting(*s) && t.is_empty();
            for (target, _) in t {
                if target != s {
                    refs[d.index(*target)] += 1;
                }
            }
        }
        // A rule for the start and for every state reached from several places; a state
        // reached from one place is written there, in parentheses, up to a nesting depth.
        let start = d.index(d.start());
        let mut own_rule = vec![false; n];
        for (s, _) in &trans {
            let i = d.index(*s);
            own_rule[i] = !is_final[i] && (i == start || refs[i] != 1);
        }
        let mut roots: Vec<usize> = (0..n).filter(|&i| own_rule[i]).collect();
        while let Some(root) = roots.pop() {
            let mut stack = vec![(root, 0usize)];
            while let Some((i, depth)) = stack.pop() {
                for (target, _) in &trans[row[i]].1 {
                    let t = d.index(*target);
                    if t == i || own_rule[t] || is_final[t] {
                        continue;
                    }
                    if depth + 1 > GBNF_AUTOMATON_NESTING {
                        own_rule[t] = true;
                        roots.push(t);
                    } else {
                        stack.push((t, depth + 1));
                    }
                }
            }
        }
        // Number every rule before any body refers to it.
        let mut rule_of = vec![usize::MAX; n];
        for (s, _) in &trans {
            let i = d.index(*s);
            if own_rule[i] {
                rule_of[i] = self.rules.len();
                self.rules.push(Rule {
                    name: format!("dfa{}", self.rules.len()),
                    at: 0,
                    body: empty(),
                });
            }
        }
        // The expression of state `i`: its loop, then its exits.
        fn body(
            i: usize,
            d: &Dfa,
            trans: &[(u32, CharTransitions)],
            row: &[usize],
            is_final: &[bool],
            rule_of: &[usize],
        ) -> Expr {
            let (s, t) = &trans[row[i]];
            let mut own_loop = None;
            let mut alts = Vec::new();
            for (target, ranges) in t {
                let c = class(&normalize(ranges.clone()));
                let j = d.index(*target);
                if target == s {
                    own_loop = Some(c);
                } else if is_final[j] {
                    alts.push(c);
                } else if rule_of[j] != usize::MAX {
                    alts.push(seq([c, Expr::Ref(rule_of[j])]));
                } else {
                    alts.push(seq([c, body(j, d, trans, row, is_final, rule_of)]));
                }
            }
            if d.is_accepting(*s) {
                alts.push(empty());
            }
            let exits = alt(alts);
            match own_loop {
                None => exits,
                Some(l) if exits == empty() => repeated(l, 0, None),
                Some(l) => seq([repeated(l, 0, None), exits]),
            }
        }
        for (s, _) in &trans {
            let i = d.index(*s);
            if own_rule[i] {
                self.rules[rule_of[i]].body = body(i, d, &trans, &row, &is_final, &rule_of);
            }
        }
        let e = if is_final[start] {
            empty()
        } else {
            Expr::Ref(rule_of[start])
        };
        self.automata.insert(d, e.clone());
        e
    }

    /// `item{min,max}`; past [`GBNF_BLOCKED_REPEAT`], nested blocks of
    /// [`GBNF_BLOCK`] (see [`Gbnf::repeat`]).
    fn counted(&mut self, item: &'a Node, min: u32, max: Option<u32>) -> Expr {
        let mut a = self.expr(item);
        if max.unwrap_or(min) > GBNF_BLOCKED_REPEAT && self.text_reaches(&a, GBNF_SHARED_MIN_BYTES)
        {
            // Every block copies the item: one rule instead of `GBNF_BLOCK` copies.
            a = self.rule("repeated", a);
        }
        self.repeat(a, min, max)
    }

    /// `a{min,max}`, written so that no rule holds more than [`GBNF_BLOCKED_REPEAT`] copies
    /// of its item: `block ::= a{16}`, then `min` is `block{min / 16} a{min % 16}` and up to
    /// `r = 16 q + t` more are "fewer than `q` blocks, then fewer than 16 items" or "`q`
    /// blocks, then at most `t`" — each part again a repetition, of blocks. Each count has
    /// one split, so at most one wrong guess per nesting level is alive at a time (it dies
    /// within one block).
    fn repeat(&mut self, a: Expr, min: u32, max: Option<u32>) -> Expr {
        let most = max.unwrap_or(min);
        if most <= GBNF_BLOCKED_REPEAT || (self.counters && most > crate::grammar::COUNTER_FROM) {
            return match max {
                Some(0) => empty(),
                _ => repeated(a, min, max),
            };
        }
        let k = GBNF_BLOCK;
        let block = self.rule("block", repeated(a.clone(), k, Some(k)));
        let mut parts = Vec::new();
        for (x, lo, hi) in [
            (&block, min / k, Some(min / k)),
            (&a, min % k, Some(min % k)),
        ] {
            if hi != Some(0) {
                parts.push(self.repeat(x.clone(), lo, hi));
            }
        }
        match max {
            None => parts.push(repeated(a, 0, None)),
            Some(max) if max == min => {}
            Some(max) if self.chains && (max - min) / k <= GBNF_UPTO_CHAIN => {
                // Up to r = 16 q + t more: "fewer than 16, or 16 and then up to r - 16
                // more", innermost first. Each count has one parse, so a pushdown engine
                // keeps one head where the blocks below keep ~6 alive (a 255-character
                // string's masks took 2-3 ms).
                let r = max - min;
                let (q, t) = (r / k, r % k);
                let mut upto = match t {
                    0 => empty(),
                    t => repeated(a.clone(), 0, Some(t)),
                };
                for _ in 0..q {
                    let body = alt([
                        repeated(a.clone(), 0, Some(k - 1)),
                        seq([repeated(a.clone(), k, Some(k)), upto]),
                    ]);
                    let before = self.rules.len();
                    upto = self.rule("upto", body);
                    self.chain_rules += self.rules.len() - before;
                }
                parts.push(upto);
            }
            Some(max) => {
                let r = max - min;
                let (q, t) = (r / k, r % k);
                let mut alts = Vec::new();
                if q > 0 {
                    let fewer = self.repeat(block.clone(), 0, Some(q - 1));
                    alts.push(seq([fewer, repeated(a.clone(), 0, Some(k - 1))]));
                }
                let mut top = vec![self.repeat(block, q, Some(q))];
                if t > 0 {
                    top.push(repeated(a, 0, Some(t)));
                }
                alts.push(seq(top));
                let body = alt(alts);
                parts.push(self.rule("upto", body));
            }
        }
        seq(parts)
    }

    fn render(&mut self, n: &'a Node) -> Expr {
        match n {
            Node::Empty => empty(),
            Node::Nothing => alt([]),
            Node::Lit(s) => Expr::Literal(s.as_bytes().to_vec()),
            Node::Class(r) => class(r),
            Node::AnyJson => {
                if let Some(r) = self.any_json {
                    return Expr::Ref(r);
                }
                // Numbered before its body is written: the body refers to itself.
                let r = self.rules.len();
                self.any_json = Some(r);
                self.rules.push(Rule {
                    name: format!("anyjson{r}"),
                    at: 0,
                    body: empty(),
                });
                let body = self.expr(super::any_json_body());
                self.rules[r].body = body;
                Expr::Ref(r)
            }
            Node::Concat(items) => {
                let items: Vec<Expr> = items.iter().map(|i| self.expr(i)).collect();
                seq(items)
            }
            Node::Alt(items) => {
                let items: Vec<Expr> = items.iter().map(|i| self.expr(i)).collect();
                alt(items)
            }
            Node::Repeat(item, min, max) => self.counted(item, *min, *max),
            Node::Automaton(d) => self.automaton(d),
            Node::Seq {
                items,
                sep,
                nonempty,
            } => {
                // tail[i] ::= (sep item_i)? tail[i+1]: after something was emitted.
                let sep = self.expr(sep);
                let names: Vec<Expr> = items
                    .iter()
                    .map(|(item, _)| {
                        let body = self.expr(item);
                        if matches!(item, Node::Lit(_) | Node::Class(_)) {
                            body
                        } else {
                            self.rule("item", body)
                        }
                    })
                    .collect();
                // Up to the first required item, the items before it are each optional and
                // followed by a separator: `(a sep)? (b sep)? c tail`. As alternatives
                // (`a tail_b | b tail_c | c tail`, the no-required case's form) the rest was
                // copied once per optional item before it: an object with extra keys allowed
                // and one required key is `(extras sep)? key tail`, and its root and first
                // tail each held the key and the rest (two keys: 254 states, 176 so).
                let first_required = items.iter().position(|&(_, required)| required);
                let mut tails: Vec<Option<Expr>> = vec![None; items.len() + 1];
                // tails[0] is never referenced: the first item comes without a separator; nor
                // is any up to the first required item's.
                let from = first_required.map_or(1, |k| k + 1);
                for i in (from..items.len()).rev() {
                    let step = seq([sep.clone(), names[i].clone()]);
                    let step = if items[i].1 {
                        step
                    } else {
                        repeated(step, 0, Some(1))
                    };
                    let body = match &tails[i + 1] {
                        Some(t) => seq([step, t.clone()]),
                        None => step,
                    };
                    tails[i] = Some(self.rule("tail", body));
                }
                if let Some(k) = first_required {
                    let mut parts: Vec<Expr> = names[..k]
                        .iter()
                        .map(|n| repeated(seq([n.clone(), sep.clone()]), 0, Some(1)))
                        .collect();
                    parts.push(names[k].clone());
                    parts.extend(tails[k + 1].clone());
                    return seq(parts);
                }
                let alts: Vec<Expr> = (0..items.len())
                    .map(|j| match &tails[j + 1] {
                        Some(t) => seq([names[j].clone(), t.clone()]),
                        None => names[j].clone(),
                    })
                    .collect();
                let body = alt(alts);
                if *nonempty {
                    body
                } else {
                    repeated(body, 0, Some(1))
                }
            }
            Node::List {
                item,
                sep,
                min,
                max,
            } => {
                let body = self.expr(item);
                let it = if matches!(**item, Node::Lit(_) | Node::Class(_)) {
                    body
                } else {
                    self.rule("item", body)
                };
                let sep = self.expr(sep);
                let rest = self.repeat(
                    seq([sep, it.clone()]),
                    min.saturating_sub(1),
                    max.map(|m| m - 1),
                );
                if *min == 0 {
                    repeated(seq([it, rest]), 0, Some(1))
                } else {
                    seq([it, rest])
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Compiler, SchemaOptions};
    use crate::limits::Limits;
    use serde_json::json;

    /// The rules that run here and the text exported are one grammar: the text parses back
    /// to exactly these rules (numbered alike), in every rendering, and its length is the
    /// one bounded before compiling.
    #[test]
    fn exported_text_parses_back_to_the_rules_that_run() {
        let schemas = [
            // Optional and required keys, nested objects, arrays with bounds.
            json!({"type": "object", "properties": {
                "id": {"type": "integer", "minimum": 3},
                "name": {"type": "string", "maxLength": 12},
                "tags": {"type": "array", "items": {"enum": ["a", "b\"c"]}, "minItems": 1, "maxItems": 4},
                "child": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}
            }, "required": ["name"]}),
            // Free-form values, extra keys, `not`, `oneOf`.
            json!({"type": "object", "properties": {"meta": {}, "kind": {"not": {"const": "x"}}},
                   "additionalProperties": true}),
            json!({"oneOf": [{"type": "string", "pattern": "^[a-c]+$"}, {"type": "integer"}]}),
            // A pattern with lengths (an automaton leaf), long counts (blocks, chains,
            // counters), non-ASCII text and escapes.
            json!({"type": "string", "pattern": "^[a-f0-9é]+$", "minLength": 3, "maxLength": 40}),
            json!({"type": "string", "maxLength": 1500}),
            json!({"type": "array", "items": {"type": "boolean"}, "minItems": 70, "maxItems": 300}),
            json!({"const": "tab\t\"quote\" \\ ]-^[ ü 😀"}),
        ];
        let limits = Limits::DEFAULT;
        for schema in &schemas {
            for extra_keys in [false, true] {
                let node = Compiler::new(schema, SchemaOptions { extra_keys }, limits)
                    .schema(schema)
                    .unwrap();
                for rules in [
                    node.gbnf_rules(),
                    node.gbnf_rules_blocked(),
                    node.gbnf_rules_counted(),
                ] {
                    let text = rules.to_gbnf();
                    assert_eq!(rules.gbnf_len(usize::MAX), text.len());
                    let mut parsed = crate::grammar::parse(&text, &limits).unwrap();
                    parsed.rules.iter_mut().for_each(|r| r.at = 0);
                    // Parsing knows no prebuilt rule: the rest is the same.
                    let mut ours = rules.numbered_as_parsed();
                    ours.prebuilt = None;
                    assert_eq!(parsed, ours, "{schema}\n{text}");
                }
            }
        }
    }
}
