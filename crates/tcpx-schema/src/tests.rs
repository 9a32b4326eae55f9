use super::*;

/// The header serde writes for `row`: what a file of those rows starts with.
fn header_of<T: Serialize>(row: &T) -> Vec<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.serialize(row).expect("serialize");
    let bytes = w.into_inner().expect("flush");
    let mut r = csv::Reader::from_reader(bytes.as_slice());
    r.headers().expect("header").iter().map(String::from).collect()
}

fn names(cols: &[&Column]) -> Vec<&'static str> {
    cols.iter().map(|c| c.name).collect()
}

/// The row tcpx-perf writes has exactly the columns admission knows, in their order.
#[test]
fn result_row_writes_the_declared_columns_in_order() {
    let declared: Vec<&str> = RESULTS_COLUMNS.iter().map(|c| c.name).collect();
    assert_eq!(header_of(&ResultRow::default()), declared);
    assert_eq!(declared.len(), 46);
    assert_eq!(declared[..3], ["schema_version", "pattern", "scope"]);
    assert_eq!(declared[7], "type", "the field type_ is the column type");
}

/// Each version requires its own columns and its predecessors', by version then file order
/// (the order admission names a missing one in); the cpu_* columns came later within schema 3.
#[test]
fn each_version_requires_its_columns_and_the_earlier_ones() {
    let counts: Vec<usize> = SCHEMA_VERSIONS.iter().map(|&v| required_columns(v).len()).collect();
    assert_eq!(counts, [24, 28, 39, 41]);
    let v4 = names(&required_columns(4));
    assert_eq!(v4[..2], ["schema_version", "pattern"]);
    assert_eq!(v4[23], "abi", "schema 1's columns first");
    assert_eq!(
        v4[24..28],
        [
            "bytes_verified_by",
            "wire_rx_bytes",
            "wire_payload_ratio",
            "wire_by_iface"
        ]
    );
    assert_eq!(
        v4[28..31],
        ["netbw_gbps", "send_peers_in_flight", "recv_peers_in_flight"]
    );
    assert_eq!(v4[39..], ["tcp_retrans_segs", "tcp_timeouts"]);
    assert!(v4.iter().all(|c| !c.starts_with("cpu_")), "{v4:?}");
    assert!(!names(&required_columns(2)).contains(&"netbw_gbps"));
}

/// One column dates each version after the first; every version a column names is admitted,
/// and the version written is the newest.
#[test]
fn versions_are_dated_and_admitted() {
    let dating: Vec<(&str, u32)> = dating_columns().map(|c| (c.name, c.since)).collect();
    assert_eq!(
        dating,
        [("bytes_verified_by", 2), ("nccl_time_us", 3), ("tcp_timeouts", 4)]
    );
    assert!(RESULTS_COLUMNS.iter().all(|c| SCHEMA_VERSIONS.contains(&c.since)));
    assert_eq!(SCHEMA_VERSIONS.last(), Some(&SCHEMA_VERSION));
    assert_eq!(column("bytes_moved").map(|c| c.cell), Some(Cell::CountOrUnverified));
    assert!(column("plugin").is_some_and(|c| !c.is_number()));
    assert!(column("schema_version").is_some_and(|c| !c.is_number()));
    assert!(column("nope").is_none());
}

/// results/README.md, the users' description of the files, names every column of every file:
/// results.csv's in the first cell of a row of its table (and the version written in its title), the others' as the list
/// their section opens with.
#[test]
fn the_readme_documents_every_column() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../results/README.md");
    let readme = std::fs::read_to_string(path).expect("results/README.md");
    let section = |file: &str| {
        let start = readme
            .find(&format!("## `{file}`"))
            .unwrap_or_else(|| panic!("no section for {file}"));
        let rest = &readme[start..];
        &rest[..rest[3..].find("\n## ").map_or(rest.len(), |e| e + 3)]
    };
    let results = section("results.csv");
    assert!(
        results.contains(&format!("(schema version {SCHEMA_VERSION})")),
        "{results}"
    );
    // The first cell of each row of its table names the columns that row describes.
    let described: Vec<&str> = results
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split(" | ").next())
        .collect();
    for col in header_of(&ResultRow::default()) {
        let name = format!("`{col}`");
        assert!(
            described.iter().any(|cell| format!("`{cell}").contains(&name)),
            "results/README.md's table does not describe results.csv's {name}"
        );
    }
    for (file, columns) in [
        ("samples.csv", header_of(&SampleRow::default())),
        ("rank_samples.csv", header_of(&RankSampleRow::default())),
        ("pairs.csv", header_of(&PairRow::default())),
        ("nccl_samples.csv", header_of(&NcclSampleRow::default())),
    ] {
        let list = format!("`{}`", columns.join(", "));
        assert!(
            section(file).contains(&list),
            "results/README.md's {file} section does not list {list}"
        );
    }
}
