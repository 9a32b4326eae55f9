//! Reading a drawn picture back, for the tests of every picture (tcpx-perf's `links.svg`,
//! `tcpx-analyze heatmap`): where each text stands, estimated as [`text_width`] lays it out, and
//! which texts leave the canvas. The same estimate sizes the canvas when drawing, so a picture
//! that passes here was laid out with room for its texts.

/// Width in pixels a text of `chars` characters takes at `px` (an SVG font size): 0.6 em a
/// character, above the average of a sans-serif face (digits 0.56 em, lower case about 0.5 em),
/// so a layout by it leaves room rather than clipping.
pub fn text_width(text: &str, px: f64) -> f64 {
    text.chars().count() as f64 * 0.6 * px
}

/// One `<text>` of a picture and the box it covers (estimated).
#[derive(Debug, Clone, PartialEq)]
pub struct TextBox {
    pub text: String,
    pub x0: f64,
    pub y0: f64,
    pub x1: f64,
    pub y1: f64,
}

/// The picture's canvas (width, height) and every text's box; an error says what does not parse.
pub fn texts(svg: &str) -> Result<((f64, f64), Vec<TextBox>), String> {
    let doc = roxmltree::Document::parse(svg).map_err(|e| format!("not SVG: {e}"))?;
    let root = doc.root_element();
    let num = |n: &roxmltree::Node, a: &str| -> Result<f64, String> {
        n.attribute(a)
            .ok_or_else(|| format!("<{}> has no {a}", n.tag_name().name()))?
            .trim_end_matches("px")
            .parse::<f64>()
            .map_err(|e| format!("{a}: {e}"))
    };
    let canvas = (num(&root, "width")?, num(&root, "height")?);
    let mut out = Vec::new();
    for n in doc.descendants().filter(|n| n.has_tag_name("text")) {
        let text: String = n
            .descendants()
            .filter(roxmltree::Node::is_text)
            .filter_map(|t| t.text())
            .collect::<String>()
            .trim()
            .to_string();
        let (x, y, px) = (num(&n, "x")?, num(&n, "y")?, num(&n, "font-size")?);
        let w = text_width(&text, px);
        let (x0, x1) = match n.attribute("text-anchor").unwrap_or("start") {
            "middle" => (x - w / 2.0, x + w / 2.0),
            "end" => (x - w, x),
            _ => (x, x + w),
        };
        // plotters' vertical anchors: top 0.76em below y, centre 0.5ex, bottom -0.5ex.
        let (y0, y1) = match n.attribute("dy").unwrap_or("") {
            "0.76em" => (y, y + px),
            "0.5ex" => (y - px / 2.0, y + px / 2.0),
            _ => (y - px, y),
        };
        let corners = [(x0, y0), (x1, y0), (x0, y1), (x1, y1)];
        let turned: Vec<(f64, f64)> = match rotation(n.attribute("transform")) {
            Some((deg, cx, cy)) => {
                let (s, c) = deg.to_radians().sin_cos();
                corners
                    .iter()
                    .map(|&(px, py)| {
                        let (dx, dy) = (px - cx, py - cy);
                        (cx + dx * c - dy * s, cy + dx * s + dy * c)
                    })
                    .collect()
            }
            None => corners.to_vec(),
        };
        let fold =
            |f: fn(f64, f64) -> f64, pick: fn(&(f64, f64)) -> f64, init: f64| turned.iter().map(pick).fold(init, f);
        out.push(TextBox {
            text,
            x0: fold(f64::min, |p| p.0, f64::INFINITY),
            x1: fold(f64::max, |p| p.0, f64::NEG_INFINITY),
            y0: fold(f64::min, |p| p.1, f64::INFINITY),
            y1: fold(f64::max, |p| p.1, f64::NEG_INFINITY),
        });
    }
    Ok((canvas, out))
}

/// `rotate(deg, cx, cy)` of a transform attribute.
fn rotation(t: Option<&str>) -> Option<(f64, f64, f64)> {
    let inner = t?.trim().strip_prefix("rotate(")?.strip_suffix(')')?;
    let v: Vec<f64> = inner
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    match v[..] {
        [d, cx, cy] => Some((d, cx, cy)),
        [d] => Some((d, 0.0, 0.0)),
        _ => None,
    }
}

/// The texts of `svg` whose box leaves its canvas, each with its box, or what does not parse.
pub fn outside_canvas(svg: &str) -> Vec<String> {
    match texts(svg) {
        Err(e) => vec![e],
        Ok(((w, h), boxes)) => boxes
            .into_iter()
            .filter(|b| b.x0 < 0.0 || b.y0 < 0.0 || b.x1 > w || b.y1 > h)
            .map(|b| {
                format!(
                    "{:?} spans x {:.0}..{:.0}, y {:.0}..{:.0} of a {w} x {h} canvas",
                    b.text, b.x0, b.x1, b.y0, b.y1
                )
            })
            .collect(),
    }
}

/// The colour bar's tick labels: right-aligned numbers with a decimal point (the matrix' own
/// right-aligned labels are whole ranks or names).
pub fn bar_ticks(svg: &str) -> Vec<String> {
    texts(svg)
        .map(|(_, boxes)| boxes)
        .unwrap_or_default()
        .into_iter()
        .map(|b| b.text)
        .zip(anchors(svg))
        .filter(|(t, anchor)| anchor == "end" && t.contains('.') && t.parse::<f64>().is_ok())
        .map(|(t, _)| t)
        .collect()
}

/// Each `<text>`'s `text-anchor`, in document order.
fn anchors(svg: &str) -> Vec<String> {
    roxmltree::Document::parse(svg)
        .map(|doc| {
            doc.descendants()
                .filter(|n| n.has_tag_name("text"))
                .map(|n| n.attribute("text-anchor").unwrap_or("start").to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// The fill colours of a picture's `<rect>`s in drawing order, upper case (`#RRGGBB`).
pub fn rect_fills(svg: &str) -> Vec<String> {
    roxmltree::Document::parse(svg)
        .map(|doc| {
            doc.descendants()
                .filter(|n| n.has_tag_name("rect"))
                .filter_map(|n| n.attribute("fill").map(str::to_uppercase))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boxes_follow_anchor_and_rotation() {
        let svg = r#"<svg width="100" height="50" viewBox="0 0 100 50" xmlns="http://www.w3.org/2000/svg">
<text x="50" y="10" dy="0.76em" text-anchor="middle" font-size="10">abcd</text>
<text x="98" y="30" dy="0.5ex" text-anchor="end" font-size="10">abcdefghijklmnopq</text>
<text x="5" y="25" dy="0.76em" text-anchor="middle" font-size="10" transform="rotate(270, 5, 25)">ab</text>
</svg>"#;
        let (canvas, b) = texts(svg).unwrap();
        assert_eq!(canvas, (100.0, 50.0));
        assert_eq!((b[0].x0, b[0].x1, b[0].y0, b[0].y1), (38.0, 62.0, 10.0, 20.0));
        // Rotated a quarter turn back: 12 px wide becomes 12 px tall around (5, 25).
        assert!((b[2].y1 - b[2].y0 - 12.0).abs() < 1e-9 && (b[2].x1 - b[2].x0 - 10.0).abs() < 1e-9);
        let out = outside_canvas(svg);
        assert_eq!(out.len(), 1, "{out:?}");
        assert!(out[0].starts_with("\"abcdefghijklmnopq\""), "{out:?}");
    }
}
