//! Token masks: one bit per vocabulary token, bit `i` of word `i / 32` is token `i`.
//!
//! The same layout crosses to JavaScript as a `Uint32Array` and to the GPU as a
//! `array<u32>` storage buffer, so a mask is never converted on its way to the sampler.

use crate::error::{Error, Result};

/// Number of `u32` words a mask over `vocab_size` tokens needs.
pub const fn words_for(vocab_size: usize) -> usize {
    vocab_size.div_ceil(32)
}

/// A set of allowed token ids over a vocabulary of fixed size.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenMask {
    words: Vec<u32>,
    vocab_size: usize,
}

impl std::fmt::Debug for TokenMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenMask")
            .field("vocab_size", &self.vocab_size)
            .field("allowed", &self.count_allowed())
            .finish()
    }
}

impl TokenMask {
    /// A mask that allows no token.
    pub fn none(vocab_size: usize) -> Self {
        TokenMask {
            words: vec![0; words_for(vocab_size)],
            vocab_size,
        }
    }

    /// A mask that allows every token.
    pub fn all(vocab_size: usize) -> Self {
        let mut mask = Self::none(vocab_size);
        mask.words.fill(u32::MAX);
        mask.clear_padding();
        mask
    }

    /// Wraps caller-provided words; bits past `vocab_size` are cleared.
    pub fn from_words(words: Vec<u32>, vocab_size: usize) -> Result<Self> {
        check_mask_len(words.len(), vocab_size)?;
        let mut mask = TokenMask { words, vocab_size };
        mask.clear_padding();
        Ok(mask)
    }

    fn clear_padding(&mut self) {
        let tail = self.vocab_size % 32;
        if tail != 0 {
            if let Some(last) = self.words.last_mut() {
                *last &= (1u32 << tail) - 1;
            }
        }
    }

    /// The vocabulary size this mask covers.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// The raw words (bit `i % 32` of word `i / 32` is token `i`).
    pub fn words(&self) -> &[u32] {
        &self.words
    }

    /// Mutable raw words, for filling in place.
    pub fn words_mut(&mut self) -> &mut [u32] {
        &mut self.words
    }

    /// Whether token `id` is allowed; ids outside the vocabulary are not.
    pub fn is_allowed(&self, id: usize) -> bool {
        id < self.vocab_size && is_allowed(&self.words, id)
    }

    /// Allows token `id`. Panics if `id` is outside the vocabulary (a caller bug).
    pub fn allow(&mut self, id: usize) {
        assert!(
            id < self.vocab_size,
            "token {id} outside a vocabulary of {}",
            self.vocab_size
        );
        self.words[id / 32] |= 1 << (id % 32);
    }

    /// Number of allowed tokens.
    pub fn count_allowed(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }
}

#[inline]
fn is_allowed(words: &[u32], id: usize) -> bool {
    words[id / 32] >> (id % 32) & 1 == 1
}

/// Sets token `t`'s bit in mask words.
#[inline]
pub(crate) fn set_bit(words: &mut [u32], t: u32) {
    words[t as usize / 32] |= 1 << (t % 32);
}

/// Adds the tokens of mask words `other` to `words`.
#[inline]
pub(crate) fn or_words(words: &mut [u32], other: &[u32]) {
    for (w, o) in words.iter_mut().zip(other) {
        *w |= *o;
    }
}

pub(crate) fn check_mask_len(words: usize, vocab_size: usize) -> Result<()> {
    if vocab_size == 0 {
        return Err(Error::invalid_input("the vocabulary is empty (0 logits)").with_param("logits"));
    }
    let want = words_for(vocab_size);
    if words != want {
        return Err(Error::invalid_input(format!(
            "a mask over {vocab_size} tokens needs {want} u32 words, got {words}"
        ))
        .with_param("mask"));
    }
    Ok(())
}

/// Reads a logit as the kernels do: NaN counts as negative infinity, so a NaN never wins.
#[inline]
fn sanitized(logit: f32) -> f32 {
    if logit.is_nan() {
        f32::NEG_INFINITY
    } else {
        logit
    }
}

/// The CPU twin of `shaders/apply_token_mask.wgsl`.
///
/// Sets every disallowed logit to negative infinity (in place) and returns the index of the
/// largest allowed logit. Ties go to the lowest index; a NaN logit counts as negative infinity;
/// an allowed token whose logit is negative infinity can still be chosen when it is the only one.
/// A mask that allows no token is an error, never an arbitrary index.
pub fn apply_token_mask(logits: &mut [f32], mask: &[u32]) -> Result<u32> {
    check_mask_len(mask.len(), logits.len())?;
    check_vocab_size(logits.len())?;
    let mut best: Option<(usize, f32)> = None;
    for (i, logit) in logits.iter_mut().enumerate() {
        if !is_allowed(mask, i) {
            *logit = f32::NEG_INFINITY;
            continue;
        }
        let value = sanitized(*logit);
        match best {
            Some((_, best_value)) if value <= best_value => {}
            _ => best = Some((i, value)),
        }
    }
    match best {
        Some((index, _)) => Ok(index as u32),
        None => Err(no_allowed_token(logits.len())),
    }
}

/// The error for a mask with no bit set, shared with the GPU path so both say the same.
pub(crate) fn no_allowed_token(vocab_size: usize) -> Error {
    Error::no_allowed_token(format!(
        "the token mask allows none of the {vocab_size} tokens, so no token can be chosen"
    ))
    .with_param("mask")
}

/// Token ids are `u32` with `u32::MAX` reserved as the kernels' "none" sentinel.
pub(crate) fn check_vocab_size(vocab_size: usize) -> Result<()> {
    if vocab_size >= u32::MAX as usize {
        return Err(Error::limit_exceeded(format!(
            "a vocabulary of {vocab_size} tokens exceeds the limit of {} tokens",
            u32::MAX - 1
        ))
        .with_param("logits"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_largest_allowed_logit() {
        let mut logits = vec![5.0, 1.0, 3.0, 9.0];
        let mask = [0b0110];
        assert_eq!(apply_token_mask(&mut logits, &mask).unwrap(), 2);
        assert_eq!(logits, vec![f32::NEG_INFINITY, 1.0, 3.0, f32::NEG_INFINITY]);
    }

    #[test]
    fn ties_go_to_lowest_index_and_nan_never_wins() {
        let mut logits = vec![f32::NAN, 2.0, 2.0, f32::NAN];
        assert_eq!(apply_token_mask(&mut logits, &[0b1111]).unwrap(), 1);
        let mut only_nan = vec![f32::NAN, 7.0];
        assert_eq!(apply_token_mask(&mut only_nan, &[0b01]).unwrap(), 0);
    }

    #[test]
    fn all_zero_mask_is_an_error_not_an_index() {
        let mut logits = vec![1.0; 33];
        let err = apply_token_mask(&mut logits, &[0, 0]).unwrap_err();
        assert_eq!(err.code(), "no_allowed_token");
        assert_eq!(err.param(), Some("mask"));
        assert!(err.to_string().contains("none of the 33 tokens"), "{err}");
    }

    #[test]
    fn wrong_mask_length_names_both_sizes() {
        let mut logits = vec![1.0; 33];
        let err = apply_token_mask(&mut logits, &[1]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "a mask over 33 tokens needs 2 u32 words, got 1"
        );
        assert!(apply_token_mask(&mut [], &[]).is_err());
    }

    #[test]
    fn padding_bits_past_the_vocabulary_are_ignored() {
        let mask = TokenMask::from_words(vec![u32::MAX], 5).unwrap();
        assert_eq!(mask.count_allowed(), 5);
        assert!(!mask.is_allowed(5));
        assert_eq!(TokenMask::all(33).count_allowed(), 33);
    }
}
