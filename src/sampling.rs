//! Choosing the next token from logits: mask, bias, penalties, temperature, truncation, draw.
//!
//! The order is fixed and each stage only ever removes tokens, so a token the constraint's
//! mask forbids can never be drawn, whatever the bias or temperature:
//! 1. the token mask (bit clear → the token is out);
//! 2. `logit_bias` (added to the logits of allowed tokens);
//! 3. repetition (divide a positive logit, multiply a negative one), frequency (× count) and
//!    presence penalties, over the history the caller passes;
//! 4. temperature (0 = greedy: the largest remaining logit, ties to the lowest id);
//! 5. top-k, then top-p (the smallest set whose probability reaches p), then min-p (drop
//!    tokens below `min_p ×` the top probability);
//! 6. a draw from what is left with a seeded generator, so a seed reproduces the output.

use crate::error::{Error, Result};
use crate::vocab::TokenId;

/// The next output of the SplitMix64 generator whose state is `state`: the crate's one seeded
/// generator (sampling, tool-call ids, synthetic test models), so a seed reproduces everything.
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Sampling settings (OpenAI / llama.cpp names; every default turns its stage off).
#[derive(Debug, Clone, PartialEq)]
pub struct Params {
    /// 0 = greedy; otherwise logits are divided by it.
    pub temperature: f32,
    /// Keep the k most likely tokens; 0 = off.
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches `top_p`; 1 = off.
    pub top_p: f32,
    /// Drop tokens below `min_p ×` the top token's probability; 0 = off.
    pub min_p: f32,
    /// 1 = off; > 1 discourages tokens already in the history.
    pub repetition_penalty: f32,
    /// Subtracted once per occurrence in the history.
    pub frequency_penalty: f32,
    /// Subtracted once if the token occurs in the history.
    pub presence_penalty: f32,
    /// Added to a token's logit (when the mask allows it).
    pub logit_bias: Vec<(TokenId, f32)>,
    pub seed: u64,
}

impl Default for Params {
    fn default() -> Self {
        Params {
            temperature: 1.0,
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repetition_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            logit_bias: Vec::new(),
            seed: 0,
        }
    }
}

impl Params {
    /// Greedy decoding (temperature 0).
    pub fn greedy() -> Self {
        Params {
            temperature: 0.0,
            ..Params::default()
        }
    }

    /// Checks every field's range; the error names the field.
    pub fn validate(&self) -> Result<()> {
        let bad = |param: &str, what: String| Err(Error::invalid_input(what).with_param(param));
        if !(self.temperature.is_finite() && self.temperature >= 0.0) {
            return bad(
                "temperature",
                format!("temperature {} must be a number ≥ 0", self.temperature),
            );
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return bad("top_p", format!("top_p {} must be in (0, 1]", self.top_p));
        }
        if !(0.0..=1.0).contains(&self.min_p) {
            return bad("min_p", format!("min_p {} must be in [0, 1]", self.min_p));
        }
        if !(self.repetition_penalty.is_finite() && self.repetition_penalty > 0.0) {
            return bad(
                "repetition_penalty",
                format!("repetition_penalty {} must be > 0", self.repetition_penalty),
            );
        }
        for (name, v) in [
            ("frequency_penalty", self.frequency_penalty),
            ("presence_penalty", self.presence_penalty),
        ] {
            if !(-2.0..=2.0).contains(&v) {
                return bad(name, format!("{name} {v} must be in [-2, 2]"));
            }
        }
        if let Some((id, b)) = self
            .logit_bias
            .iter()
            .find(|(_, b)| !(-100.0..=100.0).contains(b))
        {
            return bad(
                "logit_bias",
                format!("logit_bias {b} for token {id} must be in [-100, 100]"),
            );
        }
        Ok(())
    }
}

/// What a device (the GPU's `shaders/sample.wgsl`) needs to choose a token the way
/// [`Sampler::sample`] would: the settings it implements and this step's draw, made on the CPU
/// from the sampler's own generator so both sides use the same number.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DeviceSampling {
    /// 0 = greedy.
    pub temperature: f32,
    /// 0 = off.
    pub top_k: usize,
    /// 1 = off.
    pub top_p: f32,
    /// 0 = off.
    pub min_p: f32,
    /// The uniform draw in [0, 1) [`Sampler::sample`] would make at this step (0 when greedy,
    /// which draws nothing).
    pub uniform: f64,
}

/// A sampler: the settings plus the random generator's state.
#[derive(Debug, Clone)]
pub struct Sampler {
    params: Params,
    rng: u64,
    /// Scratch: (token, logit or probability) candidates.
    cands: Vec<(TokenId, f32)>,
}

impl Sampler {
    /// A sampler with validated settings, its generator seeded from `params.seed`.
    pub fn new(params: Params) -> Result<Self> {
        params.validate()?;
        let rng = params.seed ^ 0x5851_f42d_4c95_7f2d;
        Ok(Sampler {
            params,
            rng,
            cands: Vec::new(),
        })
    }

    /// The settings.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Whether a device can choose the token with these settings: everything but
    /// `logit_bias` and the penalties, which need the logits on the CPU (a request with them
    /// reads the logits back and samples here).
    pub fn runs_on_device(&self) -> bool {
        let p = &self.params;
        p.logit_bias.is_empty()
            && p.repetition_penalty == 1.0
            && p.frequency_penalty == 0.0
            && p.presence_penalty == 0.0
    }

    /// This step's settings and draw for a device, advancing the generator exactly as
    /// [`Sampler::sample`] would (one draw per non-greedy step); `None` when
    /// [`Sampler::runs_on_device`] is false.
    pub fn device_step(&mut self) -> Option<DeviceSampling> {
        if !self.runs_on_device() {
            return None;
        }
        let p = &self.params;
        let (temperature, top_k, top_p, min_p) = (p.temperature, p.top_k, p.top_p, p.min_p);
        let uniform = if temperature == 0.0 {
            0.0
        } else {
            self.next_f64()
        };
        Some(DeviceSampling {
            temperature,
            top_k,
            top_p,
            min_p,
            uniform,
        })
    }

    fn next_f64(&mut self) -> f64 {
        (splitmix64(&mut self.rng) >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Picks the next token. `mask` (bit i of word i/32 = token i allowed, as
    /// [`crate::mask::TokenMask`]) may be `None` for unconstrained decoding; `history` is what
    /// the penalties count (typically the generated tokens). `logits` is modified in place
    /// (masked entries become −∞, bias and penalties are applied).
    pub fn sample(
        &mut self,
        logits: &mut [f32],
        mask: Option<&[u32]>,
        history: &[TokenId],
    ) -> Result<TokenId> {
        if let Some(mask) = mask {
            crate::mask::apply_token_mask(logits, mask)?;
        }
        let p = &self.params;
        for &(id, b) in &p.logit_bias {
            if let Some(l) = logits.get_mut(id as usize) {
                if *l != f32::NEG_INFINITY {
                    *l += b;
                }
            }
        }
        if p.repetition_penalty != 1.0 || p.frequency_penalty != 0.0 || p.presence_penalty != 0.0 {
            let mut counts: Vec<(TokenId, u32)> = Vec::new();
            let mut sorted = history.to_vec();
            sorted.sort_unstable();
            for id in sorted {
                match counts.last_mut() {
                    Some((last, n)) if *last == id => *n += 1,
                    _ => counts.push((id, 1)),
                }
            }
            for (id, n) in counts {
                let Some(l) = logits.get_mut(id as usize) else {
                    continue;
                };
                if *l == f32::NEG_INFINITY {
                    continue;
                }
                if *l > 0.0 {
                    *l /= p.repetition_penalty;
                } else {
                    *l *= p.repetition_penalty;
                }
                *l -= n as f32 * p.frequency_penalty + p.presence_penalty;
            }
        }
        let no_token = || {
            Error::no_allowed_token(
                "no token is allowed at this step: the mask and logits leave nothing to sample",
            )
        };
        if p.temperature == 0.0 {
            let id = argmax(logits);
            return if logits
                .get(id as usize)
                .is_some_and(|l| *l > f32::NEG_INFINITY)
            {
                Ok(id)
            } else {
                Err(no_token())
            };
        }
        let temperature = p.temperature;
        let (top_k, top_p, min_p) = (p.top_k, p.top_p, p.min_p);
        let cands = &mut self.cands;
        cands.clear();
        cands.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, l)| **l > f32::NEG_INFINITY && !l.is_nan())
                .map(|(i, &l)| (i as TokenId, l / temperature)),
        );
        if cands.is_empty() {
            return Err(no_token());
        }
        let by_logit_desc =
            |a: &(TokenId, f32), b: &(TokenId, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if top_k > 0 && top_k < cands.len() {
            cands.select_nth_unstable_by(top_k - 1, by_logit_desc);
            cands.truncate(top_k);
        }
        cands.sort_unstable_by(by_logit_desc);
        // Softmax in f64 over what is left.
        let max = cands[0].1;
        let mut probs: Vec<f64> = cands
            .iter()
            .map(|&(_, l)| f64::from(l - max).exp())
            .collect();
        let total: f64 = probs.iter().sum();
        probs.iter_mut().for_each(|q| *q /= total);
        let mut keep = probs.len();
        if top_p < 1.0 {
            let mut acc = 0.0;
            for (i, q) in probs.iter().enumerate() {
                acc += q;
                if acc >= f64::from(top_p) {
                    keep = i + 1;
                    break;
                }
            }
        }
        if min_p > 0.0 {
            let floor = probs[0] * f64::from(min_p);
            keep = keep.min(probs.iter().take_while(|&&q| q >= floor).count().max(1));
        }
        let kept: f64 = probs[..keep].iter().sum();
        let mut r = self.next_f64() * kept;
        for (i, q) in probs[..keep].iter().enumerate() {
            if r < *q {
                return Ok(self.cands[i].0);
            }
            r -= q;
        }
        Ok(self.cands[keep - 1].0)
    }
}

/// The index of the largest logit (the lowest index among ties; NaN never wins).
pub fn argmax(logits: &[f32]) -> TokenId {
    let mut best = 0;
    let mut best_v = f32::NEG_INFINITY;
    for (i, &v) in logits.iter().enumerate() {
        if v > best_v {
            best = i;
            best_v = v;
        }
    }
    best as TokenId
}

/// The `k` largest logits as `(id, logit)`, largest first (ties to the lower id).
pub fn top_k(logits: &[f32], k: usize) -> Vec<(TokenId, f32)> {
    let mut all: Vec<(TokenId, f32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &l)| (i as TokenId, l))
        .collect();
    let by_desc = |a: &(TokenId, f32), b: &(TokenId, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
    let k = k.min(all.len());
    if k == 0 {
        return Vec::new();
    }
    all.select_nth_unstable_by(k - 1, by_desc);
    all.truncate(k);
    all.sort_unstable_by(by_desc);
    all
}

/// Natural-log softmax of `logits` (computed in f64), for log-probabilities.
pub fn log_softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let lse = f64::from(max)
        + logits
            .iter()
            .map(|&l| f64::from(l - max).exp())
            .sum::<f64>()
            .ln();
    logits
        .iter()
        .map(|&l| (f64::from(l) - lse) as f32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mask::TokenMask;

    fn sampler(p: Params) -> Sampler {
        Sampler::new(p).unwrap()
    }

    #[test]
    fn greedy_takes_the_largest_allowed_logit() {
        let mut s = sampler(Params::greedy());
        assert_eq!(s.sample(&mut [0.1, 3.0, 2.0], None, &[]).unwrap(), 1);
        let mask = TokenMask::from_words(vec![0b101], 3).unwrap();
        assert_eq!(
            s.sample(&mut [0.1, 3.0, 2.0], Some(mask.words()), &[])
                .unwrap(),
            2
        );
        let none = TokenMask::none(3);
        let err = s
            .sample(&mut [0.1, 3.0, 2.0], Some(none.words()), &[])
            .unwrap_err();
        assert_eq!(err.code(), "no_allowed_token");
    }

    #[test]
    fn a_masked_token_is_never_drawn_whatever_the_bias_or_temperature() {
        let mask = TokenMask::from_words(vec![0b0110], 4).unwrap();
        let p = Params {
            temperature: 5.0,
            logit_bias: vec![(0, 100.0), (3, 100.0)],
            seed: 3,
            ..Params::default()
        };
        let mut s = sampler(p);
        for _ in 0..500 {
            let t = s
                .sample(&mut [9.0, 0.0, 0.0, 9.0], Some(mask.words()), &[])
                .unwrap();
            assert!(t == 1 || t == 2, "drew masked token {t}");
        }
    }

    #[test]
    fn a_seed_reproduces_the_draws() {
        let draw = |seed| {
            let mut s = sampler(Params {
                seed,
                ..Params::default()
            });
            (0..50)
                .map(|_| s.sample(&mut [0.0; 16], None, &[]).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn draws_follow_the_softmax() {
        let mut s = sampler(Params {
            seed: 1,
            ..Params::default()
        });
        let logits = [0.0f32, (2.0f32).ln(), (5.0f32).ln()]; // probabilities 1/8, 2/8, 5/8
        let mut counts = [0usize; 3];
        for _ in 0..8000 {
            counts[s.sample(&mut logits.clone(), None, &[]).unwrap() as usize] += 1;
        }
        for (c, want) in counts.iter().zip([1000.0, 2000.0, 5000.0]) {
            assert!((*c as f64 - want).abs() < 200.0, "{counts:?}");
        }
    }

    #[test]
    fn truncations_keep_the_right_sets() {
        let logits = [3.0f32, 2.0, 1.0, 0.0];
        let seen = |p: Params| {
            let mut s = sampler(Params { seed: 5, ..p });
            let mut seen = [false; 4];
            for _ in 0..400 {
                seen[s.sample(&mut logits.clone(), None, &[]).unwrap() as usize] = true;
            }
            seen
        };
        assert_eq!(
            seen(Params {
                top_k: 2,
                ..Params::default()
            }),
            [true, true, false, false]
        );
        // Probabilities ≈ 0.64, 0.24, 0.09, 0.03: top_p 0.8 keeps two, min_p 0.1 drops the last.
        assert_eq!(
            seen(Params {
                top_p: 0.8,
                ..Params::default()
            }),
            [true, true, false, false]
        );
        assert_eq!(
            seen(Params {
                min_p: 0.1,
                ..Params::default()
            }),
            [true, true, true, false]
        );
        assert_eq!(
            seen(Params {
                top_k: 1,
                temperature: 100.0,
                ..Params::default()
            }),
            [true, false, false, false]
        );
    }

    #[test]
    fn penalties_and_bias_change_the_greedy_choice() {
        let mut s = sampler(Params {
            repetition_penalty: 2.0,
            ..Params::greedy()
        });
        assert_eq!(s.sample(&mut [2.0, 1.5], None, &[0]).unwrap(), 1); // 2.0 / 2 < 1.5
        let mut s = sampler(Params {
            frequency_penalty: 0.4,
            ..Params::greedy()
        });
        assert_eq!(s.sample(&mut [2.0, 1.5], None, &[0]).unwrap(), 0); // 2.0 - 0.4 > 1.5
        assert_eq!(s.sample(&mut [2.0, 1.5], None, &[0, 0]).unwrap(), 1); // 2.0 - 0.8 < 1.5
        let mut s = sampler(Params {
            presence_penalty: 1.0,
            ..Params::greedy()
        });
        assert_eq!(s.sample(&mut [2.0, 1.5], None, &[0, 0, 0]).unwrap(), 1);
        let mut s = sampler(Params {
            logit_bias: vec![(1, 1.0)],
            ..Params::greedy()
        });
        assert_eq!(s.sample(&mut [2.0, 1.5], None, &[]).unwrap(), 1);
    }

    #[test]
    fn bad_settings_name_the_field() {
        for (p, param) in [
            (
                Params {
                    temperature: -1.0,
                    ..Params::default()
                },
                "temperature",
            ),
            (
                Params {
                    top_p: 0.0,
                    ..Params::default()
                },
                "top_p",
            ),
            (
                Params {
                    min_p: 2.0,
                    ..Params::default()
                },
                "min_p",
            ),
            (
                Params {
                    presence_penalty: 3.0,
                    ..Params::default()
                },
                "presence_penalty",
            ),
            (
                Params {
                    logit_bias: vec![(0, 101.0)],
                    ..Params::default()
                },
                "logit_bias",
            ),
        ] {
            assert_eq!(Sampler::new(p).unwrap_err().param(), Some(param));
        }
    }

    #[test]
    fn helpers() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, f32::NAN]), 1);
        assert_eq!(top_k(&[1.0, 3.0, 2.0], 2), [(1, 3.0), (2, 2.0)]);
        let lp = log_softmax(&[0.0, 0.0]);
        assert!((lp[0] - (0.5f32).ln()).abs() < 1e-6);
    }
}
