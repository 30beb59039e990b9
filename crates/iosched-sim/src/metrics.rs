//! Streaming latency statistics: an HDR histogram per process and direction plus exact moments.
//! Memory is fixed per process, whatever the run length.

use hdrhistogram::Histogram;

use crate::result::{DirectionResult, SampleSummary, FIO_PERCENTILES};

/// Running statistics of samples (Welford's mean and sum of squared deviations), mergeable across processes as
/// fio's group reporting pools its threads' samples.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SampleStats {
    n: u64,
    mean: f64,
    m2: f64,
    min: f64,
    max: f64,
}

impl SampleStats {
    pub fn add(&mut self, x: f64) {
        self.merge(&SampleStats {
            n: 1,
            mean: x,
            m2: 0.0,
            min: x,
            max: x,
        });
    }

    pub fn merge(&mut self, other: &SampleStats) {
        if other.n == 0 {
            return;
        }
        if self.n == 0 {
            *self = other.clone();
            return;
        }
        let n = self.n + other.n;
        let delta = other.mean - self.mean;
        self.mean += delta * other.n as f64 / n as f64;
        self.m2 += other.m2 + delta * delta * self.n as f64 * other.n as f64 / n as f64;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.n = n;
    }

    pub fn summary(&self) -> SampleSummary {
        SampleSummary {
            samples: self.n,
            min: if self.n > 0 { self.min } else { 0.0 },
            max: if self.n > 0 { self.max } else { 0.0 },
            mean: self.mean,
            stddev: if self.n > 1 {
                (self.m2 / (self.n - 1) as f64).max(0.0).sqrt()
            } else {
                0.0
            },
        }
    }
}

/// Highest latency the histograms track (100 s); larger values are clamped into the top bucket.
const MAX_LATENCY_NS: u64 = 100_000_000_000;
/// Two significant digits: buckets are within 1% (fio's own histogram is within ~1.6%).
const SIGNIFICANT_DIGITS: u8 = 2;

#[derive(Clone)]
pub struct LatencyStats {
    histogram: Option<Histogram<u64>>,
    pub ios: u64,
    pub bytes: u64,
    sum_ns: f64,
    sum_sq_ns: f64,
    min_ns: u64,
    max_ns: u64,
}

impl Default for LatencyStats {
    fn default() -> Self {
        Self {
            histogram: None,
            ios: 0,
            bytes: 0,
            sum_ns: 0.0,
            sum_sq_ns: 0.0,
            min_ns: u64::MAX,
            max_ns: 0,
        }
    }
}

impl LatencyStats {
    #[inline]
    pub fn record(&mut self, latency_ns: u64, bytes: u64) {
        let histogram = self.histogram.get_or_insert_with(|| {
            Histogram::new_with_bounds(1, MAX_LATENCY_NS, SIGNIFICANT_DIGITS)
                .expect("valid histogram bounds")
        });
        histogram.saturating_record(latency_ns.max(1));
        self.record_moments(latency_ns, bytes);
    }

    /// Count, bytes and moments only, without the histogram (no percentiles or bins in the result): for the
    /// latencies fio reports as five statistics unless asked (slat; lat without lat_percentiles), which would
    /// otherwise cost a histogram update per I/O on the hot path.
    #[inline]
    pub fn record_moments(&mut self, latency_ns: u64, bytes: u64) {
        self.ios += 1;
        self.bytes += bytes;
        let l = latency_ns as f64;
        self.sum_ns += l;
        self.sum_sq_ns += l * l;
        self.min_ns = self.min_ns.min(latency_ns);
        self.max_ns = self.max_ns.max(latency_ns);
    }

    pub fn merge(&mut self, other: &LatencyStats) {
        if let Some(h) = &other.histogram {
            match &mut self.histogram {
                Some(mine) => mine.add(h).expect("histograms with equal bounds"),
                None => self.histogram = Some(h.clone()),
            }
        }
        self.ios += other.ios;
        self.bytes += other.bytes;
        self.sum_ns += other.sum_ns;
        self.sum_sq_ns += other.sum_sq_ns;
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    pub fn result(&self) -> DirectionResult {
        if self.ios == 0 {
            return DirectionResult::default();
        }
        let n = self.ios as f64;
        let mean = self.sum_ns / n;
        let variance = if self.ios > 1 {
            ((self.sum_sq_ns - n * mean * mean) / (n - 1.0)).max(0.0)
        } else {
            0.0
        };
        DirectionResult {
            ios: self.ios,
            bytes: self.bytes,
            clat_min_ns: self.min_ns,
            clat_max_ns: self.max_ns,
            clat_mean_ns: mean,
            clat_stddev_ns: variance.sqrt(),
            percentiles: self.histogram.as_ref().map_or_else(Vec::new, |h| {
                FIO_PERCENTILES
                    .iter()
                    .map(|&p| {
                        (
                            p,
                            h.highest_equivalent(h.value_at_quantile(p / 100.0))
                                .min(self.max_ns),
                        )
                    })
                    .collect()
            }),
            bins: self.histogram.as_ref().map_or_else(Vec::new, |h| {
                h.iter_recorded()
                    .map(|v| {
                        (
                            h.highest_equivalent(v.value_iterated_to()),
                            v.count_at_value(),
                        )
                    })
                    .collect()
            }),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_moments_and_bins_follow_the_recorded_values() {
        let mut stats = LatencyStats::default();
        for v in 1..=1000u64 {
            stats.record(v * 1_000, 4096);
        }
        let r = stats.result();
        assert_eq!(
            (r.ios, r.bytes, r.clat_min_ns, r.clat_max_ns),
            (1000, 4_096_000, 1_000, 1_000_000)
        );
        assert!((r.clat_mean_ns - 500_500.0).abs() < 1e-6);
        let p99 = r.percentiles.iter().find(|p| p.0 == 99.0).unwrap().1;
        assert!((p99 as f64 - 990_000.0).abs() / 990_000.0 < 0.01, "{p99}");
        assert_eq!(r.bins.iter().map(|b| b.1).sum::<u64>(), 1000);
    }

    #[test]
    fn merging_equals_recording_into_one() {
        let (mut a, mut b, mut both) = (
            LatencyStats::default(),
            LatencyStats::default(),
            LatencyStats::default(),
        );
        for v in 0..500u64 {
            a.record(1_000 + v * 7, 512);
            both.record(1_000 + v * 7, 512);
            b.record(90_000 + v * 13, 512);
            both.record(90_000 + v * 13, 512);
        }
        a.merge(&b);
        let (x, y) = (a.result(), both.result());
        assert_eq!(x.percentiles, y.percentiles);
        assert_eq!(x.bins, y.bins);
        assert!((x.clat_mean_ns - y.clat_mean_ns).abs() < 1e-6);
    }

    #[test]
    fn nothing_recorded_gives_zeros() {
        assert_eq!(LatencyStats::default().result(), DirectionResult::default());
    }
}
