use super::*;
use clap::CommandFactory;

fn cli(args: &[&str]) -> Cli {
    let mut v = vec!["tcpx-perf"];
    v.extend_from_slice(args);
    Cli::try_parse_from(v).expect("parse")
}

#[test]
fn clap_definition_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn defaults() {
    let c = cli(&[]);
    assert_eq!(c.minbytes, 1 << 20);
    assert_eq!(c.maxbytes, 64 << 20);
    assert_eq!(c.stepfactor, 2);
    assert_eq!(c.stepbytes, 1 << 20);
    assert_eq!(c.iters, 20);
    assert_eq!(c.warmup_iters, 5);
    assert!(c.check_enabled());
    assert_eq!(c.average, TimeReduction::Avg);
    assert_eq!(c.timeout, 300);
    assert_eq!(c.ngpus, 1);
    assert_eq!(c.pattern, Pattern::Sendrecv);
    assert_eq!(c.scope, Scope::Auto);
    assert_eq!(c.dir, Dir::Bi);
    assert_eq!(c.mem, Mem::Auto);
    assert_eq!(c.chunk, 512 << 10);
    assert_eq!(c.channels, 2);
    assert_eq!(c.window, 8);
    assert_eq!(c.progress, Progress::Auto);
    assert_eq!(c.plugin_log, PluginLog::Warn);
    assert_eq!(c.verbose, 0);
    assert!(c.validate().is_ok());
    assert_eq!(c.sizes().len(), 7);
}

#[test]
fn nccl_tests_flags() {
    let c = cli(&[
        "-b", "8", "-e", "1G", "-f", "4", "-n", "5", "-w", "1", "-c", "0", "-a", "3", "-T", "10", "-g", "8", "-vv",
    ]);
    assert_eq!((c.minbytes, c.maxbytes, c.stepfactor), (8, 1 << 30, 4));
    assert_eq!((c.iters, c.warmup_iters, c.timeout, c.ngpus), (5, 1, 10, 8));
    assert!(!c.check_enabled());
    assert_eq!(c.average, TimeReduction::Max);
    assert_eq!(c.verbose, 2);
    let c = cli(&["--warmup_iters", "3", "--average", "min", "--minbytes", "1K"]);
    assert_eq!(c.warmup_iters, 3);
    assert_eq!(c.average, TimeReduction::Min);
    assert_eq!(c.minbytes, 1024);
    assert!(Cli::try_parse_from(["tcpx-perf", "-a", "4"]).is_err());
    assert!(Cli::try_parse_from(["tcpx-perf", "--abi", "6"]).is_err());
    assert!(Cli::try_parse_from(["tcpx-perf", "--abi", "12"]).is_ok());
    assert!(Cli::try_parse_from(["tcpx-perf", "--out", "x", "--no-out"]).is_err());
    let c = cli(&["--pattern", "fullmesh", "--scope", "inter-node", "--mem", "cuda"]);
    assert_eq!(c.pattern, Pattern::Fullmesh);
    assert_eq!(c.scope, Scope::InterNode);
    assert_eq!(c.mem, Mem::Cuda);
}

#[test]
fn sweep() {
    let c = cli(&["-b", "1M", "-e", "8M"]);
    assert_eq!(c.sizes(), vec![1 << 20, 2 << 20, 4 << 20, 8 << 20]);
    let c = cli(&["-b", "1M", "-e", "3.5M", "-f", "1", "-i", "1M"]);
    assert_eq!(c.sizes(), vec![1 << 20, 2 << 20, 3 << 20]);
    let c = cli(&["-b", "3", "-e", "3"]);
    assert_eq!(c.sizes(), vec![3]);
    let c = cli(&["-b", "8M", "-e", "1M"]);
    assert!(c.sizes().is_empty());
    // Degenerate inputs terminate (validate rejects them with a message).
    let c = cli(&["-b", "0", "-e", "1M"]);
    assert_eq!(c.sizes(), vec![0]);
    let c = cli(&["-b", "1", "-e", "1M", "-f", "1", "-i", "0"]);
    assert_eq!(c.sizes(), vec![1]);
    let c = cli(&["-b", "8G", "-e", "17179869183G"]);
    assert!(c.sizes().len() > 10);
}

#[test]
fn validation() {
    let err = |args: &[&str]| cli(args).validate().unwrap_err();
    assert!(err(&["-b", "2M", "-e", "1M"]).contains("-b 2M is larger than -e 1M"));
    assert!(err(&["-f", "0"]).contains("-f"));
    assert!(err(&["-b", "0"]).contains("-b 0"));
    assert!(err(&["-f", "1", "-i", "0"]).contains("-i 0"));
    assert!(cli(&["-f", "1", "-i", "0", "-b", "1M", "-e", "1M"]).validate().is_ok());
    assert!(err(&["-n", "0"]).contains("-n"));
    // -T 0 is nccl-tests' "off" (settings map it to no deadline).
    assert!(cli(&["-T", "0"]).validate().is_ok());
    assert!(err(&["-g", "0"]).contains("-g"));
    assert!(err(&["--chunk", "0"]).contains("--chunk"));
    assert!(err(&["--window", "0"]).contains("1 to 32"));
    assert!(err(&["--window", "33"]).contains("1 to 32"));
    assert!(cli(&["--window", "32"]).validate().is_ok());
    assert!(err(&["--channels", "65"]).contains("1 to 64"));
    assert!(err(&["--ranks-per-node", "0"]).contains("--ranks-per-node"));
    let zero = Cli::try_parse_from(["tcpx-perf", "--max-peers", "0"]).expect_err("0 peers");
    assert!(zero.to_string().contains("--max-peers"), "{zero}");
    assert_eq!(cli(&[]).max_peers, MaxPeers::Auto);
    assert_eq!(cli(&["--max-peers", "all"]).max_peers.bound(), None);
    assert_eq!(cli(&["--max-peers", "3"]).max_peers.bound(), Some(3));
    assert!(err(&["--dir", "uni"]).contains("pairs"));
    assert!(cli(&["--dir", "uni", "--pattern", "pairs"]).validate().is_ok());
    for args in [&["-b", "2M", "-e", "1M"][..], &["--chunk", "0"], &["--window", "99"]] {
        assert!(!err(args).contains('\n'));
    }
}

#[test]
fn scope_resolution_and_names() {
    assert_eq!(Scope::Auto.resolve(2), Scope::InterNode);
    assert_eq!(Scope::Auto.resolve(1), Scope::All);
    assert_eq!(Scope::All.resolve(4), Scope::All);
    assert_eq!(Scope::InterNode.resolve(1), Scope::InterNode);
    assert_eq!(Scope::InterNode.to_string(), "inter-node");
    assert_eq!(TimeReduction::Avg.as_str(), "avg");
    assert_eq!(TimeReduction::Max.code(), 3);
    assert_eq!(Pattern::Fullmesh.as_str(), "fullmesh");
    assert_eq!(Pattern::Ring.to_string(), Pattern::Ring.as_str());
    assert_eq!(Dir::Uni.as_str(), "uni");
}

#[test]
fn disagreeing_ranks_name_the_flag_values_and_ranks() {
    let argv = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
    assert_eq!(
        Cli::disagreement(&[argv("-n 5 --window 8"), argv("--iters 5 --window 8")]),
        None
    );
    let msg = Cli::disagreement(&[argv("--window 8"), argv("--window 17"), argv("--window 8")]).unwrap();
    assert_eq!(
        msg,
        "ranks disagree on --window: 8 on ranks 0,2; 17 on rank 1; launch every rank with the same flags"
    );
    let msg = Cli::disagreement(&[argv("--ranks-per-node 1"), argv("")]).unwrap();
    assert!(
        msg.contains("--ranks-per-node: 1 on rank 0; (unset) on rank 1"),
        "{msg}"
    );
    let msg = Cli::disagreement(&[argv("-b 1M"), argv("-b 2M")]).unwrap();
    assert!(
        msg.contains("--minbytes: 1048576 on rank 0; 2097152 on rank 1"),
        "{msg}"
    );
}

#[test]
fn config_json_has_every_option() {
    let c = cli(&["--scope", "inter-node", "-a", "0"]);
    let v = c.config_json();
    assert_eq!(v["scope"], "inter-node");
    assert_eq!(v["average"], "rank0");
    assert_eq!(v["minbytes"], 1 << 20);
    assert_eq!(v["plugin_log"], "warn");
    assert!(v["out"].is_null());
}

#[test]
fn help_defines_patterns() {
    let help = Cli::command().render_long_help().to_string();
    assert!(help.contains("busbw = algbw * 2(n-1)/n"));
    assert!(help.contains("busbw = algbw * (n-1)/n"));
    assert!(help.contains("netbw = network bytes sent per sending endpoint / time"));
    assert!(help.contains("--warmup_iters"));
    for flag in [
        "--net-dev",
        "--spread-channels",
        "--cpu-bind",
        "--setup-threads",
        "--dry-run",
    ] {
        assert!(help.contains(flag), "{flag} is documented");
    }
}

#[test]
fn placement_flags() {
    let c = cli(&[
        "--net-dev",
        "eth1,eth1,2,2",
        "--cpu-bind",
        "0-7;52-59",
        "--dry-run",
        "--setup-threads",
        "8",
    ]);
    assert_eq!(
        c.net_dev.as_ref().map(ToString::to_string).as_deref(),
        Some("eth1,eth1,2,2")
    );
    assert!(matches!(&c.cpu_bind, CpuBind::Lists(l) if l.len() == 2));
    assert!(c.dry_run && c.setup_threads == Some(8));
    assert_eq!(cli(&[]).cpu_bind, CpuBind::Auto);
    assert!(Cli::try_parse_from(["tcpx-perf", "--cpu-bind", "x"]).is_err());
    assert!(Cli::try_parse_from(["tcpx-perf", "--net-dev", "0,,1"]).is_err());
    assert!(cli(&["--setup-threads", "0"])
        .validate()
        .unwrap_err()
        .contains("--setup-threads"));
    assert_eq!(cli(&["--cpu-bind", "none"]).config_json()["cpu_bind"], "None");
}

/// Issue 44: `--connects-in-flight auto` is the default `--help` names, accepted as written and
/// the same as leaving the flag out; a count is taken, 0 and words are refused naming the flag.
#[test]
fn connects_in_flight_takes_auto_as_its_help_says() {
    let auto = Cli::try_parse_from(["tcpx-perf", "--connects-in-flight", "auto"]).expect("auto is accepted");
    assert_eq!(
        format!("{:?}", auto.connects_in_flight),
        format!("{:?}", cli(&[]).connects_in_flight)
    );
    let four = cli(&["--connects-in-flight", "4"]);
    assert!(four.validate().is_ok());
    assert!(format!("{:?}", four.connects_in_flight).contains('4'));
    for bad in ["0", "many", "4x"] {
        let e = Cli::try_parse_from(["tcpx-perf", "--connects-in-flight", bad])
            .map_err(|e| e.to_string())
            .and_then(|c| c.validate().map(|()| c))
            .expect_err(bad);
        assert!(e.contains("--connects-in-flight"), "{bad}: {e}");
    }
}

/// nccl-tests 2.19's getopt string (src/common.cu): every flag it has, none left out of the table.
const NCCL_TESTS_GETOPT: &str = "t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:";

/// A value nccl-tests' flag takes that tcpx-perf's counterpart parses too.
fn nccl_tests_value(short: char) -> &'static str {
    match short {
        'b' | 'e' | 'i' => "2M",
        'J' => "x.json",
        // Not the defaults, so that the option is seen to change.
        'g' => "2",
        'c' | 'a' => "0",
        _ => "1",
    }
}

#[test]
fn every_nccl_tests_flag_means_the_same_or_is_refused_in_one_line() {
    use nccl_tests::{Here, FLAGS};
    let letters: Vec<char> = NCCL_TESTS_GETOPT.chars().filter(|c| *c != ':').collect();
    let table: Vec<char> = FLAGS.iter().map(|f| f.short).collect();
    assert_eq!(table, letters, "the table lists nccl-tests' flags in getopt order");
    for flag in FLAGS {
        if flag.short == 'h' {
            let e = Cli::try_parse_from(["tcpx-perf", "-h"]).expect_err("help");
            assert_eq!(e.kind(), clap::error::ErrorKind::DisplayHelp);
            continue;
        }
        let value = nccl_tests_value(flag.short);
        let spellings = [
            vec![format!("-{}", flag.short), value.to_string()],
            vec![format!("-{}{value}", flag.short)],
            vec![format!("--{}", flag.long), value.to_string()],
            vec![format!("--{}={value}", flag.long)],
        ];
        for args in spellings {
            let parsed = Cli::try_parse_from(std::iter::once("tcpx-perf".to_string()).chain(args.clone()));
            match flag.here {
                Here::Same => {
                    // The same option as tcpx-perf's own spelling of it.
                    let c = parsed.unwrap_or_else(|e| panic!("{args:?} refused: {e}"));
                    let arg = Cli::command()
                        .get_arguments()
                        .find(|a| a.get_short() == Some(flag.short))
                        .cloned()
                        .unwrap_or_else(|| panic!("-{} is no flag of tcpx-perf", flag.short));
                    assert_eq!(arg.get_long(), Some(flag.long), "-{}'s long name", flag.short);
                    let key = arg.get_id().as_str().to_string();
                    assert_ne!(
                        c.config_json()[&key],
                        cli(&[]).config_json()[&key],
                        "{args:?} changed nothing"
                    );
                }
                Here::Refused(instead) => {
                    let e = parsed.expect_err("refused");
                    let line = nccl_tests::usage_line(&e);
                    assert!(!line.contains('\n'), "{line}");
                    assert!(
                        line.starts_with(&format!("nccl-tests' -{} (--{})", flag.short, flag.long))
                            && line.contains(instead),
                        "{args:?}: {line}"
                    );
                }
            }
        }
    }
    let line = nccl_tests::usage_line(&Cli::try_parse_from(["tcpx-perf", "-N", "3"]).expect_err("refused"));
    assert!(line.contains("launch/repeat.sh N OUT -- FLAGS..."), "{line}");
    // Its own flags keep clap's message; --version stays.
    let e = Cli::try_parse_from(["tcpx-perf", "--bogus"]).expect_err("unknown");
    assert!(nccl_tests::usage_line(&e).starts_with("unexpected argument '--bogus'"));
    let e = Cli::try_parse_from(["tcpx-perf", "--version"]).expect_err("version");
    assert_eq!(e.kind(), clap::error::ErrorKind::DisplayVersion);
}

/// docs/nccl-tests.md's flag table has a row per nccl-tests flag, saying what the code does.
#[test]
fn the_docs_table_lists_every_nccl_tests_flag_as_the_code_treats_it() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/nccl-tests.md")).expect("doc");
    for flag in nccl_tests::FLAGS {
        let row = format!("| `-{}` | `--{}` |", flag.short, flag.long);
        let line = doc
            .lines()
            .find(|l| l.starts_with(&row))
            .unwrap_or_else(|| panic!("docs/nccl-tests.md has no row {row}"));
        match flag.here {
            nccl_tests::Here::Same => assert!(line.contains("| accepted |"), "{line}"),
            nccl_tests::Here::Refused(instead) => assert!(line.contains(&format!("| refused: {instead} |")), "{line}"),
        }
    }
}

/// The README lists the refused flags by letter, in the table's order.
#[test]
fn the_readme_lists_the_refused_nccl_tests_flags() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README");
    let refused: Vec<String> = nccl_tests::FLAGS
        .iter()
        .filter(|f| matches!(f.here, nccl_tests::Here::Refused(_)))
        .map(|f| format!("-{}", f.short))
        .collect();
    let want = format!("Every other nccl-tests flag (`{}`) is", refused.join(" "));
    assert!(readme.contains(&want), "README: {want}");
}
