//! A grammar's per-state, per-byte-class tables, packed.
//!
//! Dense rows (one entry per byte class) took ~0.5-1.5 KiB per state on schema grammars
//! (64-97 classes, 4-8 bytes each), while a state moves on a few classes: a key's next byte,
//! or a string's character range and its two exits. In a 150-property Snowplow schema's
//! grammar (21k states over 77 classes), a row differed from its most common value in 1.8
//! classes on average. So each row keeps that value as its default and only the classes
//! that differ, overlaid into one array (row displacement, as parser generators pack their
//! tables): a lookup is two reads, the row's `(base, default)` and the cell `base + class`,
//! which belongs to the row only if it names it as owner.

use super::NONE;

/// A state's moves within its rule: classes `lo..=hi` go to `target`. A state's spans are
/// sorted, disjoint, and neighbours with one target are merged; a class in none has no move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span<T> {
    pub lo: u8,
    pub hi: u8,
    pub target: T,
}

impl<T> Span<T> {
    /// Classes covered.
    pub fn width(&self) -> usize {
        usize::from(self.hi - self.lo) + 1
    }
}

/// The value of the span of `row` (sorted, disjoint) that covers class `class`.
pub(crate) fn covering<T: Copy>(row: &[Span<T>], class: u16) -> Option<T> {
    let i = row.partition_point(|x| u16::from(x.hi) < class);
    row.get(i)
        .filter(|x| u16::from(x.lo) <= class)
        .map(|x| x.target)
}

/// Spans of every state, in state order: state `s`'s are `spans[off[s]..off[s + 1]]`.
#[derive(Clone, Debug)]
pub(crate) struct Rows<T> {
    pub off: Vec<u32>,
    pub spans: Vec<Span<T>>,
}

impl<T: Copy + PartialEq> Rows<T> {
    pub fn new() -> Self {
        Rows {
            off: vec![0],
            spans: Vec::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.off.len() - 1
    }

    pub fn row(&self, s: usize) -> &[Span<T>] {
        &self.spans[self.off[s] as usize..self.off[s + 1] as usize]
    }

    /// Adds classes `lo..=hi` to the row being built (the last one, not yet ended), merged
    /// into its last span when they continue it with the same target.
    pub fn push(&mut self, lo: u8, hi: u8, target: T) {
        let open = *self.off.last().expect("off starts with 0") as usize;
        if let Some(last) = self.spans[open..].last_mut() {
            if last.target == target && u16::from(last.hi) + 1 == u16::from(lo) {
                last.hi = hi;
                return;
            }
        }
        self.spans.push(Span { lo, hi, target });
    }

    /// Ends the row being built.
    pub fn end_row(&mut self) {
        self.off.push(self.spans.len() as u32);
    }

    /// Moves by class over every state (what a dense table would hold).
    pub fn class_moves(&self) -> usize {
        self.spans.iter().map(Span::width).sum()
    }

    pub fn heap_bytes(&self) -> usize {
        self.off.len() * 4 + self.spans.len() * std::mem::size_of::<Span<T>>()
    }
}

/// A row-displaced table: `get(s, class)` for every state and class.
#[derive(Clone, Debug)]
pub(crate) struct Packed<T> {
    /// Per state: where its cells start, and the value of every class without a cell; or
    /// [`SPAN_ROW`] plus the row's index in `span_off`, with the value of every class that
    /// none of its spans covers.
    rows: Vec<(u32, T)>,
    /// (owning state or [`NONE`], value).
    cells: Vec<(u32, T)>,
    /// Rows kept as their spans: row `i`'s are `spans[span_off[i]..span_off[i + 1]]`.
    span_off: Vec<u32>,
    spans: Vec<Span<T>>,
}

/// Marks a row kept as spans (a cell index never comes near it: cells are bounded by the
/// automaton limit, ~131k at 1 MiB).
const SPAN_ROW: u32 = 1 << 31;

/// A bit per cell of a [`Packed`] table being made, set where the cell is free; every cell
/// past the end is free.
struct FreeCells(Vec<u64>);

impl FreeCells {
    /// Cells `at..at + 64`, a bit each (lowest first).
    fn word(&self, at: usize) -> u64 {
        let word = |i: usize| self.0.get(i).copied().unwrap_or(!0);
        let (i, shift) = (at / 64, at % 64);
        match shift {
            0 => word(i),
            _ => word(i) >> shift | word(i + 1) << (64 - shift),
        }
    }

    fn take(&mut self, cell: usize) {
        if self.0.len() <= cell / 64 {
            self.0.resize(cell / 64 + 1, !0);
        }
        self.0[cell / 64] &= !(1 << (cell % 64));
    }
}

impl<T: Copy + Ord> Packed<T> {
    /// Packs `rows` over `stride` classes, `absent` where a state's spans have no value;
    /// `None` as soon as the classes that differ from their row's default pass `max_cells`
    /// (each takes a cell, so the packed table could not be smaller), before any placement.
    ///
    /// With `span_rows`, a row with more than twice as many such classes as spans (and at
    /// least 4) is kept as its spans instead: a lookup there is a binary search over them.
    /// A wide span away from the row's default is a cell per class: Snowplow sp_328's
    /// grammar has 2.6 spans a state but packed to 44 cells a state (1.1 MB of `trans`).
    pub fn pack(
        rows: &Rows<T>,
        stride: usize,
        absent: T,
        max_cells: usize,
        span_rows: bool,
    ) -> Option<Self> {
        let n = rows.len();
        let mut span_off = vec![0u32];
        let mut spans: Vec<Span<T>> = Vec::new();
        // Each row's (base, default): the default is the value over most classes, and the
        // base is set when the row is placed, or marks it as kept as spans.
        let mut rows_out: Vec<(u32, T)> = Vec::with_capacity(n);
        let mut exc_off = Vec::with_capacity(n + 1);
        let mut exc: Vec<(u8, T)> = Vec::new();
        let mut widths: Vec<(T, usize)> = Vec::new();
        exc_off.push(0u32);
        for s in 0..n {
            let row = rows.row(s);
            let covered: usize = row.iter().map(Span::width).sum();
            // Widths by value, summed over the value's spans (sorted: O(k log k) for k spans,
            // at most one per class).
            widths.clear();
            widths.extend(
                row.iter()
                    .filter(|x| x.target != absent)
                    .map(|x| (x.target, x.width())),
            );
            widths.sort_unstable_by_key(|w| w.0);
            let (mut default, mut most) = (absent, stride - covered);
            let mut i = 0;
            while i < widths.len() {
                let (value, mut width) = widths[i];
                i += 1;
                while i < widths.len() && widths[i].0 == value {
                    width += widths[i].1;
                    i += 1;
                }
                if width > most {
                    (default, most) = (value, width);
                }
            }
            let mut next = 0usize;
            for x in row {
                if default != absent {
                    exc.extend((next..usize::from(x.lo)).map(|c| (c as u8, absent)));
                }
                if x.target != default {
                    exc.extend((x.lo..=x.hi).map(|c| (c, x.target)));
                }
                next = usize::from(x.hi) + 1;
            }
            if default != absent {
                exc.extend((next..stride).map(|c| (c as u8, absent)));
            }
            let own = exc.len() - *exc_off.last().expect("starts with 0") as usize;
            let mut base = 0;
            if span_rows && own >= 4 && own > 2 * row.len() {
                exc.truncate(exc.len() - own);
                base = SPAN_ROW + span_off.len() as u32 - 1;
                spans.extend_from_slice(row);
                span_off.push(spans.len() as u32);
                default = absent;
            }
            if exc.len() > max_cells {
                return None;
            }
            rows_out.push((base, default));
            exc_off.push(exc.len() as u32);
        }
        // Widest rows first, each at the first place its cells are free.
        let mut order: Vec<u32> = (0..n as u32).collect();
        order.sort_by_key(|&s| std::cmp::Reverse(exc_off[s as usize + 1] - exc_off[s as usize]));
        let mut cells: Vec<(u32, T)> = Vec::new();
        let mut free = FreeCells(Vec::new());
        let mut lowest_free = 0usize;
        for &s in &order {
            let own = &exc[exc_off[s as usize] as usize..exc_off[s as usize + 1] as usize];
            let Some(&(first, _)) = own.first() else {
                continue;
            };
            // The first of the 64 bases from the lowest free cell on where every cell of the
            // row is free, else past the end, where it always fits: bit `k` of each cell's
            // word is base `start + k`'s, so each class that differs is read once. A base at
            // a time, half the rows of a small grammar's tables tried all 64 (35 tries a row
            // on average): ~3 % of its compile.
            let start = lowest_free.saturating_sub(usize::from(first));
            let fits = own.iter().fold(!0u64, |fits, &(c, _)| {
                fits & free.word(start + usize::from(c))
            });
            let base = if fits == 0 {
                cells.len()
            } else {
                start + fits.trailing_zeros() as usize
            };
            let (last, _) = own[own.len() - 1];
            let end = base + usize::from(last) + 1;
            if cells.len() < end {
                cells.resize(end, (NONE, absent));
            }
            for &(c, v) in own {
                cells[base + usize::from(c)] = (s, v);
                free.take(base + usize::from(c));
            }
            rows_out[s as usize].0 = base as u32;
            while lowest_free < cells.len() && cells[lowest_free].0 != NONE {
                lowest_free += 1;
            }
        }
        Some(Packed {
            rows: rows_out,
            cells,
            span_off,
            spans,
        })
    }

    #[inline]
    pub fn get(&self, s: u32, class: usize) -> T {
        let (base, default) = self.rows[s as usize];
        // A span row's base is past the cells: its lookup always lands here.
        match self.cells.get(base as usize + class) {
            Some(&(owner, v)) if owner == s => v,
            _ if base >= SPAN_ROW => self.span_get((base - SPAN_ROW) as usize, class, default),
            _ => default,
        }
    }

    /// Class `class` of span row `i`.
    fn span_get(&self, i: usize, class: usize, default: T) -> T {
        let row = &self.spans[self.span_off[i] as usize..self.span_off[i + 1] as usize];
        covering(row, class as u16).unwrap_or(default)
    }

    pub fn heap_bytes(&self) -> usize {
        (self.rows.len() + self.cells.len()) * std::mem::size_of::<(u32, T)>()
            + self.span_off.len() * 4
            + self.spans.len() * std::mem::size_of::<Span<T>>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::BitSet256;

    /// A range inserted a word at a time holds exactly the bytes inserted one by one.
    #[test]
    fn byte_ranges_insert_every_byte_and_no_other() {
        for lo in 0..=256u16 {
            for hi in lo..=256u16 {
                let mut fast = BitSet256::default();
                fast.insert_range(lo, hi);
                let mut slow = BitSet256::default();
                for b in lo..hi {
                    slow.insert(b as u8);
                }
                assert_eq!(fast, slow, "{lo}..{hi}");
            }
        }
    }

    /// Packed lookups equal the dense rows they were made from, on random rows of every
    /// shape: empty, sparse, dense with one common value, several values.
    #[test]
    fn packed_lookups_equal_the_dense_rows() {
        let mut rng = crate::test_rng::XorShift::new(0x9E37_79B9_7F4A_7C15u64);
        let mut rand = move |n: u64| rng.below(n);
        for stride in [1usize, 2, 7, 64, 97, 256] {
            let n = 300;
            let mut dense = vec![NONE; n * stride];
            let mut rows = Rows::new();
            for s in 0..n {
                let shape = rand(5);
                let cut = rand(stride as u64 + 1) as usize;
                for c in 0..stride {
                    let v = match shape {
                        0 => NONE,
                        // Two wide spans: a row kept as spans when `span_rows` is on.
                        4 if c < cut => 3,
                        4 => 4,
                        1 if rand(10) == 0 => rand(5) as u32,
                        1 => NONE,
                        2 if rand(8) == 0 => NONE,
                        2 => 7,
                        _ => [NONE, 1, 2][rand(3) as usize],
                    };
                    dense[s * stride + c] = v;
                    if v != NONE {
                        rows.push(c as u8, c as u8, v);
                    }
                }
                rows.end_row();
            }
            for span_rows in [false, true] {
                let packed =
                    Packed::pack(&rows, stride, NONE, usize::MAX, span_rows).expect("no bound");
                for s in 0..n {
                    for c in 0..stride {
                        let want = dense[s * stride + c];
                        assert_eq!(packed.get(s as u32, c), want, "{s} {c} {span_rows}");
                    }
                }
                // Sparse rows share the cells: well under one cell per class per state.
                assert!(
                    packed.cells.len() < n * stride,
                    "{} cells",
                    packed.cells.len()
                );
                // Wide rows kept as spans exactly when asked, where they are narrower.
                assert_eq!(!packed.spans.is_empty(), span_rows && stride >= 64);
            }
        }
    }
}
