//! Percentiles over latency samples and medians over runs.

use std::time::Duration;

/// Percentile (0..=100) of unsorted samples, nearest-rank; zero when empty.
pub fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    if samples.is_empty() {
        return Duration::ZERO;
    }
    samples.sort_unstable();
    let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

pub fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// p50 and p99 of samples, in microseconds.
pub fn p50_p99(samples: &mut [Duration]) -> (f64, f64) {
    (
        micros(percentile(samples, 50.0)),
        micros(percentile(samples, 99.0)),
    )
}

/// Median of per-run values (the middle one; mean of the two middle ones for
/// an even count).
pub fn median(values: &[f64]) -> f64 {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub fn per_sec(count: usize, elapsed: Duration) -> f64 {
    count as f64 / elapsed.as_secs_f64().max(1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_nearest_rank() {
        let mut v: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        assert_eq!(percentile(&mut v, 50.0), Duration::from_micros(50));
        assert_eq!(percentile(&mut v, 99.0), Duration::from_micros(99));
        assert_eq!(percentile(&mut v, 100.0), Duration::from_micros(100));
    }

    #[test]
    fn median_of_runs() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
    }
}
