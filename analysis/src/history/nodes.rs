//! `history nodes`: each node's verdicts (tcpx-perf's `node_verdicts`, docs/drain.md) over the
//! stored runs, so that a node that is suspect in 3 of the last 5 runs stands out.

use super::model::NodeVerdict;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One letter a verdict: `.` healthy, `S` suspect, `B` bad, `?` anything else.
fn letter(verdict: &str) -> char {
    match verdict {
        "healthy" => '.',
        "suspect" => 'S',
        "bad" => 'B',
        _ => '?',
    }
}

/// The table: per node (those not healthy in its last `last` runs first, most bad first), its
/// counts over those runs, the runs as letters (oldest first; `-` where the node was not in the
/// run), and the newest evidence of a verdict that was not healthy.
pub fn table(stored: &[(i64, String, NodeVerdict)], last: usize) -> String {
    let mut runs: Vec<i64> = Vec::new();
    for (id, _, _) in stored {
        if !runs.contains(id) {
            runs.push(*id);
        }
    }
    let shown = &runs[runs.len().saturating_sub(last)..];
    let mut nodes: BTreeMap<&str, BTreeMap<i64, &NodeVerdict>> = BTreeMap::new();
    for (id, _, v) in stored.iter().filter(|(id, _, _)| shown.contains(id)) {
        nodes.entry(&v.host).or_default().insert(*id, v);
    }
    if nodes.is_empty() {
        return "no node verdicts stored (tcpx-perf multi-node result directories record them)\n".into();
    }
    let count = |runs: &BTreeMap<i64, &NodeVerdict>, what: &str| runs.values().filter(|v| v.verdict == what).count();
    let mut order: Vec<(&str, &BTreeMap<i64, &NodeVerdict>)> = nodes.iter().map(|(h, r)| (*h, r)).collect();
    order.sort_by_key(|(h, r)| (std::cmp::Reverse((count(r, "bad"), count(r, "suspect"))), *h));
    let width = order.iter().map(|(h, _)| h.len()).max().unwrap_or(4).max(4);
    let mut s = format!(
        "{:<width$}  runs  healthy  suspect  bad  last {} run(s), oldest first  newest evidence\n",
        "node",
        shown.len()
    );
    for (host, r) in order {
        let letters: String = shown
            .iter()
            .map(|id| r.get(id).map_or('-', |v| letter(&v.verdict)))
            .collect();
        let newest = r.iter().rev().find(|(_, v)| v.verdict != "healthy");
        let evidence = newest.map_or(String::new(), |(id, v)| {
            format!("run {id}: {} {}", v.verdict, v.evidence)
        });
        let line = format!(
            "{host:<width$}  {:>4}  {:>7}  {:>7}  {:>3}  {:<w2$}  {evidence}",
            r.len(),
            count(r, "healthy"),
            count(r, "suspect"),
            count(r, "bad"),
            letters,
            w2 = "last N run(s), oldest first".len().max(shown.len()) + 1,
        );
        let _ = writeln!(s, "{}", line.trim_end());
    }
    s.push_str("(. healthy, S suspect, B bad, - not in the run)\n");
    s
}

/// The HTML report's node-by-run grid (`<h2>Nodes</h2>` and a table, a row per node, a column
/// per run, each cell its verdict's letter with the evidence as its title); nothing without
/// verdicts. `esc` escapes text for HTML.
pub fn grid(stored: &[(i64, String, NodeVerdict)], esc: fn(&str) -> String) -> String {
    if stored.is_empty() {
        return String::new();
    }
    let mut runs: Vec<(i64, &str)> = Vec::new();
    for (id, t, _) in stored {
        if !runs.iter().any(|(r, _)| r == id) {
            runs.push((*id, t));
        }
    }
    let mut nodes: BTreeMap<&str, BTreeMap<i64, &NodeVerdict>> = BTreeMap::new();
    for (id, _, v) in stored {
        nodes.entry(&v.host).or_default().insert(*id, v);
    }
    let mut s = String::from("<h2>Nodes</h2>\n<table id=\"nodes\"><tr><th>node</th>");
    for (id, t) in &runs {
        let _ = write!(s, "<th title=\"{}\">#{id}</th>", esc(t));
    }
    s.push_str("</tr>\n");
    for (host, verdicts) in &nodes {
        let _ = write!(s, "<tr><td>{}</td>", esc(host));
        for (id, _) in &runs {
            match verdicts.get(id) {
                Some(v) => {
                    let colour = match v.verdict.as_str() {
                        "healthy" => "#dfd",
                        "suspect" => "#fd8",
                        _ => "#f99",
                    };
                    let _ = write!(
                        s,
                        "<td class=\"{}\" style=\"background:{colour}\" title=\"{}\">{}</td>",
                        esc(&v.verdict),
                        esc(&v.evidence),
                        letter(&v.verdict)
                    );
                }
                None => s.push_str("<td>-</td>"),
            }
        }
        s.push_str("</tr>\n");
    }
    s.push_str(
        "</table>\n<p>. healthy, S suspect, B bad (tcpx-perf's node verdicts; the evidence is each cell's title)</p>\n",
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(host: &str, verdict: &str) -> NodeVerdict {
        NodeVerdict {
            host: host.into(),
            verdict: verdict.into(),
            evidence: format!("{verdict} evidence"),
        }
    }

    #[test]
    fn a_node_slowed_in_3_of_5_runs_comes_first_with_its_letters() {
        let mut stored = Vec::new();
        for (i, node5) in ["healthy", "bad", "suspect", "healthy", "bad"].iter().enumerate() {
            let id = i as i64 + 1;
            let t = format!("2026-11-27T0{i}:00:00Z");
            stored.push((id, t.clone(), v("node4", "healthy")));
            stored.push((id, t, v("node5", node5)));
        }
        let t = table(&stored, 10);
        let lines: Vec<&str> = t.lines().collect();
        assert!(
            lines[0].starts_with("node   runs  healthy  suspect  bad  last 5 run(s)"),
            "{t}"
        );
        assert!(
            lines[1].starts_with("node5     5        2        1    2  .BS.B "),
            "{t}"
        );
        assert!(lines[1].ends_with("run 5: bad bad evidence"), "{t}");
        assert!(lines[2].starts_with("node4     5        5        0    0  ....."), "{t}");
        // The last 2 runs only.
        assert!(
            table(&stored, 2).contains("node5     2        1        0    1  .B"),
            "{}",
            table(&stored, 2)
        );
        assert!(table(&[], 5).starts_with("no node verdicts stored"));
        let html = grid(&stored, |t| t.replace('<', "&lt;"));
        assert!(
            html.contains("<table id=\"nodes\"><tr><th>node</th><th title=\"2026-11-27T00:00:00Z\">#1</th>"),
            "{html}"
        );
        assert!(html.contains("<tr><td>node5</td><td class=\"healthy\" style=\"background:#dfd\" title=\"healthy evidence\">.</td><td class=\"bad\""), "{html}");
        assert_eq!(grid(&[], std::string::ToString::to_string), "");
    }
}
