//! `history report`: one self-contained HTML page (inline SVG, one inline script, no network):
//! per configuration and series, busbw per run over its start time (a date axis with ticks on
//! round instants, busbw ticks at round values: [`super::axis`]) with the change points and
//! segment means of [`super::detect`], NCCL of the same runs beside it, every run a link to its
//! directory, and a table of the changes. The plotted values are embedded twice for machines:
//! as `data-value` on every point and as JSON in `<script id="history-data">`; the inline script
//! checks on load that every point's position encodes its value and that both agree, and sets
//! `<body data-check>` to `ok N` (N points) or to the first mismatch (a console error as well).

use super::axis;
use super::detect::{Detection, SeriesResult};
use std::fmt::Write;
use std::path::Path;

const W: f64 = 640.0;
const H: f64 = 256.0;
const LEFT: f64 = 56.0;
const TOP: f64 = 12.0;
const PW: f64 = W - LEFT - 12.0;
const PH: f64 = H - TOP - 52.0;

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

/// A link to a run's directory (or log).
/// A link to a run that works where the page is read (a CI artifact, a copy beside a shared
/// database): the run's directory relative to the report's, percent-encoded, where the run lies
/// under the report's directory; none otherwise (an absolute `file://` path is dead anywhere
/// but the machine that wrote it; the run is named by its history id instead).
fn href(source: &str, report_dir: Option<&Path>) -> Option<String> {
    let path = Path::new(source.split(" (").next().unwrap_or(source));
    let rel = path.strip_prefix(report_dir?).ok()?;
    let text = rel.to_str().filter(|t| !t.is_empty())?;
    Some(
        text.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'/' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect(),
    )
}

/// `inner` as a link to `href`, or alone where there is none.
fn linked(href: Option<String>, inner: &str) -> String {
    match href {
        Some(h) => format!(r#"<a href="{}">{inner}</a>"#, esc(&h)),
        None => inner.to_string(),
    }
}

/// Where a chart puts its points: by start time (a date axis), or by order where a time does
/// not read as one.
struct Frame {
    xs: Vec<f64>,
    ymax: f64,
    yticks: Vec<f64>,
    xticks: Vec<super::axis::TimeTick>,
    /// Seconds to x: (t0, pixels per second); None: one instant, drawn in the middle.
    scale: Option<(f64, f64)>,
}

impl Frame {
    fn new(r: &SeriesResult) -> Frame {
        let pts = &r.data.points;
        let top = pts
            .iter()
            .flat_map(|p| std::iter::once(p.value).chain(p.nccl))
            .fold(0.0f64, f64::max);
        let (ymax, yticks) = axis::value_ticks(top, 5);
        let times: Option<Vec<f64>> = pts.iter().map(|p| axis::parse_time(&p.start_time)).collect();
        let n = pts.len().max(1);
        let by_order = |i: usize| {
            LEFT + if n > 1 {
                PW * i as f64 / (n - 1) as f64
            } else {
                PW / 2.0
            }
        };
        let Some(times) = times.filter(|t| !t.is_empty()) else {
            return Frame {
                xs: (0..pts.len()).map(by_order).collect(),
                ymax,
                yticks,
                xticks: Vec::new(),
                scale: None,
            };
        };
        let (t0, t1) = times
            .iter()
            .fold((f64::MAX, f64::MIN), |(a, b), t| (a.min(*t), b.max(*t)));
        let scale = (t1 > t0).then(|| (t0, PW / (t1 - t0)));
        let mut f = Frame {
            xs: Vec::new(),
            ymax,
            yticks,
            xticks: axis::time_ticks(t0, t1, 8),
            scale,
        };
        f.xs = times.iter().map(|t| f.x_of(*t)).collect();
        f
    }

    fn x_of(&self, t: f64) -> f64 {
        match self.scale {
            Some((t0, k)) => LEFT + (t - t0) * k,
            None => LEFT + PW / 2.0,
        }
    }

    fn y(&self, v: f64) -> f64 {
        TOP + PH * (1.0 - v / self.ymax)
    }
}

/// The widest a character of the axes' 10 px sans-serif font draws (digits, `-`, `:` are
/// narrower).
const CHAR_PX: f64 = 6.5;

/// `x` and `text-anchor` attributes that centre a label on `x` where it fits, and keep it
/// inside the chart where it does not (a tick at either end of the axis).
fn inside(x: f64, label: &str) -> String {
    let half = CHAR_PX * label.chars().count() as f64 / 2.0;
    if x + half > W {
        format!(r#"x="{:.3}" text-anchor="end""#, W - 1.0)
    } else if x - half < 0.0 {
        r#"x="1" text-anchor="start""#.to_string()
    } else {
        format!(r#"x="{x:.3}" text-anchor="middle""#)
    }
}

/// Grid lines with round busbw ticks, and the date axis.
fn axes(o: &mut String, f: &Frame, runs: usize) {
    let step = f.yticks.get(1).copied().unwrap_or(f.ymax);
    for &v in &f.yticks {
        let _ = write!(
            o,
            r##"<line x1="{LEFT}" x2="{}" y1="{yy:.3}" y2="{yy:.3}" stroke="#eee"/><text class="ytick" data-value="{v}" x="{}" y="{:.3}" font-size="10" text-anchor="end">{}</text>"##,
            LEFT + PW,
            LEFT - 4.0,
            f.y(v) + 3.0,
            axis::value_label(v, step),
            yy = f.y(v)
        );
    }
    for t in &f.xticks {
        let x = f.x_of(t.at);
        let at = super::model::rfc3339(t.at.floor() as i64);
        let _ = write!(
            o,
            r##"<line x1="{x:.3}" x2="{x:.3}" y1="{}" y2="{}" stroke="#999"/><text class="xtick" data-time="{at}" {} y="{}" font-size="10">{}</text>"##,
            TOP + PH,
            TOP + PH + 4.0,
            inside(x, &t.label),
            TOP + PH + 14.0,
            esc(&t.label)
        );
        if let Some(d) = &t.date {
            let _ = write!(
                o,
                r#"<text class="xdate" {} y="{}" font-size="10">{}</text>"#,
                inside(x, d),
                TOP + PH + 25.0,
                esc(d)
            );
        }
    }
    let title = if f.xticks.is_empty() {
        "run (time order)"
    } else {
        "start time (UTC)"
    };
    let _ = write!(
        o,
        r#"<text x="{}" y="{}" font-size="10" text-anchor="middle">{title}, {}</text><text x="12" y="{}" font-size="10" transform="rotate(-90 12 {})" text-anchor="middle">busbw GB/s</text>"#,
        LEFT + PW / 2.0,
        H - 4.0,
        count(runs, "run", "runs"),
        TOP + PH / 2.0,
        TOP + PH / 2.0
    );
}

/// Segment means between change points, and the change points.
fn changes(o: &mut String, f: &Frame, r: &SeriesResult) {
    let pts = &r.data.points;
    let mut bounds = vec![0];
    bounds.extend(r.changes.iter().map(|c| c.index));
    bounds.push(pts.len());
    for w in bounds.windows(2) {
        let seg = &pts[w[0]..w[1]];
        if seg.is_empty() || r.skipped.is_some() {
            continue;
        }
        let m = seg.iter().map(|p| p.value).sum::<f64>() / seg.len() as f64;
        let _ = write!(
            o,
            r##"<line class="segment" x1="{:.3}" x2="{:.3}" y1="{:.3}" y2="{:.3}" stroke="#2a7" stroke-width="2" data-mean="{m}"/>"##,
            f.xs[w[0]],
            f.xs[w[1] - 1],
            f.y(m),
            f.y(m)
        );
    }
    for c in &r.changes {
        let xc = f64::midpoint(f.xs[c.index], f.xs[c.index.saturating_sub(1)]);
        let _ = write!(
            o,
            r##"<line class="cp" x1="{xc:.3}" x2="{xc:.3}" y1="{TOP}" y2="{}" stroke="#d22" stroke-dasharray="4 3" data-index="{}"><title>change at run {} ({}): {:+.1}%</title></line>"##,
            TOP + PH,
            c.index,
            c.run_id,
            esc(&c.start_time),
            c.relative_change * 100.0
        );
    }
}

fn chart(o: &mut String, r: &SeriesResult, report_dir: Option<&Path>) {
    let pts = &r.data.points;
    let f = Frame::new(r);
    let _ = write!(
        o,
        r#"<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" data-size="{}" data-ymin="0" data-ymax="{}" data-top="{TOP}" data-height="{PH}">"#,
        r.data.size.map_or("avg".into(), |s| s.to_string()),
        f.ymax
    );
    let _ = write!(
        o,
        r##"<rect x="{LEFT}" y="{TOP}" width="{PW}" height="{PH}" fill="#fff" stroke="#999"/>"##
    );
    axes(o, &f, pts.len());
    changes(o, &f, r);
    let poly = |sel: &dyn Fn(&super::detect::Point) -> Option<f64>| {
        pts.iter()
            .zip(&f.xs)
            .filter_map(|(p, x)| sel(p).map(|v| format!("{x:.3},{:.3}", f.y(v))))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let nccl_line = poly(&|p| p.nccl);
    if !nccl_line.is_empty() {
        let _ = write!(
            o,
            r##"<polyline class="nccl-line" points="{nccl_line}" fill="none" stroke="#88a" stroke-dasharray="3 2"/>"##
        );
    }
    let _ = write!(
        o,
        r##"<polyline points="{}" fill="none" stroke="#36c"/>"##,
        poly(&|p| Some(p.value))
    );
    for (i, (p, x)) in pts.iter().zip(&f.xs).enumerate() {
        if let Some(v) = p.nccl {
            let _ = write!(
                o,
                r##"<circle class="nccl" cx="{x:.3}" cy="{:.3}" r="2.5" fill="#88a" data-run="{}" data-value="{v}"><title>NCCL, same run: {v:.4} GB/s</title></circle>"##,
                f.y(v),
                p.run_id
            );
        }
        let point = format!(
            r##"<circle class="pt" cx="{x:.3}" cy="{:.3}" r="3.5" fill="#36c" data-index="{i}" data-run="{}" data-value="{}" data-time="{}"><title>run {} {} {} commit {}: {:.4} GB/s</title></circle>"##,
            f.y(p.value),
            p.run_id,
            p.value,
            esc(&p.start_time),
            p.run_id,
            esc(&p.source),
            esc(&p.start_time),
            esc(p.git_commit.as_deref().unwrap_or("-")),
            p.value
        );
        o.push_str(&linked(href(&p.source, report_dir), &point));
    }
    o.push_str("</svg>");
}

/// `1 run`, `2 runs`: a count in words that fit it.
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The check the page runs on itself (see the module comment).
const CHECK_JS: &str = r"
(function () {
  var bad = null, count = 0;
  var data = JSON.parse(document.getElementById('history-data').textContent);
  var charts = document.querySelectorAll('svg.chart');
  if (charts.length !== data.series.length) bad = 'charts ' + charts.length + ' != series ' + data.series.length;
  for (var k = 0; k < charts.length && !bad; k++) {
    var svg = charts[k], s = data.series[k];
    var ymax = parseFloat(svg.dataset.ymax), top = parseFloat(svg.dataset.top), h = parseFloat(svg.dataset.height);
    var tol = ymax / h * 0.01;
    var pts = svg.querySelectorAll('circle.pt');
    if (pts.length !== s.points.length) { bad = 'series ' + k + ': ' + pts.length + ' points drawn, ' + s.points.length + ' in data'; break; }
    for (var i = 0; i < pts.length; i++) {
      var c = pts[i], v = parseFloat(c.dataset.value), want = s.points[i].value;
      var fromY = ymax * (1 - (parseFloat(c.getAttribute('cy')) - top) / h);
      if (v !== want) { bad = 'series ' + k + ' point ' + i + ': data-value ' + v + ' != ' + want; break; }
      if (Math.abs(fromY - v) > tol) { bad = 'series ' + k + ' point ' + i + ': drawn at ' + fromY + ', value ' + v; break; }
      count++;
    }
  }
  document.body.dataset.check = bad ? 'mismatch: ' + bad : 'ok ' + count;
  if (bad) console.error('history report check failed: ' + bad);
})();
";

/// The whole page.
/// The page; `report_dir` (canonical) is where it is written, which run links are relative to.
pub fn html(
    d: &Detection,
    db_name: &str,
    nodes: &[(i64, String, super::model::NodeVerdict)],
    report_dir: Option<&Path>,
) -> String {
    let mut o = String::new();
    let runs: std::collections::BTreeSet<i64> = d
        .series
        .iter()
        .flat_map(|s| s.data.points.iter().map(|p| p.run_id))
        .collect();
    let _ = write!(
        o,
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>tcpx-perf run history</title>
<style>body{{font-family:sans-serif;margin:1.5em;color:#222}}table{{border-collapse:collapse;font-size:13px}}td,th{{border:1px solid #ccc;padding:3px 6px}}figure{{display:inline-block;margin:0.5em}}figcaption{{font-size:13px;font-weight:bold}}.reg{{color:#c00;font-weight:bold}}code{{font-size:12px}}</style>
</head><body data-check="pending">
<h1>Run history</h1>
<p>{}, {}, {} from <code>{}</code>. Change points: E-Divisive with Means, alpha {}, significance {}, {} permutations, min segment {}, seed {}; {:.0}% intervals (Welch t on log busbw). Blue: busbw per run (each point links to its run); green: segment means; red dashed: change points; grey dashed: NCCL in the same run.</p>
"#,
        count(runs.len(), "run", "runs"),
        count(d.configs.len(), "configuration", "configurations"),
        count(d.series.len(), "series", "series"),
        esc(db_name),
        d.settings.alpha,
        d.settings.significance,
        d.settings.permutations,
        d.settings.min_segment,
        d.settings.seed,
        d.ci_level * 100.0
    );
    o.push_str("<h2>Changes</h2>\n<table id=\"changes\"><tr><th>configuration</th><th>series</th><th>at run</th><th>start</th><th>commit</th><th>before GB/s</th><th>after GB/s</th><th>change</th><th>CI</th><th>p</th></tr>\n");
    let mut any = false;
    for r in &d.series {
        for (k, c) in r.changes.iter().enumerate() {
            any = true;
            let reg = r.regression && k + 1 == r.changes.len();
            let _ = writeln!(
                o,
                "<tr{}><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.4}</td><td>{:.4}</td><td>{:+.1}%</td><td>[{:+.1}%, {:+.1}%]</td><td>{:.3}</td></tr>",
                if reg { r#" class="reg""# } else { "" },
                esc(&r.data.config_key),
                esc(&r.data.label()),
                linked(href(&c.source, report_dir), &format!("run {}", c.run_id)),
                esc(&c.start_time),
                esc(c.git_commit.as_deref().unwrap_or("-")),
                c.mean_before,
                c.mean_after,
                c.relative_change * 100.0,
                c.ci_low * 100.0,
                c.ci_high * 100.0,
                c.p_value
            );
        }
    }
    if !any {
        o.push_str("<tr><td colspan=\"10\">no change points</td></tr>\n");
    }
    o.push_str("</table>\n");
    o.push_str(&super::nodes::grid(nodes, esc));
    for (cid, key, _) in &d.configs {
        let _ = writeln!(o, "<section class=\"config\"><h2><code>{}</code></h2>", esc(key));
        for r in d.series.iter().filter(|r| r.data.config_id == *cid) {
            let _ = write!(o, "<figure><figcaption>{}", esc(&r.data.label()));
            if let Some(why) = &r.skipped {
                let _ = write!(o, " (not analysed: {})", esc(why));
            } else if r.regression {
                o.push_str(" <span class=\"reg\">regression in the newest segment</span>");
            }
            o.push_str("</figcaption>");
            chart(&mut o, r, report_dir);
            o.push_str("</figure>\n");
        }
        o.push_str("</section>\n");
    }
    let json = script_json(&serde_json::to_string(d).unwrap_or_else(|_| "{}".into()));
    let _ = write!(
        o,
        "<script type=\"application/json\" id=\"history-data\">{json}</script>\n<script>{CHECK_JS}</script>\n</body></html>\n"
    );
    o
}

/// JSON made safe inside a `<script>` element whatever the strings in it say: `</script>` would
/// end the element early, and `<!--` followed by `<script` would make the tokenizer skip the real
/// `</script>` (the "double escaped" state), leaving the page's check script unrun. `<`, `>` and
/// `&` as JSON's `\u` escapes mean the same to a JSON parser and nothing to HTML.
fn script_json(json: &str) -> String {
    json.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

#[cfg(test)]
mod tests {
    use super::script_json;

    #[test]
    fn no_string_can_end_or_hide_the_data_script() {
        let hostile = serde_json::json!({ "git_commit": "<!--<script>", "host": "</script><b>&" }).to_string();
        let safe = script_json(&hostile);
        assert!(
            !safe.contains('<') && !safe.contains('>') && !safe.contains('&'),
            "{safe}"
        );
        // The same data for a JSON reader.
        let back: serde_json::Value = serde_json::from_str(&safe).expect("still JSON");
        assert_eq!(back["git_commit"], "<!--<script>");
        assert_eq!(back["host"], "</script><b>&");
    }
}
