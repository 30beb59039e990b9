//! fio's `random_distribution`: which block of its region a random I/O of a job addresses.
//!
//! The skewed kinds draw a popularity rank (1 = hottest) and scatter it over the region with a 64-bit hash, then
//! rotate by the distribution's center, as fio does; so the hot blocks lie all over the region rather than at its
//! start. The rank draws follow fio's methods (facts from its documentation and `lib/zipf.c`, `lib/gauss.c`):
//! - zipf: Gray et al.'s inversion ("Quickly generating billion-record synthetic databases", SIGMOD 1994), with the
//!   normalising sum H(N, theta) = sum of r^-theta over the N blocks. fio sums at most 10 M terms; this sums the
//!   first 1,000 and the rest by Euler-Maclaurin, so large regions keep the exact shape;
//! - pareto: rank = (N - 1) u^(ln h / ln(1 - h)) for u uniform in [0, 1), so P(rank < hN) = 1 - h;
//! - normal: a normal deviate with standard deviation `dev_percent` of N, folded to a distance from the center
//!   (fio sums uniforms for its deviate; a Box-Muller draw gives the same distribution).
//!
//! Simplification: the hash maps ranks to blocks modulo N, so two ranks can share a block, as in fio.

use rand::RngExt;
use rand_pcg::Pcg64;

use crate::config::RandomDistribution;
use crate::mix;

/// Terms of H(N, theta) summed one by one before the Euler-Maclaurin tail.
const EXACT_TERMS: u64 = 1_000;

/// Draws block indices in `0..blocks` from one job's distribution (a process keeps its own).
#[derive(Debug, Clone)]
pub struct BlockSampler {
    blocks: u64,
    kind: Kind,
    /// Where rank 1 lands before the hash's scatter (the distribution's center), in blocks.
    rotation: u64,
}

#[derive(Debug, Clone)]
enum Kind {
    Zipf {
        theta: f64,
        zeta_n: f64,
        alpha: f64,
        eta: f64,
    },
    Pareto {
        power: f64,
    },
    Normal {
        sigma_blocks: f64,
    },
}

impl BlockSampler {
    /// A sampler over `blocks` blocks; without a center, the rotation is drawn from `rng` (the job's seed).
    pub fn new(distribution: &RandomDistribution, blocks: u64, rng: &mut Pcg64) -> Self {
        let blocks = blocks.max(1);
        let n = blocks as f64;
        let (kind, center) = match *distribution {
            RandomDistribution::Zipf { theta, center } => {
                let zeta_n = harmonic(blocks, theta);
                let zeta_2 = 1.0 + 0.5f64.powf(theta);
                let alpha = 1.0 / (1.0 - theta);
                let eta = (1.0 - (2.0 / n).powf(1.0 - theta)) / (1.0 - zeta_2 / zeta_n);
                (
                    Kind::Zipf {
                        theta,
                        zeta_n,
                        alpha,
                        eta,
                    },
                    center,
                )
            }
            RandomDistribution::Pareto { h, center } => (
                Kind::Pareto {
                    power: h.ln() / (1.0 - h).ln(),
                },
                center,
            ),
            RandomDistribution::Normal {
                dev_percent,
                center,
            } => (
                Kind::Normal {
                    sigma_blocks: n * dev_percent / 100.0,
                },
                center,
            ),
        };
        let rotation = match center {
            Some(c) => ((n * c.clamp(0.0, 1.0)) as u64).min(blocks - 1),
            None => rng.random_range(0..blocks),
        };
        Self {
            blocks,
            kind,
            rotation,
        }
    }

    /// The popularity rank of the next I/O, 0 = hottest, below `blocks`.
    pub fn next_rank(&self, rng: &mut Pcg64) -> u64 {
        let n = self.blocks;
        let u: f64 = rng.random_range(0.0..1.0);
        let rank = match self.kind {
            Kind::Zipf {
                theta,
                zeta_n,
                alpha,
                eta,
            } => {
                let z = u * zeta_n;
                if z < 1.0 {
                    0
                } else if z < 1.0 + 0.5f64.powf(theta) {
                    1
                } else {
                    (n as f64 * (eta * u - eta + 1.0).powf(alpha)) as u64
                }
            }
            Kind::Pareto { power } => ((n - 1) as f64 * u.powf(power)) as u64,
            Kind::Normal { sigma_blocks } => {
                // Box-Muller; the second uniform is drawn away from 0 so its logarithm is finite.
                let v: f64 = rng.random_range(f64::EPSILON..1.0);
                let deviate = (-2.0 * v.ln()).sqrt() * (std::f64::consts::TAU * u).cos();
                (deviate * sigma_blocks).abs() as u64
            }
        };
        rank.min(n - 1)
    }

    /// The block of the next I/O: its rank scattered over the region and rotated to the center.
    pub fn next_block(&self, rng: &mut Pcg64) -> u64 {
        (mix(self.next_rank(rng)) % self.blocks + self.rotation) % self.blocks
    }
}

/// H(n, theta) = sum over r = 1..n of r^-theta: the first `EXACT_TERMS` summed, the rest by Euler-Maclaurin
/// (integral, end-point halves and the first derivative term), accurate to far below a part in a million there.
fn harmonic(n: u64, theta: f64) -> f64 {
    let exact = n.min(EXACT_TERMS);
    let head: f64 = (1..=exact).map(|r| (r as f64).powf(-theta)).sum();
    if n <= EXACT_TERMS {
        return head;
    }
    let (a, b) = (exact as f64, n as f64);
    let f = |x: f64| x.powf(-theta);
    let derivative = |x: f64| -theta * x.powf(-theta - 1.0);
    let integral = (b.powf(1.0 - theta) - a.powf(1.0 - theta)) / (1.0 - theta);
    // sum over (a, b] = integral + (f(b) - f(a)) / 2 + (f'(b) - f'(a)) / 12
    head + integral + (f(b) - f(a)) / 2.0 + (derivative(b) - derivative(a)) / 12.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    /// The share of `draws` ranks that fall below `below`, from a sampler over `blocks` blocks.
    fn share_below(distribution: RandomDistribution, blocks: u64, below: u64, draws: u32) -> f64 {
        let mut rng = Pcg64::seed_from_u64(1);
        let sampler = BlockSampler::new(&distribution, blocks, &mut rng);
        let hits = (0..draws)
            .filter(|_| sampler.next_rank(&mut rng) < below)
            .count();
        hits as f64 / draws as f64
    }

    #[test]
    fn harmonic_numbers_match_their_sums() {
        // H(10, 1.2) = 1 + 0.43528 + 0.26758 + 0.18946 + 0.14496 + 0.11647 + 0.09680 + 0.08247 + 0.07160
        // + 0.06310 = 2.46771.
        assert!((harmonic(10, 1.2) - 2.46771).abs() < 1e-5);
        // Past the exact terms the tail is Euler-Maclaurin's: against a plain sum of 100,000 terms.
        let plain: f64 = (1..=100_000u64).map(|r| (r as f64).powf(-0.8)).sum();
        assert!((harmonic(100_000, 0.8) - plain).abs() / plain < 1e-9);
    }

    #[test]
    fn pareto_h_0_2_sends_80_percent_of_the_io_to_20_percent_of_the_blocks() {
        // P(rank < hN) = P(u^p < h) with p = ln h / ln(1 - h): u < h^(1/p) = e^(ln(1 - h)) = 1 - h = 0.8.
        let pareto = RandomDistribution::Pareto {
            h: 0.2,
            center: None,
        };
        let share = share_below(pareto, 1_000_000, 200_000, 100_000);
        assert!((share - 0.8).abs() < 0.01, "{share}");
    }

    #[test]
    fn zipf_gives_the_hottest_block_one_over_h_of_the_io() {
        // Rank 1 has probability 1 / H(N, theta); N = 1,000, theta = 1.2: H = 4.3358, so 23.1%.
        let zipf = RandomDistribution::Zipf {
            theta: 1.2,
            center: None,
        };
        let expected = 1.0 / harmonic(1_000, 1.2);
        assert!((expected - 0.2306).abs() < 1e-3, "{expected}");
        let share = share_below(zipf, 1_000, 1, 200_000);
        assert!((share - expected).abs() < 0.005, "{share} vs {expected}");
        // Negative control: uniform draws give rank 0 one in 1,000.
        let mut rng = Pcg64::seed_from_u64(1);
        let uniform = (0..200_000)
            .filter(|_| rng.random_range(0..1_000u64) == 0)
            .count();
        assert!((uniform as f64 / 200_000.0) < 0.002);
    }

    #[test]
    fn normal_puts_68_percent_within_one_standard_deviation() {
        // dev 10% of 1,000,000 blocks: |deviate| < sigma = 100,000 blocks for 68.3% of the draws.
        let normal = RandomDistribution::Normal {
            dev_percent: 10.0,
            center: None,
        };
        let share = share_below(normal, 1_000_000, 100_000, 100_000);
        assert!((share - 0.683).abs() < 0.01, "{share}");
    }

    #[test]
    fn ranks_scatter_over_the_region_and_the_center_rotates_them() {
        let at = |center: f64| {
            let mut rng = Pcg64::seed_from_u64(1);
            let zipf = RandomDistribution::Zipf {
                theta: 1.2,
                center: Some(center),
            };
            let sampler = BlockSampler::new(&zipf, 1_000_000, &mut rng);
            (mix(0) % 1_000_000, sampler.rotation)
        };
        // Rank 0 (the hottest) lands where the hash puts it plus the rotation: center 0.5 is 500,000 blocks on.
        let (hashed, rotation) = at(0.5);
        assert_eq!(rotation, 500_000);
        assert_ne!(hashed, 0, "the hottest block is not the region's first");
        assert_eq!(at(0.0).1, 0);
    }
}
