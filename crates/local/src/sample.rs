//! Choosing the next token from the model's logits: repeat penalty, temperature, nucleus
//! (top-p) sampling over the most likely tokens, and an optional filter of the tokens that
//! may come next (the JSON constraint).

use crate::LocalError;

/// How many of the most likely tokens sampling considers (after the filter).
pub const TOP_K: usize = 40;

/// Sampling settings of one generation plus its random state.
#[derive(Debug, Clone)]
pub struct Sampler {
    temperature: f32,
    top_p: f32,
    repeat_penalty: f32,
    rng: SplitMix64,
    /// Reused buffers: the penalised logits and candidate ids.
    logits: Vec<f32>,
    ids: Vec<u32>,
}

impl Sampler {
    /// Checks the settings: temperature >= 0, top_p in [0, 1] (above 1 means 1), repeat
    /// penalty > 0. Temperature 0 or top_p 0 is greedy.
    pub fn new(
        temperature: f64,
        top_p: f64,
        repeat_penalty: f32,
        seed: u64,
    ) -> Result<Self, LocalError> {
        if !temperature.is_finite() || temperature < 0.0 {
            return Err(LocalError::InvalidRequest(format!(
                "temperature must be a number >= 0, got {temperature}"
            )));
        }
        if !top_p.is_finite() || top_p < 0.0 {
            return Err(LocalError::InvalidRequest(format!(
                "top_p must be a number in [0, 1], got {top_p}"
            )));
        }
        if !repeat_penalty.is_finite() || repeat_penalty <= 0.0 {
            return Err(LocalError::InvalidRequest(format!(
                "repeat_penalty must be a number > 0, got {repeat_penalty}"
            )));
        }
        Ok(Self {
            temperature: temperature as f32,
            top_p: top_p.min(1.0) as f32,
            repeat_penalty,
            rng: SplitMix64(seed),
            logits: Vec::new(),
            ids: Vec::new(),
        })
    }

    /// Whether this sampler always takes the most likely token.
    pub fn is_greedy(&self) -> bool {
        self.temperature == 0.0 || self.top_p == 0.0
    }

    /// Picks the next token. `recent` are the last generated tokens (penalised);
    /// `allowed(id)` says whether a token may come next. `None` when no token is allowed.
    pub fn sample(
        &mut self,
        logits: &[f32],
        recent: &[u32],
        mut allowed: impl FnMut(u32) -> bool,
    ) -> Option<u32> {
        self.logits.clear();
        self.logits.extend_from_slice(logits);
        if self.repeat_penalty != 1.0 {
            for &id in recent {
                if let Some(l) = self.logits.get_mut(id as usize) {
                    *l = if *l < 0.0 {
                        *l * self.repeat_penalty
                    } else {
                        *l / self.repeat_penalty
                    };
                }
            }
        }
        let l = &self.logits;
        let by_logit = |a: &u32, b: &u32| l[*b as usize].total_cmp(&l[*a as usize]);

        // The most likely tokens first; only when none of them is allowed, every allowed one.
        let k = TOP_K.min(l.len());
        if k == 0 {
            return None;
        }
        top_k(l, k, &mut self.ids);
        let mut candidates: Vec<u32> = self.ids[..k]
            .iter()
            .copied()
            .filter(|&id| allowed(id))
            .collect();
        if candidates.is_empty() {
            candidates = (0..l.len() as u32).filter(|&id| allowed(id)).collect();
            if candidates.len() > TOP_K {
                candidates.select_nth_unstable_by(TOP_K - 1, by_logit);
                candidates.truncate(TOP_K);
            }
        }
        candidates.sort_unstable_by(by_logit);
        let best = *candidates.first()?;
        if self.is_greedy() || candidates.len() == 1 {
            return Some(best);
        }
        let max = l[best as usize];
        let mut probs: Vec<f32> = candidates
            .iter()
            .map(|&id| ((l[id as usize] - max) / self.temperature).exp())
            .collect();
        let total: f32 = probs.iter().sum();
        // Nucleus: the smallest prefix whose mass reaches top_p.
        let mut mass = 0.0;
        let mut keep = probs.len();
        for (i, p) in probs.iter_mut().enumerate() {
            *p /= total;
            mass += *p;
            if mass >= self.top_p {
                keep = i + 1;
                break;
            }
        }
        let kept = &probs[..keep];
        let kept_total: f32 = kept.iter().sum();
        let mut r = self.rng.unit() as f32 * kept_total;
        for (i, p) in kept.iter().enumerate() {
            if r < *p {
                return Some(candidates[i]);
            }
            r -= p;
        }
        Some(candidates[keep - 1])
    }
}

/// Leaves in `ids` the indices of the `k` largest values of `l` (`k <= l.len()`, `k > 0`),
/// in no particular order, in one pass: indices at or above the running k-th largest
/// value are collected, and the collection is cut back to `k` whenever it reaches `4k`.
/// (Over a 49,152-token vocabulary this is ~10x faster than selecting among all ids.)
fn top_k(l: &[f32], k: usize, ids: &mut Vec<u32>) {
    let by_logit = |a: &u32, b: &u32| l[*b as usize].total_cmp(&l[*a as usize]);
    ids.clear();
    let cap = 4 * k;
    let mut threshold = f32::NEG_INFINITY;
    for (i, &v) in l.iter().enumerate() {
        // The same order as `by_logit` (a NaN ranks first, as before).
        if v.total_cmp(&threshold).is_ge() {
            ids.push(i as u32);
            if ids.len() == cap {
                ids.select_nth_unstable_by(k - 1, by_logit);
                ids.truncate(k);
                threshold = l[ids[k - 1] as usize];
            }
        }
    }
    if ids.len() > k {
        ids.select_nth_unstable_by(k - 1, by_logit);
        ids.truncate(k);
    }
}

/// A small seeded generator: the same seed gives the same text.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_best_allowed_token() {
        let logits = [0.1, 3.0, 2.0, -1.0];
        let mut s = Sampler::new(0.0, 1.0, 1.0, 1).unwrap();
        assert_eq!(s.sample(&logits, &[], |_| true), Some(1));
        assert_eq!(s.sample(&logits, &[], |id| id != 1), Some(2));
        assert_eq!(s.sample(&logits, &[], |id| id == 3), Some(3));
        assert_eq!(s.sample(&logits, &[], |_| false), None);
        // The repeat penalty demotes recent tokens (3.0 / 2 < 2.0).
        let mut s = Sampler::new(0.0, 1.0, 2.0, 1).unwrap();
        assert_eq!(s.sample(&logits, &[1], |_| true), Some(2));
    }

    #[test]
    fn sampling_follows_the_seed_and_the_distribution() {
        let logits: Vec<f32> = (0..100).map(|i| -(i as f32) * 0.5).collect();
        let draw = |seed| {
            let mut s = Sampler::new(1.0, 0.9, 1.0, seed).unwrap();
            (0..50)
                .map(|_| s.sample(&logits, &[], |_| true).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
        let xs = draw(7);
        // Top-p 0.9 of this distribution keeps the first few tokens only.
        assert!(xs.iter().all(|&x| x < 6), "{xs:?}");
        assert!(xs.iter().any(|&x| x != 0), "{xs:?}");
    }

    #[test]
    fn top_k_finds_the_largest_values() {
        // A pseudo-random vocabulary-sized vector, against a full sort.
        let l: Vec<f32> = (0..49_152u32)
            .map(|i| ((i.wrapping_mul(2_654_435_761) >> 7) % 100_000) as f32 / 997.0 - 50.0)
            .collect();
        for k in [1, 2, 40, 100] {
            let mut ids = Vec::new();
            top_k(&l, k, &mut ids);
            let mut got: Vec<f32> = ids.iter().map(|&i| l[i as usize]).collect();
            got.sort_by(|a, b| b.total_cmp(a));
            let mut all = l.clone();
            all.sort_by(|a, b| b.total_cmp(a));
            assert_eq!(got, all[..k].to_vec(), "k = {k}");
        }
        let mut ids = Vec::new();
        top_k(&[1.0, 5.0, 3.0], 3, &mut ids);
        ids.sort_unstable();
        assert_eq!(ids, vec![0, 1, 2]);
    }

    #[test]
    fn bad_settings_are_refused() {
        assert!(Sampler::new(-1.0, 1.0, 1.0, 0).is_err());
        assert!(Sampler::new(f64::NAN, 1.0, 1.0, 0).is_err());
        assert!(Sampler::new(1.0, -0.5, 1.0, 0).is_err());
        assert!(Sampler::new(1.0, 1.0, 0.0, 0).is_err());
        assert!(Sampler::new(0.7, 0.0, 1.0, 0).unwrap().is_greedy());
    }
}
