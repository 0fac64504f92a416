//! The Markdown report: one table of medians and ratios, plus notes.

use std::path::Path;

use anyhow::{Context as _, Result};

use crate::model::{Entry, Measure, Outcome, Unit};
use crate::targets::Context;

pub fn fmt_value(unit: Unit, v: f64) -> String {
    if !v.is_finite() {
        return "—".into();
    }
    match unit {
        Unit::Micros if v < 1_000.0 => format!("{v:.0} µs"),
        Unit::Micros if v < 1_000_000.0 => format!("{:.2} ms", v / 1e3),
        Unit::Micros => format!("{:.2} s", v / 1e6),
        Unit::PerSec => format!("{}/s", thousands(v)),
        Unit::Count => thousands(v),
        Unit::Bytes => format!("{v:.0} B"),
        Unit::Ratio => format!("{v:.3}"),
    }
}

fn thousands(v: f64) -> String {
    let digits = format!("{:.0}", v.abs());
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0.0 { format!("-{out}") } else { out }
}

fn row(cells: &[&str]) -> String {
    format!("| {} |\n", cells.join(" | "))
}

fn measure_row(ctx: &Context, e: &Entry, m: &Measure, runs: usize) -> String {
    let (ratio, target) = ctx.judge(e, m);
    let p99 = m.p99.map(|p| fmt_value(m.unit, p)).unwrap_or_default();
    let metric = if runs > 1 {
        m.metric.to_string()
    } else {
        format!("{} (1 run)", m.metric)
    };
    row(&[
        &e.workload,
        &e.implementation,
        &metric,
        &fmt_value(m.unit, m.value),
        &p99,
        &ratio,
        &target,
    ])
}

/// The table: every entry, in the order measured.
pub fn table(ctx: &Context) -> String {
    let mut out = row(&[
        "Workload",
        "Implementation",
        "Metric",
        "Median / p50",
        "p99",
        "Ratio",
        "Target",
    ]);
    out += "|---|---|---|---:|---:|---|---|\n";
    for e in ctx.entries {
        // A row without a measure: the text goes in the value column.
        let note = |text: &str| row(&[&e.workload, &e.implementation, "—", text, "", "", ""]);
        let text = match &e.outcome {
            Outcome::Measured { runs, measures } => measures
                .iter()
                .map(|m| measure_row(ctx, e, m, *runs))
                .collect(),
            Outcome::NotApplicable(why) => note(&format!("n/a: {why}")),
            Outcome::TimedOut(cap) => note(&format!("timed out (cap {} s per run)", cap.as_secs())),
            Outcome::Failed(err) => {
                let err = err.replace('|', "/").replace('\n', " ");
                note(&format!("failed: {err}"))
            }
        };
        out += &text;
    }
    out
}

/// W7/C7/P2/P3/K1 at a glance: one row per (workload, implementation), the same medians as the
/// table.
pub fn w7_table(ctx: &Context) -> String {
    use crate::model::{
        ACQ_PER_SEC, CLIENT_CPU_PER_ACQ, COUNTER_OFF, COUNTER_OFF_WRITES, JAIN, MOST_INSIDE,
        OVERLAPS, SCRIPTS_PER_ACQ, WAIT, WAIT_MAX, family,
    };
    use crate::workloads::processes::{PERMITS, RSLOCK_IMPL, Workload};
    let rows: Vec<&Entry> = ctx
        .entries
        .iter()
        .filter(|e| Workload::of(&e.workload).is_some())
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "W7/C7/P2/P3/K1 at a glance (medians; the ratios are redlease's acquisitions/s over the \
         floor's and rslock's, same run and K; client CPU: user + system of the K processes \
         over the measured part, per acquisition, and over the floor's at the same K; the check \
         is the worst run's):\n\n",
    );
    out += &row(&[
        "Workload",
        "Implementation",
        "acquisitions/s",
        "script calls / acq.",
        "client CPU / acq.",
        "CPU ÷ floor",
        "p50 wait",
        "p99 wait",
        "longest wait",
        "Jain",
        "check",
        "÷ floor",
        "÷ rslock",
    ]);
    out += "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|\n";
    let value = |e: &Entry, metric: &str| e.measure(metric).map(|m| m.value);
    let find = |w: &str, of: &dyn Fn(&str) -> bool, metric: &str| {
        ctx.entries
            .iter()
            .find(|e| e.workload == w && of(&e.implementation))
            .and_then(|e| value(e, metric))
    };
    let acq = |w: &str, of: &dyn Fn(&str) -> bool| find(w, of, ACQ_PER_SEC);
    for e in rows {
        if !matches!(e.outcome, Outcome::Measured { .. }) {
            continue;
        }
        let show = |metric: &str, unit: Unit| {
            value(e, metric)
                .map(|v| fmt_value(unit, v))
                .unwrap_or_default()
        };
        let wait = e.measure(WAIT);
        let p50 = wait.map(|m| fmt_value(Unit::Micros, m.value));
        let p99 = wait.and_then(|m| m.p99).map(|v| fmt_value(Unit::Micros, v));
        // W7/C7: counter = acquisitions; P2: counter = writes and no acquisition meeting a
        // write; P3: most inside ≤ the permits.
        let exact = |v: f64, what: &str| match v == 0.0 {
            true => format!("counter = {what}"),
            false => format!("❌ counter − {what} = {v:+.0}"),
        };
        let check = if let Some(v) = value(e, COUNTER_OFF) {
            exact(v, "acq.")
        } else if let Some(v) = value(e, COUNTER_OFF_WRITES) {
            match value(e, OVERLAPS) {
                Some(0.0) => format!("{}, no overlap", exact(v, "writes")),
                Some(n) => format!("{}, ❌ {n:.0} overlapped", exact(v, "writes")),
                None => exact(v, "writes"),
            }
        } else if let Some(v) = value(e, MOST_INSIDE) {
            match v <= f64::from(PERMITS) {
                true => format!("most inside {v:.0} ≤ {PERMITS}"),
                false => format!("❌ most inside {v:.0} > {PERMITS}"),
            }
        } else {
            String::new()
        };
        let (mut to_floor, mut to_rslock) = (String::new(), String::new());
        if family(&e.implementation) == "redlease" {
            let lock = acq(&e.workload, &|i| i == e.implementation);
            let of = |base: Option<f64>| match (lock, base) {
                (Some(l), Some(b)) if b > 0.0 => format!("{:.2}×", l / b),
                _ => String::new(),
            };
            to_floor = of(acq(&e.workload, &|i| family(i) == "floor"));
            to_rslock = of(acq(&e.workload, &|i| i == RSLOCK_IMPL));
        }
        // Every implementation's client CPU over the floor's (the floor's own row: blank).
        let cpu = value(e, CLIENT_CPU_PER_ACQ);
        let floor_cpu = find(&e.workload, &|i| family(i) == "floor", CLIENT_CPU_PER_ACQ);
        let cpu_to_floor = match (cpu, floor_cpu) {
            (Some(c), Some(f)) if f > 0.0 && family(&e.implementation) != "floor" => {
                format!("{:.2}×", c / f)
            }
            _ => String::new(),
        };
        out += &row(&[
            &e.workload,
            &e.implementation,
            &show(ACQ_PER_SEC, Unit::PerSec),
            &show(SCRIPTS_PER_ACQ, Unit::Ratio),
            &show(CLIENT_CPU_PER_ACQ, Unit::Micros),
            &cpu_to_floor,
            &p50.unwrap_or_default(),
            &p99.unwrap_or_default(),
            &show(WAIT_MAX, Unit::Micros),
            &show(JAIN, Unit::Ratio),
            &check,
            &to_floor,
            &to_rslock,
        ]);
    }
    out + "\n"
}

pub fn write(path: &Path, markdown: &str) -> Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, markdown).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_value(Unit::Micros, 57.4), "57 µs");
        assert_eq!(fmt_value(Unit::Micros, 12_345.0), "12.35 ms");
        assert_eq!(fmt_value(Unit::PerSec, 1_234_567.0), "1,234,567/s");
        assert_eq!(fmt_value(Unit::Count, 4000.0), "4,000");
        assert_eq!(fmt_value(Unit::Count, 999.0), "999");
    }
}
