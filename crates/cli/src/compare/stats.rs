//! The statistics of a comparison: pairwise verdicts in both orders, win rates, bootstrap
//! confidence intervals over problems (seeded, deterministic) and the Pareto frontier.

use std::collections::BTreeMap;

/// One evaluator's verdict on one ordering of a pair: the answer shown first (`First`) or
/// second (`Second`) is better, or neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    First,
    Second,
    Tie,
}

/// The outcome for strategy `a` against `b` on one problem and one evaluator, after both
/// orders were asked: `a` shown first, then `b` shown first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    AWins,
    BWins,
    /// Both orders said tie.
    Tie,
    /// The two orders picked different answers: counted as a tie.
    Disagree,
}

impl Outcome {
    /// `ab` is the verdict with `a` shown first, `ba` the one with `b` shown first.
    pub fn of(ab: Verdict, ba: Verdict) -> Self {
        match (ab, ba) {
            (Verdict::First, Verdict::Second) => Outcome::AWins,
            (Verdict::Second, Verdict::First) => Outcome::BWins,
            (Verdict::Tie, Verdict::Tie) => Outcome::Tie,
            _ => Outcome::Disagree,
        }
    }

    /// Whether both orders gave the same judgement.
    pub fn orders_agree(self) -> bool {
        self != Outcome::Disagree
    }

    /// `a`'s score: 1 for a win, ½ for a tie (or a disagreement), 0 for a loss.
    pub fn score_of_a(self) -> f64 {
        match self {
            Outcome::AWins => 1.0,
            Outcome::BWins => 0.0,
            Outcome::Tie | Outcome::Disagree => 0.5,
        }
    }
}

/// A point estimate with its bootstrap interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

/// splitmix64: a small, seeded, deterministic generator (the same seed gives the same
/// intervals on every machine).
pub struct SplitMix64(u64);

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`), without modulo bias.
    pub fn below(&mut self, n: usize) -> usize {
        let n = n as u64;
        let zone = u64::MAX - u64::MAX % n;
        loop {
            let x = self.next_u64();
            if x < zone {
                return (x % n) as usize;
            }
        }
    }
}

/// The `q` quantile (0..=1) of sorted values, linear between closest ranks.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    let frac = pos - lo as f64;
    sorted[lo] + (sorted[hi] - sorted[lo]) * frac
}

/// The mean of per-problem values, with a 95 % percentile-bootstrap interval: `samples`
/// resamples of the problems with replacement. `None` for no problems.
pub fn bootstrap_mean(per_problem: &[f64], samples: u32, seed: u64) -> Option<Estimate> {
    if per_problem.is_empty() {
        return None;
    }
    let n = per_problem.len();
    let value = per_problem.iter().sum::<f64>() / n as f64;
    let mut rng = SplitMix64::new(seed);
    let mut means: Vec<f64> = (0..samples.max(1))
        .map(|_| (0..n).map(|_| per_problem[rng.below(n)]).sum::<f64>() / n as f64)
        .collect();
    means.sort_by(f64::total_cmp);
    Some(Estimate {
        value,
        low: quantile(&means, 0.025),
        high: quantile(&means, 0.975),
    })
}

/// The pairwise results: problem → (a, b) with a < b in strategy order → the outcomes of
/// the evaluators that judged that pair.
pub type PairTable = BTreeMap<String, BTreeMap<(usize, usize), Vec<Outcome>>>;

/// Strategy `s`'s score against `t` on one problem: the mean over evaluators of its score
/// (win 1, tie ½, loss 0); `None` when no evaluator judged the pair there.
pub fn score_on_problem(
    pairs: &BTreeMap<(usize, usize), Vec<Outcome>>,
    s: usize,
    t: usize,
) -> Option<f64> {
    let (key, flip) = if s < t {
        ((s, t), false)
    } else {
        ((t, s), true)
    };
    let outcomes = pairs.get(&key).filter(|o| !o.is_empty())?;
    let mean = outcomes.iter().map(|o| o.score_of_a()).sum::<f64>() / outcomes.len() as f64;
    Some(if flip { 1.0 - mean } else { mean })
}

/// `s`'s win rate against every other strategy: per problem, the mean of its scores
/// against the opponents judged there; then the bootstrap mean over those problems.
pub fn win_rate(
    table: &PairTable,
    s: usize,
    strategies: usize,
    samples: u32,
    seed: u64,
) -> Option<Estimate> {
    let per_problem: Vec<f64> = table
        .values()
        .filter_map(|pairs| {
            let scores: Vec<f64> = (0..strategies)
                .filter(|&t| t != s)
                .filter_map(|t| score_on_problem(pairs, s, t))
                .collect();
            (!scores.is_empty()).then(|| scores.iter().sum::<f64>() / scores.len() as f64)
        })
        .collect();
    bootstrap_mean(&per_problem, samples, seed)
}

/// `s`'s win rate against `t` alone, bootstrapped over the problems where they were judged.
pub fn head_to_head(
    table: &PairTable,
    s: usize,
    t: usize,
    samples: u32,
    seed: u64,
) -> Option<Estimate> {
    let per_problem: Vec<f64> = table
        .values()
        .filter_map(|pairs| score_on_problem(pairs, s, t))
        .collect();
    bootstrap_mean(&per_problem, samples, seed)
}

/// (orders that agreed, pairs judged in both orders).
pub fn order_agreement(table: &PairTable) -> (usize, usize) {
    let all = table.values().flat_map(|p| p.values()).flatten();
    all.fold((0, 0), |(agree, n), o| {
        (agree + usize::from(o.orders_agree()), n + 1)
    })
}

/// Indices of the points on the Pareto frontier of (cost, quality): no other point costs
/// no more and scores no less, with one of the two strictly better.
pub fn pareto_frontier(points: &[(f64, f64)]) -> Vec<usize> {
    (0..points.len())
        .filter(|&i| {
            let (ci, qi) = points[i];
            !points
                .iter()
                .enumerate()
                .any(|(j, &(cj, qj))| j != i && cj <= ci && qj >= qi && (cj < ci || qj > qi))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_orders_must_agree_for_a_win() {
        use Verdict::*;
        assert_eq!(Outcome::of(First, Second), Outcome::AWins);
        assert_eq!(Outcome::of(Second, First), Outcome::BWins);
        assert_eq!(Outcome::of(Tie, Tie), Outcome::Tie);
        // Position bias: the first answer shown wins both times.
        assert_eq!(Outcome::of(First, First), Outcome::Disagree);
        assert_eq!(Outcome::of(Second, Second), Outcome::Disagree);
        assert_eq!(Outcome::of(First, Tie), Outcome::Disagree);
        assert_eq!(Outcome::Disagree.score_of_a(), 0.5);
        assert!(!Outcome::Disagree.orders_agree());
        assert!(Outcome::Tie.orders_agree());
    }

    #[test]
    fn quantiles_interpolate() {
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(quantile(&v, 0.0), 1.0);
        assert_eq!(quantile(&v, 0.5), 3.0);
        assert_eq!(quantile(&v, 1.0), 5.0);
        assert_eq!(quantile(&v, 0.125), 1.5);
    }

    #[test]
    fn bootstrap_of_constant_values_is_a_point() {
        let e = bootstrap_mean(&[0.75; 8], 500, 7).unwrap();
        assert_eq!((e.value, e.low, e.high), (0.75, 0.75, 0.75));
        assert!(bootstrap_mean(&[], 500, 7).is_none());
    }

    #[test]
    fn bootstrap_is_seeded_and_brackets_the_mean() {
        let v = [1.0, 0.0, 1.0, 1.0, 0.5, 0.0, 1.0, 1.0, 0.5, 1.0];
        let a = bootstrap_mean(&v, 2000, 42).unwrap();
        let b = bootstrap_mean(&v, 2000, 42).unwrap();
        assert_eq!(a, b, "the same seed gives the same interval");
        assert!((a.value - 0.7).abs() < 1e-12);
        assert!(a.low < a.value && a.value < a.high);
        assert!(a.low >= 0.0 && a.high <= 1.0);
        // The mean of 10 values from {0, .5, 1} with sd ≈ 0.4: the 95 % interval is about
        // ±0.25 wide on each side, not a point and not the whole range.
        assert!(a.high - a.low > 0.2 && a.high - a.low < 0.7, "{a:?}");
        let spread = [0.13, 0.92, 0.55, 0.71, 0.08, 0.34, 0.99, 0.61, 0.27, 0.48];
        let c = bootstrap_mean(&spread, 2000, 42).unwrap();
        let d = bootstrap_mean(&spread, 2000, 43).unwrap();
        assert_eq!(c.value, d.value);
        assert_ne!(
            (c.low, c.high),
            (d.low, d.high),
            "another seed, other resamples"
        );
    }

    #[test]
    fn bootstrap_of_two_problems_has_known_quantiles() {
        // Resampling [0, 1]: means 0 (¼), ½ (½), 1 (¼); the 2.5 % and 97.5 % quantiles of
        // 4000 resamples are 0 and 1, and about half the means are ½.
        let e = bootstrap_mean(&[0.0, 1.0], 4000, 11).unwrap();
        assert_eq!((e.value, e.low, e.high), (0.5, 0.0, 1.0));
        let mut rng = SplitMix64::new(11);
        let halves = (0..4000)
            .filter(|_| rng.below(2) + rng.below(2) == 1)
            .count();
        assert!((1800..2200).contains(&halves), "{halves}");
    }

    #[test]
    fn win_rates_average_over_opponents_then_problems() {
        // Three strategies, two problems, one evaluator each.
        let mut table = PairTable::new();
        let p1 = table.entry("p1".into()).or_default();
        p1.insert((0, 1), vec![Outcome::AWins]);
        p1.insert((0, 2), vec![Outcome::Disagree]);
        p1.insert((1, 2), vec![Outcome::BWins]);
        let p2 = table.entry("p2".into()).or_default();
        p2.insert((0, 1), vec![Outcome::BWins, Outcome::AWins]);
        p2.insert((0, 2), vec![Outcome::AWins]);
        p2.insert((1, 2), vec![Outcome::Tie]);
        // Strategy 0: p1 (1 + .5)/2 = .75, p2 (.5 + 1)/2 = .75.
        assert_eq!(win_rate(&table, 0, 3, 100, 1).unwrap().value, 0.75);
        // Strategy 1: p1 (0 + 0)/2 = 0, p2 (.5 + .5)/2 = .5 → .25.
        assert_eq!(win_rate(&table, 1, 3, 100, 1).unwrap().value, 0.25);
        // Strategy 2: p1 (.5 + 1)/2 = .75, p2 (0 + .5)/2 = .25 → .5.
        assert_eq!(win_rate(&table, 2, 3, 100, 1).unwrap().value, 0.5);
        // Win rates of all strategies average to one half.
        // Head to head, seen from either side.
        assert_eq!(head_to_head(&table, 0, 1, 100, 1).unwrap().value, 0.75);
        assert_eq!(head_to_head(&table, 1, 0, 100, 1).unwrap().value, 0.25);
        assert_eq!(order_agreement(&table), (6, 7));
    }

    #[test]
    fn frontier_keeps_undominated_points() {
        let pts = [(1.0, 5.0), (2.0, 7.0), (3.0, 6.0), (0.5, 4.0), (2.0, 7.0)];
        // (3, 6) is dominated by (2, 7); the two equal (2, 7) points do not dominate
        // each other.
        assert_eq!(pareto_frontier(&pts), vec![0, 1, 3, 4]);
    }

    #[test]
    fn below_stays_in_range() {
        let mut r = SplitMix64::new(3);
        let mut seen = [false; 5];
        for _ in 0..200 {
            seen[r.below(5)] = true;
        }
        assert!(seen.iter().all(|s| *s));
    }
}
