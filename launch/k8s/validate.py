#!/usr/bin/env python3
"""Validates Kubernetes manifests offline, as an API server would check their shape.

    python3 launch/k8s/validate.py FILE.yaml...

Core kinds (ConfigMap, Service, Pod, Job, ...) against the Kubernetes API's own schemas as the
kubernetes-validate package ships them (strict: unknown fields are errors, as with kubectl
--validate=strict); JobSet against the openAPIV3Schema of kubernetes-sigs/jobset's CRD
(launch/k8s/schema/jobset-v0.12.0.json, unknown fields made errors the same way), and each of its
Job templates once more as a batch/v1 Job. CEL rules (x-kubernetes-validations) are not evaluated.

Label values are checked against Kubernetes' rules (k8s_labels.py), as the API server checks them. A
manifest written by render.sh must end with its "# end of manifest: N objects" line and hold N
objects: a cut-off copy (a full disk) is invalid even where what is left parses.

Prints one line per invalid object (file, document, kind/name, field path, reason) and "ok" lines
for valid ones; exit 0 when every object is valid, 1 otherwise, 64 on bad usage.
"""

import json
import os
import sys

K8S_VERSION = "1.33"  # native sidecars (init containers with restartPolicy Always) are GA here
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import k8s_labels  # noqa: E402 (beside this file)
from manifests import END_MARK  # noqa: E402
JOBSET_SCHEMA = os.path.join(HERE, "schema", "jobset-v0.12.0.json")

try:
    import jsonschema
    import kubernetes_validate
    import yaml
except ImportError as e:
    print(f"validate.py: {e.name} is missing: pip install kubernetes-validate==1.37.0 (launch/setup.sh --tests does)", file=sys.stderr)
    sys.exit(64)


def strict(schema):
    """Unknown fields become errors: what the API server prunes silently is a typo here."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def jobset_validator():
    with open(JOBSET_SCHEMA, encoding="utf-8") as f:
        crd = json.load(f)
    return jsonschema.Draft7Validator(strict(crd["openAPIV3Schema"]))


def where(path):
    return "." + ".".join(str(p) for p in path) if path else "(top)"


def core_errors(doc):
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        return []
    except kubernetes_validate.ValidationError as e:
        return [f"{where(e.absolute_path)}: {e.message}"]
    except kubernetes_validate.SchemaNotFoundError as e:
        return [e.message]


def errors(doc, jobset):
    if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
        return ["not a Kubernetes object (no apiVersion/kind)"]
    labels = [f"{field}: {why}" for field, why in k8s_labels.problems(doc)]
    return labels + shape_errors(doc, jobset)


def cut_off(text, count):
    """Why a manifest render.sh wrote is not whole, or None (other files are not checked)."""
    if "# Written by launch/k8s/render.sh" not in text:
        return None
    last = text.rstrip("\n").rsplit("\n", 1)[-1]
    if not text.endswith("\n") or last != f"{END_MARK}{count} objects":
        return f"cut off: it does not end with '{END_MARK}{count} objects' for the {count} documents it holds (render it again)"
    return None


def shape_errors(doc, jobset):
    if doc["kind"] != "JobSet":
        return core_errors(doc)
    if doc["apiVersion"] != "jobset.x-k8s.io/v1alpha2":
        return [f"JobSet apiVersion {doc['apiVersion']} is not jobset.x-k8s.io/v1alpha2 (the schema held)"]
    found = [
        f"{where(e.absolute_path)}: {e.message}"
        for e in sorted(jobset.iter_errors(doc), key=lambda e: list(map(str, e.absolute_path)))
    ]
    if found:
        return found
    # The pod template inside, checked as the Job the JobSet controller will create.
    name = doc.get("metadata", {}).get("name", "jobset")
    for i, rj in enumerate(doc["spec"]["replicatedJobs"]):
        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": f"{name}-{rj['name']}-0"},
            "spec": rj["template"].get("spec", {}),
        }
        # The Job's .spec is the template's .spec: prefix the path to name the JobSet's field.
        found += [f".spec.replicatedJobs.{i}.template{e}" for e in core_errors(job)]
    return found


def main(argv):
    if not argv or any(a.startswith("-") for a in argv):
        print("validate.py: usage: python3 launch/k8s/validate.py FILE.yaml...", file=sys.stderr)
        return 64
    jobset = jobset_validator()
    bad = 0
    for path in argv:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            docs = [d for d in yaml.safe_load_all(text) if d is not None]
        except (OSError, UnicodeError, yaml.YAMLError) as e:
            print(f"{path}: cannot read: {e}".replace("\n", " "))
            bad += 1
            continue
        if why := cut_off(text, len(docs)):
            print(f"{path}: {why}")
            bad += 1
        for n, doc in enumerate(docs):
            what = f"{doc.get('kind', '?')}/{doc.get('metadata', {}).get('name', '?')}" if isinstance(doc, dict) else "?"
            found = errors(doc, jobset)
            for e in found:
                print(f"{path}: document {n}: {what}: {e}")
            if found:
                bad += 1
            else:
                print(f"{path}: document {n}: {what}: ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
