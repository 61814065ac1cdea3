//! Integers and numbers, with bounds compiled to exact digit-wise ranges.
//!
//! An integer range `[lo, hi]` splits by sign and digit count; each same-length piece is the
//! classic recursive digit construction (`[137, 254]` = `13[7-9]|1[4-9][0-9]|2[0-4][0-9]|25[0-4]`).
//! `-0` is never emitted. A number with integer-valued bounds is its integer part in a range
//! plus an optional fraction, with the boundary cases spelled out (`x <= 5` allows `5`,
//! `5.0`, `5.00`, not `5.1`); bounded numbers are written without exponents.

use super::node::Node;
use crate::limits::Limits;
use crate::regex::{Dfa, Refusal};
use std::sync::Arc;

fn digit(lo: u8, hi: u8) -> Node {
    Node::class(vec![(char::from(b'0' + lo), char::from(b'0' + hi))])
}

fn any_digits(n: usize) -> Node {
    Node::repeat(digit(0, 9), n as u32, Some(n as u32))
}

/// Decimal strings of the same length between `lo` and `hi` inclusive (`lo <= hi`).
fn same_len(lo: &[u8], hi: &[u8]) -> Node {
    debug_assert_eq!(lo.len(), hi.len());
    if lo.is_empty() {
        return Node::Empty;
    }
    let (a, b) = (lo[0] - b'0', hi[0] - b'0');
    let rest = lo.len() - 1;
    if a == b {
        return Node::concat(vec![digit(a, a), same_len(&lo[1..], &hi[1..])]);
    }
    let lo_rest_min = lo[1..].iter().all(|&d| d == b'0');
    let hi_rest_max = hi[1..].iter().all(|&d| d == b'9');
    let mut alts = Vec::new();
    let (mut from, mut to) = (a, b);
    if !lo_rest_min {
        alts.push(Node::concat(vec![
            digit(a, a),
            same_len(&lo[1..], &vec![b'9'; rest]),
        ]));
        from = a + 1;
    }
    let tail_hi = if !hi_rest_max {
        to = b - 1;
        Some(Node::concat(vec![
            digit(b, b),
            same_len(&vec![b'0'; rest], &hi[1..]),
        ]))
    } else {
        None
    };
    if from <= to {
        alts.push(Node::concat(vec![digit(from, to), any_digits(rest)]));
    }
    alts.extend(tail_hi);
    Node::alt(alts)
}

/// Non-negative integers in `[lo, hi]` (`hi` `None`: unbounded) without leading zeros.
pub(crate) fn nonneg_range(lo: u128, hi: Option<u128>) -> Node {
    if hi.is_some_and(|h| h < lo) {
        return Node::Nothing;
    }
    let lo_s = lo.to_string();
    let mut alts = Vec::new();
    let max_len = match hi {
        Some(h) => h.to_string().len(),
        None => lo_s.len(),
    };
    for len in lo_s.len()..=max_len {
        let first = if len == 1 {
            0
        } else {
            10u128.pow(len as u32 - 1)
        };
        let last = 10u128.pow(len as u32) - 1;
        let a = lo.max(first);
        let b = match hi {
            Some(h) => h.min(last),
            None => last,
        };
        if a <= b {
            alts.push(same_len(a.to_string().as_bytes(), b.to_string().as_bytes()));
        }
    }
    if hi.is_none() {
        // Every longer number.
        alts.push(Node::concat(vec![
            digit(1, 9),
            Node::repeat(digit(0, 9), lo_s.len() as u32, None),
        ]));
    }
    Node::alt(alts)
}

/// Integers in `[lo, hi]`, either side open when `None`.
pub(crate) fn integer_range(lo: Option<i128>, hi: Option<i128>) -> Node {
    if let (Some(l), Some(h)) = (lo, hi) {
        if l > h {
            return Node::Nothing;
        }
    }
    let mut alts = Vec::new();
    // Negative side: magnitudes in [max(1, -hi), -lo].
    if lo.is_none_or(|l| l < 0) {
        let mag_lo = match hi {
            Some(h) if h < 0 => h.unsigned_abs(),
            _ => 1,
        };
        let mag_hi = lo.map(i128::unsigned_abs);
        let mags = nonneg_range(mag_lo, mag_hi);
        if mags != Node::Nothing {
            alts.push(Node::concat(vec![Node::lit("-"), mags]));
        }
    }
    if hi.is_none_or(|h| h >= 0) {
        let a = lo.map_or(0, |l| l.max(0) as u128);
        alts.push(nonneg_range(a, hi.map(|h| h as u128)));
    }
    Node::alt(alts)
}

/// Integers in `[lo, hi]` (either side open) that are multiples of `k >= 1`, exactly.
///
/// A bounded range with at most [`LISTED_MULTIPLES`] multiples is their list. Otherwise
/// `k = j * 10^m` with `j` not a multiple of 10: a multiple is `0`, or a non-zero multiple
/// `q` of `j` followed by `m` zeros, with `q` in the range divided by `10^m`. For `j = 1`
/// that is a range; otherwise the range's automaton times [`divisible_by`]`(j)`, refused past
/// `limits` (`j` + 3 states, then the product).
pub(crate) fn multiples_in_range(
    k: u128,
    lo: Option<i128>,
    hi: Option<i128>,
    limits: &Limits,
) -> Result<Node, Refusal> {
    debug_assert!(k >= 1 && k <= i128::MAX as u128);
    let ceil_div = |a: i128, p: i128| -((-a).div_euclid(p));
    if let (Some(l), Some(h)) = (lo, hi) {
        let ki = k as i128;
        let (first, last) = (ceil_div(l, ki), h.div_euclid(ki));
        if last < first {
            return Ok(Node::Nothing);
        }
        if last - first < LISTED_MULTIPLES {
            return Ok(Node::alt(
                (first..=last)
                    .map(|q| Node::lit((q * ki).to_string()))
                    .collect(),
            ));
        }
    }
    let (mut j, mut m) = (k, 0u32);
    while j % 10 == 0 {
        j /= 10;
        m += 1;
    }
    let p = 10i128.pow(m);
    let (qlo, qhi) = (lo.map(|l| ceil_div(l, p)), hi.map(|h| h.div_euclid(p)));
    let neg = match qlo {
        Some(q) if q > -1 => Node::Nothing,
        _ => integer_range(qlo, Some(qhi.map_or(-1, |h| h.min(-1)))),
    };
    let pos = match qhi {
        Some(q) if q < 1 => Node::Nothing,
        _ => integer_range(Some(qlo.map_or(1, |l| l.max(1))), qhi),
    };
    // A symmetric range is `-?` and the magnitudes: one automaton for both signs, so the
    // product below has half the states.
    let nonzero = match (qlo, qhi) {
        (Some(l), Some(h)) if l == -h && h >= 1 => Node::concat(vec![
            Node::opt(Node::lit("-")),
            nonneg_range(1, Some(h as u128)),
        ]),
        _ => Node::alt(vec![neg, pos]),
    };
    let multiples = if j == 1 {
        nonzero
    } else {
        Node::intersect(&nonzero, &divisible_by(j, limits)?, limits)?
    };
    let zero_in_range = lo.is_none_or(|l| l <= 0) && hi.is_none_or(|h| h >= 0);
    Ok(Node::alt(vec![
        if zero_in_range {
            Node::lit("0")
        } else {
            Node::Nothing
        },
        Node::concat(vec![multiples, Node::lit("0".repeat(m as usize))]),
    ]))
}

/// A bounded range with at most this many multiples lists them (regex text stays available).
const LISTED_MULTIPLES: i128 = 64;

/// Decimal integers (no leading zeros, no `-0`) divisible by `k >= 2`, as a hand-made
/// automaton: a start, the state after `-`, `0`, and one state per residue (the value so far
/// modulo `k`; a digit `d` takes `r` to `(10 r + d) mod k`); refused past `limits`.
pub(crate) fn divisible_by(k: u128, limits: &Limits) -> Result<Node, Refusal> {
    const START: usize = 0;
    const MINUS: usize = 1;
    const ZERO: usize = 2;
    const RESIDUE: usize = 3;
    let too_big = Refusal::Table {
        states: 0,
        limit: limits.automaton_bytes,
    };
    // Four bytes per state at least: k past the table bound is refused before any work.
    let k = usize::try_from(k)
        .ok()
        .filter(|&k| k <= limits.automaton_bytes / 4)
        .ok_or(too_big)?;
    Dfa::from_fn_within(
        k + RESIDUE,
        START,
        |s| s == ZERO || s == RESIDUE,
        |s, b| {
            if s == START && b == b'-' {
                return Some(MINUS);
            }
            let d = b.is_ascii_digit().then(|| usize::from(b - b'0'))?;
            match s {
                START if d == 0 => Some(ZERO),
                START | MINUS if d > 0 => Some(RESIDUE + d % k),
                ZERO | START | MINUS => None,
                r => Some(RESIDUE + ((r - RESIDUE) * 10 + d) % k),
            }
        },
        limits,
    )
    .map(|d| d.map_or(Node::Nothing, |d| Node::Automaton(Arc::new(d))))
}

/// A `multipleOf` that is not an integer as `units × 10^-scale`, from the shortest decimal
/// text of its f64 (`0.01` is 1 and 2, `1.5` is 15 and 1): the step a validator that reads
/// numbers as decimals divides by (the `jsonschema` crate, past its f64 fast path, compares
/// the shortest decimal texts). None for a step of more than 30 decimals or 38 digits.
pub(crate) fn decimal_step(k: f64) -> Option<(u128, u32)> {
    if !(k.is_finite() && k > 0.0) {
        return None;
    }
    // Rust prints an f64 as its shortest round-trip decimal, never with an exponent.
    let text = format!("{k}");
    let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
    let scale = u32::try_from(frac.len()).ok().filter(|&s| s <= 30)?;
    let digits = format!("{int}{frac}");
    let units: u128 = digits.trim_start_matches('0').parse().ok()?;
    Some((units, scale))
}

/// Numbers `v` (no exponent) with `v × 10^scale` a multiple of `units`, `scale >= 1`: a
/// fraction has at most `scale` digits before trailing zeros, and at most `max_digits`
/// digits come before those zeros in all, so every such number is exact in an f64 and a
/// validator dividing binary floats agrees (see `MULTIPLE_DIGITS`). One state per residue
/// of the digits read so far and fraction position (`units × (scale + 2)`), refused past
/// `limits`.
pub(crate) fn decimal_multiples(
    units: u128,
    scale: u32,
    max_digits: u32,
    limits: &Limits,
) -> Result<Node, Refusal> {
    debug_assert!(scale >= 1 && scale < max_digits);
    let shape = Node::concat(vec![
        Node::opt(Node::lit("-")),
        Node::alt(vec![
            Node::lit("0"),
            Node::concat(vec![
                digit(1, 9),
                Node::repeat(digit(0, 9), 0, Some(max_digits - scale - 1)),
            ]),
        ]),
        Node::opt(Node::concat(vec![
            Node::lit("."),
            Node::repeat(digit(0, 9), 1, Some(scale)),
            Node::repeat(Node::lit("0"), 0, None),
        ])),
    ]);
    if units == 1 {
        return Ok(shape);
    }
    const START: usize = 0;
    const MINUS: usize = 1;
    const ZERO: usize = 2;
    const INT: usize = 3;
    let too_big = Refusal::Table {
        states: 0,
        limit: limits.automaton_bytes,
    };
    let scale_us = scale as usize;
    // Each state's row holds at least the ten digits (their residues differ once units
    // passes 9) at four bytes: past the bound, refused before any work (2.125, 10,628
    // states, took 16 ms to build and then failed the product with the digit count).
    let u = usize::try_from(units)
        .ok()
        .filter(|&u| u.saturating_mul(scale_us + 2) <= limits.automaton_bytes / 40)
        .ok_or(too_big)?;
    // FRAC(j, r): j fraction digits read (0..=scale), residue r.
    let frac = |j: usize, r: usize| INT + u + j * u + r;
    // Whether residue r with j of the scale's digits read is a multiple: r × 10^(scale-j).
    let whole = |r: usize, j: usize| {
        let mut r = r as u128;
        for _ in j..scale_us {
            r = r * 10 % units;
        }
        r == 0
    };
    let residues = Dfa::from_fn_within(
        INT + u * (scale_us + 2),
        START,
        |s| match s {
            ZERO => true,
            START | MINUS => false,
            s if s < INT + u => whole(s - INT, 0),
            s => {
                let (j, r) = ((s - INT - u) / u, (s - INT - u) % u);
                j >= 1 && whole(r, j)
            }
        },
        |s, b| {
            let d = b.is_ascii_digit().then(|| usize::from(b - b'0'));
            let step = |r: usize, d: usize| (r * 10 + d) % u;
            match (s, b, d) {
                (START, b'-', _) => Some(MINUS),
                (START | MINUS, _, Some(0)) => Some(ZERO),
                (START | MINUS, _, Some(d)) => Some(INT + d % u),
                (START | MINUS, _, None) => None,
                (ZERO, b'.', _) => Some(frac(0, 0)),
                (ZERO, _, _) => None,
                (s, b'.', _) if s < INT + u => Some(frac(0, s - INT)),
                (s, _, Some(d)) if s < INT + u => Some(INT + step(s - INT, d)),
                (s, _, Some(d)) => {
                    let (j, r) = ((s - INT - u) / u, (s - INT - u) % u);
                    if j < scale_us {
                        Some(frac(j + 1, step(r, d)))
                    } else {
                        // Past the scale's digits only zeros, which leave the value.
                        (d == 0).then_some(s)
                    }
                }
                _ => None,
            }
        },
        limits,
    )?;
    match residues {
        None => Ok(Node::Nothing),
        Some(d) => Node::intersect(&shape, &Node::Automaton(Arc::new(d)), limits),
    }
}

/// Any JSON number; the exponent has at most two digits, so every emitted number is finite
/// in an f64 (up to integer parts of ~200 digits).
pub(crate) fn any_number() -> Node {
    Node::concat(vec![
        Node::opt(Node::lit("-")),
        Node::alt(vec![
            Node::lit("0"),
            Node::concat(vec![digit(1, 9), Node::repeat(digit(0, 9), 0, None)]),
        ]),
        Node::opt(fraction()),
        Node::opt(Node::concat(vec![
            Node::class(vec![('E', 'E'), ('e', 'e')]),
            Node::opt(Node::class(vec![('+', '+'), ('-', '-')])),
            Node::repeat(digit(0, 9), 1, Some(2)),
        ])),
    ])
}

fn fraction() -> Node {
    Node::concat(vec![Node::lit("."), Node::repeat(digit(0, 9), 1, None)])
}

fn zero_fraction() -> Node {
    Node::opt(Node::concat(vec![
        Node::lit("."),
        Node::repeat(Node::lit("0"), 1, None),
    ]))
}

fn nonzero_fraction() -> Node {
    Node::concat(vec![
        Node::lit("."),
        Node::repeat(digit(0, 9), 0, None),
        digit(1, 9),
        Node::repeat(digit(0, 9), 0, None),
    ])
}

/// A bound on a number: the value and whether it is exclusive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Bound {
    pub value: i128,
    pub exclusive: bool,
}

/// Non-negative magnitudes `m` with `lo <(=) m <(=) hi` (integer-valued bounds), no exponent.
fn magnitude(lo: Bound, hi: Option<Bound>) -> Node {
    debug_assert!(lo.value >= 0);
    let lo_v = lo.value as u128;
    let mut alts = Vec::new();
    // Integer parts strictly inside, any fraction.
    let int_lo = lo_v + 1;
    let int_hi = hi.map(|h| h.value - 1);
    if int_hi.is_none_or(|h| h >= int_lo as i128) {
        alts.push(Node::concat(vec![
            nonneg_range(int_lo, int_hi.map(|h| h as u128)),
            Node::opt(fraction()),
        ]));
    }
    let same = hi.is_some_and(|h| h.value as u128 == lo_v);
    // Integer part == lo: exactly lo (when inclusive) or above it by a fraction.
    let at_lo = Node::lit(lo_v.to_string());
    let lo_frac = if same {
        // lo == hi: only the exact value, when both are inclusive.
        if lo.exclusive || hi.is_some_and(|h| h.exclusive) {
            Node::Nothing
        } else {
            zero_fraction()
        }
    } else if lo.exclusive {
        nonzero_fraction()
    } else {
        Node::opt(fraction())
    };
    alts.push(Node::concat(vec![at_lo, lo_frac]));
    // Integer part == hi (> lo): exactly hi, when inclusive.
    if let Some(h) = hi {
        if !same && !h.exclusive {
            alts.push(Node::concat(vec![
                Node::lit(h.value.to_string()),
                zero_fraction(),
            ]));
        }
    }
    Node::alt(alts)
}

/// Numbers `x` with the given integer-valued bounds (either side may be open).
pub(crate) fn number_range(lo: Option<Bound>, hi: Option<Bound>) -> Node {
    if let (Some(l), Some(h)) = (lo, hi) {
        if l.value > h.value || (l.value == h.value && (l.exclusive || h.exclusive)) {
            return Node::Nothing;
        }
    }
    let mut alts = Vec::new();
    // x >= 0 (including 0 written without a sign).
    let nonneg_ok = hi.is_none_or(|h| h.value > 0 || (h.value == 0 && !h.exclusive));
    if nonneg_ok {
        let l = match lo {
            Some(l) if l.value >= 0 => l,
            _ => Bound {
                value: 0,
                exclusive: false,
            },
        };
        alts.push(magnitude(l, hi));
    }
    // x < 0: "-" then a magnitude m > 0 with -hi <= m <= -lo.
    let neg_ok = lo.is_none_or(|l| l.value < 0);
    if neg_ok {
        let mlo = match hi {
            Some(h) if h.value < 0 => Bound {
                value: -h.value,
                exclusive: h.exclusive,
            },
            _ => Bound {
                value: 0,
                exclusive: true,
            },
        };
        let mhi = lo.map(|l| Bound {
            value: -l.value,
            exclusive: l.exclusive,
        });
        let m = magnitude(mlo, mhi);
        if m != Node::Nothing {
            alts.push(Node::concat(vec![Node::lit("-"), m]));
        }
    }
    Node::alt(alts)
}

/// A bound of any finite value as decimal digits: the sign, the integer part, the fraction's
/// digits without trailing zeros (empty for an integer) and whether it is exclusive.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct DecimalBound {
    negative: bool,
    int: u128,
    frac: String,
    exclusive: bool,
}

impl DecimalBound {
    /// The bound `v` (finite, below 10^38 in magnitude) as written by its shortest
    /// round-trip decimal, which is the value validators compare with (f64).
    pub(crate) fn new(v: f64, exclusive: bool) -> Option<DecimalBound> {
        if !v.is_finite() || v.abs() >= 1e38 {
            return None;
        }
        // `Display` for f64 writes every digit, never an exponent.
        let text = format!("{}", v.abs());
        let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
        Some(DecimalBound {
            negative: v < 0.0,
            int: int.parse().ok()?,
            frac: frac.trim_end_matches('0').to_owned(),
            exclusive,
        })
    }
}

fn frac_digits() -> Node {
    Node::repeat(digit(0, 9), 0, None)
}

/// The optional fraction (`.` and digits, or nothing) of a number whose integer part equals
/// the bound's: fractions at least `.d` (above it when `strict`).
fn fraction_at_least(d: &str, strict: bool) -> Node {
    if d.is_empty() {
        return if strict {
            nonzero_fraction()
        } else {
            Node::opt(fraction())
        };
    }
    let b = d.as_bytes();
    let mut alts = Vec::new();
    // The first digit that differs is larger.
    for i in 0..b.len() {
        let di = b[i] - b'0';
        if di < 9 {
            alts.push(Node::concat(vec![
                Node::lit(&d[..i]),
                digit(di + 1, 9),
                frac_digits(),
            ]));
        }
    }
    // All of d, then anything (something above zero when strict).
    alts.push(Node::concat(vec![
        Node::lit(d),
        if strict {
            Node::concat(vec![frac_digits(), digit(1, 9), frac_digits()])
        } else {
            frac_digits()
        },
    ]));
    Node::concat(vec![Node::lit("."), Node::alt(alts)])
}

/// The optional fraction of a number whose integer part equals the bound's: fractions at
/// most `.d` (below it when `strict`); no fraction is `.0`.
fn fraction_at_most(d: &str, strict: bool) -> Node {
    if d.is_empty() {
        return if strict {
            Node::Nothing
        } else {
            zero_fraction()
        };
    }
    let b = d.as_bytes();
    let mut alts = Vec::new();
    // The first digit that differs is smaller.
    for i in 0..b.len() {
        let di = b[i] - b'0';
        if di > 0 {
            alts.push(Node::concat(vec![
                Node::lit(&d[..i]),
                digit(0, di - 1),
                frac_digits(),
            ]));
        }
    }
    // A prefix of d, then zeros (all of d only when not strict: d ends in a nonzero digit).
    let longest = if strict { b.len() - 1 } else { b.len() };
    for k in 1..=longest {
        alts.push(Node::concat(vec![
            Node::lit(&d[..k]),
            Node::repeat(Node::lit("0"), 0, None),
        ]));
    }
    Node::alt(vec![
        Node::Empty,
        Node::concat(vec![Node::lit("."), Node::alt(alts)]),
    ])
}

/// Magnitudes (unsigned, no exponent) at least the bound's (above it when exclusive).
fn magnitude_at_least(b: &DecimalBound) -> Node {
    Node::alt(vec![
        Node::concat(vec![nonneg_range(b.int + 1, None), Node::opt(fraction())]),
        Node::concat(vec![
            Node::lit(b.int.to_string()),
            fraction_at_least(&b.frac, b.exclusive),
        ]),
    ])
}

/// Magnitudes at most the bound's (below it when exclusive).
fn magnitude_at_most(b: &DecimalBound) -> Node {
    let mut alts = Vec::new();
    if b.int >= 1 {
        alts.push(Node::concat(vec![
            nonneg_range(0, Some(b.int - 1)),
            Node::opt(fraction()),
        ]));
    }
    alts.push(Node::concat(vec![
        Node::lit(b.int.to_string()),
        fraction_at_most(&b.frac, b.exclusive),
    ]));
    Node::alt(alts)
}

/// Numbers (no exponent, no `-0`) with decimal bounds on either side: those at least `lo`
/// intersected with those at most `hi`, digit by digit (exact for any finite decimal bound,
/// `0.5 <= x < 99.99`); refused past `limits`.
pub(crate) fn decimal_range(
    lo: Option<&DecimalBound>,
    hi: Option<&DecimalBound>,
    limits: &Limits,
) -> Result<Node, Refusal> {
    let any_magnitude = || Node::concat(vec![nonneg_range(0, None), Node::opt(fraction())]);
    // A negative number's magnitude is not zero (`-0` is not written).
    let negative = |m: Node| -> Result<Node, Refusal> {
        let zero = Node::concat(vec![Node::lit("0"), zero_fraction()]);
        let m = Node::difference(&m, &zero, limits)?;
        Ok(match m {
            Node::Nothing => Node::Nothing,
            m => Node::concat(vec![Node::lit("-"), m]),
        })
    };
    let at_least = |b: &DecimalBound| -> Result<Node, Refusal> {
        Ok(if b.negative {
            Node::alt(vec![any_magnitude(), negative(magnitude_at_most(b))?])
        } else {
            magnitude_at_least(b)
        })
    };
    let at_most = |b: &DecimalBound| -> Result<Node, Refusal> {
        Ok(if b.negative {
            negative(magnitude_at_least(b))?
        } else {
            Node::alt(vec![negative(any_magnitude())?, magnitude_at_most(b)])
        })
    };
    match (lo, hi) {
        (None, None) => Ok(any_number()),
        (Some(l), None) => at_least(l),
        (None, Some(h)) => at_most(h),
        (Some(l), Some(h)) => Node::intersect(&at_least(l)?, &at_most(h)?, limits),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check_int(lo: Option<i128>, hi: Option<i128>) {
        let n = integer_range(lo, hi);
        for v in -1200i128..=1200 {
            let want = lo.is_none_or(|l| v >= l) && hi.is_none_or(|h| v <= h);
            assert_eq!(
                n.matches(v.to_string().as_bytes()),
                want,
                "{lo:?}..{hi:?} at {v}"
            );
        }
        assert!(!n.matches(b"-0") && !n.matches(b"007") && !n.matches(b""));
    }

    #[test]
    fn integer_ranges_are_exact() {
        for (lo, hi) in [
            (Some(0), Some(0)),
            (Some(1), Some(120)),
            (Some(-37), Some(254)),
            (Some(-999), Some(-10)),
            (None, Some(-5)),
            (Some(13), None),
            (None, None),
            (Some(100), Some(999)),
            (Some(7), Some(1000)),
        ] {
            check_int(lo, hi);
        }
        assert_eq!(integer_range(Some(3), Some(2)), Node::Nothing);
    }

    fn b(value: i128, exclusive: bool) -> Bound {
        Bound { value, exclusive }
    }

    #[test]
    fn number_ranges_are_exact_on_a_grid() {
        let cases = [
            (Some(b(0, false)), Some(b(1, false))),
            (Some(b(0, true)), None),
            (None, Some(b(0, true))),
            (Some(b(-5, true)), Some(b(5, true))),
            (Some(b(-20, false)), Some(b(-3, false))),
            (Some(b(2, false)), Some(b(2, false))),
            (Some(b(10, false)), None),
        ];
        let texts: Vec<String> = (-250i32..=250)
            .flat_map(|t| {
                let x = f64::from(t) / 10.0;
                vec![format!("{x}"), format!("{x:.2}"), format!("{}", t / 10)]
            })
            .collect();
        for (lo, hi) in cases {
            let n = number_range(lo, hi);
            for s in &texts {
                let x: f64 = s.parse().unwrap();
                let want = lo.is_none_or(|l| {
                    if l.exclusive {
                        x > l.value as f64
                    } else {
                        x >= l.value as f64
                    }
                }) && hi.is_none_or(|h| {
                    if h.exclusive {
                        x < h.value as f64
                    } else {
                        x <= h.value as f64
                    }
                });
                if s.starts_with("-0") && x == 0.0 {
                    // `-0`, `-0.0`: never emitted, whatever the range.
                    assert!(!n.matches(s.as_bytes()), "{lo:?} {hi:?} {s}");
                    continue;
                }
                assert_eq!(n.matches(s.as_bytes()), want, "{lo:?} {hi:?} {s}");
            }
        }
    }

    /// Every integer in and around each range, for steps with and without trailing zeros,
    /// listed, by a range alone, and by the residue automaton.
    #[test]
    fn multiples_in_ranges_are_exact() {
        let limits = Limits::DEFAULT;
        let ranges = [
            (-1000, 1000),
            (1, 999),
            (-999_999, 999_999),
            (0, 5000),
            (-5000, -1),
            (95, 105),
        ];
        for k in [2u128, 3, 7, 10, 12, 30, 125, 700, 1000, 4000] {
            for (lo, hi) in ranges {
                let n = multiples_in_range(k, Some(lo), Some(hi), &limits).unwrap();
                for v in (-6000i128..=6000).chain([999_990, -999_999, 1_000_000, 999_999]) {
                    let want = lo <= v && v <= hi && v % k as i128 == 0;
                    let text = v.to_string();
                    assert_eq!(n.matches(text.as_bytes()), want, "{k} in {lo}..={hi}: {v}");
                }
                assert!(!n.matches(b"-0") && !n.matches(b"00") && !n.matches(b""));
            }
        }
    }

    #[test]
    fn any_number_takes_json_numbers_only() {
        let n = any_number();
        for s in ["0", "-0", "1.5", "-12e3", "1E+05", "0.001"] {
            assert!(n.matches(s.as_bytes()), "{s}");
        }
        for s in ["01", "1.", ".5", "+1", "1e", "1e123", "--1"] {
            assert!(!n.matches(s.as_bytes()), "{s}");
        }
    }
}
