//! The language of a schema's numbers: `type: integer`/`number` with their bounds,
//! `multipleOf` and excluded values, over the digit-wise constructions of `number.rs`.

use super::*;

impl Compiler<'_> {
    pub(super) fn bounds(&self, m: &Map<String, Value>) -> R<(Option<FBound>, Option<FBound>)> {
        let here = self.here();
        let mut lo: Option<(f64, bool)> = None;
        let mut hi: Option<(f64, bool)> = None;
        let tighter_lo = |cur: Option<(f64, bool)>, new: (f64, bool)| match cur {
            Some(c) if c.0 > new.0 || (c.0 == new.0 && c.1) => Some(c),
            _ => Some(new),
        };
        let tighter_hi = |cur: Option<(f64, bool)>, new: (f64, bool)| match cur {
            Some(c) if c.0 < new.0 || (c.0 == new.0 && c.1) => Some(c),
            _ => Some(new),
        };
        let ex_min_bool = m.get("exclusiveMinimum").and_then(Value::as_bool);
        let ex_max_bool = m.get("exclusiveMaximum").and_then(Value::as_bool);
        if let Some(v) = m.get("minimum") {
            lo = tighter_lo(
                lo,
                (as_f64(v, "minimum", &here)?, ex_min_bool == Some(true)),
            );
        }
        if let Some(v) = m.get("maximum") {
            hi = tighter_hi(
                hi,
                (as_f64(v, "maximum", &here)?, ex_max_bool == Some(true)),
            );
        }
        if let Some(v) = m.get("exclusiveMinimum").filter(|v| v.is_number()) {
            lo = tighter_lo(lo, (as_f64(v, "exclusiveMinimum", &here)?, true));
        }
        if let Some(v) = m.get("exclusiveMaximum").filter(|v| v.is_number()) {
            hi = tighter_hi(hi, (as_f64(v, "exclusiveMaximum", &here)?, true));
        }
        Ok((lo, hi))
    }

    /// Integers, less what a leaf `not` excludes ([`Excluded`]): multiples of a step by the
    /// digits read modulo the step ([`number::divisible_by`], exact at any length), values
    /// by their canonical text.
    pub(super) fn integer(
        &mut self,
        m: &Map<String, Value>,
        from_number: bool,
        excluded: &Excluded,
    ) -> R<Node> {
        let node = self.integer_in_bounds(m, from_number)?;
        if excluded.multiples.is_empty() && excluded.values.is_empty() {
            return Ok(node);
        }
        let here = self.here();
        let refused = |r: crate::regex::Refusal| {
            Fail::Limit(format!(
                "`not` at {here} takes integers out of a set that needs more than {} ({r})",
                r.limit_phrase()
            ))
        };
        let mut node = node;
        if !excluded.multiples.is_empty() || excluded.values.iter().any(Value::is_number) {
            // Validators divide and compare in floating point: past 2^53 an odd integer can
            // be "a multiple of 2", or equal an excluded value. As for `multipleOf`, at most
            // MULTIPLE_DIGITS digits.
            let most = 10i128.pow(MULTIPLE_DIGITS) - 1;
            node = Node::intersect(
                &node,
                &number::integer_range(Some(-most), Some(most)),
                &self.limits,
            )
            .map_err(refused)?;
        }
        for &k in &excluded.multiples {
            if k.fract() != 0.0 {
                if (1.0 / k).fract() == 0.0 {
                    // Every integer is a multiple of 1/2, 1/4 ...
                    return Ok(Node::Nothing);
                }
                return Err(unsupported(
                    "not",
                    &here,
                    "excluding the integer multiples of a step that is not an integer",
                ));
            }
            if k == 1.0 {
                return Ok(Node::Nothing);
            }
            let multiples = match k {
                k if k >= 1e38 => Node::lit("0"),
                k => number::divisible_by(k as u128, &self.limits).map_err(refused)?,
            };
            node = Node::difference(&node, &multiples, &self.limits).map_err(refused)?;
        }
        let mut values = Vec::new();
        for v in &excluded.values {
            let Some(f) = v.as_f64().filter(|f| f.fract() == 0.0) else {
                continue;
            };
            // Emitted integers have at most 15 digits (above), where the canonical text is
            // the value's only one.
            if f.abs() < 1e15 {
                values.push(Node::lit(canonical_json(v)));
            }
        }
        if !values.is_empty() {
            node = Node::difference(&node, &Node::alt(values), &self.limits).map_err(refused)?;
        }
        Ok(node)
    }

    pub(super) fn integer_in_bounds(
        &mut self,
        m: &Map<String, Value>,
        from_number: bool,
    ) -> R<Node> {
        let here = self.here();
        if m.contains_key("divisibleBy") {
            return Err(unsupported("divisibleBy", &here, "draft-3 keyword"));
        }
        let (lo, hi) = self.bounds(m)?;
        // 10^38 - 1 fits u128 digit ranges; a farther bound allows every integer we emit.
        const FAR: f64 = 1e38;
        let lo_i = lo.map(|(v, ex)| if ex { v.floor() + 1.0 } else { v.ceil() });
        let hi_i = hi.map(|(v, ex)| if ex { v.ceil() - 1.0 } else { v.floor() });
        let lo_i: Option<i128> = match lo_i {
            Some(v) if v > FAR => return Ok(Node::Nothing),
            Some(v) if v < -FAR => Some(-(10i128.pow(38) - 1)),
            Some(v) => Some(v as i128),
            None => None,
        };
        let hi_i: Option<i128> = match hi_i {
            Some(v) if v < -FAR => return Ok(Node::Nothing),
            Some(v) if v > FAR => Some(10i128.pow(38) - 1),
            Some(v) => Some(v as i128),
            None => None,
        };
        let bounded = lo_i.is_some() || hi_i.is_some();
        if let Some(k) = m.get("multipleOf") {
            let step = as_f64(k, "multipleOf", &here)?;
            let k = if step.fract() != 0.0 || step <= 0.0 {
                // An integer multiple of units × 10^-scale is a multiple of units over its
                // common factor with 10^scale: of 3 for 1.5, of every integer for 0.25.
                let (units, scale) = number::decimal_step(step)
                    .filter(|_| !from_number)
                    .ok_or_else(|| {
                        unsupported("multipleOf", &here, "a step that is not an integer")
                    })?;
                let ten = 10u128.pow(scale);
                let (mut a, mut b) = (units, ten);
                while b != 0 {
                    (a, b) = (b, a % b);
                }
                (units / a) as f64
            } else {
                step
            };
            if k >= 1e38 {
                // Past every multiple emitted (below): 0 is the only one.
                let zero = lo_i.is_none_or(|l| l <= 0) && hi_i.is_none_or(|h| h >= 0);
                return Ok(if zero { Node::lit("0") } else { Node::Nothing });
            }
            let k = k as u128;
            if k != 1 {
                if !bounded && 100 % k == 0 {
                    // Decided by the last two digits: no automaton, and a regex.
                    return Ok(multiples(k as u64).expect("k divides 100"));
                }
                // Multiples have at most MULTIPLE_DIGITS digits (see `multiples`).
                let most = 10i128.pow(MULTIPLE_DIGITS) - 1;
                let lo_c = lo_i.map_or(-most, |l| l.max(-most));
                let hi_c = hi_i.map_or(most, |h| h.min(most));
                let limits = &self.limits;
                return number::multiples_in_range(k, Some(lo_c), Some(hi_c), limits).map_err(
                    |r| {
                        Fail::Limit(format!(
                            "`multipleOf` {step} at {here} needs more than {} ({r})",
                            r.limit_phrase()
                        ))
                    },
                );
            }
        }
        Ok(number::integer_range(lo_i, hi_i))
    }

    pub(super) fn number(&mut self, m: &Map<String, Value>, x: &Excluded) -> R<Node> {
        let here = self.here();
        let integral_step = m
            .get("multipleOf")
            .and_then(Value::as_f64)
            .is_some_and(|k| k > 0.0 && k.fract() == 0.0);
        let numbers_out = x.values.iter().any(Value::is_number);
        if !integral_step
            && !numbers_out
            && !x.multiples.is_empty()
            && x.multiples.iter().all(|&k| k == 1.0)
        {
            // Not an integer (`not: {type: integer}`): a fraction whose last digit is
            // not 0, no exponent, and at most 15 digits in all (more, and a validator's
            // f64 may round 1.0000000000000001 to the integer 1).
            let base = self.number_in_bounds(m, x)?;
            let digits = |lo, hi| Node::repeat(Node::class(vec![('0', '9')]), lo, Some(hi));
            let last = || Node::class(vec![('1', '9')]);
            let mut shapes = vec![Node::concat(vec![Node::lit("0."), digits(0, 14), last()])];
            for int_digits in 1..MULTIPLE_DIGITS {
                shapes.push(Node::concat(vec![
                    Node::class(vec![('1', '9')]),
                    digits(int_digits - 1, int_digits - 1),
                    Node::lit("."),
                    digits(0, MULTIPLE_DIGITS - 1 - int_digits),
                    last(),
                ]));
            }
            let fractional = Node::concat(vec![Node::opt(Node::lit("-")), Node::alt(shapes)]);
            return Node::intersect(&base, &fractional, &self.limits).map_err(|r| {
                Fail::Limit(format!(
                    "`not` at {here} takes integers out of numbers that need more than {} \
                     ({r})",
                    r.limit_phrase()
                ))
            });
        }
        if !integral_step && (!x.multiples.is_empty() || numbers_out) {
            // 1, 1.0 and 10e-1 are one number: a value or a step's multiples have
            // unboundedly many spellings among numbers with a fraction or an exponent.
            return Err(unsupported(
                "not",
                &here,
                "excluding values or multiples from numbers that are not integers",
            ));
        }
        self.number_in_bounds(m, x)
    }

    pub(super) fn number_in_bounds(
        &mut self,
        m: &Map<String, Value>,
        excluded: &Excluded,
    ) -> R<Node> {
        let here = self.here();
        if let Some(k) = m.get("multipleOf") {
            let kf = as_f64(k, "multipleOf", &here)?;
            if kf.fract() == 0.0 && kf > 0.0 {
                return self.integer(m, true, excluded);
            }
            // A decimal step: the numbers within the bounds, intersected with the step's
            // decimal multiples (no exponent, at most MULTIPLE_DIGITS digits).
            let (units, scale) = number::decimal_step(kf)
                .filter(|&(_, scale)| scale < MULTIPLE_DIGITS)
                .ok_or_else(|| {
                    unsupported(
                        "multipleOf",
                        &here,
                        &format!("a step of more than {} decimals", MULTIPLE_DIGITS - 1),
                    )
                })?;
            let mut bounds = m.clone();
            bounds.remove("multipleOf");
            let within = self.number_in_bounds(&bounds, excluded)?;
            let limits = &self.limits;
            return number::decimal_multiples(units, scale, MULTIPLE_DIGITS, limits)
                .and_then(|steps| Node::intersect(&within, &steps, limits))
                .map_err(|r| {
                    Fail::Limit(format!(
                        "`multipleOf` {kf} at {here} needs more than {} ({r})",
                        r.limit_phrase()
                    ))
                });
        }
        let (lo, hi) = self.bounds(m)?;
        if lo.is_none() && hi.is_none() {
            return Ok(number::any_number());
        }
        let to_bound = |b: Option<(f64, bool)>, key: &str| -> R<Option<Bound>> {
            match b {
                None => Ok(None),
                Some((v, ex)) if v.fract() == 0.0 && v.abs() < 1e30 => Ok(Some(Bound {
                    value: v as i128,
                    exclusive: ex,
                })),
                Some((v, _)) => Err(unsupported(
                    key,
                    &here,
                    &format!("number bound {v} is not an integer; number bounds must be integers"),
                )),
            }
        };
        let integral =
            |b: Option<FBound>| b.is_none_or(|(v, _)| v.fract() == 0.0 && v.abs() < 1e30);
        if !(integral(lo) && integral(hi)) {
            // A bound with a fraction: compared digit by digit with its decimal text.
            let decimal = |b: Option<FBound>, key: &str| -> R<Option<number::DecimalBound>> {
                b.map(|(v, ex)| {
                    number::DecimalBound::new(v, ex).ok_or_else(|| {
                        unsupported(key, &here, &format!("number bound {v} is past 10^38"))
                    })
                })
                .transpose()
            };
            let (lo, hi) = (decimal(lo, "minimum")?, decimal(hi, "maximum")?);
            return number::decimal_range(lo.as_ref(), hi.as_ref(), &self.limits).map_err(|r| {
                Fail::Limit(format!(
                    "the number bounds at {here} need more than {} ({r})",
                    r.limit_phrase()
                ))
            });
        }
        let lo = to_bound(lo, "minimum")?;
        let hi = to_bound(hi, "maximum")?;
        Ok(number::number_range(lo, hi))
    }
}
