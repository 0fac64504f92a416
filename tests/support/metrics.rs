//! Reading the Prometheus exposition text the metrics tests render.

use std::collections::BTreeMap;

/// The value of the sample `name{labels}` with exactly these labels, from the exposition text.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let wanted: BTreeMap<&str, &str> = labels.iter().copied().collect();
    text.lines().find_map(|line| {
        let (series, value) = line.rsplit_once(' ')?;
        let (metric, rest) = series.split_once('{').unwrap_or((series, "}"));
        if metric != name {
            return None;
        }
        let found: BTreeMap<&str, &str> = rest
            .trim_end_matches('}')
            .split(',')
            .filter(|pair| !pair.is_empty())
            .filter_map(|pair| {
                let (k, v) = pair.split_once('=')?;
                Some((k, v.trim_matches('"')))
            })
            .collect();
        (found == wanted).then(|| value.parse().ok())?
    })
}
