#!/usr/bin/env python3
"""Writes the Kubernetes objects of a tcpx-perf job as YAML (stdlib only, deterministic).

Called by launch/k8s/render.sh, which parses the user's flags and takes TCPX's environment and the
mpirun line from launch/tcpx-env.sh; this file only shapes objects. Every pod comes from one
template, pod_spec(): the JobSet form stamps it into an Indexed Job, the pods form into N Pods.

Facts taken from Google's GKE samples (GoogleCloudPlatform/container-engine-accelerators,
gpudirect-tcpx/, read at commit 992db81, 2026-06-11) are cited where they are used; the JobSet
fields are those of kubernetes-sigs/jobset v0.12.0's CRD (launch/k8s/schema/).
"""

import argparse
import json
import os
import re
import sys

import k8s_labels

# Where GKE's node image keeps the NVIDIA driver's libraries and where containers expect them
# (nccl-test.yaml, nccl-test-latest.yaml: volume "libraries", hostPath
# /home/kubernetes/bin/nvidia/lib64 mounted at /usr/local/nvidia/lib64). The nccl-tcpx-installer
# DaemonSet also copies TCPX's plugin there (nccl-tcpx-installer.yaml: "cp -r
# /var/lib/tcpx/lib64/. /usr/local/nvidia/lib64" with /usr/local = /home/kubernetes/bin).
NVIDIA_HOST_LIB = "/home/kubernetes/bin/nvidia/lib64"
NVIDIA_LIB = "/usr/local/nvidia/lib64"
# The plugin image installs its libraries into /var/lib/tcpx/lib64 (nccl-tcpx-installer.yaml runs
# "/scripts/container_entry.sh install --install-nccl" with /var/lib mounted, then copies
# /var/lib/tcpx/lib64).
PLUGIN_INSTALL_DIR = "/var/lib/tcpx"
# tcpgpudmarxd's command line (nccl-test.yaml, container tcpx-daemon), the socket directory
# from launch/tcpx-env.sh; privileged with hostNetwork, as there.
RXDM_BINARY = "/tcpgpudmarxd/build/app/tcpgpudmarxd"
# Where the image (launch/k8s/Dockerfile) keeps the build, so that a3-high.sh's relative
# target/release/tcpx-perf resolves on every pod (Open MPI starts remote ranks in mpirun's
# working directory).
WORKDIR = "/opt/tcpx-perf"
RESULTS = WORKDIR + "/results"
JOB_DIR = "/etc/tcpx-perf/job"
SSH_DIR = "/etc/tcpx-perf/ssh"
# A3-high: 8 H100 per node, one rank per GPU (launch/a3-high.sh: --map-by ppr:8:node).
GPUS = 8
WAIT_S = 600
KEEP_S = 3600
ACCELERATOR = "nvidia-h100-80gb"  # nccl-tcpx-installer.yaml's node affinity


def env_list(pairs):
    return [{"name": k, "value": v} for k, v in pairs]


def pod_spec(o, index_env):
    """The one pod template: RxDM sidecar, TCPX's plugin, tcpx-perf with TCPX's environment."""
    copy_plugin = o.tcpx_lib != NVIDIA_LIB
    init = []
    if copy_plugin:
        # The plugin's libraries, from the image the job names (matched with the RxDM image),
        # into an emptyDir that tcpx-perf mounts at TCPX_LIB: the version is the job's choice,
        # not whatever the installer DaemonSet last put on the node.
        check = ""
        # A plugin inside TCPX_LIB must be among what the image installs: say so at once.
        if o.plugin.startswith(o.tcpx_lib + "/"):
            lib = o.plugin[len(o.tcpx_lib) + 1 :]
            check = (
                f'test -e {PLUGIN_INSTALL_DIR}/lib64/{lib} || {{ echo "tcpx-plugin: the image installs no {lib}'
                f' (it has: $(ls {PLUGIN_INSTALL_DIR}/lib64 | tr \'\\n\' \' \')); render with PLUGIN={o.tcpx_lib}/<one of them>"; exit 1; }}\n'
            )
        init.append(
            {
                "name": "tcpx-plugin",
                "image": o.plugin_image,
                "command": ["/bin/sh", "-c"],
                "args": [f"set -e\n/scripts/container_entry.sh install --install-nccl\n{check}"],
                "volumeMounts": [{"name": "tcpx-lib", "mountPath": PLUGIN_INSTALL_DIR}],
            }
        )
    # A native sidecar (an init container that restarts Always, Kubernetes >= 1.29): it starts
    # before tcpx-perf and is stopped when tcpx-perf ends, so the pod, and the Job, complete.
    # Google's samples run it as an ordinary container beside a sleep-forever one.
    init.append(
        {
            "name": "tcpx-daemon",
            "image": o.rxdm_image,
            "restartPolicy": "Always",
            "command": [RXDM_BINARY, "--gpu_nic_preset", "a3vm", "--gpu_shmem_type", "fd", "--uds_path", o.uds],
            "env": env_list([("LD_LIBRARY_PATH", NVIDIA_LIB)]),
            "securityContext": {"privileged": True},
            "volumeMounts": [
                {"name": "nvidia-lib", "mountPath": NVIDIA_LIB, "readOnly": True},
                {"name": "tcpx-socket", "mountPath": o.uds},
            ],
        }
    )
    env = env_list([kv.split("=", 1) for kv in o.env])
    env += env_list([("LD_LIBRARY_PATH", o.ld_library_path)])
    env.append(index_env)
    env.append({"name": "TCPX_PERF_POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    env += env_list(
        [
            ("TCPX_PERF_HOSTFILE", o.hostfile_path),
            ("TCPX_PERF_SSH_DIR", SSH_DIR),
            ("TCPX_PERF_SSH_PORT", str(o.ssh_port)),
            ("TCPX_PERF_WAIT_S", str(WAIT_S)),
            ("TCPX_PERF_DEADLINE_S", str(o.deadline)),
            ("TCPX_PERF_KEEP_S", str(KEEP_S)),
            ("TCPX_PERF_RESULTS", RESULTS),
        ]
    )
    mounts = [
        {"name": "nvidia-lib", "mountPath": NVIDIA_LIB, "readOnly": True},
        {"name": "tcpx-socket", "mountPath": o.uds},
    ]
    if copy_plugin:
        mounts.append({"name": "tcpx-lib", "mountPath": o.tcpx_lib, "subPath": "lib64", "readOnly": True})
    mounts += [
        {"name": "job", "mountPath": JOB_DIR, "readOnly": True},
        {"name": "ssh", "mountPath": SSH_DIR, "readOnly": True},
        {"name": "results", "mountPath": RESULTS},
    ]
    volumes = [
        {"name": "nvidia-lib", "hostPath": {"path": NVIDIA_HOST_LIB}},
        # emptyDir, as nccl-test.yaml now has it (earlier versions shared the host's /run/tcpx).
        {"name": "tcpx-socket", "emptyDir": {}},
    ]
    if copy_plugin:
        volumes.append({"name": "tcpx-lib", "emptyDir": {}})
    volumes += [
        {"name": "job", "configMap": {"name": o.name, "defaultMode": 0o555}},
        {"name": "ssh", "secret": {"secretName": o.name + "-ssh", "defaultMode": 0o400}},
        # Results stay in the pod until kubectl cp takes them (entry.sh waits for that): they
        # are a few MB, and an emptyDir needs no storage class or ReadWriteMany volume.
        {"name": "results", "emptyDir": {}},
    ]
    return {
        # The node's NICs (eth0 control, eth1..eth4 data) in the pod, as in nccl-test.yaml;
        # ClusterFirstWithHostNet keeps the cluster's DNS for the other pods' names.
        "hostNetwork": True,
        "dnsPolicy": "ClusterFirstWithHostNet",
        "restartPolicy": "Never",
        "nodeSelector": {"cloud.google.com/gke-accelerator": ACCELERATOR},
        "initContainers": init,
        "containers": [
            {
                "name": "tcpx-perf",
                "image": o.image,
                "workingDir": WORKDIR,
                "command": ["/bin/bash", JOB_DIR + "/entry.sh"],
                "args": o.launch,
                "env": env,
                # IPC_LOCK: TCPX pins its buffers (nccl-test.yaml's nccl-test container).
                "securityContext": {"capabilities": {"add": ["IPC_LOCK"]}},
                "resources": {"limits": {"nvidia.com/gpu": GPUS}},
                "volumeMounts": mounts,
            }
        ],
        "volumes": volumes,
    }


def labels(o):
    return {"app.kubernetes.io/name": "tcpx-perf", "app.kubernetes.io/instance": o.name}


def config_map(o, entry):
    hostfile = "".join(f"{h} slots={GPUS}\n" for h in o.host)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": o.name, "labels": labels(o)},
        "data": {"entry.sh": entry, "hostfile": hostfile},
    }


def jobset(o):
    # Kubernetes sets this annotation on every pod of an Indexed Job.
    index = {
        "name": "TCPX_PERF_INDEX",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}},
    }
    meta = {"name": o.name, "labels": labels(o)}
    if o.queue:
        meta["labels"]["kueue.x-k8s.io/queue-name"] = o.queue
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": meta,
        "spec": {
            # Pod DNS names <name>-node-0-<i>.<name> (the hostfile's), published before the pods
            # are ready so that pod 0 can reach them while they start.
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            # A benchmark that failed is reported, not rerun.
            "failurePolicy": {"maxRestarts": 0},
            "replicatedJobs": [
                {
                    "name": "node",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": o.nodes,
                            "completions": o.nodes,
                            "completionMode": "Indexed",
                            "backoffLimit": 0,
                            "activeDeadlineSeconds": o.deadline,
                            "template": {"metadata": {"labels": labels(o)}, "spec": pod_spec(o, index)},
                        }
                    },
                }
            ],
        },
    }


def pods(o):
    out = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": o.name, "labels": labels(o)},
            # Headless: DNS names <hostname>.<name> for the pods that set subdomain <name>
            # (nccl-test.yaml: one such Service per pod; one for all does the same).
            "spec": {"clusterIP": "None", "selector": labels(o), "publishNotReadyAddresses": True},
        }
    ]
    for i in range(o.nodes):
        spec = pod_spec(o, {"name": "TCPX_PERF_INDEX", "value": str(i)})
        spec = {"hostname": f"{o.name}-{i}", "subdomain": o.name, "activeDeadlineSeconds": o.deadline, **spec}
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"{o.name}-{i}", "labels": labels(o)},
                "spec": spec,
            }
        )
    return out


PLAIN = re.compile(r"^[A-Za-z/][A-Za-z0-9_./:@,=+-]*$")
YAML11_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}


def scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if PLAIN.match(v) and v.lower() not in YAML11_WORDS and not v.endswith(":"):
        return v
    return json.dumps(v)  # a JSON string is a YAML double-quoted scalar


def block_body(x, pad):
    """The lines of a multi-line string under its `|` header, two spaces deeper than `pad`."""
    return [(pad + "  " + ln).rstrip() for ln in x.rstrip("\n").split("\n")]


def emit(v, indent=0):
    """Block-style YAML: mappings and sequences nested, multi-line strings as literal blocks."""
    pad = " " * indent
    lines = []
    if isinstance(v, dict):
        if not v:
            return [pad + "{}"]
        for k, x in v.items():
            key = scalar(k)
            if isinstance(x, (dict, list)) and x:
                lines.append(f"{pad}{key}:")
                lines += emit(x, indent + 2)
            elif isinstance(x, str) and "\n" in x:
                lines.append(f"{pad}{key}: {block_header(x)}")
                lines += block_body(x, pad)
            else:
                lines.append(f"{pad}{key}: {'{}' if x == {} else '[]' if x == [] else scalar(x)}")
    else:
        for x in v:
            sub = emit(x, indent + 2) if isinstance(x, (dict, list)) else None
            if sub is None:
                if isinstance(x, str) and "\n" in x:
                    lines.append(f"{pad}- {block_header(x)}")
                    lines += block_body(x, pad)
                else:
                    lines.append(f"{pad}- {scalar(x)}")
            else:
                lines.append(f"{pad}- {sub[0].lstrip()}")
                lines += sub[1:]
    return lines


def block_header(s):
    # "|" keeps exactly one final newline, "|-" none; text with leading spaces or more final
    # newlines is not produced here.
    if s.startswith(" ") or s.endswith("\n\n"):
        raise ValueError("multi-line value not representable as a literal block")
    return "|" if s.endswith("\n") else "|-"


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--form", choices=["jobset", "pods"], required=True)
    p.add_argument("--nodes", type=int, required=True)
    for flag in ["name", "image", "queue", "plugin-image", "rxdm-image", "tcpx-lib", "plugin", "uds"]:
        p.add_argument("--" + flag, required=True)
    p.add_argument("--ld-library-path", required=True)
    p.add_argument("--hostfile-path", required=True)
    p.add_argument("--deadline", type=int, required=True)
    p.add_argument("--ssh-port", type=int, required=True)
    p.add_argument("--entry", required=True)
    p.add_argument("--env", action="append", default=[])
    p.add_argument("--host", action="append", default=[])
    p.add_argument("--out", help="write this file whole (or not at all) instead of stdout")
    p.add_argument("launch", nargs=argparse.REMAINDER)
    o = p.parse_args()
    o.launch = o.launch[1:] if o.launch[:1] == ["--"] else o.launch
    with open(o.entry, encoding="utf-8") as f:
        entry = f.read()
    if o.queue and (why := k8s_labels.value_problem(o.queue)):
        fail(64, f"--queue {why}")
    objects = [config_map(o, entry)]
    objects += [jobset(o)] if o.form == "jobset" else pods(o)
    for obj in objects:
        for field, why in k8s_labels.problems(obj):
            fail(64, f"{obj['kind']}/{obj['metadata']['name']}: {field}: {why}")
    out = [
        f"# tcpx-perf on {o.nodes} GKE A3-high nodes ({o.nodes * GPUS} ranks), {o.form} form.",
        "# Written by launch/k8s/render.sh from launch/tcpx-env.sh: render again rather than edit.",
        f"# Needs the Secret {o.name}-ssh (docs/gke.md); results: kubectl cp from pod 0 (entry.sh says how).",
    ]
    for obj in objects:
        out.append("---")
        out += emit(obj)
    # The last line, so that a cut-off copy is known as one (validate.py checks it).
    out.append(f"{END_MARK}{len(objects)} objects")
    text = "\n".join(out) + "\n"
    if o.out:
        write_whole(o.out, text)
    else:
        try:
            # Straight to the descriptor, every write checked: Python's buffered stdout can
            # lose a short write to a full disk without an error.
            sys.stdout.flush()
            write_all(sys.stdout.fileno(), text.encode("utf-8"))
        except OSError as e:
            # Nothing more reaches a closed or full stdout; Python's own flush at exit must not
            # print a traceback either.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            fail(1, f"cannot write the manifest to stdout: {e.strerror or e}")


# The manifest's last line: END_MARK, then the number of objects it holds.
END_MARK = "# end of manifest: "


def fail(code, msg):
    print(f"render.sh: {msg}", file=sys.stderr)
    sys.exit(code)


def write_all(fd, data):
    """Writes every byte of `data` to `fd`; a short write is continued, an error raised."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_whole(path, text):
    """Writes `path` whole or not at all, never through a link: a new temporary sibling
    (O_CREAT | O_EXCL | O_NOFOLLOW), every write checked, fsync, close, read back and compared,
    then renamed into place and the directory synced. Any failure (a full disk) is one line and
    exit 1, the temporary removed and `path` as it was."""
    data = text.encode("utf-8")
    folder = os.path.dirname(path) or "."
    if os.path.islink(path) or (os.path.lexists(path) and not os.path.isfile(path)):
        fail(1, f"{path} is a symbolic link or not a file: refusing to write through it; remove it")
    tmp = None
    try:
        for n in range(64):
            name = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.{n}.tmp")
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
            except FileExistsError:
                continue
            tmp = name
            break
        else:
            raise FileExistsError(f"no free temporary name beside {path}")
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        with open(tmp, "rb") as f:
            if f.read() != data:
                raise OSError(f"{tmp} does not read back as written")
        if os.path.islink(path):
            raise OSError(f"{path} became a symbolic link while it was written")
        os.rename(tmp, path)
        tmp = None
        dfd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as e:
        if tmp:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        fail(1, f"cannot write {path}: {e.strerror or e}")


if __name__ == "__main__":
    main()
